//! Every condition of an EtcdCluster, decided here and nowhere else: Available, Progressing
//! and Degraded from the observation and the action ([`of`]); the Degraded and Progressing
//! marks of what the rest of the pass found ([`mark_degraded`], [`mark_rotating`]); the
//! Recovering condition of a recovery ([`mark_recovery`]). Their types and reasons are
//! `crate::api::conditions`'.

use kube::ResourceExt;

use super::Roster;
use crate::api::{
    AuthReason, AvailableReason, Condition, ConditionType, DegradedReason, EtcdCluster,
    EtcdClusterStatus, ProgressingReason, find_condition,
};
use crate::cluster::observe::Observed;
use crate::cluster::plan::{Action, Progress, Step, quorum};
use crate::cluster::serving::READ_GRACE;

/// What [`of`] decides the conditions from.
pub(super) struct Inputs<'a> {
    pub(super) cluster: &'a EtcdCluster,
    pub(super) obs: &'a Observed,
    pub(super) action: &'a Action,
    /// The status on the object, whose conditions keep their transition times.
    pub(super) previous: &'a EtcdClusterStatus,
    pub(super) roster: &'a Roster,
    /// Voting members in etcd's member list.
    pub(super) voters: usize,
    /// The members do not all run the version asked for.
    pub(super) upgrading: bool,
    /// The phase's reason, which an otherwise healthy Degraded condition repeats.
    pub(super) phase_reason: &'a str,
}

/// Available, Progressing and Degraded after `action` was planned on `obs`.
pub(super) fn of(i: &Inputs<'_>) -> Vec<Condition> {
    let generation = i.cluster.metadata.generation;
    let size = i.cluster.spec.members();
    let (quorate, available_reason, available_message) =
        availability(i.cluster, i.obs, i.action, i.previous, i.voters, i.roster);
    let progressing = progressing_reason(i.obs, i.action, i.upgrading, i.voters, size);
    let old = &i.previous.conditions;
    let whole = quorate && i.roster.ready.len() >= i.voters;
    let mut conditions = vec![
        Condition::computed(
            old,
            ConditionType::Available,
            generation,
            quorate,
            available_reason.as_str(),
            available_message,
        ),
        Condition::computed(
            old,
            ConditionType::Progressing,
            generation,
            progressing.is_some(),
            match (progressing, i.action) {
                (None, Action::WaitForWindow { .. }) => "WaitingForMaintenanceWindow",
                (p, _) => p.unwrap_or(ProgressingReason::Stable).as_str(),
            },
            step_message(i.action, i.voters, size),
        ),
        degraded(old, generation, i.action, whole, i.roster, i.phase_reason),
    ];
    // Only where it is off: a cluster whose node losses are handled carries nothing more.
    if i.obs.nodes_unwatched {
        conditions.push(Condition::computed(
            old,
            ConditionType::NodeLossHandled,
            generation,
            false,
            "NodesNotRead",
            "the operator reads no Nodes (chart: readNodes=false): a member on a lost node is \
             replaced as any unhealthy member is, after replaceUnhealthyAfter (5 minutes by \
             default), not after nodeLossGrace"
                .into(),
        ));
    }
    conditions
}

