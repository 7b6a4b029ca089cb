//! Types shared by the three kinds: object-storage locations and status conditions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation;

/// API group of all three kinds, kept from the coreos etcd-operator so old manifests still apply.
pub const GROUP: &str = "etcd.database.coreos.com";
/// API version of all three kinds.
pub const VERSION: &str = "v1beta2";

/// Where a snapshot is stored. The value names the section of the spec that holds its location.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum StorageType {
    /// Amazon S3 or an S3-compatible server (`spec.s3`).
    S3,
    /// Azure Blob Storage (`spec.abs`).
    #[serde(rename = "ABS")]
    Abs,
    /// Google Cloud Storage (`spec.gcs`).
    #[serde(rename = "GCS")]
    Gcs,
    /// Alibaba Cloud OSS (`spec.oss`).
    #[serde(rename = "OSS")]
    Oss,
}

impl StorageType {
    /// The JSON name of the spec section this storage type uses.
    pub fn section(self) -> &'static str {
        match self {
            StorageType::S3 => "s3",
            StorageType::Abs => "abs",
            StorageType::Gcs => "gcs",
            StorageType::Oss => "oss",
        }
    }
}

/// A snapshot location in Amazon S3 or an S3-compatible server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.encryption) || self.encryption.mode != 'SSE-C' || has(self.awsSecret)",
    "message": "encryption mode SSE-C reads its key from awsSecret (key sse-customer-key): set awsSecret"
}]))]
pub struct S3Source {
    /// Full path of the snapshot as `<bucket>/<key>`, for example `my-bucket/etcd/prod.db`.
    /// Periodic backups append `_v<revision>_<timestamp>` to the key.
    #[schemars(length(min = 3, max = 1088), regex(pattern = r"^[^/]+/.+$"))]
    pub path: String,
    /// Name of a Secret in the same namespace with the files `credentials` and `config`, in the
    /// format of `~/.aws/credentials` and `~/.aws/config`. Without it, credentials come from the
    /// operator's environment (for example an IAM role for its service account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_secret: Option<String>,
    /// URL of an S3-compatible server (MinIO, Ceph, ...); empty for AWS itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Address buckets as `<endpoint>/<bucket>` instead of `<bucket>.<endpoint>`; most
    /// S3-compatible servers need this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_path_style: Option<bool>,
    /// Server-side encryption of what is written (an extension of this operator), and the key
    /// to read it back with (SSE-C). Without it, the bucket's default encryption applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<S3Encryption>,
}

/// S3 server-side encryption.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.kmsKeyId) || self.mode == 'SSE-KMS' || self.mode == 'DSSE-KMS'",
    "message": "kmsKeyId is for modes SSE-KMS and DSSE-KMS"
}, {
    "rule": "!has(self.bucketKey) || self.mode == 'SSE-KMS' || self.mode == 'DSSE-KMS'",
    "message": "bucketKey is for modes SSE-KMS and DSSE-KMS"
}]))]
pub struct S3Encryption {
    /// `SSE-S3` (keys managed by S3), `SSE-KMS` or `DSSE-KMS` (a KMS key), or `SSE-C` (a key
    /// of yours, base64 of 32 bytes, in the awsSecret's `sse-customer-key`: without it, the
    /// backup cannot be read back).
    pub mode: S3EncryptionMode,
    /// The KMS key (ID, ARN or alias); the account's default key for S3 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub kms_key_id: Option<String>,
    /// Use an S3 Bucket Key for SSE-KMS (fewer KMS requests); the bucket's setting when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_key: Option<bool>,
}

/// How S3 encrypts an object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum S3EncryptionMode {
    /// AES256 with keys S3 manages.
    #[default]
    #[serde(rename = "SSE-S3")]
    SseS3,
    /// AWS KMS.
    #[serde(rename = "SSE-KMS")]
    SseKms,
    /// Dual-layer AWS KMS.
    #[serde(rename = "DSSE-KMS")]
    DsseKms,
    /// A customer-provided key.
    #[serde(rename = "SSE-C")]
    SseC,
}

/// A snapshot location in Azure Blob Storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbsSource {
    /// Full path of the snapshot as `<container>/<blob>`.
    #[schemars(length(min = 3, max = 1088), regex(pattern = r"^[^/]+/.+$"))]
    pub path: String,
    /// Name of a Secret in the same namespace with the keys `storage-account`, `storage-key` and,
    /// optionally, `cloud` (the Azure cloud name) or `endpoint` (a Blob service URL).
    pub abs_secret: String,
}

/// A snapshot location in Google Cloud Storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsSource {
    /// Full path of the snapshot as `<bucket>/<object>`.
    #[schemars(length(min = 3, max = 1088), regex(pattern = r"^[^/]+/.+$"))]
    pub path: String,
    /// Name of a Secret in the same namespace with a service-account key in `credentials.json`
    /// (or an access token in `access-token`). Without it, workload identity is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp_secret: Option<String>,
}

/// A snapshot location in Alibaba Cloud OSS.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OssSource {
    /// Full path of the snapshot as `<bucket>/<key>`.
    #[schemars(length(min = 3, max = 1088), regex(pattern = r"^[^/]+/.+$"))]
    pub path: String,
    /// Name of a Secret in the same namespace with the keys `accessKeyID` and `accessKeySecret`.
    pub oss_secret: String,
    /// OSS endpoint, for example `http://oss-cn-hangzhou.aliyuncs.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// A status condition in the standard Kubernetes shape.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, for example `Available`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The metadata.generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the status last changed, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// One-word CamelCase reason for the condition's status.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    /// Whether the condition's status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// The sha256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A store of a cluster's backups, searched by name for the newest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::recovery_store_rules)]
pub struct RecoveryStore {
    /// S3, ABS or GCS; the section of the same name must be set, and no other.
    pub backup_storage_type: StorageType,
    /// Amazon S3 or an S3-compatible server; `path` is the prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Azure Blob Storage; `path` is the prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,
    /// Google Cloud Storage; `path` is the prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,
    /// Alibaba Cloud OSS (not implemented by this operator: reported, never searched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oss: Option<OssSource>,
}
