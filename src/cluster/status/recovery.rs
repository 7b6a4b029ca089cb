//! The status's part of a recovery from lost quorum: `status.recovery` and the `Recovering`
//! condition.

use kube::ResourceExt;

use crate::api::{EtcdCluster, EtcdClusterStatus, RecoveryRecord};
use crate::cluster::observe::Observed;
use crate::cluster::plan::Action;

/// The status record of a recovery this pass started, or the last one carried on (marked
/// completed once its restore is).
pub fn record(
    action: &Action,
    obs: &Observed,
    cluster: &EtcdCluster,
    status: &EtcdClusterStatus,
    revision_seen: Option<i64>,
) -> Option<RecoveryRecord> {
    let started = || k8s_openapi::jiff::Timestamp::now().to_string();
    let name = cluster.name_any();
    match action {
        Action::RecoverFromMember {
            name: member,
            applied,
            approved,
            uid,
            revision_before,
        } => Some(RecoveryRecord {
            reason: "ForceNewCluster".into(),
            approved: *approved,
            source: member.clone(),
            applied_index: i64::try_from(*applied).ok(),
            revision_before: *revision_before,
            revision_recovered: obs
                .plan
                .members
                .iter()
                .flatten()
                .find(|m| m.name == *member)
                .and_then(|m| obs.statuses.get(&m.id))
                .map(|s| s.revision),
            started: started(),
            restore: crate::kube::names::recovery_name(&name, uid),
            completed: false,
        }),
        Action::RecoverFromBackup {
            backup,
            revision,
            approved,
            uid,
            ..
        } => Some(RecoveryRecord {
            reason: "RestoredFromBackup".into(),
            approved: *approved,
            source: backup.clone(),
            applied_index: None,
            revision_before: revision_seen,
            revision_recovered: *revision,
            started: started(),
            restore: crate::kube::names::recovery_name(&name, uid),
            completed: false,
        }),
        _ => {
            let mut last = cluster.status.as_ref()?.recovery.clone()?;
            last.completed |= status
                .restore
                .as_ref()
                .is_some_and(|r| r.name == last.restore && r.completed);
            Some(last)
        }
    }
}

/// What the recovery cost, for its Event: the revisions between the newest seen and the one
/// recovered.
pub fn summary(r: &RecoveryRecord) -> String {
    let lost = match (r.revision_before, r.revision_recovered) {
        (Some(before), Some(got)) if before > got => {
            format!("; revisions {} to {before} are lost", got + 1)
        }
        (Some(_), Some(_)) => "; no revision seen before the loss is missing".into(),
        _ => String::new(),
    };
    format!(
        "{} from {}{}{lost}",
        r.reason,
        r.source,
        r.applied_index
            .map(|i| format!(" (applied index {i})"))
            .unwrap_or_default()
    )
}

/// The report's part: `status.recovery` (a recovery started this pass, else the last one
/// carried on) and its `Recovering` condition. Returns the record when this pass saw its
/// rebuilt cluster serve for the first time, for the Event.
pub fn report(
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    started: bool,
    new_status: &mut EtcdClusterStatus,
    revision_seen: Option<i64>,
    early: Option<RecoveryRecord>,
) -> Option<RecoveryRecord> {
    let last = cluster.status.as_ref().and_then(|s| s.recovery.clone());
    new_status.recovery = match action {
        Action::RecoverFromMember { .. } | Action::RecoverFromBackup { .. } if !started => {
            last.clone()
        }
        // The record the status got before the hand-off (see the task's early status).
        Action::RecoverFromMember { .. } | Action::RecoverFromBackup { .. } if early.is_some() => {
            early
        }
        _ => record(action, obs, cluster, new_status, revision_seen),
    };
    let r = new_status.recovery.clone()?;
    let previous = cluster
        .status
        .as_ref()
        .map(|s| &s.conditions[..])
        .unwrap_or_default();
    let generation = cluster.metadata.generation;
    let message = summary(&r);
    super::conditions::mark_recovery(
        new_status,
        previous,
        generation,
        &r.reason,
        r.completed,
        message,
    );
    let known = last.is_some_and(|old| old.completed && old.restore == r.restore);
    (r.completed && !known).then_some(r)
}
