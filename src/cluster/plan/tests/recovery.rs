//! Recovery from lost quorum: approvals act at once, a policy only once no majority can come
//! back, and the member rebuilt from is the one with the most data.

use proptest::prelude::*;

use super::*;

const MANUAL: RecoveryPolicy = RecoveryPolicy {
    automatic: None,
    after: Duration::from_secs(300),
    approved: None,
};

fn policy(automatic: Option<Approval>, approved: Option<Approval>) -> RecoveryPolicy {
    RecoveryPolicy {
        automatic,
        approved,
        ..MANUAL
    }
}

/// m1 answers without a leader at applied index 100; m2 has no pod (deleted for good, its data
/// with it); m3 is added next by the caller.
fn survivor_and_one_gone() -> Fixture {
    cluster()
        .voter("m1")
        .answers(100)
        .voter("m2")
        .unhealthy()
        .no_pod()
}

/// [`survivor_and_one_gone`], and m3's pod gone too.
fn two_of_three_gone() -> Observation {
    survivor_and_one_gone()
        .voter("m3")
        .unhealthy()
        .no_pod()
        .build()
}

/// [`survivor_and_one_gone`], and m3 silent for a minute while its pod runs.
fn m3_silent_a_minute() -> Fixture {
    survivor_and_one_gone()
        .voter("m3")
        .unhealthy()
        .silent_for(MINUTE)
}

