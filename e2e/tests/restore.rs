//! EtcdRestore end to end, with the operator installed by the chart and snapshots in moto (S3)
//! and Azurite (Azure Blob) on the local cluster's bridge: a corrupt snapshot is refused with
//! the cluster untouched; a good one replaces the cluster's data, with the operator killed once
//! in the middle, keeps a pre-restore snapshot of what was there, and never lets the revision
//! go back; a second restore meanwhile is refused; the EtcdCluster's spec is never changed.
//! The manifests are coreos-style. The Azure Blob backup is stored compressed (zstd), and its
//! restore decompresses it on the way to the seed.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::backups::{
    abs_secret, manifest, s3_spec, setup, sha256_hex, snapshot_status, status, store_host,
    until_failed, until_status,
};
use e2e::stores::{Azurite, Moto};
use e2e::{Kubectl, get, healthy_at_size, put_keys, until};
use serde_json::{Value, json};

const BUCKET: &str = "etcd-restores";

/// The client URL of one of `cluster`'s members, by pod IP.
fn endpoint(k: &Kubectl, ns: &str, cluster: &str) -> String {
    format!("http://{}:2379", e2e::member_ip(k, ns, cluster))
}

/// The number of keys under `prefix`, and the revision they were read at.
fn count(endpoint: &str, prefix: &str) -> (usize, i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let r = c
            .get(
                prefix,
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap();
        (
            usize::try_from(r.count()).unwrap(),
            r.header().unwrap().revision(),
        )
    })
}

fn apply(k: &Kubectl, ns: &str, manifest: &str) {
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(manifest));
}

fn restore_spec(storage: &str, section: Value) -> Value {
    let key = storage.to_lowercase();
    json!({"etcdCluster": {"name": "example"}, "backupStorageType": storage, key: section})
}

