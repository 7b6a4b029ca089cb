//! Whether a restore hand-off on an EtcdCluster may be acted on.
//!
//! Acting on a hand-off deletes every member of the cluster, and the annotation that carries it
//! can be written by anyone who may edit the EtcdCluster (or left in a saved manifest). So the
//! annotation alone proves nothing: a hand-off counts only when its source vouches for it, in a
//! place only the operator writes (a status subresource), and when the annotation was written by
//! the operator's own field manager:
//!
//! - a restore from a backup: the EtcdRestore it names exists with that UID, targets this
//!   cluster, is in phase Restoring, and recorded the sha256 of this very annotation value
//!   (`status.handoffSha256`), so no field of it (the snapshot's hash, the token's hash, the
//!   revision bump) can be changed after the restore controller verified the snapshot;
//! - a recovery from lost quorum: the cluster's own status records that recovery (its restore's
//!   name and the member it rebuilds from) and has not completed it.

use super::cluster::{EtcdCluster, RESTORE_ANNOTATION, RestoreHandoff};
use super::restore::{EtcdRestore, RestorePhase};

/// The field manager with which the restore controller writes the hand-off.
pub const RESTORE_MANAGER: &str = "etcd-operator-restore";
/// The field manager with which a cluster's task hands itself a recovery from a member.
pub const RECOVERY_MANAGER: &str = "etcd-operator-recovery";

/// The revision bump when the replaced cluster's revision is unknown (it did not answer): far
/// above any revision a cluster reaches, as etcd's own documentation suggests.
pub const UNKNOWN_BUMP: u64 = 1_000_000_000;
/// Added to the replaced cluster's revision, for the writes it took after the safety snapshot
/// was asked for.
pub const BUMP_MARGIN: u64 = 100_000;

/// How much to raise the restored revision so that it passes `replaced` (the replaced
/// cluster's revision, when it answered). Only etcdutl 3.5.10 and later can; the cluster's
/// task drops it for older versions.
pub fn bump_for(replaced: Option<i64>) -> u64 {
    match replaced {
        Some(r) => u64::try_from(r).unwrap_or(0) + BUMP_MARGIN,
        None => UNKNOWN_BUMP,
    }
}

/// The sha256 (hex) of a hand-off annotation's value, as the EtcdRestore records it.
pub fn digest(value: &str) -> String {
    super::common::sha256_hex(value.as_bytes())
}

/// The field manager that last wrote `cluster`'s restore annotation, from its managedFields;
/// `None` when they do not say (an object read without them).
pub fn writer(cluster: &EtcdCluster) -> Option<&str> {
    let key = format!("f:{RESTORE_ANNOTATION}");
    cluster
        .metadata
        .managed_fields
        .as_ref()?
        .iter()
        .rev()
        .find(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:metadata")?.get("f:annotations")?.get(&key))
                .is_some()
        })
        .and_then(|m| m.manager.as_deref())
}

/// Why the hand-off `handoff` on `cluster` may not be acted on, or `None` when it may.
/// `restore` is the EtcdRestore of the hand-off's name as the API server has it (unused for a
/// recovery from a member, which no EtcdRestore carries).
pub fn refusal(
    cluster: &EtcdCluster,
    handoff: &RestoreHandoff,
    restore: Option<&EtcdRestore>,
) -> Option<String> {
    let raw = cluster
        .metadata
        .annotations
        .as_ref()?
        .get(RESTORE_ANNOTATION)?;
    let recovery = !handoff.member.is_empty();
    let manager = if recovery {
        RECOVERY_MANAGER
    } else {
        RESTORE_MANAGER
    };
    let wrote = writer(cluster);
    if wrote != Some(manager) {
        return Some(format!(
            "annotation {RESTORE_ANNOTATION} was written by {}, not by the operator ({manager}); \
             it is ignored and no member is touched: remove it, and restore with an EtcdRestore",
            wrote.map_or("an unknown writer".into(), |w| format!(
                "field manager {w:?}"
            ))
        ));
    }
    if recovery {
        recovery_refusal(cluster, handoff)
    } else {
        restore_refusal(cluster, handoff, restore, raw)
    }
}

