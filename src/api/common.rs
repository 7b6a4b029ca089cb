//! Types shared by the three kinds: object-storage locations and status conditions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
pub struct S3Source {
    /// Full path of the snapshot as `<bucket>/<key>`, for example `my-bucket/etcd/prod.db`.
    /// Periodic backups append `_v<revision>_<timestamp>` to the key.
    #[schemars(length(min = 3), regex(pattern = r"^[^/]+/.+$"))]
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
}

/// A snapshot location in Azure Blob Storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbsSource {
    /// Full path of the snapshot as `<container>/<blob>`.
    #[schemars(length(min = 3), regex(pattern = r"^[^/]+/.+$"))]
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
    #[schemars(length(min = 3), regex(pattern = r"^[^/]+/.+$"))]
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
    #[schemars(length(min = 3), regex(pattern = r"^[^/]+/.+$"))]
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

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}
