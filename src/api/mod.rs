//! The v1beta2 API (`etcd.database.coreos.com`) as Rust types. No I/O here.

pub mod backup;
pub mod cluster;
pub mod common;
pub mod restore;
pub mod validation;

pub use backup::{BackupPhase, BackupPolicy, EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
pub use cluster::{
    ClusterPhase, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, MemberRole, MemberSecret,
    MemberStatus, MembersStatus, PodPolicy, StaticTls, TlsPolicy,
};
pub use common::{AbsSource, Condition, GcsSource, OssSource, S3Source, StorageType};
pub use restore::{EtcdClusterRef, EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus, RestorePhase};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The CRDs of the three kinds, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![EtcdCluster::crd(), EtcdBackup::crd(), EtcdRestore::crd()]
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
