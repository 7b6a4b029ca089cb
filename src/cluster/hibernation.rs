//! The task's side of hibernation (`spec.hibernation`): finding the final snapshot for the
//! planner ([`plan::FinalSnapshot`]), the EtcdBackup that takes it, and the snapshot a cluster
//! with no claims left wakes from.

use kube::api::ListParams;
use kube::{Resource, ResourceExt};

use super::handles::Handles;
use super::observe::Observed;
use super::plan::FinalSnapshot;
use crate::api::{BackupPhase, EtcdBackup, EtcdBackupSpec, EtcdCluster, RecoveryStore};

/// Labels the EtcdBackups of a cluster's final snapshots, with the cluster's name.
pub const HIBERNATION_LABEL: &str = "etcd.database.coreos.com/hibernation-of";

/// The name of the EtcdBackup of the final snapshot at `revision`: one per revision, so that
/// a cluster written to after a snapshot gets a newer one, and a restarted operator finds the
/// one it made.
pub fn backup_name(cluster: &str, revision: i64) -> String {
    format!("{cluster}-hibernation-r{revision}")
}

/// The members' newest revision, when any answered.
pub fn revision(obs: &Observed) -> Option<i64> {
    obs.statuses.values().map(|s| s.revision).max()
}

/// The EtcdBackup of the final snapshot at `revision` to `store`: the path is the store's
/// prefix and the backup's name; owned by the cluster, so that it goes with it (the object in
/// the store stays).
pub fn backup_of(cluster: &EtcdCluster, store: &RecoveryStore, revision: i64) -> EtcdBackup {
    let name = backup_name(&cluster.name_any(), revision);
    let at = |prefix: &str| format!("{}/{name}", prefix.trim_end_matches('/'));
    let mut spec = EtcdBackupSpec {
        cluster_name: Some(cluster.name_any()),
        storage_type: store.backup_storage_type,
        s3: store.s3.clone(),
        abs: store.abs.clone(),
        gcs: store.gcs.clone(),
        oss: store.oss.clone(),
        etcd_endpoints: Vec::new(),
        backup_policy: None,
        client_tls_secret: None,
        compression: None,
    };
    if let Some(s) = &mut spec.s3 {
        s.path = at(&s.path);
    }
    if let Some(s) = &mut spec.abs {
        s.path = at(&s.path);
    }
    if let Some(s) = &mut spec.gcs {
        s.path = at(&s.path);
    }
    if let Some(s) = &mut spec.oss {
        s.path = at(&s.path);
    }
    let mut backup = EtcdBackup::new(&name, spec);
    backup.metadata.labels = Some([(HIBERNATION_LABEL.to_string(), cluster.name_any())].into());
    backup.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
    backup
}

/// The final snapshot for the planner: looked for only while the cluster is put to sleep with
/// a store and a pod still runs (a sleeping cluster makes no request).
pub async fn final_snapshot(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
) -> Result<FinalSnapshot, kube::Error> {
    let wanted = cluster
        .spec
        .hibernating()
        .is_some_and(|h| h.store.is_some());
    if !wanted || obs.pods.is_empty() {
        return Ok(FinalSnapshot::NotLooked);
    }
    let Some(now) = revision(obs) else {
        return Ok(FinalSnapshot::Missing);
    };
    let selector = format!("{HIBERNATION_LABEL}={}", cluster.name_any());
    let list = handles
        .backups
        .list(&ListParams::default().labels(&selector))
        .await?;
    Ok(judge(
        &list.items,
        &backup_name(&cluster.name_any(), now),
        now,
    ))
}

/// The final snapshot `found` this pass, remembered in `kept` once taken; once no pod stays
/// (every one is being deleted, or gone), the one remembered: nothing is left to compare
/// revisions with, the planner no longer asks, and the status must still record it.
pub fn remembered(
    found: FinalSnapshot,
    kept: &mut Option<FinalSnapshot>,
    cluster: &EtcdCluster,
    obs: &Observed,
) -> FinalSnapshot {
    if cluster.spec.hibernating().is_none() {
        *kept = None;
        return found;
    }
    if matches!(found, FinalSnapshot::Taken { .. }) {
        *kept = Some(found.clone());
        return found;
    }
    let staying = obs
        .pods
        .values()
        .any(|p| p.metadata.deletion_timestamp.is_none());
    match kept {
        Some(taken) if !staying => taken.clone(),
        _ => found,
    }
}

/// Of a cluster's final-snapshot EtcdBackups, the one that holds revision `now` (or later),
/// else the state of the one named `current` (this revision's).
fn judge(backups: &[EtcdBackup], current: &str, now: i64) -> FinalSnapshot {
    let taken = backups
        .iter()
        .filter_map(|b| {
            let s = b.status.as_ref()?;
            let revision = s.etcd_revision?;
            (s.succeeded && !s.sha256.is_empty() && revision >= now)
                .then(|| (revision, b.name_any()))
        })
        .max();
    if let Some((revision, backup)) = taken {
        return FinalSnapshot::Taken { backup, revision };
    }
    let Some(b) = backups.iter().find(|b| b.name_any() == current) else {
        return FinalSnapshot::Missing;
    };
    let status = b.status.clone().unwrap_or_default();
    if status.phase == Some(BackupPhase::Failed) {
        return FinalSnapshot::Failed {
            backup: current.to_string(),
            reason: status.reason,
        };
    }
    // Succeeded below the members' revision (written to since): a newer one is taken under
    // the newer revision's name, so this one is only ever in flight.
    FinalSnapshot::Taking {
        backup: current.to_string(),
    }
}

