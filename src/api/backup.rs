//! `EtcdBackup`: a snapshot of an etcd cluster streamed to object storage, once or periodically.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{AbsSource, Condition, GcsSource, OssSource, S3Source, StorageType};
use super::validation;

/// Desired backup. Field names are those of the coreos etcd-operator.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdBackup",
    plural = "etcdbackups",
    namespaced,
    status = "EtcdBackupStatus",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Succeeded", type_ = "boolean", json_path = ".status.succeeded"),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.etcdRevision",
        description = "etcd revision of the newest snapshot"
    ),
    printcolumn(
        name = "Path",
        type_ = "string",
        json_path = ".status.path",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::backup_spec_rules)]
pub struct EtcdBackupSpec {
    /// Client URLs of the etcd cluster to back up, for example
    /// `http://example-client.default.svc:2379`. Use this or `clusterName`. Each must name a
    /// Service or pod of the backup's own namespace (or an address in the operator's
    /// `tenancy.allowedExternalCIDRs`), with or without `clientTLSSecret`; anything else,
    /// and any URL with userinfo, a path, a query or a fragment, fails the backup naming this
    /// field before anything is dialed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 512)))]
    pub etcd_endpoints: Vec<String>,

    /// Name of an EtcdCluster in this namespace to back up; the operator finds its endpoints
    /// and TLS settings. Use this or `etcdEndpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,

    /// Where the snapshot goes: S3, ABS, GCS or OSS. The section of the same name (`s3`, `abs`,
    /// `gcs`, `oss`) must be set, and no other.
    pub storage_type: StorageType,

    /// Timeout and schedule. Without it, or with `backupIntervalInSecond` 0, the backup is taken
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_policy: Option<BackupPolicy>,

    /// Amazon S3 or an S3-compatible server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,

    /// Azure Blob Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,

    /// Google Cloud Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,

    /// Alibaba Cloud OSS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oss: Option<OssSource>,

    /// Secret with the client certificate for an etcd that requires one (`etcd-client.crt`,
    /// `etcd-client.key`, `etcd-client-ca.crt`).
    #[serde(
        rename = "clientTLSSecret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_tls_secret: Option<String>,

    /// Store the snapshot compressed with zstd (an extension of this operator). etcd's own hash
    /// is checked on the snapshot as it streams, `status.sha256` is that of the stored object,
    /// and a restore recognizes and decompresses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<BackupCompression>,
}

/// How a backup is compressed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupCompression {
    /// The algorithm: `zstd`, the only one.
    pub algorithm: CompressionAlgorithm,
    /// zstd's level, 1 (fastest) to 19 (smallest); 3 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 19))]
    pub level: Option<i32>,
}

impl EtcdBackupSpec {
    /// The archive settings, if this backup archives every change: a periodic backup with
    /// `backupPolicy.continuous`.
    pub fn continuous(&self) -> Option<ContinuousArchive> {
        let policy = self.backup_policy.as_ref()?;
        (policy.backup_interval_in_second.unwrap_or(0) > 0)
            .then(|| policy.continuous.clone())
            .flatten()
    }
}

impl BackupCompression {
    /// The level, defaulted.
    pub fn level(&self) -> i32 {
        self.level.unwrap_or(3)
    }
}

/// Compression algorithms.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CompressionAlgorithm {
    /// Zstandard.
    #[default]
    Zstd,
}

/// Timeout, schedule and retention of a backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// Give up on one snapshot after this many seconds (at most a day). 0 means the default,
    /// 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub timeout_in_second: Option<i64>,
    /// Take a snapshot every this many seconds (at most a year). 0 means once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31536000))]
    pub backup_interval_in_second: Option<i64>,
    /// Keep at most this many periodic snapshots, deleting the oldest. 0 means keep all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100000))]
    pub max_backups: Option<i64>,
    /// Tiered retention of periodic snapshots (an extension of this operator): the newest
    /// `last`, and the newest of each of the newest `hourly` hours, `daily` days, `weekly` ISO
    /// weeks and `monthly` months that have one (UTC). Replaces `maxBackups` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<TieredRetention>,
    /// Continuous archiving (an extension of this operator): from each periodic snapshot on,
    /// every change etcd makes is written to the same storage in chunks
    /// (`<path>_chunks/<from revision>-<to revision>`), so that an EtcdRestore with
    /// `restoreTo` can bring the cluster back to any revision or moment the archive holds.
    /// Needs `backupIntervalInSecond` > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousArchive>,
}

/// How changes are archived between periodic snapshots.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContinuousArchive {
    /// A chunk is written at least this often (while there are changes): `5s`, `1m`; 1s to
    /// 10m, 5s when unset. The recovery point: changes of the last interval may be lost with
    /// the whole cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = validation::flush_interval_rules)]
    pub flush_interval: Option<String>,
    /// ... or as soon as it holds this many bytes of changes: `8Mi`, `512Ki`, or bytes
    /// (quoted); 64Ki to 32Mi, 8Mi when unset. The operator holds about one chunk per
    /// archived cluster in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = validation::chunk_bytes_rules)]
    pub max_chunk_bytes: Option<String>,
}

