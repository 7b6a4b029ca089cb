//! The planner: from what was observed about one cluster (etcd's member list, each member's
//! status, the pods) and the spec, the single next step. Pure: no client, no clock.
//!
//! It keeps the membership rules: at most one membership change at a time; nothing that leaves
//! the cluster without quorum; members join as learners and are promoted once etcd accepts it;
//! scale-down removes a pending learner first (it is never promoted only to be removed), then an
//! unhealthy member, then a follower, never the leader; a member whose pod is gone is removed
//! (and replaced by the scale-up path) unless it keeps its data on a volume; a member that stays
//! unhealthy while its pod runs is replaced after [`Target::replace_after`]; every partial state
//! a crash leaves is finished or undone; lost quorum is reported only once the silent members
//! have been silent for [`Target::quorum_grace`] (a restarting member is not a lost cluster), and
//! nothing destructive is done.

use std::collections::BTreeSet;
use std::time::Duration;

/// A pod's lifecycle as far as the planner cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Not running yet (scheduling, pulling, init containers).
    Pending,
    /// Its containers run.
    Running,
    /// It ended (Failed or Succeeded: etcd never exits on its own).
    Gone,
    /// It is being deleted: as good as gone, and not to be deleted again.
    Terminating,
}

impl PodState {
    /// Ended or being deleted.
    pub fn is_gone(self) -> bool {
        matches!(self, PodState::Gone | PodState::Terminating)
    }
}

/// One pod that belongs to the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Pod name, which is also the member name.
    pub name: String,
    /// Its state.
    pub state: PodState,
    /// How long ago it was created.
    pub age: Duration,
    /// For a pod created ahead of its member (its etcd waits behind `etcd-gate` until the
    /// member is added): the other members its `--initial-cluster` names.
    pub joining: Option<BTreeSet<String>>,
    /// For a seed restored from a snapshot: the restore's UID and the URL its gate fetches
    /// the snapshot from.
    pub restore: Option<(String, String)>,
}

/// One member from etcd's member list, with its status if it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// Member name (the first label of its peer URL).
    pub name: String,
    /// etcd member ID.
    pub id: u64,
    /// Whether it is a learner.
    pub is_learner: bool,
    /// Whether it is healthy: it answered a status request as itself (the member ID it reports
    /// is this one), it knows a leader, and it raises no alarm.
    pub healthy: bool,
    /// How long it has been unhealthy without a break, as far as this operator has watched it
    /// (zero when healthy; the clock starts again when the operator restarts, which only ever
    /// delays a replacement).
    pub unhealthy_for: Duration,
}

/// Everything the planner needs about one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// etcd's member list, or `None` when no member answered.
    pub members: Option<Vec<MemberView>>,
    /// ID of the leader, when known.
    pub leader: Option<u64>,
    /// The cluster's pods.
    pub pods: Vec<PodView>,
    /// Whether the seed was ever created (recorded in status, or a pod exists), so the
    /// operator never bootstraps twice.
    pub bootstrapped: bool,
    /// How long no member has answered (zero when one did).
    pub silent_for: Duration,
}

impl Observation {
    /// Whether member `name`'s pod exists and is neither ended nor being deleted. A member
    /// whose pod is being deleted still answers for a moment, but it is on its way out: it
    /// counts towards neither quorum nor readiness.
    pub fn pod_alive(&self, name: &str) -> bool {
        self.pods
            .iter()
            .any(|p| p.name == name && !p.state.is_gone())
    }
}

/// What the planner is asked to reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// `spec.size`.
    pub size: usize,
    /// `spec.paused`.
    pub paused: bool,
    /// Members keep their data on volumes: a member whose pod is gone gets its pod back.
    pub persistent: bool,
    /// How long a learner may take to start before its addition is undone.
    pub learner_timeout: Duration,
    /// How long a new pod may take to answer before silence counts as lost quorum.
    pub startup_grace: Duration,
    /// How long a member may stay unhealthy while its pod runs (crash-looping, stuck Pending,
    /// raising an alarm) before it is removed and replaced.
    pub replace_after: Duration,
    /// How long members may be silent before their silence counts as lost quorum: a member
    /// whose container restarts is back within seconds.
    pub quorum_grace: Duration,
}

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// A learner was added but its pod never came (the operator stopped in between) or died.
    StrandedLearner,
    /// Its pod is gone, and its data with it.
    PodGone,
    /// Scale-down.
    ScaleDown,
    /// It stayed unhealthy past [`Target::replace_after`] while its pod ran; the scale-up path
    /// replaces it.
    Unhealthy,
}

