//! Status as a function of what was observed and what the planner decided. Pure.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::observe::Observed;
use super::plan::{Action, DeleteReason, FinalSnapshot};
use super::version::Version;
use crate::api::{
    AvailableReason, ClusterPhase, Condition, ConditionType, EtcdCluster, EtcdClusterStatus,
    HibernationPhase, HibernationStatus, MemberRole, MemberStatus, MembersStatus, find_condition,
};
use crate::kube::names::CLIENT_PORT;

mod conditions;
mod finish;
mod recovery;

pub use conditions::{mark_auth, mark_degraded, mark_following, mark_rotating};
pub use finish::{Findings, Finished, early, finish};
pub use recovery::{record as recovery_record, summary as recovery_summary};

/// How long after a pass last found the cluster Available a pass that finds it not may still
/// report it Available. One observation is not proof of an outage: the member list is read
/// linearizably and fails for the moment of a leader election (a roll's leader move), a status
/// answer lost to a busy node counts its member unhealthy, and endpoints and the proxies
/// follow a roll's removal a moment late. A cluster that stays unavailable is reported so
/// after this; lost quorum, NOSPACE and a cluster put to sleep (`spec.hibernation`) at once.
pub const AVAILABLE_GRACE: Duration = Duration::from_secs(3);

/// Keeps the previous Available condition in `status` when this pass's verdict is a drop that
/// [`AVAILABLE_GRACE`] covers. Returns this pass's own verdict.
pub fn hold_available(
    status: &mut EtcdClusterStatus,
    previous: &EtcdClusterStatus,
    action: &Action,
    available_ago: Option<Duration>,
) -> bool {
    let find =
        |s: &EtcdClusterStatus| find_condition(&s.conditions, ConditionType::Available).cloned();
    let Some(now) = find(status) else {
        return false;
    };
    if now.is_true() {
        return true;
    }
    let definite = matches!(action, Action::QuorumLost { .. })
        || now.reason == AvailableReason::NoSpace.as_str()
        || now.reason == AvailableReason::Hibernated.as_str();
    let recent = available_ago.is_some_and(|ago| ago < AVAILABLE_GRACE);
    if let Some(before) = find(previous).filter(|c| c.is_true())
        && recent
        && !definite
    {
        for c in status.conditions.iter_mut() {
            if c.type_ == before.type_ {
                *c = Condition {
                    observed_generation: c.observed_generation,
                    ..before.clone()
                };
            }
        }
    }
    false
}

/// The status to write after `action` was planned on `obs`.
pub fn compute(cluster: &EtcdCluster, obs: &Observed, action: &Action) -> EtcdClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;
    let members = obs.plan.members.as_deref().unwrap_or_default();
    let roster = roster(obs, &previous);
    let voters = members.iter().filter(|m| !m.is_learner).count();
    // The oldest version a member runs: the cluster's, until every member is upgraded.
    let current_version = obs
        .statuses
        .values()
        .map(|s| s.version.as_str())
        .min_by_key(|v| Version::parse(v))
        .unwrap_or(previous.current_version.as_str())
        .to_string();
    let wanted = cluster.spec.version().to_string();

    let (phase, reason) = phase_of(obs, action, &previous);
    let upgrading = Version::parse(&current_version) != Version::parse(&wanted);
    let conditions = conditions::of(&conditions::Inputs {
        cluster,
        obs,
        action,
        previous: &previous,
        roster: &roster,
        voters,
        upgrading,
        phase_reason: &reason,
    });

    let available = conditions
        .iter()
        .any(|c| c.type_ == ConditionType::Available.as_str() && c.is_true());
    let hibernation = hibernation_of(cluster, obs, action, &previous, available);
    EtcdClusterStatus {
        phase: Some(phase),
        reason,
        control_paused: cluster.spec.is_paused(),
        conditions,
        size: i32::try_from(members.len()).unwrap_or(i32::MAX),
        service_name: format!("{}-client", cluster.name_any()),
        client_port: Some(CLIENT_PORT),
        ready_members: Some(i32::try_from(roster.ready.len()).unwrap_or(i32::MAX)),
        selector: crate::kube::names::selector_text(&cluster.name_any()),
        members: roster.members,
        target_version: if current_version.is_empty() || current_version == wanted {
            String::new()
        } else {
            wanted
        },
        current_version,
        observed_generation: generation,
        cluster_id: obs
            .statuses
            .values()
            .next()
            .map_or(previous.cluster_id.clone(), |s| {
                format!("{:x}", s.cluster_id)
            }),
        member_statuses: roster.statuses,
        restore: previous.restore.clone(),
        recovery: previous.recovery.clone(),
        defragmentations: previous.defragmentations.clone(),
        defrag_request: previous.defrag_request.clone(),
        auth: previous.auth.clone(),
        migration: super::external::migration(
            cluster,
            &obs.addr
                .clone()
                .unwrap_or_else(|| crate::kube::names::addressing(cluster)),
            obs.members.as_deref(),
            &previous,
        ),
        hibernation,
        standby: previous.standby.clone(),
    }
}