/// Whether the cluster is Available, with the condition's reason and message. Available means
/// a client of the client Service can read and write now: the ready members (healthy voters
/// whose pods are Ready and published as ready endpoints of the client Service) are a quorum
/// of the membership as it is and of `spec.size` (so a new 3-member cluster is not Available
/// on its seed alone), and a linearizable read through the Service's address was answered by
/// this cluster. Once Available, failed reads alone take it away only after [`READ_GRACE`]:
/// one read lost to a busy node is no outage.
/// Nor is it Available while the Service still sends clients to a member that does not serve
/// (a member whose node stopped, whose pod is being deleted, or that was removed): its
/// endpoint stays ready until its kubelet's probes, or the node controller, say otherwise,
/// and each client sent there fails until then.
fn availability(
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    previous: &EtcdClusterStatus,
    voters: usize,
    roster: &Roster,
) -> (bool, AvailableReason, String) {
    let (healthy, ready) = (roster.healthy_voters, roster.ready.len());
    let size = cluster.spec.members();
    let service = format!("{}-client", cluster.name_any());
    let enough = |n: usize| n >= quorum(voters) && n >= quorum(size);
    let was_available = find_condition(&previous.conditions, ConditionType::Available)
        .is_some_and(Condition::is_true);
    if let Some(asleep) = hibernated(cluster, obs) {
        return asleep;
    }
    if obs.plan.members.is_none() || matches!(action, Action::QuorumLost { .. }) || !enough(healthy)
    {
        return (
            false,
            AvailableReason::QuorumUnavailable,
            format!("{healthy} of {voters} voting members healthy"),
        );
    }
    if !obs.plan.nospace.is_empty() {
        return (
            false,
            AvailableReason::NoSpace,
            format!(
                "etcd raised NOSPACE (quota {} MiB): writes that grow the database are refused until space is reclaimed; reads are served",
                cluster.spec.quota_backend_bytes() / (1024 * 1024)
            ),
        );
    }
    if !enough(ready) {
        return (
            false,
            AvailableReason::EndpointsNotReady,
            format!(
                "{healthy} of {voters} voting members healthy; {ready} of them Ready and published by Service {service}"
            ),
        );
    }
    if !roster.stray.is_empty() {
        let (does, they) = match roster.stray.len() {
            1 => ("does", "it is"),
            _ => ("do", "they are"),
        };
        return (
            false,
            AvailableReason::UnhealthyEndpoints,
            format!(
                "Service {service} still sends clients to {}, which {does} not serve; clients sent there fail until {they} withdrawn",
                roster.stray.join(", "),
            ),
        );
    }
    match &obs.serving.read {
        Some(Err(why)) if !was_available || obs.serving.failing_for >= READ_GRACE => {
            (false, AvailableReason::ServiceUnreachable, why.clone())
        }
        None => (
            false,
            AvailableReason::ServiceUnreachable,
            format!("no read was made through Service {service}"),
        ),
        _ => (
            true,
            AvailableReason::QuorumHealthy,
            format!(
                "{ready} of {voters} voting members healthy and serving clients through Service {service}"
            ),
        ),
    }
}

/// Not Available, by request: the cluster sleeps (`spec.hibernation`) and no member answers.
fn hibernated(cluster: &EtcdCluster, obs: &Observed) -> Option<(bool, AvailableReason, String)> {
    (cluster.spec.hibernating().is_some() && obs.plan.members.is_none()).then(|| {
        (
            false,
            AvailableReason::Hibernated,
            "spec.hibernation.enabled: no member runs".into(),
        )
    })
}

/// Why the cluster is progressing, if it is.
fn progressing_reason(
    obs: &Observed,
    action: &Action,
    upgrading: bool,
    voters: usize,
    size: usize,
) -> Option<ProgressingReason> {
    // A roll is under way while some live pod is made from an older template: an upgrade
    // when the members do not all run the version asked for yet, else a pod-policy roll.
    let rolling = obs
        .plan
        .pods
        .iter()
        .any(|p| (!p.current || obs.plan.volumes.must_move(&p.name)) && !p.state.is_gone())
        || matches!(action, Action::RollStalled { .. });
    let roll_reason = if upgrading {
        ProgressingReason::Upgrading
    } else {
        ProgressingReason::RollingUpdate
    };
    match action.progress() {
        Progress::Restoring => Some(ProgressingReason::Restoring),
        Progress::Roll => Some(roll_reason),
        Progress::LeaderLeaving => Some(ProgressingReason::Recovering),
        Progress::Halted => None,
        _ if rolling => Some(roll_reason),
        Progress::Own(step) => step.map(|s| match s {
            Step::Scaling => ProgressingReason::Scaling,
            Step::Spreading => ProgressingReason::Spreading,
            Step::Recovering => ProgressingReason::Recovering,
            Step::RotatingCertificates => ProgressingReason::CertificatesRotating,
            Step::Hibernating => ProgressingReason::Hibernating,
            Step::ExpandingVolumes => ProgressingReason::ExpandingVolumes,
        }),
        Progress::Wait if voters != size => Some(ProgressingReason::Scaling),
        Progress::Wait if !obs.plan.volumes.expanding.is_empty() => {
            Some(ProgressingReason::ExpandingVolumes)
        }
        Progress::Wait => Some(ProgressingReason::Recovering),
    }
}