/// Why a pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// Its member is not (or no longer) in etcd's member list.
    NoMember,
    /// It ended (evicted, or its node rebooted) and its member keeps its data on a volume: the
    /// pod is recreated on the same claim once this one is gone.
    Ended,
    /// A restore replaces the cluster's members: a member of the cluster being replaced, or a
    /// seed that cannot finish (it ended, or fetches from an operator that no longer leads).
    Restore,
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the seed member's pod (`--initial-cluster-state=new`, a fresh token).
    Bootstrap,
    /// Add a learner to etcd and create its pod, `--initial-cluster-state=existing`.
    AddMember,
    /// Add the member of a pod that was created ahead of it (the addition's second half).
    JoinMember { name: String },
    /// Promote a learner that has started.
    Promote { name: String, id: u64 },
    /// Remove a member from etcd (its pod is deleted on a later step).
    RemoveMember {
        name: String,
        id: u64,
        reason: RemoveReason,
    },
    /// Recreate the pod of a member that keeps its data on a volume.
    RecreatePod { name: String },
    /// Delete a pod that has no member.
    DeletePod { name: String, reason: DeleteReason },
    /// Something is in flight; look again later.
    Wait { reason: String },
    /// Fewer than a majority of voters are healthy: report, change nothing.
    QuorumLost { reason: String },
    /// `spec.paused`: change nothing.
    Paused,
    /// Restore: create the seed, which fetches the snapshot and restores it before etcd starts.
    RestoreSeed,
    /// Restore: the seed serves the snapshot's data; the restore's part is over, and the
    /// cluster grows back to its size by the usual path.
    RestoreDone { seed: String },
    /// Restore: something is in flight (or missing); look again later.
    Restoring { reason: String },
    /// The cluster is as asked.
    Steady,
}

impl Action {
    /// Whether the action changes etcd's membership.
    pub fn is_membership_change(&self) -> bool {
        matches!(
            self,
            Action::AddMember
                | Action::JoinMember { .. }
                | Action::Promote { .. }
                | Action::RemoveMember { .. }
        )
    }
}

/// Majority of `voters`.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// The next step for one cluster.
pub fn plan(obs: &Observation, target: &Target) -> Action {
    if target.paused {
        return Action::Paused;
    }
    let pod = |name: &str| obs.pods.iter().find(|p| p.name == name);
    let Some(members) = &obs.members else {
        return without_member_list(obs, target);
    };

    let voters: Vec<&MemberView> = members.iter().filter(|m| !m.is_learner).collect();
    // Counting a voter whose pod is being deleted would let a removal go ahead on a quorum
    // that is already leaving (two pods deleted at once).
    let healthy_voters = voters
        .iter()
        .filter(|m| m.healthy && obs.pod_alive(&m.name))
        .count();
    if healthy_voters < quorum(voters.len()) {
        // Members whose pods still run and that went silent only a moment ago are most likely
        // restarting; until the grace has passed, the cluster is short, not lost.
        let restarting = voters
            .iter()
            .filter(|m| {
                !m.healthy && obs.pod_alive(&m.name) && m.unhealthy_for < target.quorum_grace
            })
            .count();
        let reason = format!(
            "{healthy_voters} of {} voting members are healthy, {} are needed",
            voters.len(),
            quorum(voters.len())
        );
        if healthy_voters + restarting >= quorum(voters.len()) {
            return Action::Wait {
                reason: format!("{reason}; {restarting} went silent moments ago"),
            };
        }
        return Action::QuorumLost { reason };
    }

    // Learners first: an addition in flight is finished (promoted) or undone (removed). On
    // scale-down a pending learner is removed, not promoted: promoting it would be a voting
    // change only to make the next one (its removal) necessary.
    if let Some(l) = members.iter().find(|m| m.is_learner) {
        if voters.len() >= target.size {
            return Action::RemoveMember {
                name: l.name.clone(),
                id: l.id,
                reason: RemoveReason::ScaleDown,
            };
        }
        let remove = Action::RemoveMember {
            name: l.name.clone(),
            id: l.id,
            reason: RemoveReason::StrandedLearner,
        };
        match pod(&l.name) {
            None => return remove,
            Some(p) if p.state.is_gone() => return remove,
            // Added so long ago that it will not catch up (etcd refused every promotion).
            Some(p) if p.age > target.learner_timeout => return remove,
            Some(_) if l.healthy => {
                return Action::Promote {
                    name: l.name.clone(),
                    id: l.id,
                };
            }
            Some(_) => {
                return Action::Wait {
                    reason: format!("learner {} is starting", l.name),
                };
            }
        }
    }

    // Pods without a member: a removal whose pod deletion was interrupted, a pod whose member
    // was never added, or one created ahead of its member. Only one of the last kind is kept,
    // and only while its `--initial-cluster` still names exactly the current members and a
    // member is still wanted; etcd would refuse it otherwise.
    let names: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
    let mut joining = None;
    for p in obs
        .pods
        .iter()
        .filter(|p| !names.contains(&p.name) && p.state != PodState::Terminating)
    {
        let keep = joining.is_none()
            && p.joining.as_ref() == Some(&names)
            && !p.state.is_gone()
            && p.age <= target.learner_timeout
            && voters.len() < target.size;
        if keep {
            joining = Some(p.name.clone());
            continue;
        }
        return Action::DeletePod {
            name: p.name.clone(),
            reason: DeleteReason::NoMember,
        };
    }

    // Voters whose pod is gone. Removing an unhealthy voter never costs a healthy one, so it
    // is safe whenever the healthy voters are a quorum of the smaller membership.
    for v in &voters {
        if obs.pod_alive(&v.name) || v.healthy {
            continue;
        }
        if target.persistent {
            match pod(&v.name) {
                None => {
                    return Action::RecreatePod {
                        name: v.name.clone(),
                    };
                }
                Some(p) if p.state == PodState::Gone => {
                    return Action::DeletePod {
                        name: v.name.clone(),
                        reason: DeleteReason::Ended,
                    };
                }
                Some(_) => {}
            }
            return Action::Wait {
                reason: format!("pod of {} is terminating", v.name),
            };
        }
        if healthy_voters >= quorum(voters.len() - 1) {
            return Action::RemoveMember {
                name: v.name.clone(),
                id: v.id,
                reason: RemoveReason::PodGone,
            };
        }
    }

    let n = voters.len();
    if n > target.size {
        return scale_down(obs, &voters, healthy_voters);
    }
    if let Some(sick) = voters.iter().find(|v| !v.healthy) {
        // Stuck (crash-looping, Pending, an alarm raised) past the bound: it blocks every other
        // change, so it is replaced, when the healthy voters are a quorum without it.
        if sick.unhealthy_for >= target.replace_after
            && healthy_voters >= quorum(n - 1)
            && Some(sick.id) != obs.leader
        {
            return Action::RemoveMember {
                name: sick.name.clone(),
                id: sick.id,
                reason: RemoveReason::Unhealthy,
            };
        }
        // The reason goes into status, so it names no running clock: a message that changed
        // every pass would make every pass a status write.
        return Action::Wait {
            reason: format!(
                "member {} is not healthy; it is replaced if it stays so for {} s",
                sick.name,
                target.replace_after.as_secs()
            ),
        };
    }
    if n < target.size {
        return match joining {
            Some(name) => Action::JoinMember { name },
            None => Action::AddMember,
        };
    }
    Action::Steady
}

