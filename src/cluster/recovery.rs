//! The task's side of recovery from lost quorum: the policy and approval read from the
//! EtcdCluster, the planner's decision ([`plan::recover`]) turned into an action (with the
//! newest backup looked up when one is to be restored), and the status record of it.

use kube::ResourceExt;
use kube::api::ListParams;

use super::act::{self, withdraw_approval};
use super::handles::Handles;
use super::observe::Observed;
use super::plan::{self, Action, Approval, Recover, RecoveryPolicy, Target, quorum};
use crate::api::{
    EtcdBackup, EtcdCluster, EtcdRestore, QuorumLossPolicy, RECOVER_ANNOTATION, RestorePhase,
};
use crate::store::location::{Storage, Stored, newest_stored};

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
    // Woken with its data only in the final snapshot: restored from it, as the user asked
    // by waking it (no approval is waited for).
    if let Some((backup, revision)) = super::hibernation::wakes_from(cluster, obs) {
        return Ok(match restoring(handles, cluster).await? {
            Some(why) => Action::QuorumLost {
                reason: format!("waking from the final snapshot (EtcdBackup {backup}); {why}"),
            },
            None => Action::RecoverFromBackup {
                backup,
                stored: false,
                revision,
                approved: true,
                uid,
            },
        });
    }
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
        Recover::FromBackup { approved } => match restoring(handles, cluster).await? {
            // Made on an earlier pass and not over, or failed: one recovery at a time, and
            // a failed one is not made again and again.
            Some(why) => Action::QuorumLost {
                reason: format!("{reason}; {why}"),
            },
            None => match newest(handles, cluster).await? {
                Ok(Newest::Backup(b)) => Action::RecoverFromBackup {
                    revision: b.status.as_ref().and_then(|s| s.etcd_revision),
                    backup: b.name_any(),
                    stored: false,
                    approved,
                    uid,
                },
                Ok(Newest::Stored(s)) => Action::RecoverFromBackup {
                    revision: (s.revision > 0).then_some(s.revision),
                    backup: s.path,
                    stored: true,
                    approved,
                    uid,
                },
                Err(why) => Action::QuorumLost {
                    reason: format!("{reason}; {why}"),
                },
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

/// The newest backup a recovery may restore.
enum Newest {
    /// A succeeded EtcdBackup of the cluster.
    Backup(Box<EtcdBackup>),
    /// An object in the store `spec.recovery.backups` names.
    Stored(Stored),
}

/// The newest of the cluster's succeeded EtcdBackups and of the backups in the store
/// `spec.recovery.backups` names (by the time in their names), or why there is none to
/// restore. A store that cannot be listed holds the recovery: what it holds may be newer than
/// any EtcdBackup, and restoring an older backup would lose more than waiting.
async fn newest(
    handles: &Handles,
    cluster: &EtcdCluster,
) -> Result<Result<Newest, String>, act::Error> {
    let backup = newest_backup(handles, cluster).await?;
    let Some(store) = cluster.spec.recovery_store() else {
        return Ok(backup.map(|b| Newest::Backup(Box::new(b))).ok_or_else(|| {
            format!(
                "no succeeded EtcdBackup with spec.clusterName {} to restore",
                cluster.name_any()
            )
        }));
    };
    let client = handles.clusters.clone().into_client();
    let ns = cluster.namespace().unwrap_or_default();
    let listed = tokio::time::timeout(
        STORE_LIST_TIMEOUT,
        newest_stored(&client, &ns, Storage::from(store)),
    )
    .await;
    let stored = match listed {
        Ok(Ok(stored)) => stored,
        Ok(Err(e)) => return Ok(Err(format!("spec.recovery.backups: {e}"))),
        Err(_) => {
            return Ok(Err(format!(
                "spec.recovery.backups: listing the store took over {} s",
                STORE_LIST_TIMEOUT.as_secs()
            )));
        }
    };
    Ok(match (backup, stored) {
        (Some(b), Some(s)) if !stored_is_newer(&b, &s) => Ok(Newest::Backup(Box::new(b))),
        (_, Some(s)) => Ok(Newest::Stored(s)),
        (Some(b), None) => Ok(Newest::Backup(Box::new(b))),
        (None, None) => Err(format!(
            "no succeeded EtcdBackup with spec.clusterName {} and no backup in \
             spec.recovery.backups to restore",
            cluster.name_any()
        )),
    })
}

/// Whether a backup found in the store holds newer data than EtcdBackup `b`: by revision when
/// both are known (a periodic name carries it; the same revision is the same data, and the
/// EtcdBackup's verified status is preferred), else by time, to the second of the name (a backup
/// that succeeded within the second another started is not newer than it).
fn stored_is_newer(b: &EtcdBackup, s: &Stored) -> bool {
    let status = b.status.clone().unwrap_or_default();
    if let (Some(revision), true) = (status.etcd_revision, s.revision > 0) {
        return s.revision > revision;
    }
    let succeeded = status
        .last_success_date
        .as_deref()
        .and_then(|d| d.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t.as_second()).ok())
        .map(|t| t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).datetime());
    succeeded.is_none_or(|at| s.at >= at)
}

/// Bounds the listing of `spec.recovery.backups` on a pass.
const STORE_LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_backup_is_newer_by_revision_else_by_the_second_of_its_name() {
        let backup = |revision: Option<i64>, at: &str| {
            let mut b: EtcdBackup = serde_json::from_value(serde_json::json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
                "metadata": {"name": "nightly"},
                "spec": {"clusterName": "c", "storageType": "S3", "s3": {"path": "b/k"}}
            }))
            .unwrap();
            b.status = Some(crate::api::EtcdBackupStatus {
                etcd_revision: revision,
                last_success_date: Some(at.into()),
                ..Default::default()
            });
            b
        };
        let stored = |revision: i64, at: &str| Stored {
            path: "b/k".into(),
            at: at.parse().unwrap(),
            revision,
        };
        // Succeeded within the second the stored one started, with an older revision.
        let b = backup(Some(1247), "2026-11-26T18:51:27.300Z");
        assert!(stored_is_newer(&b, &stored(1267, "2026-11-26T18:51:27")));
        assert!(!stored_is_newer(&b, &stored(1247, "2026-11-26T18:51:27")));
        // A scheduled name has no revision: by time, to the second.
        assert!(stored_is_newer(&b, &stored(0, "2026-11-26T18:51:27")));
        assert!(!stored_is_newer(&b, &stored(0, "2026-11-26T18:51:26")));
    }
}