#[test]
fn manual_reports_what_to_do_and_an_approval_rebuilds_from_the_survivor() {
    let obs = two_of_three_gone();
    let t = target(3);
    assert!(matches!(plan(&obs, &t), Action::QuorumLost { .. }));
    match recover(&obs, &t, &MANUAL) {
        Recover::Hold { reason } => {
            assert!(reason.contains("recover=force-new-cluster"), "{reason}");
            assert!(reason.contains("member m1 (applied index 100"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        recover(&obs, &t, &policy(None, Some(Approval::ForceNewCluster))),
        Recover::FromMember {
            name: "m1".into(),
            applied: 100,
            approved: true
        }
    );
    assert_eq!(
        recover(&obs, &t, &policy(None, Some(Approval::RestoreLatestBackup))),
        Recover::FromBackup { approved: true }
    );
}

#[test]
fn a_policy_acts_on_members_whose_pods_are_gone_at_once_and_on_silent_ones_after_its_wait() {
    let t = target(3);
    let auto = policy(Some(Approval::ForceNewCluster), None);
    assert!(matches!(
        recover(&two_of_three_gone(), &t, &auto),
        Recover::FromMember {
            approved: false,
            ..
        }
    ));
    // m3's pod runs and it has been silent for a minute: m1 and m3 may still make a majority.
    let waiting = m3_silent_a_minute().build();
    assert!(matches!(plan(&waiting, &t), Action::QuorumLost { .. }));
    match recover(&waiting, &t, &auto) {
        Recover::Hold { reason } => assert!(reason.contains("m1, m3"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // An approval is the user's call: it does not wait.
    assert!(matches!(
        recover(
            &waiting,
            &t,
            &policy(
                Some(Approval::ForceNewCluster),
                Some(Approval::ForceNewCluster)
            )
        ),
        Recover::FromMember { approved: true, .. }
    ));
    // After the wait, m3 counts as lost; so does a member whose node is lost.
    let after = RecoveryPolicy {
        after: MINUTE / 2,
        ..auto
    };
    assert!(matches!(
        recover(&waiting, &t, &after),
        Recover::FromMember { .. }
    ));
    let node_gone = m3_silent_a_minute().node_lost(MINUTE).build();
    assert!(matches!(
        recover(&node_gone, &t, &auto),
        Recover::FromMember { .. }
    ));
}

#[test]
fn the_survivor_with_the_most_data_is_chosen_and_without_one_only_a_backup_can_help() {
    let t = target(3);
    let auto = policy(Some(Approval::ForceNewCluster), None);
    let two_answer = cluster()
        .voter("m1")
        .answers(100)
        .voter("m2")
        .answers(140)
        .voter("m3")
        .unhealthy()
        .no_pod()
        .voter("m4")
        .unhealthy()
        .no_pod()
        .voter("m5")
        .unhealthy()
        .no_pod()
        .build();
    assert!(matches!(
        recover(&two_answer, &t, &auto),
        Recover::FromMember { name, applied: 140, .. } if name == "m2"
    ));
    let none = Observation {
        members: None,
        pods: vec![],
        silent_for: 10 * MINUTE,
        ..two_of_three_gone()
    };
    let none = Observation {
        applied: BTreeMap::new(),
        ..none
    };
    assert!(matches!(plan(&none, &t), Action::QuorumLost { .. }));
    assert!(matches!(recover(&none, &t, &auto), Recover::Hold { .. }));
    assert_eq!(
        recover(
            &none,
            &t,
            &policy(Some(Approval::RestoreLatestBackup), None)
        ),
        Recover::FromBackup { approved: false }
    );
}

/// A voter in a random state: (answers, pod, silent minutes, node lost).
fn arb_voter() -> impl Strategy<Value = (bool, u8, u8, bool)> {
    (any::<bool>(), 0u8..4, 0u8..20, any::<bool>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// No automatic recovery while the voters that may come back (those that answer, and
    /// those whose pods run on live nodes and went silent less than `after` ago) make a
    /// majority; any recovery rebuilds from an answering member with a live pod and the
    /// highest applied index.
    #[test]
    fn no_automatic_recovery_while_a_majority_may_come_back(
        voters in prop::collection::vec(arb_voter(), 1..8),
        indexes in prop::collection::vec(0u64..1000, 8),
        automatic in prop_oneof![
            Just(None),
            Just(Some(Approval::ForceNewCluster)),
            Just(Some(Approval::RestoreLatestBackup)),
        ],
        after_minutes in 0u32..15,
        persistent in any::<bool>(),
    ) {
        let mut f = cluster();
        for (i, (answers, pod, silent, node)) in voters.iter().enumerate() {
            f = f.voter(&format!("m{i}"));
            f = if *answers { f.answers(indexes[i]) } else { f.unhealthy() };
            f = f.silent_for(MINUTE * u32::from(*silent));
            f = match pod {
                0 => f.no_pod(),
                1 => f.pod(PodState::Gone),
                _ => f,
            };
            if *node {
                f = f.node_lost(10 * MINUTE);
            }
        }
        let obs = f.build();
        let t = Target { persistent, ..target(voters.len()) };
        let after = MINUTE * after_minutes;
        let p = RecoveryPolicy { automatic, after, approved: None };
        if !matches!(plan(&obs, &t), Action::QuorumLost { .. }) {
            return Ok(());
        }
        let decision = recover(&obs, &t, &p);
        let may_come_back = obs.members.iter().flatten().filter(|m| {
            let alive = obs.pod_alive(&m.name);
            let answers = alive && obs.applied.contains_key(&m.name);
            let on_claim = persistent && obs.claims.contains(&m.name);
            let node_ok = !obs.node_lost(&m.name, t.node_grace);
            answers || ((alive || on_claim) && node_ok && m.unhealthy_for < after)
        }).count();
        match &decision {
            Recover::Hold { .. } => {}
            Recover::FromMember { name, applied, approved } => {
                prop_assert!(!approved);
                prop_assert!(automatic.is_some());
                prop_assert!(
                    may_come_back < quorum(voters.len()),
                    "{:?} with {} that may come back", decision, may_come_back
                );
                prop_assert!(obs.pod_alive(name));
                let best = obs.applied.iter().filter(|(n, _)| obs.pod_alive(n)).map(|(_, a)| *a).max();
                prop_assert_eq!(Some(*applied), best);
            }
            Recover::FromBackup { approved } => {
                prop_assert!(!approved);
                prop_assert_eq!(automatic, Some(Approval::RestoreLatestBackup));
                prop_assert!(may_come_back < quorum(voters.len()));
                prop_assert!(obs.applied.keys().all(|n| !obs.pod_alive(n)));
            }
        }
        if automatic.is_none() {
            let held = matches!(decision, Recover::Hold { .. });
            prop_assert!(held);
        }
    }
}

#[test]
fn a_recovery_from_a_member_keeps_its_pod_until_the_seed_serves_its_data() {
    let t = target(3);
    let r = RestoreTarget {
        source: Some("m1".into()),
        ..restore_target(Some("http://op/s"))
    };
    // The lost members' pods go first (m2's still exists, ended); m1 stays.
    let mut obs = cluster()
        .voter("m1")
        .answers(100)
        .voter("m2")
        .unhealthy()
        .pod(PodState::Gone)
        .voter("m3")
        .unhealthy()
        .no_pod()
        .build();
    assert_eq!(
        restore(&obs, &t, &r),
        Action::DeletePod {
            name: "m2".into(),
            reason: DeleteReason::Restore
        }
    );
    obs.pods.retain(|p| p.name != "m2");
    assert_eq!(restore(&obs, &t, &r), Action::RestoreSeed);
    // The seed fetches m1's snapshot: m1 is kept.
    obs.pods.push(seed(PodState::Running, "http://op/s"));
    assert!(matches!(restore(&obs, &t, &r), Action::Restoring { .. }));
    // The seed serves (a cluster of its own): only now does m1 go, then the restore is done.
    obs.members = Some(vec![member("seed", 9, false, true)]);
    assert_eq!(
        restore(&obs, &t, &r),
        Action::DeletePod {
            name: "m1".into(),
            reason: DeleteReason::Restore
        }
    );
    obs.pods.retain(|p| p.name != "m1");
    assert_eq!(
        restore(&obs, &t, &r),
        Action::RestoreDone {
            seed: "seed".into()
        }
    );
    // Should m1 go before the seed has its data, nothing is made again from nothing: the
    // recovery is withdrawn, its seed (which has nothing) with it, and the loss decided again.
    let mut early = cluster()
        .voter("m1")
        .answers(100)
        .pod(PodState::Gone)
        .build();
    early.pods.push(seed(PodState::Gone, "http://op/s"));
    assert!(matches!(
        restore(&early, &t, &r),
        Action::WithdrawRestore { seed: Some(ref s), ref reason } if s == "seed" && reason.contains("m1")
    ));
    early.pods.retain(|p| p.name != "seed");
    assert!(matches!(
        restore(&early, &t, &r),
        Action::WithdrawRestore { seed: None, .. }
    ));
}