/// `status.hibernation`: while the cluster is put to sleep, sleeps, or wakes (until it is
/// Available again).
fn hibernation_of(
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    previous: &EtcdClusterStatus,
    available: bool,
) -> Option<HibernationStatus> {
    let before = previous.hibernation.clone();
    if cluster.spec.hibernating().is_none() {
        return before.filter(|_| !available).map(|h| HibernationStatus {
            phase: HibernationPhase::Waking,
            since: None,
            ..h
        });
    }
    // A status left by an earlier hibernation that woke says nothing of this one.
    let before = before.filter(|h| h.phase != HibernationPhase::Waking);
    let (backup, revision) = match &obs.plan.final_snapshot {
        FinalSnapshot::Taken { backup, revision } => (backup.clone(), Some(*revision)),
        _ => before
            .as_ref()
            .map(|h| (h.backup.clone(), h.revision))
            .unwrap_or_default(),
    };
    let asleep = matches!(action, Action::Hibernated);
    Some(HibernationStatus {
        phase: if asleep {
            HibernationPhase::Hibernated
        } else {
            HibernationPhase::Hibernating
        },
        backup,
        revision,
        since: asleep.then(|| {
            before
                .and_then(|h| h.since)
                .unwrap_or_else(|| Timestamp::now().to_string())
        }),
    })
}

/// Each member's status, and which are ready.
pub(super) struct Roster {
    pub(super) statuses: Vec<MemberStatus>,
    pub(super) members: MembersStatus,
    /// Ready members (also in `members.ready`).
    pub(super) ready: Vec<String>,
    /// Healthy in etcd's view, whether or not clients of the Service reach them yet.
    pub(super) healthy_voters: usize,
    /// Pods published as ready endpoints of the client Service whose members do not serve
    /// (not healthy, or no longer members).
    pub(super) stray: Vec<String>,
}

/// The alarms any member reports for member `id` (each lists the whole cluster's), once each.
fn alarms_of(obs: &Observed, id: u64) -> Vec<String> {
    let all: BTreeSet<String> = obs
        .statuses
        .values()
        .flat_map(|s| s.alarms_of(id))
        .collect();
    all.into_iter().collect()
}