/// What the cluster waits for, else how many members it has of its size.
fn step_message(action: &Action, voters: usize, size: usize) -> String {
    match action {
        Action::Wait { reason } | Action::Restoring { reason } | Action::RollStalled { reason } => {
            reason.clone()
        }
        Action::WaitForWindow { what, opens } => {
            format!("{what} waits for the maintenance window, which opens at {opens}")
        }
        _ => format!("{voters} of {size} members"),
    }
}

/// `Degraded`: quorum lost, fewer ready members than voters (`whole` false), a member not
/// ready, or a roll stalled.
fn degraded(
    old: &[Condition],
    generation: Option<i64>,
    action: &Action,
    whole: bool,
    roster: &Roster,
    reason: &str,
) -> Condition {
    let stalled = matches!(action, Action::RollStalled { .. });
    let space = matches!(action, Action::ReclaimSpace);
    let unready = &roster.members.unready;
    let asleep = matches!(action, Action::Hibernated);
    let degraded = !asleep && (!whole || !unready.is_empty() || stalled || space);
    Condition::computed(
        old,
        ConditionType::Degraded,
        generation,
        degraded,
        match action {
            Action::QuorumLost { .. } => DegradedReason::QuorumLost,
            Action::RollStalled { .. } => DegradedReason::RollStalled,
            Action::ReclaimSpace => DegradedReason::NoSpace,
            Action::Hibernated => DegradedReason::Hibernated,
            _ if degraded => DegradedReason::MembersUnhealthy,
            _ => DegradedReason::AllMembersHealthy,
        }
        .as_str(),
        match action {
            Action::RollStalled { reason } => reason.clone(),
            Action::ReclaimSpace => "etcd raised NOSPACE: writes that grow the database are \
                refused, reads are served; the history is compacted, the members defragmented \
                and the alarm disarmed"
                .into(),
            Action::Hibernated => "hibernated by spec.hibernation: no member runs".into(),
            _ if unready.is_empty() => reason.to_string(),
            _ => format!("not ready: {}", unready.join(", ")),
        },
    )
}

/// Marks `status` Progressing for a step of a CA rotation that was just written: the roll it
/// causes starts on the next pass, and until then the status must not say the cluster is
/// settled.
pub fn mark_rotating(status: &mut EtcdClusterStatus, generation: Option<i64>, message: &str) {
    let progressing = Condition::computed(
        &status.conditions,
        ConditionType::Progressing,
        generation,
        true,
        ProgressingReason::CertificatesRotating.as_str(),
        message.to_string(),
    );
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == ConditionType::Progressing.as_str())
    {
        Some(c) => *c = progressing,
        None => status.conditions.push(progressing),
    }
}

/// Marks `status` Degraded for `reason`, with `message` (naming the field or object).
pub fn mark_degraded(status: &mut EtcdClusterStatus, reason: &str, message: &str) {
    for c in status
        .conditions
        .iter_mut()
        .filter(|c| c.type_ == ConditionType::Degraded.as_str())
    {
        c.status = "True".into();
        c.reason = reason.into();
        c.message = message.into();
    }
}

/// Sets `status.auth` and the `AuthApplied` condition from what the access-control stage
/// found; without a finding (the stage did not run: no leader, paused), both stay as they were.
pub fn mark_auth(
    status: &mut EtcdClusterStatus,
    previous: &EtcdClusterStatus,
    generation: Option<i64>,
    found: Option<&crate::cluster::auth::Finding>,
    declared: bool,
) {
    let kept = previous
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::AuthApplied.as_str());
    status
        .conditions
        .retain(|c| c.type_ != ConditionType::AuthApplied.as_str());
    let Some(found) = found else {
        if declared {
            status.conditions.extend(kept.cloned());
        }
        return;
    };
    status.auth = Some(found.status.clone());
    let (ok, reason, message) = match (&found.error, found.problems.is_empty()) {
        (Some(e), _) => (false, AuthReason::NotApplied, e.clone()),
        (None, false) => (false, AuthReason::InvalidEntries, found.problems.join("; ")),
        (None, true) => (
            true,
            AuthReason::Applied,
            format!(
                "authentication {}; {} users and {} roles managed",
                if found.status.enabled { "on" } else { "off" },
                found.status.users.len(),
                found.status.roles.len()
            ),
        ),
    };
    status.conditions.push(Condition::computed(
        &previous.conditions,
        ConditionType::AuthApplied,
        generation,
        ok,
        reason.as_str(),
        message,
    ));
}

