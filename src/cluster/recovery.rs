//! The task's side of recovery from lost quorum: the policy and approval read from the
//! EtcdCluster, the planner's decision ([`plan::recover`]) turned into an action (with the
//! newest backup looked up when one is to be restored), and the status record of it.

use kube::ResourceExt;
use kube::api::ListParams;

use super::act::{self, withdraw_approval};
use super::handles::Handles;
use super::observe::Observed;
use super::plan::{self, Action, Approval, Recover, RecoveryPolicy, Target, quorum};
use super::status;
use crate::api::{
    EtcdBackup, EtcdCluster, EtcdClusterStatus, EtcdRestore, QuorumLossPolicy, RECOVER_ANNOTATION,
    RecoveryRecord, RestorePhase,
};

/// The cluster's recovery policy and the approval on it; an approval that cannot be read is
/// returned as text for the status.
pub fn policy_of(cluster: &EtcdCluster) -> (RecoveryPolicy, Option<String>) {
    let recovery = cluster.spec.recovery.clone().unwrap_or_default();
    let automatic = match recovery.quorum_loss.unwrap_or_default() {
        QuorumLossPolicy::Manual => None,
        QuorumLossPolicy::ForceNewCluster => Some(Approval::ForceNewCluster),
        QuorumLossPolicy::RestoreLatestBackup => Some(Approval::RestoreLatestBackup),
    };
    let (approved, unreadable) = match cluster.annotations().get(RECOVER_ANNOTATION) {
        None => (None, None),
        Some(v) if v == "force-new-cluster" => (Some(Approval::ForceNewCluster), None),
        Some(v) if v == "restore-latest-backup" => (Some(Approval::RestoreLatestBackup), None),
        Some(v) => (
            None,
            Some(format!(
                "annotation {RECOVER_ANNOTATION}: {v:?} is neither force-new-cluster nor \
                 restore-latest-backup"
            )),
        ),
    };
    let policy = RecoveryPolicy {
        automatic,
        after: recovery.after(),
        approved,
    };
    (policy, unreadable)
}

/// The action after recovery is considered: a lost quorum the policy or an approval lets the
/// operator rebuild becomes a recovery; otherwise the report says what a user may do. An
/// approval with no lost quorum to act on is withdrawn, so that it never applies to a later
/// loss nobody has looked at.
pub async fn consider(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    target: &Target,
    action: Action,
    revision_seen: Option<i64>,
) -> Result<Action, act::Error> {
    let (policy, unreadable) = policy_of(cluster);
    let Action::QuorumLost { reason } = action else {
        let annotated = cluster.annotations().contains_key(RECOVER_ANNOTATION);
        if annotated && quorate(obs) && cluster.pending_restore().is_none() {
            withdraw_approval(handles, cluster).await?;
        }
        return Ok(action);
    };
    let uid = uuid::Uuid::new_v4().to_string();
    Ok(match plan::recover(&obs.plan, target, &policy) {
        Recover::FromMember {
            name,
            applied,
            approved,
        } => Action::RecoverFromMember {
            name,
            applied,
            approved,
            uid,
            revision_before: revision_seen,
        },
        Recover::FromBackup { approved } => match (
            restoring(handles, cluster).await?,
            newest_backup(handles, cluster).await?,
        ) {
            // Made on an earlier pass and not over, or failed: one recovery at a time, and
            // a failed one is not made again and again.
            (Some(why), _) => Action::QuorumLost {
                reason: format!("{reason}; {why}"),
            },
            (None, Some(b)) => Action::RecoverFromBackup {
                revision: b.status.as_ref().and_then(|s| s.etcd_revision),
                backup: b.name_any(),
                approved,
                uid,
            },
            (None, None) => Action::QuorumLost {
                reason: format!(
                    "{reason}; no succeeded EtcdBackup with spec.clusterName {} to restore",
                    cluster.name_any()
                ),
            },
        },
        Recover::Hold { reason: why } => Action::QuorumLost {
            reason: match unreadable {
                Some(bad) => format!("{reason}; {bad}; {why}"),
                None => format!("{reason}; {why}"),
            },
        },
    })
}

/// Why no EtcdRestore of a backup is made now, if one a recovery of this cluster made has not
/// ended (neither Completed nor Failed) or failed: one at a time, and a failed one is left for
/// a user to read and delete.
async fn restoring(handles: &Handles, cluster: &EtcdCluster) -> Result<Option<String>, act::Error> {
    let selector = format!("{}={}", act::RECOVERY_LABEL, cluster.name_any());
    let list = handles
        .restores
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| act::Error::Recover {
            what: "the list of EtcdRestores".into(),
            source,
        })?;
    let phase = |r: &EtcdRestore| r.status.as_ref().and_then(|s| s.phase);
    if let Some(r) = list.items.iter().find(|r| {
        !matches!(
            phase(r),
            Some(RestorePhase::Completed | RestorePhase::Failed)
        )
    }) {
        return Ok(Some(format!(
            "EtcdRestore {} restores the newest backup",
            r.name_any()
        )));
    }
    Ok(list
        .items
        .iter()
        .find(|r| phase(r) == Some(RestorePhase::Failed))
        .map(|r| {
            format!(
                "EtcdRestore {} of the newest backup failed ({}); delete it to try again",
                r.name_any(),
                r.status
                    .as_ref()
                    .map(|s| s.reason.as_str())
                    .unwrap_or_default()
            )
        }))
}

/// Whether a quorum of the voters is healthy.
fn quorate(obs: &Observed) -> bool {
    let Some(members) = &obs.plan.members else {
        return false;
    };
    let voters: Vec<_> = members.iter().filter(|m| !m.is_learner).collect();
    let healthy = voters.iter().filter(|m| m.healthy).count();
    !voters.is_empty() && healthy >= quorum(voters.len())
}

/// The newest succeeded EtcdBackup of the cluster (by `spec.clusterName`) that names the
/// snapshot it wrote and its hash.
async fn newest_backup(
    handles: &Handles,
    cluster: &EtcdCluster,
) -> Result<Option<EtcdBackup>, act::Error> {
    let list = handles
        .backups
        .list(&ListParams::default())
        .await
        .map_err(|source| act::Error::Recover {
            what: "the list of EtcdBackups".into(),
            source,
        })?;
    let name = cluster.name_any();
    Ok(list
        .items
        .into_iter()
        .filter(|b| b.spec.cluster_name.as_deref() == Some(name.as_str()))
        .filter(|b| {
            b.status
                .as_ref()
                .is_some_and(|s| s.succeeded && !s.path.is_empty() && !s.sha256.is_empty())
        })
        .max_by_key(|b| {
            let s = b.status.clone().unwrap_or_default();
            (s.last_success_date, s.etcd_revision)
        }))
}

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
            restore: act::recovery_name(&name, uid),
            completed: false,
        }),
        Action::RecoverFromBackup {
            backup,
            revision,
            approved,
            uid,
        } => Some(RecoveryRecord {
            reason: "RestoredFromBackup".into(),
            approved: *approved,
            source: backup.clone(),
            applied_index: None,
            revision_before: revision_seen,
            revision_recovered: *revision,
            started: started(),
            restore: act::recovery_name(&name, uid),
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
    status::mark_recovery(
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