/// What a restore needs besides the observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreTarget {
    /// The EtcdRestore's UID: pods that carry it belong to the restored cluster.
    pub uid: String,
    /// Where this operator serves the snapshot to the seed, if it can.
    pub url: Option<String>,
    /// Whether new member pods can run `etcd-gate` (the operator knows its own image).
    pub gate: bool,
}

/// The next step of a restore: the members being replaced go first (all of them: a restored
/// cluster starts from one seed with a new cluster token, and no old member may ever talk to
/// it), then the seed is created; once it serves, the restore is done. Nothing is deleted
/// while the seed could not be made.
pub fn restore(obs: &Observation, target: &Target, restore: &RestoreTarget) -> Action {
    if target.paused {
        return Action::Paused;
    }
    let Some(url) = restore.url.as_deref() else {
        return Action::Restoring {
            reason: "the operator has no --snapshot-url, so the seed cannot fetch the snapshot"
                .into(),
        };
    };
    if !restore.gate {
        return Action::Restoring {
            reason: "the operator does not know its own image (--member-gate-image), whose \
                     etcd-gate fetches the snapshot"
                .into(),
        };
    }
    let ours = |p: &PodView| {
        p.restore
            .as_ref()
            .is_some_and(|(uid, _)| *uid == restore.uid)
    };
    if let Some(old) = obs
        .pods
        .iter()
        .find(|p| !ours(p) && p.state != PodState::Terminating)
    {
        return Action::DeletePod {
            name: old.name.clone(),
            reason: DeleteReason::Restore,
        };
    }
    if obs.pods.iter().any(|p| !ours(p)) {
        return Action::Restoring {
            reason: "the replaced members' pods are stopping".into(),
        };
    }
    let Some(seed) = obs.pods.iter().find(|p| ours(p)) else {
        return Action::RestoreSeed;
    };
    let serving = obs
        .members
        .as_ref()
        .is_some_and(|ms| ms.iter().any(|m| m.name == seed.name && m.healthy));
    if serving {
        return Action::RestoreDone {
            seed: seed.name.clone(),
        };
    }
    let fetches_from_us = seed.restore.as_ref().is_some_and(|(_, u)| u == url);
    match seed.state {
        PodState::Terminating => Action::Restoring {
            reason: format!("seed {} is stopping", seed.name),
        },
        PodState::Gone => Action::DeletePod {
            name: seed.name.clone(),
            reason: DeleteReason::Restore,
        },
        // Made by an operator that no longer leads: it fetches from an address that no longer
        // serves the snapshot.
        _ if !fetches_from_us => Action::DeletePod {
            name: seed.name.clone(),
            reason: DeleteReason::Restore,
        },
        _ => Action::Restoring {
            reason: format!("seed {} is fetching and restoring the snapshot", seed.name),
        },
    }
}

fn without_member_list(obs: &Observation, target: &Target) -> Action {
    if !obs.bootstrapped && obs.pods.is_empty() {
        return Action::Bootstrap;
    }
    if obs
        .pods
        .iter()
        .any(|p| p.state == PodState::Pending || p.age < target.startup_grace)
    {
        return Action::Wait {
            reason: "members are starting".into(),
        };
    }
    if !obs.pods.is_empty() && obs.silent_for < target.quorum_grace {
        return Action::Wait {
            reason: format!(
                "no member answers; members that restart are given {} s before quorum counts as lost",
                target.quorum_grace.as_secs()
            ),
        };
    }
    if obs.pods.is_empty() {
        return Action::QuorumLost {
            reason: "every member pod is gone; the data went with them, so the operator will \
                     not bootstrap a new, empty cluster: restore from a backup, or delete and \
                     recreate the EtcdCluster"
                .into(),
        };
    }
    Action::QuorumLost {
        reason: "no member answers".into(),
    }
}

