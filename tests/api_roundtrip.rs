//! Manifests in the coreos style, the source documents' EtcdCluster and every file in
//! `examples/` read into the Rust types and serialize back with the same field names and values.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use etcd_operator::api::{
    ClusterPhase, EtcdBackup, EtcdCluster, EtcdRestore, MemberSecret, StorageType,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn read_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Deserializes `doc` as `T`, serializes it back and demands the same JSON: a field the types do
/// not know, or know under another name, shows up as a difference.
fn round_trip<T: Serialize + DeserializeOwned>(doc: &Value, origin: &str) -> T {
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{origin}: does not deserialize: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back,
        doc,
        "{origin}: serialized form differs\nexpected: {}\n     got: {}",
        serde_json::to_string_pretty(doc).unwrap(),
        serde_json::to_string_pretty(&back).unwrap()
    );
    typed
}

fn round_trip_any(doc: &Value, origin: &str) -> &'static str {
    // What a scheduled backup needs besides (examples/backup-cronjob.yaml): Kubernetes' own
    // kinds, read into their types.
    fn builtin<T: serde::de::DeserializeOwned>(doc: &Value, origin: &str) {
        serde_json::from_value::<T>(doc.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));
    }
    use k8s_openapi::api::{batch::v1::CronJob, core::v1::ServiceAccount, rbac::v1};
    match (doc["apiVersion"].as_str(), doc["kind"].as_str()) {
        (Some("v1"), Some("ServiceAccount")) => {
            builtin::<ServiceAccount>(doc, origin);
            return "ServiceAccount";
        }
        (Some("rbac.authorization.k8s.io/v1"), Some("Role")) => {
            builtin::<v1::Role>(doc, origin);
            return "Role";
        }
        (Some("rbac.authorization.k8s.io/v1"), Some("RoleBinding")) => {
            builtin::<v1::RoleBinding>(doc, origin);
            return "RoleBinding";
        }
        (Some("batch/v1"), Some("CronJob")) => {
            builtin::<CronJob>(doc, origin);
            return "CronJob";
        }
        _ => {}
    }
    assert_eq!(
        doc["apiVersion"], "etcd.database.coreos.com/v1beta2",
        "{origin}"
    );
    match doc["kind"].as_str() {
        Some("EtcdCluster") => {
            round_trip::<EtcdCluster>(doc, origin);
            "EtcdCluster"
        }
        Some("EtcdBackup") => {
            round_trip::<EtcdBackup>(doc, origin);
            "EtcdBackup"
        }
        Some("EtcdRestore") => {
            round_trip::<EtcdRestore>(doc, origin);
            "EtcdRestore"
        }
        other => panic!("{origin}: unexpected kind {other:?}"),
    }
}

fn fixture(name: &str) -> Vec<Value> {
    read_docs(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
}

#[test]
fn source_document_cluster_reads_back() {
    let docs = fixture("source-document-cluster.yaml");
    let c: EtcdCluster = round_trip(&docs[0], "source document");
    assert_eq!(c.spec.size, 3);
    assert_eq!(c.spec.version(), "3.2.13");
    assert_eq!(c.spec.image(), "quay.io/coreos/etcd:v3.2.13");
    assert_eq!(c.metadata.name.as_deref(), Some("example-etcd-cluster"));
}

#[test]
fn coreos_cluster_with_every_field_reads_back() {
    let docs = fixture("coreos-cluster-full.yaml");
    let c: EtcdCluster = round_trip(&docs[0], "coreos cluster");
    let pod = c.spec.pod.as_ref().unwrap();
    assert_eq!(pod.dns_timeout_in_second, Some(60));
    assert_eq!(pod.cluster_domain.as_deref(), Some(".cluster.local"));
    assert_eq!(pod.anti_affinity, Some(true));
    assert_eq!(pod.etcd_env.len(), 2);
    let pvc = pod.persistent_volume_claim_spec.as_ref().unwrap();
    assert_eq!(pvc.storage_class_name.as_deref(), Some("fast"));
    let tls = c.spec.tls.as_ref().unwrap().static_.as_ref().unwrap();
    assert_eq!(
        tls.member,
        Some(MemberSecret {
            peer_secret: Some("etcd-peer-tls".into()),
            server_secret: Some("etcd-server-tls".into()),
        })
    );
    assert_eq!(c.spec.version(), "3.4.23", "a leading v is stripped");
    let status = c.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(ClusterPhase::Running));
    assert_eq!(status.members.unready.len(), 2);
    // The odd coreos spellings survive serialization.
    let json = serde_json::to_value(&c).unwrap();
    assert!(json["spec"]["TLS"]["static"]["operatorSecret"].is_string());
    assert_eq!(json["spec"]["pod"]["DNSTimeoutInSecond"], 60);
    assert_eq!(json["spec"]["pod"]["ClusterDomain"], ".cluster.local");
}

#[test]
fn coreos_backup_and_restore_read_back() {
    let b: EtcdBackup = round_trip(&fixture("coreos-backup-s3.yaml")[0], "coreos backup");
    assert_eq!(b.spec.storage_type, StorageType::S3);
    assert_eq!(b.spec.client_tls_secret.as_deref(), Some("etcd-client-tls"));
    let policy = b.spec.backup_policy.as_ref().unwrap();
    assert_eq!(policy.backup_interval_in_second, Some(600));
    assert_eq!(policy.max_backups, Some(5));
    let s3 = b.spec.s3.as_ref().unwrap();
    assert_eq!(s3.force_path_style, Some(false));
    let status = b.status.as_ref().unwrap();
    assert!(
        status.reason.contains("deadline"),
        "status.Reason keeps its capital R"
    );
    assert_eq!(status.etcd_revision, Some(1045));
    assert!(serde_json::to_value(&b).unwrap()["status"]["Reason"].is_string());

    let r: EtcdRestore = round_trip(&fixture("coreos-restore-s3.yaml")[0], "coreos restore");
    assert_eq!(r.spec.etcd_cluster.name, "coreos-full");
    assert_eq!(r.spec.backup_storage_type, StorageType::S3);
    assert!(r.status.unwrap().succeeded);

    let kinds: Vec<StorageType> = fixture("coreos-backup-abs-gcs-oss.yaml")
        .iter()
        .map(|d| {
            round_trip::<EtcdBackup>(d, "coreos backup (abs/gcs/oss)")
                .spec
                .storage_type
        })
        .collect();
    assert_eq!(
        kinds,
        [StorageType::Abs, StorageType::Gcs, StorageType::Oss]
    );
}

#[test]
fn every_example_reads_back() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut kinds = Vec::new();
    for file in &files {
        for doc in read_docs(file) {
            kinds.push(round_trip_any(&doc, &file.display().to_string()));
        }
    }
    for kind in ["EtcdCluster", "EtcdBackup", "EtcdRestore", "CronJob"] {
        assert!(kinds.contains(&kind), "examples/ has no {kind}");
    }
    assert!(files.len() >= 6, "examples/ lost files: {files:?}");
}
