//! Hibernation: the final snapshot before any pod goes, every pod at once, the claims only
//! when they are not kept, and waking on the claims by the usual rescue.

use super::*;

fn sleeping(store: bool, keep_volumes: bool) -> Target {
    Target {
        persistent: true,
        hibernate: Some(Hibernate {
            store,
            keep_volumes,
        }),
        ..target(3)
    }
}

#[test]
fn with_a_store_the_pods_stay_until_the_final_snapshot_holds_the_newest_revision() {
    let mut obs = steady(3);
    let t = sleeping(true, true);
    obs.final_snapshot = FinalSnapshot::Missing;
    assert_eq!(plan(&obs, &t), Action::TakeFinalSnapshot);
    obs.final_snapshot = FinalSnapshot::Taking {
        backup: "c-hibernation-r9".into(),
    };
    assert!(
        matches!(plan(&obs, &t), Action::Wait { reason } if reason.contains("c-hibernation-r9"))
    );
    obs.final_snapshot = FinalSnapshot::Failed {
        backup: "c-hibernation-r9".into(),
        reason: "access denied".into(),
    };
    let Action::Wait { reason } = plan(&obs, &t) else {
        panic!("a failed snapshot deletes nothing");
    };
    assert!(reason.contains("access denied"), "{reason}");
    // No member answers: nothing to snapshot, and nothing is deleted.
    let mut silent = obs.clone();
    silent.members = None;
    silent.final_snapshot = FinalSnapshot::Missing;
    assert!(matches!(plan(&silent, &t), Action::Wait { .. }));
    obs.final_snapshot = FinalSnapshot::Taken {
        backup: "c-hibernation-r9".into(),
        revision: 9,
    };
    assert_eq!(
        plan(&obs, &t),
        Action::Hibernate {
            pods: vec!["m1".into(), "m2".into(), "m3".into()]
        }
    );
}

#[test]
fn without_a_store_the_pods_go_at_once_and_the_claims_stay() {
    let obs = steady(3);
    let t = sleeping(false, true);
    assert!(matches!(plan(&obs, &t), Action::Hibernate { pods } if pods.len() == 3));
    // Pods stopping: waited for; then asleep, claims kept.
    let mut stopping = obs.clone();
    for p in &mut stopping.pods {
        p.state = PodState::Terminating;
    }
    assert!(matches!(plan(&stopping, &t), Action::Wait { .. }));
    let mut asleep = obs.clone();
    asleep.pods.clear();
    asleep.members = None;
    assert_eq!(plan(&asleep, &t), Action::Hibernated);
    assert_eq!(Action::Hibernated.rest(), Rest::Paused);
    assert_eq!(Action::Hibernated.progress(), Progress::Halted);
    // keepVolumes: false (with a store): the claims go once the pods are gone.
    let t = sleeping(true, false);
    assert_eq!(plan(&asleep, &t), Action::DeleteClaim { name: "m1".into() });
    asleep.claims.clear();
    assert_eq!(plan(&asleep, &t), Action::Hibernated);
}

#[test]
fn waking_brings_the_same_members_back_on_their_claims() {
    let mut obs = steady(3);
    obs.pods.clear();
    obs.members = None;
    let awake = Target {
        persistent: true,
        ..target(3)
    };
    assert_eq!(
        plan(&obs, &awake),
        Action::RecreatePod { name: "m1".into() }
    );
    // Without claims the data is in the final snapshot: lost quorum, which the task turns
    // into a restore of it (crate::cluster::hibernation::wakes_from).
    obs.claims.clear();
    assert!(matches!(plan(&obs, &awake), Action::QuorumLost { .. }));
}