fn restore_refusal(
    cluster: &EtcdCluster,
    handoff: &RestoreHandoff,
    restore: Option<&EtcdRestore>,
    raw: &str,
) -> Option<String> {
    let name = &handoff.name;
    let Some(restore) = restore.filter(|r| r.metadata.uid.as_deref() == Some(&handoff.uid)) else {
        return Some(format!(
            "annotation {RESTORE_ANNOTATION} names EtcdRestore {name} with UID {}, which does \
             not exist in this namespace; no member is touched",
            handoff.uid
        ));
    };
    let cluster_name = cluster.metadata.name.as_deref().unwrap_or_default();
    if restore.spec.etcd_cluster.name != cluster_name {
        return Some(format!(
            "annotation {RESTORE_ANNOTATION} names EtcdRestore {name}, which restores EtcdCluster \
             {}, not this one; no member is touched",
            restore.spec.etcd_cluster.name
        ));
    }
    let status = restore.status.clone().unwrap_or_default();
    if status.phase != Some(RestorePhase::Restoring) {
        return Some(format!(
            "annotation {RESTORE_ANNOTATION} names EtcdRestore {name}, which is not Restoring \
             (phase {}); no member is touched",
            status.phase.map_or("none".into(), |p| format!("{p:?}"))
        ));
    }
    if status.handoff_sha256 != digest(raw) {
        return Some(format!(
            "annotation {RESTORE_ANNOTATION} is not the hand-off EtcdRestore {name} made (its \
             sha256 differs from status.handoffSha256); no member is touched"
        ));
    }
    None
}