/// The EtcdBackup a cluster woken with no claim and no pod is restored from: the final
/// snapshot its status records.
pub fn wakes_from(cluster: &EtcdCluster, obs: &Observed) -> Option<(String, Option<i64>)> {
    if cluster.spec.hibernating().is_some() || !obs.pods.is_empty() || !obs.plan.claims.is_empty() {
        return None;
    }
    let h = cluster.status.as_ref()?.hibernation.as_ref()?;
    (!h.backup.is_empty()).then(|| (h.backup.clone(), h.revision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EtcdBackupStatus;

    fn backup(name: &str, status: Option<(bool, Option<i64>, Option<BackupPhase>)>) -> EtcdBackup {
        let store: RecoveryStore = serde_json::from_value(serde_json::json!({
            "backupStorageType": "S3", "s3": {"path": "bucket/sleep"}
        }))
        .unwrap();
        let cluster = EtcdCluster::new("c", crate::api::EtcdClusterSpec::default());
        let mut b = backup_of(&cluster, &store, 1);
        b.metadata.name = Some(name.into());
        b.status = status.map(|(succeeded, etcd_revision, phase)| EtcdBackupStatus {
            succeeded,
            etcd_revision,
            phase,
            sha256: if succeeded {
                "ab".into()
            } else {
                String::new()
            },
            reason: "store refused".into(),
            ..EtcdBackupStatus::default()
        });
        b
    }

    #[test]
    fn the_final_snapshot_must_hold_the_members_newest_revision() {
        let old = backup("c-hibernation-r10", Some((true, Some(10), None)));
        // Written to since r10: this revision's snapshot is missing, then taking, then taken.
        assert_eq!(
            judge(std::slice::from_ref(&old), "c-hibernation-r12", 12),
            FinalSnapshot::Missing
        );
        let running = backup("c-hibernation-r12", None);
        assert_eq!(
            judge(&[old.clone(), running], "c-hibernation-r12", 12),
            FinalSnapshot::Taking {
                backup: "c-hibernation-r12".into()
            }
        );
        let done = backup("c-hibernation-r12", Some((true, Some(13), None)));
        assert_eq!(
            judge(&[old.clone(), done], "c-hibernation-r12", 12),
            FinalSnapshot::Taken {
                backup: "c-hibernation-r12".into(),
                revision: 13
            }
        );
        let failed = backup(
            "c-hibernation-r12",
            Some((false, None, Some(BackupPhase::Failed))),
        );
        assert!(matches!(
            judge(&[old, failed], "c-hibernation-r12", 12),
            FinalSnapshot::Failed { reason, .. } if reason == "store refused"
        ));
    }

    #[test]
    fn the_final_snapshot_is_remembered_once_no_pod_is_left_to_compare_with() {
        let mut cluster = EtcdCluster::new("c", crate::api::EtcdClusterSpec::default());
        cluster.spec.hibernation = Some(crate::api::Hibernation {
            enabled: true,
            ..Default::default()
        });
        let taken = FinalSnapshot::Taken {
            backup: "c-hibernation-r5".into(),
            revision: 5,
        };
        let mut kept = None;
        let mut obs = Observed::default();
        obs.pods.insert("m1".into(), Default::default());
        assert_eq!(remembered(taken.clone(), &mut kept, &cluster, &obs), taken);
        // A pod still stays: what this pass found counts (the planner compares revisions).
        assert_eq!(
            remembered(FinalSnapshot::Missing, &mut kept, &cluster, &obs),
            FinalSnapshot::Missing
        );
        // Every pod gone: the one found before.
        obs.pods.clear();
        assert_eq!(
            remembered(FinalSnapshot::NotLooked, &mut kept, &cluster, &obs),
            taken
        );
        // Awake: forgotten.
        cluster.spec.hibernation = None;
        remembered(FinalSnapshot::NotLooked, &mut kept, &cluster, &obs);
        assert!(kept.is_none());
    }

    #[test]
    fn the_final_snapshot_is_written_under_the_store_prefix_and_owned_by_the_cluster() {
        let mut cluster = EtcdCluster::new("c", crate::api::EtcdClusterSpec::default());
        cluster.metadata.uid = Some("u1".into());
        let store: RecoveryStore = serde_json::from_value(serde_json::json!({
            "backupStorageType": "S3", "s3": {"path": "bucket/sleep/", "awsSecret": "aws"}
        }))
        .unwrap();
        let b = backup_of(&cluster, &store, 42);
        assert_eq!(b.name_any(), "c-hibernation-r42");
        let s3 = b.spec.s3.unwrap();
        assert_eq!(s3.path, "bucket/sleep/c-hibernation-r42");
        assert_eq!(s3.aws_secret.as_deref(), Some("aws"));
        assert_eq!(b.spec.cluster_name.as_deref(), Some("c"));
        assert_eq!(b.metadata.owner_references.unwrap()[0].uid, "u1");
    }
}
