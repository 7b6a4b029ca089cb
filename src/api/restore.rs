//! `EtcdRestore`: an EtcdCluster recreated from a snapshot.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{AbsSource, Condition, GcsSource, OssSource, S3Source, StorageType};
use super::validation;

/// Desired restore. Field names are those of the coreos etcd-operator.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdRestore",
    plural = "etcdrestores",
    namespaced,
    status = "EtcdRestoreStatus",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.etcdCluster.name"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Succeeded", type_ = "boolean", json_path = ".status.succeeded"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::restore_spec_rules)]
pub struct EtcdRestoreSpec {
    /// Where the snapshot is: S3, ABS, GCS or OSS. The section of the same name must be set,
    /// and no other.
    pub backup_storage_type: StorageType,

    /// Snapshot in Amazon S3 or an S3-compatible server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,

    /// Snapshot in Azure Blob Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,

    /// Snapshot in Google Cloud Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,

    /// Snapshot in Alibaba Cloud OSS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oss: Option<OssSource>,

    /// The EtcdCluster to restore into: its spec is used for the restored cluster, and its
    /// current members are removed first.
    pub etcd_cluster: EtcdClusterRef,

    /// Point-in-time restore (an extension of this operator): the storage path is then that
    /// of a periodic EtcdBackup with `backupPolicy.continuous` (its `path`, as in its spec),
    /// and the cluster is restored to exactly the key space it had at this revision or
    /// moment: the newest full snapshot before it, then the archived changes up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_to: Option<RestoreTo>,
}

/// The point a restore goes to: one of `revision` and `time`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::restore_to_rules)]
pub struct RestoreTo {
    /// An etcd revision of the backed-up cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision: Option<i64>,
    /// A moment, RFC 3339 (`2026-11-27T10:15:00Z`): the last change archived at or before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub time: Option<String>,
}

/// A storage section (an EtcdBackup's, or an EtcdCluster's `spec.recovery.backups`),
/// borrowed, to name one object in it.
pub struct StorageSection<'a> {
    /// S3, ABS, GCS or OSS.
    pub kind: StorageType,
    /// The S3 section.
    pub s3: Option<&'a S3Source>,
    /// The ABS section.
    pub abs: Option<&'a AbsSource>,
    /// The GCS section.
    pub gcs: Option<&'a GcsSource>,
    /// The OSS section.
    pub oss: Option<&'a OssSource>,
}

impl<'a> From<&'a super::EtcdBackupSpec> for StorageSection<'a> {
    fn from(spec: &'a super::EtcdBackupSpec) -> Self {
        StorageSection {
            kind: spec.storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
            oss: spec.oss.as_ref(),
        }
    }
}

impl<'a> From<&'a EtcdRestoreSpec> for StorageSection<'a> {
    fn from(spec: &'a EtcdRestoreSpec) -> Self {
        StorageSection {
            kind: spec.backup_storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
            oss: spec.oss.as_ref(),
        }
    }
}

impl<'a> StorageSection<'a> {
    /// Where the section points: its type, its S3 endpoint (if any) and its path; `None` for
    /// a type whose section is missing.
    pub fn place(&self) -> Option<(StorageType, &'a str, &'a str)> {
        Some(match self.kind {
            StorageType::S3 => {
                let s3 = self.s3?;
                (
                    self.kind,
                    s3.endpoint.as_deref().unwrap_or(""),
                    s3.path.as_str(),
                )
            }
            StorageType::Abs => (self.kind, "", self.abs?.path.as_str()),
            StorageType::Gcs => (self.kind, "", self.gcs?.path.as_str()),
            StorageType::Oss => (self.kind, "", self.oss?.path.as_str()),
        })
    }

    /// The path of the chosen section; `None` when that section is missing.
    pub fn path(&self) -> Option<&'a str> {
        self.place().map(|(_, _, path)| path)
    }
}

impl<'a> From<&'a super::RecoveryStore> for StorageSection<'a> {
    fn from(spec: &'a super::RecoveryStore) -> Self {
        StorageSection {
            kind: spec.backup_storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
            oss: spec.oss.as_ref(),
        }
    }
}

impl EtcdRestoreSpec {
    /// A restore into `cluster` of the object at `path` in the store `section` names (its
    /// credentials, endpoint and encryption kept).
    pub fn of(section: StorageSection<'_>, path: &str, cluster: &str) -> Self {
        EtcdRestoreSpec {
            backup_storage_type: section.kind,
            s3: section.s3.cloned().map(|mut s| {
                s.path = path.to_string();
                s
            }),
            abs: section.abs.cloned().map(|mut a| {
                a.path = path.to_string();
                a
            }),
            gcs: section.gcs.cloned().map(|mut g| {
                g.path = path.to_string();
                g
            }),
            oss: section.oss.cloned().map(|mut o| {
                o.path = path.to_string();
                o
            }),
            etcd_cluster: EtcdClusterRef {
                name: cluster.to_string(),
            },
            restore_to: None,
        }
    }
}

/// Reference to an EtcdCluster in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterRef {
    /// Name of the EtcdCluster.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// Progress of a restore.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RestorePhase {
    /// Accepted, waiting (for the EtcdCluster to exist, say).
    Pending,
    /// Reading the snapshot through and checking its hashes; taking the safety snapshot.
    Verifying,
    /// Handed to the cluster: its members are replaced by a seed restored from the snapshot.
    Restoring,
    /// The cluster runs from the snapshot, at its full size.
    Completed,
    /// The restore failed; see `reason`.
    Failed,
}

/// Observed state of a restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreStatus {
    /// Whether the restore succeeded.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the restore failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Pending, Restoring, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The metadata.generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// SHA-256 of the snapshot, verified before it was restored, hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// Size of the snapshot in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// The safety snapshot of the cluster as it was before the restore, `<path>.pre-restore-<time>`
    /// in the same storage; empty when the cluster did not answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pre_restore_path: String,
    /// The restored cluster's revision when it came back (raised above the replaced cluster's
    /// where etcd supports it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_revision: Option<i64>,
    /// For a point-in-time restore: the revision of the backed-up cluster it goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<i64>,
    /// The seed member, bootstrapped from the snapshot.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seed: String,
    /// The sha256 of the hand-off annotation this restore wrote on its EtcdCluster: the
    /// cluster's task acts on that annotation only while it is exactly this one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handoff_sha256: String,
    /// The object as it was read through and verified, so that a pass retried before the
    /// hand-off (a safety snapshot that failed) does not read it again while it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<VerifiedObject>,
}

impl EtcdRestoreStatus {
    /// Whether the coreos operator finished this restore: its status has `succeeded` or a
    /// `reason` and none of this operator's `phase`. It is history, never to be acted on:
    /// restored again, it would replace the live cluster's data with the old snapshot.
    pub fn finished_by_coreos(&self) -> bool {
        self.phase.is_none() && (self.succeeded || !self.reason.is_empty())
    }
}

/// A snapshot object that was read through and found whole.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedObject {
    /// The metadata.generation of the restore it was verified for.
    pub generation: i64,
    /// The object's entity tag, or its last-modified time where the store gives no tag.
    pub version: String,
    /// Its size in bytes.
    pub size: i64,
    /// Its sha256, hex.
    pub sha256: String,
    /// The sha256 of the snapshot inside it (differs when it is stored compressed), hex.
    pub snapshot_sha256: String,
    /// The size of the snapshot inside it, in bytes: the most the seed is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_size: Option<i64>,
}