fn recovery_refusal(cluster: &EtcdCluster, handoff: &RestoreHandoff) -> Option<String> {
    let recorded = cluster
        .status
        .as_ref()
        .and_then(|s| s.recovery.as_ref())
        .filter(|r| !r.completed && r.restore == handoff.name && r.source == handoff.member);
    match recorded {
        Some(_) => None,
        None => Some(format!(
            "annotation {RESTORE_ANNOTATION} asks for a recovery from member {} ({}) that this \
             cluster's status does not record as under way; no member is touched",
            handoff.member, handoff.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    use super::*;
    use crate::api::{
        EtcdClusterSpec, EtcdClusterStatus, EtcdRestoreSpec, EtcdRestoreStatus, RecoveryRecord,
    };

    fn handoff(member: &str) -> RestoreHandoff {
        RestoreHandoff {
            name: "r".into(),
            uid: "u-1".into(),
            token_sha256: "ab".repeat(32),
            sha256: "cd".repeat(32),
            member: member.into(),
            ..RestoreHandoff::default()
        }
    }

    fn cluster(h: &RestoreHandoff, manager: &str) -> (EtcdCluster, String) {
        let raw = serde_json::to_string(h).expect("json");
        let mut c = EtcdCluster::new("example", EtcdClusterSpec::default());
        c.metadata.annotations = Some([(RESTORE_ANNOTATION.to_string(), raw.clone())].into());
        let fields = serde_json::json!({"f:metadata": {"f:annotations": {
            format!("f:{RESTORE_ANNOTATION}"): {}}}});
        c.metadata.managed_fields = Some(vec![
            ManagedFieldsEntry {
                manager: Some("kubectl-client-side-apply".into()),
                fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": {"f:size": {}}}))),
                ..ManagedFieldsEntry::default()
            },
            ManagedFieldsEntry {
                manager: Some(manager.into()),
                fields_v1: Some(FieldsV1(fields)),
                ..ManagedFieldsEntry::default()
            },
        ]);
        (c, raw)
    }

    fn restore(raw: &str, phase: RestorePhase, target: &str) -> EtcdRestore {
        let spec: EtcdRestoreSpec = serde_json::from_value(serde_json::json!({
            "backupStorageType": "S3",
            "s3": {"path": "b/k", "awsSecret": "s"},
            "etcdCluster": {"name": target},
        }))
        .expect("spec");
        let mut r = EtcdRestore::new("r", spec);
        r.metadata.uid = Some("u-1".into());
        r.status = Some(EtcdRestoreStatus {
            phase: Some(phase),
            handoff_sha256: digest(raw),
            ..EtcdRestoreStatus::default()
        });
        r
    }

    #[test]
    fn a_restore_hand_off_counts_only_as_its_restore_recorded_it() {
        let h = handoff("");
        let (c, raw) = cluster(&h, RESTORE_MANAGER);
        let good = restore(&raw, RestorePhase::Restoring, "example");
        assert_eq!(refusal(&c, &h, Some(&good)), None);

        let why = |r: Option<&EtcdRestore>| refusal(&c, &h, r).expect("refused");
        assert!(why(None).contains("does not exist"));
        let mut other_uid = good.clone();
        other_uid.metadata.uid = Some("u-2".into());
        assert!(why(Some(&other_uid)).contains("does not exist"));
        let elsewhere = restore(&raw, RestorePhase::Restoring, "other");
        assert!(why(Some(&elsewhere)).contains("restores EtcdCluster other"));
        let done = restore(&raw, RestorePhase::Completed, "example");
        assert!(why(Some(&done)).contains("not Restoring"));
        // Any field changed after the restore controller wrote it (here the token's hash).
        let tampered = RestoreHandoff {
            token_sha256: "00".repeat(32),
            ..h.clone()
        };
        let (c2, _) = cluster(&tampered, RESTORE_MANAGER);
        let refused = refusal(&c2, &tampered, Some(&good)).expect("refused");
        assert!(refused.contains("handoffSha256"), "{refused}");
    }

    #[test]
    fn a_hand_off_written_by_anyone_but_the_operator_is_refused() {
        let h = handoff("");
        let (c, raw) = cluster(&h, "kubectl-annotate");
        let good = restore(&raw, RestorePhase::Restoring, "example");
        let refused = refusal(&c, &h, Some(&good)).expect("refused");
        assert!(refused.contains("\"kubectl-annotate\""), "{refused}");
        // A manifest applied again: no managedFields say who wrote it.
        let mut bare = c.clone();
        bare.metadata.managed_fields = None;
        let refused = refusal(&bare, &h, Some(&good)).expect("refused");
        assert!(refused.contains("an unknown writer"), "{refused}");
        // The recovery's manager does not vouch for a restore from a backup.
        let (c, raw) = cluster(&h, RECOVERY_MANAGER);
        let good = restore(&raw, RestorePhase::Restoring, "example");
        assert!(refusal(&c, &h, Some(&good)).is_some());
    }

    #[test]
    fn a_recovery_hand_off_counts_only_while_the_status_records_it() {
        let h = handoff("example-abc");
        let (mut c, _) = cluster(&h, RECOVERY_MANAGER);
        assert!(refusal(&c, &h, None).is_some(), "no recovery recorded");
        let record = RecoveryRecord {
            reason: "ForceNewCluster".into(),
            source: "example-abc".into(),
            restore: "r".into(),
            ..RecoveryRecord::default()
        };
        c.status = Some(EtcdClusterStatus {
            recovery: Some(record.clone()),
            ..EtcdClusterStatus::default()
        });
        assert_eq!(refusal(&c, &h, None), None);
        let other_member = handoff("example-xyz");
        assert!(refusal(&c, &other_member, None).is_some());
        c.status = Some(EtcdClusterStatus {
            recovery: Some(RecoveryRecord {
                completed: true,
                ..record
            }),
            ..EtcdClusterStatus::default()
        });
        assert!(refusal(&c, &h, None).is_some(), "a completed recovery");
    }
}