/// Reasons of the Events in `ns` about `kind`/`name`.
fn events(k: &Kubectl, ns: &str, kind: &str, name: &str) -> Vec<String> {
    let list = get(k, ns, "events.events.k8s.io");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

#[test]
fn a_restore_replaces_the_data_keeps_what_was_there_and_survives_an_operator_restart() {
    let k = Kubectl::from_env();
    let (moto, namespace, operator) = setup(&k, "restore", BUCKET, 3);
    let ns = namespace.name.as_str();
    let spec_before = get(&k, ns, "etcdcluster/example")["spec"].clone();

    // 10,000 keys, a backup of them, then 500 more.
    put_keys(&endpoint(&k, ns, "example"), "key", 10_000);
    apply(
        &k,
        ns,
        &manifest(
            "EtcdBackup",
            "before",
            json!({"clusterName": "example", "storageType": "S3",
                "s3": s3_spec(&moto, BUCKET, "etcd/before.db", "aws")}),
        ),
    );
    until_status(&k, ns, "etcdbackup/before", 120, |s| s["succeeded"] == true);
    put_keys(&endpoint(&k, ns, "example"), "later", 500);
    let (_, revision_before) = count(&endpoint(&k, ns, "example"), "key");
    let pods_before = e2e::pod_names(&k, ns, "example");

    // 1. A corrupt copy: refused before anything is touched.
    let mut object = moto.curl(&[], &format!("/{BUCKET}/etcd/before.db"));
    object[4096] ^= 0xff;
    let corrupt = std::env::temp_dir().join(format!("corrupt-{ns}.db"));
    std::fs::write(&corrupt, &object).unwrap();
    moto.curl(
        &["-T", corrupt.to_str().unwrap()],
        &format!("/{BUCKET}/etcd/corrupt.db"),
    );
    let _ = std::fs::remove_file(&corrupt);
    apply(
        &k,
        ns,
        &manifest(
            "EtcdRestore",
            "corrupt",
            restore_spec("S3", s3_spec(&moto, BUCKET, "etcd/corrupt.db", "aws")),
        ),
    );
    until_failed(&k, ns, "etcdrestore/corrupt", 120, "is corrupt");
    assert_eq!(e2e::pod_names(&k, ns, "example"), pods_before);
    assert_eq!(count(&endpoint(&k, ns, "example"), "later").0, 500);
    assert!(moto.keys(BUCKET, "etcd/corrupt.db.pre-restore").is_empty());
    k.ok(&["delete", "etcdrestore/corrupt", "-n", ns], None);

    // 2. The backup, restored; the operator killed once as soon as the restore is handed over.
    apply(
        &k,
        ns,
        &manifest(
            "EtcdRestore",
            "example",
            restore_spec("S3", s3_spec(&moto, BUCKET, "etcd/before.db", "aws")),
        ),
    );
    until_status(&k, ns, "etcdrestore/example", 180, |s| {
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Restoring"
    });
    // The token that fetches the snapshot is in a Secret: the hand-off names its sha256 alone.
    let annotation = get(&k, ns, "etcdcluster/example")["metadata"]["annotations"]
        ["etcd.database.coreos.com/restore"]
        .as_str()
        .unwrap()
        .to_string();
    let handoff: Value = serde_json::from_str(&annotation).unwrap();
    assert!(handoff.get("token").is_none(), "{handoff}");
    assert_eq!(
        handoff["tokenSha256"].as_str().map(str::len),
        Some(64),
        "{handoff}"
    );
    assert!(
        k.run(&["get", "secret/example-restore-token", "-n", ns], None)
            .status
            .success()
    );
    operator.kill();
    // A second restore of the same cluster meanwhile is refused, naming the first.
    apply(
        &k,
        ns,
        &manifest(
            "EtcdRestore",
            "second",
            restore_spec("S3", s3_spec(&moto, BUCKET, "etcd/before.db", "aws")),
        ),
    );
    until_failed(
        &k,
        ns,
        "etcdrestore/second",
        120,
        "is being restored by EtcdRestore example",
    );
    until_status(&k, ns, "etcdrestore/example", 300, |s| {
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Completed"
    });
    let s = status(&k, ns, "etcdrestore/example");
    assert_eq!(s["succeeded"], true, "{s}");
    assert!(healthy_at_size(&k, ns, "example", 3));
    // The seed serves: its token is gone, and no pod's spec ever held it.
    assert!(
        !k.run(&["get", "secret/example-restore-token", "-n", ns], None)
            .status
            .success()
    );
    let pods = get(&k, ns, "pods").to_string();
    assert!(!pods.contains("--token="), "a pod's spec holds a token");
    let ep = endpoint(&k, ns, "example");
    let (keys, revision_after) = count(&ep, "key");
    assert_eq!(keys, 10_000, "exactly the backed-up keys");
    assert_eq!(count(&ep, "later").0, 0, "nothing written after the backup");
    assert!(
        revision_after > revision_before,
        "the revision went back: {revision_before} -> {revision_after}"
    );
    assert!(
        s["restoredRevision"].as_i64().unwrap() > revision_before,
        "{s}"
    );
    assert!(
        e2e::pod_names(&k, ns, "example")
            .iter()
            .all(|p| !pods_before.contains(p))
    );
    let backup = status(&k, ns, "etcdbackup/before");
    assert_eq!(s["sha256"], backup["sha256"], "{s}");

    // What was there is kept, with the later keys in it.
    let pre = s["preRestorePath"].as_str().unwrap().to_string();
    let key = pre.strip_prefix(&format!("{BUCKET}/")).unwrap();
    assert!(key.starts_with("etcd/before.db.pre-restore-"), "{pre}");
    let object = moto.curl(&[], &format!("/{BUCKET}/{key}"));
    let file = std::env::temp_dir().join(format!("pre-restore-{ns}.db"));
    std::fs::write(&file, &object).unwrap();
    let snap = snapshot_status(&file);
    let _ = std::fs::remove_file(&file);
    assert!(snap["totalKey"].as_u64().unwrap() >= 10_500, "{snap}");
    assert!(
        snap["revision"].as_i64().unwrap() >= revision_before,
        "{snap}"
    );
    assert_eq!(
        moto.metadata(BUCKET, key, "sha256").as_deref(),
        Some(sha256_hex(&object).as_str())
    );

    // The EtcdCluster: its spec as it was, the hand-off annotation gone, Events on both.
    let cluster = get(&k, ns, "etcdcluster/example");
    assert_eq!(cluster["spec"], spec_before);
    assert!(
        cluster["metadata"]["annotations"]
            .get("etcd.database.coreos.com/restore")
            .is_none(),
        "{cluster}"
    );
    for (kind, name) in [("EtcdRestore", "example"), ("EtcdCluster", "example")] {
        let reasons = events(&k, ns, kind, name);
        assert!(
            reasons.iter().any(|r| r == "RestoreCompleted"),
            "{kind} {name}: {reasons:?}"
        );
    }
}

#[test]
fn a_restore_from_azure_blob() {
    let k = Kubectl::from_env();
    let (_moto, namespace, _operator): (Moto, _, _) = setup(&k, "restore-abs", BUCKET, 1);
    let ns = namespace.name.as_str();
    let azurite = Azurite::start(&store_host());
    azurite.create_container("etcd-restores");
    abs_secret(&k, ns, &azurite);
    let abs = json!({"path": "etcd-restores/etcd/abs.db", "absSecret": "abs"});
    put_keys(&endpoint(&k, ns, "example"), "key", 300);
    apply(
        &k,
        ns,
        &manifest(
            "EtcdBackup",
            "to-abs",
            json!({"clusterName": "example", "storageType": "ABS", "abs": abs,
                   "compression": {"algorithm": "zstd", "level": 3}}),
        ),
    );
    until_status(&k, ns, "etcdbackup/to-abs", 120, |s| s["succeeded"] == true);
    // Stored compressed: the object is smaller than the snapshot it holds.
    let stored = status(&k, ns, "etcdbackup/to-abs");
    assert!(
        stored["size"].as_i64().unwrap() < stored["snapshotSize"].as_i64().unwrap(),
        "{stored}"
    );
    put_keys(&endpoint(&k, ns, "example"), "later", 50);

    // Bad input first, each answered by name, the cluster untouched: a snapshot that does not
    // exist, a Secret that does not exist, a cluster that does not exist (waited for).
    let pods_before = e2e::pod_names(&k, ns, "example");
    let missing = json!({"path": "etcd-restores/etcd/none.db", "absSecret": "abs"});
    apply(
        &k,
        ns,
        &manifest("EtcdRestore", "missing", restore_spec("ABS", missing)),
    );
    let no_secret = json!({"path": "etcd-restores/etcd/abs.db", "absSecret": "nope"});
    apply(
        &k,
        ns,
        &manifest("EtcdRestore", "no-secret", restore_spec("ABS", no_secret)),
    );
    let mut ghost = restore_spec("ABS", abs.clone());
    ghost["etcdCluster"]["name"] = json!("ghost");
    apply(&k, ns, &manifest("EtcdRestore", "ghost", ghost));
    until_failed(
        &k,
        ns,
        "etcdrestore/missing",
        60,
        "abs://etcd-restores/etcd/none.db does not exist",
    );
    until_failed(
        &k,
        ns,
        "etcdrestore/no-secret",
        60,
        "abs.absSecret: Secret nope does not exist",
    );
    until_status(&k, ns, "etcdrestore/ghost", 60, |s| {
        s["phase"] == "Pending"
            && s["conditions"][0]["reason"] == "ClusterNotFound"
            && s["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("EtcdCluster ghost does not exist"))
    });
    for name in ["missing", "no-secret", "ghost"] {
        k.ok(&["delete", &format!("etcdrestore/{name}"), "-n", ns], None);
    }
    assert_eq!(e2e::pod_names(&k, ns, "example"), pods_before);
    assert_eq!(count(&endpoint(&k, ns, "example"), "later").0, 50);

    apply(
        &k,
        ns,
        &manifest("EtcdRestore", "example", restore_spec("ABS", abs)),
    );
    // Deleted once it is handed to the cluster: its finalizer keeps it (the seed reads the
    // snapshot's location from it) until the cluster runs from the snapshot, then it goes.
    until_status(&k, ns, "etcdrestore/example", 300, |s| {
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Restoring"
    });
    let s = status(&k, ns, "etcdrestore/example");
    k.ok(
        &["delete", "etcdrestore/example", "-n", ns, "--wait=false"],
        None,
    );
    until(
        "the deleted EtcdRestore gone once its restore completed",
        300,
        || {
            !k.run(&["get", "etcdrestore/example", "-n", ns], None)
                .status
                .success()
        },
    );
    let completed = events(&k, ns, "EtcdCluster", "example");
    assert!(
        completed.iter().any(|e| e == "RestoreCompleted"),
        "{completed:?}"
    );
    until("healthy at size 1", 60, || {
        healthy_at_size(&k, ns, "example", 1)
    });
    let ep = endpoint(&k, ns, "example");
    assert_eq!(count(&ep, "key").0, 300);
    assert_eq!(count(&ep, "later").0, 0);
    assert!(
        s["preRestorePath"]
            .as_str()
            .is_some_and(|p| p.starts_with("etcd-restores/etcd/abs.db.pre-restore-")),
        "{s}"
    );
    assert_eq!(azurite.blobs("etcd-restores", "etcd/").len(), 2);

    // The same backup again through `kubectl etcd restore` (the plugin, found by kubectl on the
    // PATH; --yes as a script would): keys written since are gone, the backup's are there.
    put_keys(&ep, "since", 20);
    let dir = e2e::repo_root().join("target/debug");
    let out = k.plugin_ok(
        &dir,
        &[
            "etcd", "restore", "example", "-n", ns, "--from", "to-abs", "--yes",
        ],
    );
    assert!(out.contains("completed: restored revision"), "{out}");
    until("healthy at size 1", 60, || {
        healthy_at_size(&k, ns, "example", 1)
    });
    let ep = endpoint(&k, ns, "example");
    assert_eq!(count(&ep, "key").0, 300);
    assert_eq!(count(&ep, "since").0, 0);
    println!("kubectl etcd restore:\n{out}");
}