/// Removes one voter: an unhealthy one if any, else a follower; never the leader.
fn scale_down(obs: &Observation, voters: &[&MemberView], healthy: usize) -> Action {
    let remaining = quorum(voters.len() - 1);
    let victim = voters
        .iter()
        .find(|v| !v.healthy && Some(v.id) != obs.leader && healthy >= remaining)
        .or_else(|| {
            voters.iter().find(|v| {
                v.healthy && Some(v.id) != obs.leader && obs.leader.is_some() && healthy > remaining
            })
        });
    match victim {
        Some(v) => Action::RemoveMember {
            name: v.name.clone(),
            id: v.id,
            reason: RemoveReason::ScaleDown,
        },
        None => Action::Wait {
            reason: "no member can be removed without risking quorum".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn target(size: usize) -> Target {
        Target {
            size,
            paused: false,
            persistent: false,
            learner_timeout: 5 * MINUTE,
            startup_grace: MINUTE / 2,
            replace_after: 5 * MINUTE,
            quorum_grace: MINUTE / 2,
        }
    }

    /// An unhealthy member has been so for an hour: well past every grace.
    fn member(name: &str, id: u64, is_learner: bool, healthy: bool) -> MemberView {
        MemberView {
            name: name.into(),
            id,
            is_learner,
            healthy,
            unhealthy_for: if healthy { Duration::ZERO } else { 60 * MINUTE },
        }
    }

    fn running(name: &str) -> PodView {
        PodView {
            name: name.into(),
            state: PodState::Running,
            age: MINUTE,
            joining: None,
            restore: None,
        }
    }

    fn steady(n: u64) -> Observation {
        Observation {
            members: Some(
                (1..=n)
                    .map(|i| member(&format!("m{i}"), i, false, true))
                    .collect(),
            ),
            leader: Some(1),
            pods: (1..=n).map(|i| running(&format!("m{i}"))).collect(),
            bootstrapped: true,
            silent_for: Duration::ZERO,
        }
    }

    fn restore_target(url: Option<&str>) -> RestoreTarget {
        RestoreTarget {
            uid: "r1".into(),
            url: url.map(String::from),
            gate: true,
        }
    }

    fn seed(state: PodState, url: &str) -> PodView {
        PodView {
            state,
            restore: Some(("r1".into(), url.into())),
            ..running("seed")
        }
    }

    #[test]
    fn a_restore_replaces_every_member_by_one_seed_and_ends_when_it_serves() {
        let t = target(3);
        let r = restore_target(Some("http://op/s"));
        // Nothing is touched while the seed could not be made.
        let mut obs = steady(3);
        for blocked in [
            restore_target(None),
            RestoreTarget {
                gate: false,
                ..r.clone()
            },
        ] {
            assert!(matches!(
                restore(&obs, &t, &blocked),
                Action::Restoring { .. }
            ));
        }
        // The old members' pods go first, one per step, then are waited out.
        assert_eq!(
            restore(&obs, &t, &r),
            Action::DeletePod {
                name: "m1".into(),
                reason: DeleteReason::Restore
            }
        );
        for p in &mut obs.pods {
            p.state = PodState::Terminating;
        }
        assert!(matches!(restore(&obs, &t, &r), Action::Restoring { .. }));
        obs.pods.clear();
        obs.members = None;
        assert_eq!(restore(&obs, &t, &r), Action::RestoreSeed);
        // The seed restores, then serves.
        obs.pods.push(seed(PodState::Running, "http://op/s"));
        assert!(matches!(restore(&obs, &t, &r), Action::Restoring { .. }));
        obs.members = Some(vec![member("seed", 9, false, true)]);
        assert_eq!(
            restore(&obs, &t, &r),
            Action::RestoreDone {
                seed: "seed".into()
            }
        );
        assert_eq!(
            restore(&obs, &Target { paused: true, ..t }, &r),
            Action::Paused
        );
    }

    #[test]
    fn a_seed_that_ended_or_fetches_from_a_former_leader_is_made_again() {
        let t = target(3);
        let r = restore_target(Some("http://new-leader/s"));
        let mut obs = Observation {
            pods: vec![seed(PodState::Running, "http://old-leader/s")],
            ..Observation::default()
        };
        let delete = Action::DeletePod {
            name: "seed".into(),
            reason: DeleteReason::Restore,
        };
        assert_eq!(restore(&obs, &t, &r), delete);
        obs.pods = vec![seed(PodState::Gone, "http://new-leader/s")];
        assert_eq!(restore(&obs, &t, &r), delete);
        // Serving, it stays whoever made it.
        obs.pods = vec![seed(PodState::Running, "http://old-leader/s")];
        obs.members = Some(vec![member("seed", 9, false, true)]);
        assert!(matches!(restore(&obs, &t, &r), Action::RestoreDone { .. }));
    }

    #[test]
    fn an_empty_cluster_is_bootstrapped_once() {
        assert_eq!(plan(&Observation::default(), &target(3)), Action::Bootstrap);
        let after_seed = Observation {
            bootstrapped: true,
            ..Observation::default()
        };
        assert!(matches!(
            plan(&after_seed, &target(3)),
            Action::QuorumLost { .. }
        ));
    }

    #[test]
    fn grows_and_shrinks_one_member_at_a_time() {
        assert_eq!(plan(&steady(1), &target(3)), Action::AddMember);
        assert_eq!(plan(&steady(3), &target(3)), Action::Steady);
        let down = plan(&steady(3), &target(1));
        assert!(
            matches!(down, Action::RemoveMember { id, reason: RemoveReason::ScaleDown, .. } if id != 1)
        );
    }

    #[test]
    fn a_started_learner_is_promoted_and_a_stranded_one_removed() {
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m4", 4, true, true));
        obs.pods.push(running("m4"));
        assert_eq!(
            plan(&obs, &target(5)),
            Action::Promote {
                name: "m4".into(),
                id: 4
            }
        );
        obs.pods.pop();
        assert!(matches!(
            plan(&obs, &target(5)),
            Action::RemoveMember {
                id: 4,
                reason: RemoveReason::StrandedLearner,
                ..
            }
        ));
    }

    #[test]
    fn a_pod_created_ahead_of_its_member_is_joined_or_else_deleted() {
        let mut obs = steady(3);
        let peers: BTreeSet<String> = ["m1", "m2", "m3"].map(String::from).into();
        obs.pods.push(PodView {
            joining: Some(peers),
            state: PodState::Pending,
            ..running("m4")
        });
        assert_eq!(
            plan(&obs, &target(5)),
            Action::JoinMember { name: "m4".into() }
        );
        // Not wanted any more, or too late.
        let delete = Action::DeletePod {
            name: "m4".into(),
            reason: DeleteReason::NoMember,
        };
        assert_eq!(plan(&obs, &target(3)), delete);
        let impatient = Target {
            learner_timeout: MINUTE / 2,
            ..target(5)
        };
        assert_eq!(plan(&obs, &impatient), delete);
        // The membership changed since the pod was made: etcd would refuse its
        // --initial-cluster.
        obs.members.as_mut().unwrap().pop();
        obs.pods.remove(2);
        assert_eq!(plan(&obs, &target(5)), delete);
    }

    #[test]
    fn the_second_members_pod_made_beside_the_seed_joins_once_the_seed_answers() {
        let gated = PodView {
            joining: Some(["m1".to_string()].into()),
            state: PodState::Pending,
            age: Duration::from_secs(1),
            ..running("m2")
        };
        let starting = Observation {
            members: None,
            leader: None,
            pods: vec![
                PodView {
                    age: Duration::from_secs(1),
                    ..running("m1")
                },
                gated.clone(),
            ],
            bootstrapped: true,
            silent_for: Duration::ZERO,
        };
        assert!(matches!(plan(&starting, &target(3)), Action::Wait { .. }));
        let mut seeded = steady(1);
        seeded.pods.push(gated);
        assert_eq!(
            plan(&seeded, &target(3)),
            Action::JoinMember { name: "m2".into() }
        );
    }

    #[test]
    fn a_dead_member_is_removed_then_replaced() {
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.pods.pop();
        assert!(matches!(
            plan(&obs, &target(3)),
            Action::RemoveMember {
                id: 3,
                reason: RemoveReason::PodGone,
                ..
            }
        ));
        let persistent = Target {
            persistent: true,
            ..target(3)
        };
        assert_eq!(
            plan(&obs, &persistent),
            Action::RecreatePod { name: "m3".into() }
        );
    }

    #[test]
    fn lost_quorum_is_reported_and_nothing_is_done() {
        let mut obs = steady(3);
        for m in &mut obs.members.as_mut().unwrap()[1..] {
            m.healthy = false;
        }
        obs.pods.truncate(1);
        assert!(matches!(plan(&obs, &target(3)), Action::QuorumLost { .. }));
    }

    #[test]
    fn a_terminating_pod_does_not_count_towards_quorum() {
        // Two of three pods deleted at once: one member already down, the other still
        // answering while its pod terminates. Removing the first would leave a two-member
        // cluster whose second half is on its way out.
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[0].healthy = false;
        obs.pods[0].state = PodState::Terminating;
        obs.pods[1].state = PodState::Terminating;
        assert!(matches!(plan(&obs, &target(3)), Action::QuorumLost { .. }));
    }

    #[test]
    fn paused_changes_nothing() {
        let mut obs = steady(3);
        obs.pods.pop();
        assert_eq!(
            plan(
                &obs,
                &Target {
                    paused: true,
                    ..target(3)
                }
            ),
            Action::Paused
        );
    }

    #[test]
    fn on_scale_down_a_pending_learner_is_removed_not_promoted() {
        // 3 voters and a learner that has caught up, and the user asks for 3 again.
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m4", 4, true, true));
        obs.pods.push(running("m4"));
        assert_eq!(
            plan(&obs, &target(3)),
            Action::RemoveMember {
                name: "m4".into(),
                id: 4,
                reason: RemoveReason::ScaleDown
            }
        );
        // Below the learner's own slot too: still removed first, then a follower.
        assert!(matches!(
            plan(&obs, &target(1)),
            Action::RemoveMember { id: 4, .. }
        ));
    }

    #[test]
    fn a_learner_that_never_catches_up_is_removed() {
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m4", 4, true, true));
        obs.pods.push(PodView {
            age: 10 * MINUTE,
            ..running("m4")
        });
        assert!(matches!(
            plan(&obs, &target(5)),
            Action::RemoveMember {
                id: 4,
                reason: RemoveReason::StrandedLearner,
                ..
            }
        ));
    }

    #[test]
    fn a_restarting_single_member_is_not_lost_quorum_until_the_grace_has_passed() {
        // The member's container restarts: its pod still runs, etcd is silent for a moment.
        let mut obs = steady(1);
        obs.members.as_mut().unwrap()[0].healthy = false;
        obs.members.as_mut().unwrap()[0].unhealthy_for = Duration::from_secs(3);
        obs.leader = None;
        assert!(matches!(plan(&obs, &target(1)), Action::Wait { .. }));
        obs.members.as_mut().unwrap()[0].unhealthy_for = MINUTE;
        assert!(matches!(plan(&obs, &target(1)), Action::QuorumLost { .. }));

        // Nobody answers at all: the same grace, counted from the last answer.
        let silent = Observation {
            members: None,
            leader: None,
            silent_for: Duration::from_secs(3),
            ..steady(1)
        };
        assert!(matches!(plan(&silent, &target(1)), Action::Wait { .. }));
        let lost = Observation {
            silent_for: MINUTE,
            ..silent
        };
        assert!(matches!(plan(&lost, &target(1)), Action::QuorumLost { .. }));
    }

    #[test]
    fn a_member_stuck_unhealthy_while_its_pod_runs_is_replaced_after_the_bound() {
        // Crash-looping: the pod is Running (or Pending), etcd never answers as this member.
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.members.as_mut().unwrap()[2].unhealthy_for = MINUTE;
        // Before the bound it blocks scale-up, as a member that is merely slow should.
        assert!(matches!(plan(&obs, &target(5)), Action::Wait { .. }));
        assert!(matches!(plan(&obs, &target(3)), Action::Wait { .. }));
        obs.members.as_mut().unwrap()[2].unhealthy_for = 6 * MINUTE;
        let replace = Action::RemoveMember {
            name: "m3".into(),
            id: 3,
            reason: RemoveReason::Unhealthy,
        };
        assert_eq!(plan(&obs, &target(3)), replace);
        assert_eq!(plan(&obs, &target(5)), replace);
        obs.pods[2].state = PodState::Pending;
        assert_eq!(plan(&obs, &target(3)), replace);

        // Not when the others are not a quorum without it (2 of 3 stuck in a 3-member cluster
        // is lost quorum; in a 5-member cluster with 2 stuck, one at a time).
        let mut five = steady(5);
        for m in &mut five.members.as_mut().unwrap()[3..] {
            m.healthy = false;
            m.unhealthy_for = 6 * MINUTE;
        }
        assert!(matches!(
            plan(&five, &target(5)),
            Action::RemoveMember {
                reason: RemoveReason::Unhealthy,
                ..
            }
        ));
    }

    #[test]
    fn a_persistent_members_ended_pod_is_deleted_then_recreated_on_its_claim() {
        let persistent = Target {
            persistent: true,
            ..target(3)
        };
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.pods[2].state = PodState::Gone;
        assert_eq!(
            plan(&obs, &persistent),
            Action::DeletePod {
                name: "m3".into(),
                reason: DeleteReason::Ended
            }
        );
        obs.pods.pop();
        assert_eq!(
            plan(&obs, &persistent),
            Action::RecreatePod { name: "m3".into() }
        );
    }

    #[test]
    fn a_stale_leader_is_never_chosen_for_scale_down_and_a_healthy_one_is_never_removed() {
        // The leader as some member last reported it is m1, which is now silent.
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[0].healthy = false;
        obs.pods[0].state = PodState::Running;
        obs.leader = Some(1);
        match plan(&obs, &target(2)) {
            Action::RemoveMember { id, .. } => assert_ne!(id, 1),
            other => assert!(matches!(other, Action::Wait { .. }), "{other:?}"),
        }
    }

    // --- properties ------------------------------------------------------------------------

    /// One member of the simulated world.
    #[derive(Clone, Debug)]
    struct SimMember {
        name: String,
        id: u64,
        learner: bool,
        /// It answers as itself, knows a leader and raises no alarm.
        answers: bool,
    }

    /// A world the planner's actions are applied to: each member is in etcd and/or has a pod.
    #[derive(Clone, Debug)]
    struct Sim {
        members: Vec<SimMember>,
        pods: Vec<(String, PodState, Option<BTreeSet<String>>)>,
        /// The leader as the planner is told it; may be stale (a member that no longer answers).
        leader: Option<u64>,
        /// How long the silent members have been silent.
        silent_for: Duration,
        next: u64,
    }

    /// The test's own majority rule, written apart from [`quorum`] so that a mistake there is
    /// not repeated here.
    fn majority(healthy: usize, of: usize) -> bool {
        2 * healthy > of
    }

    impl Sim {
        fn observe(&self) -> Observation {
            let answered = self.members.iter().any(|m| m.answers);
            Observation {
                members: answered.then(|| {
                    self.members
                        .iter()
                        .map(|m| MemberView {
                            unhealthy_for: if m.answers {
                                Duration::ZERO
                            } else {
                                self.silent_for
                            },
                            ..member(&m.name, m.id, m.learner, m.answers)
                        })
                        .collect()
                }),
                leader: self.leader,
                pods: self
                    .pods
                    .iter()
                    .map(|(n, s, j)| PodView {
                        name: n.clone(),
                        state: *s,
                        age: MINUTE,
                        joining: j.clone(),
                        restore: None,
                    })
                    .collect(),
                bootstrapped: true,
                silent_for: if answered {
                    Duration::ZERO
                } else {
                    self.silent_for
                },
            }
        }

        fn pod_state(&self, name: &str) -> Option<PodState> {
            self.pods.iter().find(|p| p.0 == name).map(|p| p.1)
        }

        fn voters(&self) -> Vec<&SimMember> {
            self.members.iter().filter(|m| !m.learner).collect()
        }

        /// A voter that counts: it answers and its pod is not on its way out.
        fn counts(&self, m: &SimMember) -> bool {
            m.answers && !m.learner && self.pod_state(&m.name).is_some_and(|s| !s.is_gone())
        }

        /// Applies `action`; afterwards every member whose pod runs answers (it has started).
        fn apply(&mut self, action: &Action) {
            match action {
                // As act does with a gate image: the pod first, its member on a later step
                // (the worst case: the operator stopped in between).
                Action::AddMember => {
                    self.next += 1;
                    let peers = self.members.iter().map(|m| m.name.clone()).collect();
                    self.pods
                        .push((format!("n{}", self.next), PodState::Pending, Some(peers)));
                }
                Action::JoinMember { name } => {
                    self.next += 1;
                    self.members.push(SimMember {
                        name: name.clone(),
                        id: 1000 + self.next,
                        learner: true,
                        answers: false,
                    });
                }
                Action::Promote { id, .. } => self
                    .members
                    .iter_mut()
                    .filter(|m| m.id == *id)
                    .for_each(|m| m.learner = false),
                Action::RemoveMember { id, name, .. } => {
                    // As act does: out of etcd first, then the pod is deleted.
                    self.members.retain(|m| m.id != *id);
                    for p in self.pods.iter_mut().filter(|p| &p.0 == name) {
                        p.1 = PodState::Terminating;
                    }
                }
                Action::DeletePod { name, .. } => {
                    for p in self.pods.iter_mut().filter(|p| &p.0 == name) {
                        p.1 = PodState::Terminating;
                    }
                }
                Action::RecreatePod { name } => {
                    self.pods.push((name.clone(), PodState::Running, None))
                }
                _ => {}
            }
            // Deleted pods finish terminating, and pods that were scheduling have started, by
            // the next look.
            self.pods.retain(|p| p.1 != PodState::Terminating);
            for p in &mut self.pods {
                if p.1 == PodState::Pending {
                    p.1 = PodState::Running;
                }
            }
            let running: BTreeSet<String> = self
                .pods
                .iter()
                .filter(|p| p.1 == PodState::Running)
                .map(|p| p.0.clone())
                .collect();
            for m in &mut self.members {
                m.answers = running.contains(&m.name);
            }
            if !self
                .members
                .iter()
                .any(|m| Some(m.id) == self.leader && m.answers && !m.learner)
            {
                self.leader = self
                    .members
                    .iter()
                    .find(|m| m.answers && !m.learner)
                    .map(|m| m.id);
            }
        }
    }

    /// Arbitrary states: up to 7 members in etcd, each a voter or learner, answering or not,
    /// with a running, pending, ended, terminating or missing pod (members whose pod is
    /// terminating may still answer, as real ones do for a moment), up to 2 stray pods, a
    /// leader that may be stale, and silent members that went silent a moment or an hour ago.
    /// With `quorate`, the first voters (a majority) are forced healthy, so every state keeps quorum.
    fn arb_sim(quorate: bool) -> impl Strategy<Value = Sim> {
        // Weighted towards running, answering voters, so that enough states keep quorum.
        let member = (
            prop::bool::weighted(0.3),
            0..9u8,
            prop::bool::weighted(0.85),
        );
        (
            prop::collection::vec(member, 1..=7),
            0..=2usize,
            any::<prop::sample::Index>(),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.5),
        )
            .prop_map(move |(ms, strays, leader, stale, recent)| {
                let mut sim = Sim {
                    members: vec![],
                    pods: vec![],
                    leader: None,
                    silent_for: if recent {
                        Duration::from_secs(2)
                    } else {
                        60 * MINUTE
                    },
                    next: 0,
                };
                for (i, (learner, pod, answers)) in ms.iter().enumerate() {
                    let name = format!("m{i}");
                    let state = match pod {
                        0..=4 => Some(PodState::Running),
                        5 => Some(PodState::Pending),
                        6 => Some(PodState::Gone),
                        7 => Some(PodState::Terminating),
                        _ => None,
                    };
                    // A member answers from a running pod, or from one that is terminating
                    // (etcd serves until the signal lands).
                    let answers = *answers
                        && matches!(state, Some(PodState::Running | PodState::Terminating));
                    // The first member is the seed, always a voter.
                    sim.members.push(SimMember {
                        name: name.clone(),
                        id: i as u64 + 1,
                        learner: *learner && i > 0,
                        answers,
                    });
                    if let Some(s) = state {
                        sim.pods.push((name, s, None));
                    }
                }
                if quorate {
                    let voters: Vec<usize> = (0..sim.members.len())
                        .filter(|&i| !sim.members[i].learner)
                        .collect();
                    for &i in voters.iter().take(voters.len() / 2 + 1) {
                        sim.members[i].answers = true;
                        let name = sim.members[i].name.clone();
                        sim.pods.retain(|p| p.0 != name);
                        sim.pods.push((name, PodState::Running, None));
                    }
                }
                // Strays: plain pods without a member, or pods created ahead of their member
                // whose `--initial-cluster` may or may not still match.
                let names: BTreeSet<String> = sim.members.iter().map(|m| m.name.clone()).collect();
                for s in 0..strays {
                    let joining = match (s + ms.len()) % 3 {
                        0 => None,
                        1 => Some(names.clone()),
                        _ => Some(names.iter().skip(1).cloned().collect()),
                    };
                    sim.pods
                        .push((format!("stray{s}"), PodState::Running, joining));
                }
                // The leader as a healthy voter reports it; sometimes stale: any voter.
                let candidates: Vec<u64> = sim
                    .members
                    .iter()
                    .filter(|m| !m.learner && (stale || m.answers))
                    .map(|m| m.id)
                    .collect();
                if !candidates.is_empty() {
                    sim.leader = Some(candidates[leader.index(candidates.len())]);
                }
                sim
            })
    }

    fn target_of(size: usize, persistent: bool) -> Target {
        Target {
            persistent,
            ..target(size)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// One step never removes a leader that counts, never removes a voter unless the voters
        /// that count (answering, pod not leaving) stay a majority of the new membership, never
        /// adds while a member is unhealthy or a learner is pending, never promotes a learner
        /// the user no longer needs, and does nothing at all without a majority.
        #[test]
        fn no_step_breaks_quorum(
            sim in arb_sim(false),
            size in 1..=7usize,
            persistent in any::<bool>(),
        ) {
            let obs = sim.observe();
            let action = plan(&obs, &target_of(size, persistent));
            let voters = sim.voters();
            let counting = voters.iter().filter(|m| sim.counts(m)).count();
            let quorate = obs.members.is_some() && majority(counting, voters.len());
            match &action {
                Action::RemoveMember { id, .. } => {
                    prop_assert!(quorate);
                    let m = sim.members.iter().find(|m| m.id == *id).unwrap();
                    if Some(*id) == obs.leader {
                        prop_assert!(!sim.counts(m), "removed the leader {:?}", action);
                    }
                    if !m.learner {
                        let after_voters = voters.len() - 1;
                        let after = counting - usize::from(sim.counts(m));
                        prop_assert!(after_voters >= 1);
                        prop_assert!(majority(after, after_voters), "{:?}", action);
                    }
                }
                Action::AddMember | Action::JoinMember { .. } => {
                    prop_assert!(quorate);
                    prop_assert!(sim.members.iter().all(|m| !m.learner && m.answers));
                    prop_assert!(voters.len() < size);
                    if let Action::JoinMember { name } = &action {
                        let names: BTreeSet<String> =
                            sim.members.iter().map(|m| m.name.clone()).collect();
                        let p = sim.pods.iter().find(|p| &p.0 == name).unwrap();
                        prop_assert_eq!(p.2.as_ref(), Some(&names));
                    }
                }
                Action::Promote { id, .. } => {
                    prop_assert!(quorate);
                    let m = sim.members.iter().find(|m| m.id == *id).unwrap();
                    prop_assert!(m.learner && m.answers);
                    prop_assert!(voters.len() < size, "promoted a learner on scale-down");
                }
                Action::RecreatePod { name } => {
                    prop_assert!(persistent);
                    prop_assert!(sim.pod_state(name).is_none());
                }
                Action::Bootstrap => prop_assert!(false, "bootstrapped twice"),
                _ => {}
            }
            if !quorate {
                prop_assert!(!action.is_membership_change(), "{:?} without quorum", action);
                let deletes = matches!(action, Action::DeletePod { .. });
                prop_assert!(!deletes, "deleted a pod without quorum");
            }
        }

        /// From any state with quorum, applying the plan step by step reaches spec.size voters,
        /// all healthy, no learner, pods equal to members, then stays there; with or without
        /// volumes.
        #[test]
        fn repeated_steps_converge_to_size(
            mut sim in arb_sim(true),
            size in 1..=7usize,
            persistent in any::<bool>(),
        ) {
            let target = target_of(size, persistent);
            let mut trace = Vec::new();
            for _ in 0..64 {
                let action = plan(&sim.observe(), &target);
                if action == Action::Steady {
                    break;
                }
                trace.push(action.clone());
                sim.apply(&action);
            }
            prop_assert_eq!(plan(&sim.observe(), &target), Action::Steady, "{:?}", trace);
            prop_assert_eq!(sim.members.len(), size);
            prop_assert!(sim.members.iter().all(|m| !m.learner && m.answers));
            let mut pods: Vec<_> = sim.pods.iter().map(|p| p.0.clone()).collect();
            let mut members: Vec<_> = sim.members.iter().map(|m| m.name.clone()).collect();
            pods.sort();
            members.sort();
            prop_assert_eq!(pods, members);
        }
    }
}