fn roster(obs: &Observed, previous: &EtcdClusterStatus) -> Roster {
    let members = obs.plan.members.as_deref().unwrap_or_default();
    let mut statuses = Vec::new();
    let mut ready = Vec::new();
    let mut unready = Vec::new();
    let mut healthy_voters = 0;
    for m in members {
        let status = obs.statuses.get(&m.id);
        let role = if m.is_learner {
            MemberRole::Learner
        } else if Some(m.id) == obs.plan.leader {
            MemberRole::Leader
        } else {
            MemberRole::Follower
        };
        let healthy = m.healthy && !m.is_learner && obs.plan.alive(&m.name);
        healthy_voters += usize::from(healthy);
        // Ready: healthy, and a route clients of the Service take (its pod Ready and listed
        // as a ready endpoint of the client Service). External members: status.migration.
        if !obs.plan.external.contains(&m.name) {
            if healthy && obs.serving.published.contains(&m.name) {
                &mut ready
            } else {
                &mut unready
            }
            .push(m.name.clone());
        }
        statuses.push(MemberStatus {
            name: m.name.clone(),
            id: format!("{:x}", m.id),
            role: Some(role),
            version: status.map(|s| s.version.clone()).unwrap_or_default(),
            healthy: m.healthy,
            db_size: status.map(|s| s.db_size),
            db_size_in_use: status.map(|s| s.db_size_in_use),
            alarms: alarms_of(obs, m.id),
            raft_index: status.map(|s| i64::try_from(s.raft_index).unwrap_or(i64::MAX)),
        });
    }
    // Nobody answers: the members as last seen, none healthy. Dropping them would hide which
    // members the cluster has, and persistent members are brought back by these names.
    if obs.plan.members.is_none() {
        for m in &previous.member_statuses {
            unready.push(m.name.clone());
            statuses.push(MemberStatus {
                role: None,
                healthy: false,
                db_size: None,
                db_size_in_use: None,
                alarms: Vec::new(),
                raft_index: None,
                ..m.clone()
            });
        }
    }
    let serving: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.healthy && obs.plan.pod_alive(&m.name))
        .map(|m| m.name.as_str())
        .collect();
    let now = Timestamp::now();
    let stray = obs
        .serving
        .published
        .iter()
        .filter(|p| obs.plan.members.is_some() && !serving.contains(p.as_str()))
        .filter(|p| !leaving_moments_ago(obs, p, now))
        .cloned()
        .collect();
    Roster {
        stray,
        statuses,
        members: MembersStatus {
            ready: ready.clone(),
            unready,
        },
        ready,
        healthy_voters,
    }
}

/// How long an endpoint of a pod being deleted may linger in the client Service before it
/// counts against Available: the endpoint controller marks a terminating pod's endpoint not
/// ready within a second or so, and a roll's removal (its pod deleted by the operator) must not
/// read as an outage. A deleted pod's endpoint still listed after this is one.
const LEAVING_GRACE: Duration = Duration::from_secs(5);

/// Whether pod `name`'s deletion was asked for less than [`LEAVING_GRACE`] ago.
fn leaving_moments_ago(obs: &Observed, name: &str, now: Timestamp) -> bool {
    let Some(meta) = obs.pods.get(name).map(|p| &p.metadata) else {
        return false;
    };
    let Some(at) = &meta.deletion_timestamp else {
        return false;
    };
    // The deletion timestamp is when the grace period ends: the request came that long before.
    let grace = Duration::from_secs(
        u64::try_from(meta.deletion_grace_period_seconds.unwrap_or(0)).unwrap_or(0),
    );
    let asked = at.0 - grace;
    Duration::try_from(now.duration_since(asked)).is_ok_and(|d| d < LEAVING_GRACE)
}

