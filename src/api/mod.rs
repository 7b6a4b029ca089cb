//! The v1beta2 API (`etcd.database.coreos.com`) as Rust types. No I/O here.

// kube's `printcolumn(...)` lists repeat `type_ = "string"`, which clippy takes for duplicated
// attributes.
#[allow(clippy::duplicated_attributes)]
pub mod auth;
#[allow(clippy::duplicated_attributes)]
pub mod backup;
pub mod bootstrap;
#[allow(clippy::duplicated_attributes)]
pub mod cluster;
pub mod common;
pub mod conditions;
pub mod handoff;
#[allow(clippy::duplicated_attributes)]
pub mod restore;
pub mod settings;
pub mod standby;
pub mod validation;

pub use auth::{Auth, AuthRole, AuthStatus, AuthUser, PasswordSecret, Permission, PermissionType};
pub use backup::{
    ArchiveGap, ArchiveStatus, BackupCompression, BackupPhase, BackupPolicy, CompressionAlgorithm,
    ContinuousArchive, EtcdBackup, EtcdBackupSpec, EtcdBackupStatus, SCHEDULE_KEEP_ANNOTATION,
    SCHEDULE_LABEL, SCHEDULE_PREFIX_ANNOTATION, TieredRetention,
};
pub use bootstrap::{Bootstrap, ExistingCluster, ExternalMember, MigrationPhase, MigrationStatus};
pub use cluster::{
    AutoCompaction, AutoCompactionMode, AutoTls, CertManagerTls, ClusterNetworkPolicy,
    ClusterPhase, DEFAULT_QUOTA_BACKEND_BYTES, DEFRAG_ANNOTATION, Defrag, DefragRequest,
    DefragmentationRecord, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, IssuerRef, Maintenance,
    MaintenanceWindow, MemberRole, MemberSecret, MemberStatus, MembersStatus, PodPolicy,
    QuorumLossPolicy, RECOVER_ANNOTATION, RESTORE_ANNOTATION, Recovery, RecoveryRecord,
    RestoreHandoff, RestoreRecord, StaticTls, TlsPolicy,
};
pub use common::{
    AbsSource, Condition, GcsSource, OssSource, RecoveryStore, S3Encryption, S3EncryptionMode,
    S3Source, StorageType,
};
pub use conditions::{
    AuthReason, AvailableReason, ConditionType, DegradedReason, ProgressingReason, find_condition,
};
pub use restore::{
    EtcdClusterRef, EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus, RestorePhase, RestoreTo,
    StorageSection, VerifiedObject,
};
pub use settings::{
    ClientService, GrpcKeepalive, Hibernation, HibernationPhase, HibernationStatus, LogFormat,
    LogLevel, OnResize, ServiceType, TrafficDistribution, Tuning,
};
pub use standby::{DEMOTE_ANNOTATION, Handover, MARKER_KEY, Standby, StandbyPhase, StandbyStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The CRDs of the three kinds, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut cluster = EtcdCluster::crd();
    add_root_rules(&mut cluster, validation::cluster_name_rules());
    [cluster, EtcdBackup::crd(), EtcdRestore::crd()]
        .map(unwrap_descriptions)
        .into()
}

/// Rules on the whole object (where `self.metadata.name` is visible), which kube's derive
/// cannot attach to a schemars-derived root.
fn add_root_rules(crd: &mut CustomResourceDefinition, rules: Vec<serde_json::Value>) {
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let parsed = rules
            .iter()
            .map(|r| serde_json::from_value(r.clone()).expect("a validation rule"));
        schema
            .x_kubernetes_validations
            .get_or_insert_with(Vec::new)
            .extend(parsed);
    }
}

/// Doc comments are wrapped at 100 columns; `kubectl explain` wraps again, so the source line
/// breaks would cut its sentences. Keep paragraph breaks, join the lines within a paragraph.
fn unwrap_descriptions(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    match child {
                        serde_json::Value::String(s) if k == "description" => *s = unwrap(s),
                        _ => walk(child),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    fn unwrap(s: &str) -> String {
        s.split("\n\n")
            .map(|para| {
                para.split('\n')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }
    let mut json = serde_json::to_value(&crd).expect("a CRD serializes");
    walk(&mut json);
    serde_json::from_value(json).expect("a CRD deserializes")
}

/// File name of a CRD in `crds/`: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// One CRD as the YAML document that `etcd-operator crd` prints and `crds/` holds.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(crd)
}

/// All CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&crd_yaml(&crd)?);
    }
    Ok(out)
}