impl ContinuousArchive {
    /// `flushInterval`, parsed and bounded.
    pub fn flush_interval(&self) -> std::time::Duration {
        let d = self
            .flush_interval
            .as_deref()
            .and_then(super::cluster::parse_duration)
            .unwrap_or(std::time::Duration::from_secs(5));
        d.clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(600),
        )
    }

    /// `maxChunkBytes`, parsed and bounded.
    pub fn max_chunk_bytes(&self) -> usize {
        let parse = |t: &str| -> Option<usize> {
            let (digits, unit) = match t.strip_suffix("Ki") {
                Some(d) => (d, 1 << 10),
                None => match t.strip_suffix("Mi") {
                    Some(d) => (d, 1 << 20),
                    None => (t, 1),
                },
            };
            digits.parse::<usize>().ok()?.checked_mul(unit)
        };
        self.max_chunk_bytes
            .as_deref()
            .and_then(parse)
            .unwrap_or(8 << 20)
            .clamp(validation::MIN_CHUNK_BYTES, validation::MAX_CHUNK_BYTES)
    }
}

/// The continuous archive of a periodic backup, as the operator last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    /// The oldest revision a restore can reach: the oldest full snapshot kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_revision: Option<i64>,
    /// When that snapshot was taken, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<String>,
    /// The newest revision archived: every change up to it is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_revision: Option<i64>,
    /// When the newest archived change was received, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time: Option<String>,
    /// The source's newest revision the archiver knows of (its watch, and a linearizable read
    /// every 5 s): what the archive must reach to hold every acknowledged change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<i64>,
    /// How long the oldest change the source made and the archive does not store yet has
    /// waited, in milliseconds, when the status was written (0: every change known of is
    /// stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_milliseconds: Option<i64>,
    /// Chunks written since archiving began for this backup.
    #[serde(default)]
    pub chunks: i64,
    /// Bytes of chunks written since archiving began for this backup.
    #[serde(default)]
    pub bytes: i64,
    /// The last time etcd had compacted changes the archive lacked: revisions a restore can
    /// never reach (a full snapshot was taken at once after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap: Option<ArchiveGap>,
    /// Why archiving is not running, when it is not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Revisions missing from an archive.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveGap {
    /// The first revision missing.
    pub from: i64,
    /// The last revision missing.
    pub to: i64,
    /// When it was found, RFC 3339.
    pub time: String,
}

/// Grandfather-father-son retention counts; each 0 or unset keeps none by that tier.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TieredRetention {
    /// The newest this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub last: Option<i64>,
    /// One per hour, for this many hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub hourly: Option<i64>,
    /// One per day, for this many days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub daily: Option<i64>,
    /// One per ISO week, for this many weeks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub weekly: Option<i64>,
    /// One per month, for this many months.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub monthly: Option<i64>,
}

/// Progress of a backup.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupPhase {
    /// Accepted, not started.
    Pending,
    /// A snapshot is being taken and uploaded.
    Running,
    /// The (newest) snapshot is stored and verified.
    Succeeded,
    /// The (newest) attempt failed; see `Reason`.
    Failed,
}

/// Observed state of a backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// Whether the newest backup succeeded.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the newest backup failed.
    #[serde(rename = "Reason", default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Version of the etcd server the snapshot came from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etcd_version: String,
    /// etcd revision the snapshot holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_revision: Option<i64>,
    /// When the newest successful backup finished, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_date: Option<String>,
    /// Pending, Running, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The metadata.generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Size of the newest snapshot in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// The snapshot's own size when it is stored compressed (`size` is the object's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_size: Option<i64>,
    /// SHA-256 of the newest snapshot, hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// Full path of the newest snapshot in its storage.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The continuous archive, for a periodic backup with `backupPolicy.continuous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveStatus>,
}

impl EtcdBackupStatus {
    /// Whether the coreos operator finished this backup: its status has `succeeded` or a
    /// `Reason` and none of this operator's `phase`. A one-shot backup that coreos finished is
    /// done for good (coreos took each once): taken again, it would write over the snapshot
    /// the user keeps at its path.
    pub fn finished_by_coreos(&self) -> bool {
        self.phase.is_none() && (self.succeeded || !self.reason.is_empty())
    }
}

/// Label of the EtcdBackups one schedule (a CronJob running `etcd-operator backup create`)
/// creates: the schedule's name.
pub const SCHEDULE_LABEL: &str = "etcd.database.coreos.com/schedule";
/// Annotation of a scheduled EtcdBackup: the coreos-style path prefix (`<bucket>/<key prefix>`)
/// of its schedule's snapshots, each `<prefix>_<tick as 2006-01-02-15:04:05>`.
pub const SCHEDULE_PREFIX_ANNOTATION: &str = "etcd.database.coreos.com/schedule-path-prefix";
/// Annotation of a scheduled EtcdBackup: how many of its schedule's stored snapshots to keep
/// (newest by the tick in their names); after a success the controller deletes older ones.
pub const SCHEDULE_KEEP_ANNOTATION: &str = "etcd.database.coreos.com/schedule-keep-snapshots";