/// The phase and its reason.
fn phase_of(
    obs: &Observed,
    action: &Action,
    previous: &EtcdClusterStatus,
) -> (ClusterPhase, String) {
    let ever_ran = !previous.cluster_id.is_empty() || !obs.statuses.is_empty();
    match action {
        Action::QuorumLost { reason } => (ClusterPhase::Failed, reason.clone()),
        Action::Hibernated => (
            ClusterPhase::Hibernated,
            "spec.hibernation.enabled: no member pod runs".into(),
        ),
        // Silent for a moment (a restarting member): the phase stays what it was; only lost
        // quorum past its grace makes it Failed.
        Action::RestoreSeed | Action::Restoring { .. } => {
            (ClusterPhase::Creating, "restoring from a snapshot".into())
        }
        Action::DeletePod {
            reason: DeleteReason::Restore,
            ..
        } => (ClusterPhase::Creating, "restoring from a snapshot".into()),
        _ if obs.plan.members.is_none() && ever_ran => (
            previous
                .phase
                .filter(|p| *p != ClusterPhase::Creating)
                .unwrap_or(ClusterPhase::Running),
            previous.reason.clone(),
        ),
        _ if obs.plan.members.is_none() => (ClusterPhase::Creating, String::new()),
        _ => (ClusterPhase::Running, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::{Condition, ConditionType, EtcdClusterSpec, find_condition};
    use crate::cluster::plan::FinalSnapshot;
    use crate::cluster::plan::{MemberView, Observation, PodState, PodView};
    use crate::cluster::serving::READ_GRACE;
    use crate::cluster::serving::Serving;

    fn observed(states: [PodState; 3]) -> Observed {
        let names = ["m1", "m2", "m3"];
        Observed {
            plan: Observation {
                members: Some(
                    names
                        .iter()
                        .enumerate()
                        .map(|(i, n)| MemberView {
                            name: n.to_string(),
                            id: i as u64 + 1,
                            is_learner: false,
                            healthy: true,
                            unhealthy_for: Duration::ZERO,
                            caught_up: true,
                        })
                        .collect(),
                ),
                leader: Some(1),
                pods: names
                    .iter()
                    .zip(states)
                    .map(|(n, state)| PodView {
                        name: n.to_string(),
                        state,
                        age: Duration::from_secs(60),
                        joining: None,
                        restore: None,
                        current: true,
                        image_only: false,
                        foreign: false,
                        failing: None,
                        node_lost: None,
                        node: None,
                    })
                    .collect(),
                bootstrapped: true,
                silent_for: Duration::ZERO,
                ..Observation::default()
            },
            serving: Serving {
                published: names.iter().map(|n| n.to_string()).collect(),
                read: Some(Ok(())),
                failing_for: Duration::ZERO,
            },
            ..Observed::default()
        }
    }

    fn available(status: &EtcdClusterStatus) -> (String, String) {
        let c = find_condition(&status.conditions, ConditionType::Available).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    fn three() -> EtcdCluster {
        EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 3,
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_sleeping_cluster_is_hibernated_not_degraded_and_waking_lasts_until_available() {
        let mut cluster = three();
        cluster.spec.hibernation = Some(crate::api::Hibernation {
            enabled: true,
            ..Default::default()
        });
        // The final snapshot found, the pods going.
        let mut obs = observed([PodState::Running; 3]);
        obs.plan.final_snapshot = FinalSnapshot::Taken {
            backup: "example-hibernation-r7".into(),
            revision: 7,
        };
        let going = compute(&cluster, &obs, &Action::Hibernate { pods: vec![] });
        let h = going.hibernation.clone().unwrap();
        assert_eq!(h.phase, HibernationPhase::Hibernating);
        assert_eq!(
            (h.backup.as_str(), h.revision),
            ("example-hibernation-r7", Some(7))
        );
        let reason = |s: &EtcdClusterStatus, t: &str| {
            let c = s.conditions.iter().find(|c| c.type_ == t).unwrap();
            (c.status.clone(), c.reason.clone())
        };
        assert_eq!(
            reason(&going, "Progressing"),
            ("True".into(), "Hibernating".into())
        );
        // Asleep: nothing answers, the snapshot is remembered, nothing is degraded.
        cluster.status = Some(going);
        let asleep = compute(&cluster, &Observed::default(), &Action::Hibernated);
        assert_eq!(asleep.phase, Some(ClusterPhase::Hibernated));
        let h = asleep.hibernation.clone().unwrap();
        assert_eq!(h.phase, HibernationPhase::Hibernated);
        assert_eq!(h.backup, "example-hibernation-r7");
        assert!(h.since.is_some());
        assert_eq!(available(&asleep), ("False".into(), "Hibernated".into()));
        // Asleep by request is no moment's drop that the grace would hide.
        let mut held = asleep.clone();
        let before = cluster.status.as_ref().unwrap();
        assert_eq!(available(before).0, "True");
        hold_available(
            &mut held,
            before,
            &Action::Hibernated,
            Some(Duration::from_secs(1)),
        );
        assert_eq!(available(&held), ("False".into(), "Hibernated".into()));
        assert_eq!(
            reason(&asleep, "Degraded"),
            ("False".into(), "Hibernated".into())
        );
        // Woken: Waking until Available, then gone.
        cluster.status = Some(asleep);
        cluster.spec.hibernation = None;
        let waking = compute(
            &cluster,
            &Observed::default(),
            &Action::Wait {
                reason: "starting".into(),
            },
        );
        let h = waking.hibernation.clone().unwrap();
        assert_eq!(h.phase, HibernationPhase::Waking);
        assert_eq!(h.revision, Some(7));
        cluster.status = Some(waking);
        let awake = compute(&cluster, &observed([PodState::Running; 3]), &Action::Steady);
        assert_eq!(available(&awake).0, "True");
        assert!(awake.hibernation.is_none());
    }

    #[test]
    fn a_roll_held_for_the_maintenance_window_is_not_progressing_and_says_until_when() {
        let cluster = three();
        let obs = observed([PodState::Running; 3]);
        let wait = Action::WaitForWindow {
            what: "rolling 3 outdated member(s)".into(),
            opens: "2026-12-05T02:00:00Z".parse().unwrap(),
        };
        let status = compute(&cluster, &obs, &wait);
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "WaitingForMaintenanceWindow")
        );
        assert_eq!(
            c.message,
            "rolling 3 outdated member(s) waits for the maintenance window, which opens at 2026-12-05T02:00:00Z"
        );
    }

    #[test]
    fn an_operator_that_reads_no_nodes_says_so_and_the_scale_selector_is_written() {
        let cluster = three();
        let mut obs = observed([PodState::Running; 3]);
        let status = compute(&cluster, &obs, &Action::Steady);
        assert!(
            !status
                .conditions
                .iter()
                .any(|c| c.type_ == "NodeLossHandled"),
            "nothing more where node loss is handled"
        );
        assert_eq!(status.selector, "app=etcd,etcd_cluster=example");
        obs.nodes_unwatched = true;
        let status = compute(&cluster, &obs, &Action::Steady);
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "NodeLossHandled")
            .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NodesNotRead")
        );
        assert!(c.message.contains("readNodes=false"), "{}", c.message);
    }

    #[test]
    fn available_needs_a_quorum_published_by_the_client_service_and_a_read_through_it() {
        let cluster = three();
        let all = observed([PodState::Running; 3]);
        let status = compute(&cluster, &all, &Action::Steady);
        assert_eq!(available(&status), ("True".into(), "QuorumHealthy".into()));
        assert_eq!(status.ready_members, Some(3));

        // etcd says all three are healthy, but the Service sends clients to one of them.
        let mut obs = observed([PodState::Running; 3]);
        obs.serving.published = ["m1".to_string()].into_iter().collect();
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(
            available(&status),
            ("False".into(), "EndpointsNotReady".into())
        );
        assert_eq!(status.ready_members, Some(1));
        assert_eq!(status.members.ready, ["m1"]);
        assert_eq!(condition_of(&status, "Degraded"), "True");

        // Two published: a quorum, and readyMembers says so; the read decides.
        obs.serving.published.insert("m2".into());
        obs.serving.read = Some(Err("a read through Service example-client failed".into()));
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(
            available(&status),
            ("False".into(), "ServiceUnreachable".into())
        );
        assert_eq!(status.ready_members, Some(2));
        obs.serving.read = None;
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(available(&status).0, "False");
    }

    #[test]
    fn a_member_the_service_still_sends_clients_to_but_that_does_not_serve_is_no_availability() {
        // A quorum serves and the read through the Service was answered, but m3's node stopped:
        // its pod stays Ready and published until the node controller says otherwise, and
        // every client the Service sends there fails.
        let cluster = three();
        let mut obs = observed([PodState::Running; 3]);
        if let Some(members) = obs.plan.members.as_mut() {
            members[2].healthy = false;
        }
        let status = compute(&cluster, &obs, &Action::Steady);
        let c = find_condition(&status.conditions, ConditionType::Available).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "UnhealthyEndpoints")
        );
        assert!(c.message.contains("m3"), "{}", c.message);
        assert_eq!(status.ready_members, Some(2));
        // Withdrawn from the Service: two of three serve every client sent to them.
        obs.serving.published.remove("m3");
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(available(&status), ("True".into(), "QuorumHealthy".into()));
    }

    #[test]
    fn a_removed_member_whose_pod_was_just_deleted_is_no_outage_for_the_endpoint_controllers_lag() {
        // A roll removed m3 and deleted its pod a moment ago; the endpoint controller has not
        // taken it out of the Service yet.
        let cluster = three();
        let mut obs = observed([PodState::Running, PodState::Running, PodState::Terminating]);
        if let Some(members) = obs.plan.members.as_mut() {
            members.pop();
        }
        let deleted = |ago: u64| {
            let mut pod = k8s_openapi::api::core::v1::Pod::default();
            pod.metadata.deletion_grace_period_seconds = Some(30);
            let at = Timestamp::now() + Duration::from_secs(30) - Duration::from_secs(ago);
            pod.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
            pod
        };
        obs.pods.insert("m3".into(), deleted(1));
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(available(&status).0, "True");
        // Still listed long after: clients sent there fail.
        obs.pods.insert("m3".into(), deleted(20));
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(
            available(&status),
            ("False".into(), "UnhealthyEndpoints".into())
        );
    }

    #[test]
    fn an_available_cluster_stays_available_through_failed_reads_only_for_the_grace() {
        let mut cluster = three();
        cluster.status = Some(compute(
            &cluster,
            &observed([PodState::Running; 3]),
            &Action::Steady,
        ));
        let mut obs = observed([PodState::Running; 3]);
        obs.serving.read = Some(Err("timed out".into()));
        obs.serving.failing_for = READ_GRACE - Duration::from_secs(1);
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(available(&status).0, "True");
        obs.serving.failing_for = READ_GRACE;
        let status = compute(&cluster, &obs, &Action::Steady);
        assert_eq!(
            available(&status),
            ("False".into(), "ServiceUnreachable".into())
        );
        // Never Available on a failed read.
        let fresh = three();
        obs.serving.failing_for = Duration::ZERO;
        let status = compute(&fresh, &obs, &Action::Steady);
        assert_eq!(available(&status).0, "False");
    }

    #[test]
    fn a_drop_found_by_one_pass_is_held_for_the_grace_but_lost_quorum_and_nospace_are_not() {
        let mut cluster = three();
        cluster.status = Some(compute(
            &cluster,
            &observed([PodState::Running; 3]),
            &Action::Steady,
        ));
        // The member list read failed for a leader election: nobody counts as healthy.
        let mut obs = observed([PodState::Running; 3]);
        for m in obs.plan.members.iter_mut().flatten() {
            m.healthy = false;
        }
        let previous = cluster.status.clone().unwrap();
        let verdict = |ago: Option<u64>, action: &Action| {
            let mut status = compute(&cluster, &obs, action);
            let raw = hold_available(&mut status, &previous, action, ago.map(Duration::from_secs));
            (raw, available(&status))
        };
        let held = verdict(Some(1), &Action::Steady);
        assert_eq!(held, (false, ("True".into(), "QuorumHealthy".into())));
        let dropped = verdict(Some(4), &Action::Steady);
        assert_eq!(
            dropped,
            (false, ("False".into(), "QuorumUnavailable".into()))
        );
        assert_eq!(verdict(None, &Action::Steady).1.0, "False");
        let lost = Action::QuorumLost {
            reason: "gone".into(),
        };
        assert_eq!(verdict(Some(1), &lost).1.0, "False");
        // Available stays Available, and says so.
        let mut status = compute(&cluster, &observed([PodState::Running; 3]), &Action::Steady);
        assert!(hold_available(
            &mut status,
            &previous,
            &Action::Steady,
            None
        ));
    }

    fn condition_of(status: &EtcdClusterStatus, type_: &str) -> String {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
            .status
            .clone()
    }

    #[test]
    fn members_whose_pods_are_being_deleted_are_not_ready() {
        let cluster = EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 3,
                ..Default::default()
            },
        );
        let healthy = compute(&cluster, &observed([PodState::Running; 3]), &Action::Steady);
        assert_eq!(healthy.members.ready.len(), 3);
        assert_eq!(condition_of(&healthy, "Available"), "True");

        // Two of three pods deleted at once: both still answer while they terminate.
        let obs = observed([
            PodState::Terminating,
            PodState::Terminating,
            PodState::Running,
        ]);
        let lost = Action::QuorumLost {
            reason: "1 of 3 voting members are healthy, 2 are needed".into(),
        };
        let status = compute(&cluster, &obs, &lost);
        assert_eq!(status.members.ready, ["m3"]);
        assert_eq!(status.phase, Some(ClusterPhase::Failed));
        assert_eq!(condition_of(&status, "Available"), "False");
        assert_eq!(condition_of(&status, "Degraded"), "True");
    }

    #[test]
    fn available_waits_for_a_quorum_of_the_requested_size() {
        let cluster = EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 3,
                ..Default::default()
            },
        );
        // The seed alone answers: a quorum of itself, not of the three asked for.
        let mut seed = observed([PodState::Running; 3]);
        seed.plan.members.as_mut().unwrap().truncate(1);
        seed.plan.pods.truncate(1);
        let status = compute(
            &cluster,
            &seed,
            &Action::AddMembers {
                count: 1,
                avoid: vec![],
            },
        );
        assert_eq!(condition_of(&status, "Available"), "False");
        assert_eq!(condition_of(&status, "Progressing"), "True");
        // Two of three: the requested cluster serves, and it is still growing.
        let mut two = observed([PodState::Running; 3]);
        two.plan.members.as_mut().unwrap().truncate(2);
        two.plan.pods.truncate(2);
        two.serving.published.remove("m3");
        let status = compute(
            &cluster,
            &two,
            &Action::AddMembers {
                count: 1,
                avoid: vec![],
            },
        );
        assert_eq!(condition_of(&status, "Available"), "True");
        assert_eq!(condition_of(&status, "Progressing"), "True");
        let all = compute(&cluster, &observed([PodState::Running; 3]), &Action::Steady);
        assert_eq!(condition_of(&all, "Progressing"), "False");
    }

    #[test]
    fn when_nobody_answers_the_members_last_seen_stay_listed_unhealthy() {
        let mut cluster = EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 3,
                ..Default::default()
            },
        );
        let seen = compute(&cluster, &observed([PodState::Running; 3]), &Action::Steady);
        cluster.status = Some(seen);
        let silent = compute(
            &cluster,
            &Observed::default(),
            &Action::Wait {
                reason: "members are starting".into(),
            },
        );
        let names: Vec<&str> = silent
            .member_statuses
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, ["m1", "m2", "m3"]);
        assert!(silent.member_statuses.iter().all(|m| !m.healthy));
        assert_eq!(silent.members.unready.len(), 3);
        assert_eq!(condition_of(&silent, "Available"), "False");
    }

    #[test]
    fn a_moment_of_silence_keeps_the_phase() {
        let mut cluster = EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 1,
                ..Default::default()
            },
        );
        cluster.status = Some(EtcdClusterStatus {
            phase: Some(ClusterPhase::Running),
            cluster_id: "abc".into(),
            ..Default::default()
        });
        let silent = Observed::default();
        let wait = Action::Wait {
            reason: "restarting".into(),
        };
        let status = compute(&cluster, &silent, &wait);
        assert_eq!(status.phase, Some(ClusterPhase::Running));
        assert_eq!(condition_of(&status, "Available"), "False");
    }

    #[test]
    fn a_rotation_step_marks_the_cluster_progressing_until_its_roll_is_seen() {
        let mut status = EtcdClusterStatus {
            conditions: vec![Condition::computed(
                &[],
                ConditionType::Progressing,
                Some(1),
                false,
                "",
                String::new(),
            )],
            ..Default::default()
        };
        mark_rotating(&mut status, Some(1), "step 3 of 3");
        assert_eq!(status.conditions.len(), 1);
        let c = &status.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "CertificatesRotating")
        );
        assert_eq!(c.message, "step 3 of 3");
    }

    #[test]
    fn member_statuses_name_the_bytes_in_use_and_the_alarms_any_member_reports() {
        let cluster = three();
        let mut obs = observed([PodState::Running; 3]);
        // Only m1 answered its status; it lists the whole cluster's alarms, m2's among them.
        obs.statuses.insert(
            1,
            crate::etcd::Status {
                member_id: 1,
                cluster_id: 7,
                leader: 1,
                version: "3.6.16".into(),
                db_size: 4096,
                db_size_in_use: 1024,
                raft_index: 9,
                raft_term: 2,
                revision: 5,
                raft_applied_index: 9,
                is_learner: false,
                errors: vec!["memberID:2 alarm:NOSPACE ".into()],
            },
        );
        let status = compute(&cluster, &obs, &Action::Steady);
        let m = |name: &str| {
            status
                .member_statuses
                .iter()
                .find(|m| m.name == name)
                .unwrap()
                .clone()
        };
        assert_eq!(
            (m("m1").db_size, m("m1").db_size_in_use),
            (Some(4096), Some(1024))
        );
        assert!(m("m1").alarms.is_empty());
        assert_eq!(m("m2").alarms, ["NOSPACE"]);
        assert_eq!(m("m2").db_size_in_use, None);
    }
}