/// Adds the `Recovering` condition of the last recovery from lost quorum: True until the
/// rebuilt cluster serves, then False; its reason says how (`ForceNewCluster`,
/// `RestoredFromBackup`).
pub(super) fn mark_recovery(
    status: &mut EtcdClusterStatus,
    previous: &[Condition],
    generation: Option<i64>,
    reason: &str,
    completed: bool,
    message: String,
) {
    let recovering = Condition::computed(
        previous,
        ConditionType::Recovering,
        generation,
        !completed,
        reason,
        message,
    );
    status
        .conditions
        .retain(|c| c.type_ != ConditionType::Recovering.as_str());
    status.conditions.push(recovering);
}

/// Sets the `Following` condition of a standby that follows or promotes, from
/// `status.standby` as this pass left it (reason `Following`, or why it is stalled); removes it
/// from any other cluster.
pub fn mark_following(
    status: &mut EtcdClusterStatus,
    previous: &[Condition],
    generation: Option<i64>,
) {
    use crate::api::StandbyPhase;
    status
        .conditions
        .retain(|c| c.type_ != ConditionType::Following.as_str());
    let Some(s) = status.standby.as_ref() else {
        return;
    };
    if !matches!(
        s.phase,
        Some(StandbyPhase::Standby | StandbyPhase::Promoting)
    ) {
        return;
    }
    let following = s.stalled.is_empty();
    let message = if following {
        format!(
            "{} ms behind the source (revision {} of {})",
            s.lag_milliseconds.unwrap_or_default(),
            s.replayed_revision.unwrap_or_default(),
            s.source_revision
                .or(s.archived_revision)
                .unwrap_or_default()
        )
    } else {
        s.message.clone()
    };
    let reason = if following {
        "Following"
    } else {
        s.stalled.as_str()
    };
    let condition = Condition::computed(
        previous,
        ConditionType::Following,
        generation,
        following,
        reason,
        message,
    );
    status.conditions.push(condition);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{StandbyPhase, StandbyStatus};

    fn with_standby(phase: StandbyPhase, stalled: &str) -> EtcdClusterStatus {
        EtcdClusterStatus {
            standby: Some(StandbyStatus {
                phase: Some(phase),
                stalled: stalled.into(),
                message: if stalled.is_empty() {
                    String::new()
                } else {
                    "why".into()
                },
                lag_milliseconds: Some(1_500),
                replayed_revision: Some(90),
                source_revision: Some(100),
                ..StandbyStatus::default()
            }),
            ..EtcdClusterStatus::default()
        }
    }

    #[test]
    fn following_says_whether_a_standby_keeps_up_and_why_not() {
        let mut s = with_standby(StandbyPhase::Standby, "");
        mark_following(&mut s, &[], Some(3));
        let c = find_condition(&s.conditions, ConditionType::Following).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Following")
        );
        assert_eq!(c.message, "1500 ms behind the source (revision 90 of 100)");
        let previous = s.conditions.clone();
        let mut stalled = with_standby(StandbyPhase::Standby, "SourceSilent");
        mark_following(&mut stalled, &previous, Some(3));
        let c = find_condition(&stalled.conditions, ConditionType::Following).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "SourceSilent", "why")
        );
        // Promoted, or never a standby: no such condition.
        let mut promoted = with_standby(StandbyPhase::Promoted, "");
        promoted.conditions = previous;
        mark_following(&mut promoted, &[], Some(3));
        assert!(find_condition(&promoted.conditions, ConditionType::Following).is_none());
        let mut plain = EtcdClusterStatus::default();
        mark_following(&mut plain, &[], Some(3));
        assert!(plain.conditions.is_empty());
    }
}
