//! Continuous backup and point-in-time restore end to end (issue 29), with the operator
//! installed by the chart and the archive in moto's S3 on the local cluster's bridge: a
//! periodic EtcdBackup with `backupPolicy.continuous` archives every change while a client
//! puts, overwrites and deletes keys, the operator killed once in the middle; the operator kept
//! away while etcd compacts past the archive makes it report the gap and take a full snapshot;
//! the cluster is destroyed (the EtcdCluster and every member deleted) and made again, then
//! restored to the last archived revision, to a revision in the middle and to a moment in the
//! middle (through `kubectl etcd restore --to-time`): each time exactly etcd's own key space at that point, read from the old cluster
//! with `get --rev` before it went, and a revision above every one the old cluster handed out.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::backups::{manifest, s3_spec, setup, status, until_status};
use e2e::{Kubectl, get, healthy_at_size, until};
use serde_json::json;

const BUCKET: &str = "etcd-archive";
const PATH: &str = "etcd/archived";

type KeySpace = BTreeMap<Vec<u8>, Vec<u8>>;

fn endpoint(k: &Kubectl, ns: &str) -> String {
    format!("http://{}:2379", e2e::member_ip(k, ns, "example"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// Every key and value at `revision` (0: now), with the answer's revision.
fn key_space(endpoint: &str, revision: i64) -> (KeySpace, i64) {
    runtime().block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let mut options = etcd_client::GetOptions::new().with_all_keys();
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let got = c.get(vec![0u8], Some(options)).await.unwrap();
        let kvs = got
            .kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
            .collect();
        (kvs, got.header().unwrap().revision())
    })
}

/// `n` writes on 50 keys (puts, overwrites, deletes), each acknowledged; the revision of the
/// last.
fn write(endpoint: &str, round: usize, n: usize) -> i64 {
    runtime().block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let mut last = 0;
        for i in 0..n {
            let key = format!("key-{:02}", (i * 7 + round * 3) % 50);
            last = if i % 4 == 3 {
                let r = c.delete(key, None).await.unwrap();
                r.header().unwrap().revision()
            } else {
                let r = c.put(key, format!("r{round}-{i}"), None).await.unwrap();
                r.header().unwrap().revision()
            };
        }
        last
    })
}

fn archived_revision(k: &Kubectl, ns: &str) -> i64 {
    status(k, ns, "etcdbackup/archived")["archive"]["lastRevision"]
        .as_i64()
        .unwrap_or(0)
}

fn restore(k: &Kubectl, ns: &str, name: &str, to: serde_json::Value, moto: &e2e::stores::Moto) {
    let restore = manifest(
        "EtcdRestore",
        name,
        json!({"etcdCluster": {"name": "example"}, "backupStorageType": "S3",
            "s3": s3_spec(moto, BUCKET, PATH, "aws"), "restoreTo": to}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&restore));
    until_status(k, ns, &format!("etcdrestore/{name}"), 300, |s| {
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Completed"
    });
    assert!(healthy_at_size(k, ns, "example", 3));
}

/// `kubectl etcd restore example --from archived --to-time T --yes` (the plugin, found by
/// kubectl on the PATH), waited for to Completed; the EtcdRestore it made.
fn plugin_restore(k: &Kubectl, ns: &str, time: &str) -> String {
    let dir = e2e::repo_root().join("target/debug");
    assert!(
        dir.join("kubectl-etcd").exists(),
        "target/debug/kubectl-etcd is missing: cargo build -p kubectl-etcd (make e2e does)"
    );
    let status = k.plugin_ok(&dir, &["etcd", "status", "example", "-n", ns]);
    assert!(status.contains("Archive: archived, revisions"), "{status}");
    let out = k.plugin_ok(
        &dir,
        &[
            "etcd",
            "restore",
            "example",
            "-n",
            ns,
            "--from",
            "archived",
            "--to-time",
            time,
            "--yes",
        ],
    );
    assert!(out.contains("completed"), "{out}");
    out.split_whitespace()
        .skip_while(|w| *w != "EtcdRestore")
        .nth(1)
        .unwrap()
        .trim_end_matches(':')
        .to_string()
}

#[test]
fn a_destroyed_cluster_comes_back_at_any_revision_or_moment_its_archive_holds() {
    let k = Kubectl::from_env();
    let (moto, namespace, operator) = setup(&k, "continuous", BUCKET, 3);
    let ns = namespace.name.as_str();
    write(&endpoint(&k, ns), 0, 100);

    // A periodic backup (one full snapshot an hour) archiving every change, flushed each second.
    let backup = manifest(
        "EtcdBackup",
        "archived",
        json!({"clusterName": "example", "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, PATH, "aws"),
            "backupPolicy": {"backupIntervalInSecond": 3600,
                "continuous": {"flushInterval": "1s"}}}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(&k, ns, "etcdbackup/archived", 120, |s| {
        s["succeeded"] == true
    });
    let snapshot_revision = status(&k, ns, "etcdbackup/archived")["etcdRevision"]
        .as_i64()
        .unwrap();
    until("archiving to start", 60, || {
        archived_revision(&k, ns) >= snapshot_revision
    });

    // Writes, the operator killed in the middle of them, more writes.
    let middle_revision = write(&endpoint(&k, ns), 1, 300);
    std::thread::sleep(Duration::from_secs(2));
    let middle_time = k8s_openapi::jiff::Timestamp::now();
    std::thread::sleep(Duration::from_secs(2));
    write(&endpoint(&k, ns), 2, 150);
    operator.kill();
    let last_revision = write(&endpoint(&k, ns), 3, 150);
    let started = Instant::now();
    until("the archive to hold every acknowledged write", 120, || {
        archived_revision(&k, ns) >= last_revision
    });
    eprintln!(
        "archived up to revision {last_revision} {:?} after the last write (operator killed once)",
        started.elapsed()
    );
    let old = endpoint(&k, ns);
    let at_middle = key_space(&old, middle_revision).0;
    let at_last = key_space(&old, last_revision).0;
    assert!(!at_middle.is_empty() && at_middle != at_last);

    // The operator away while etcd compacts past the archive: the gap is reported and a full
    // snapshot taken at once.
    let scale = |n: &str| {
        k.ok(
            &[
                "scale",
                "deployment/etcd-operator",
                "-n",
                ns,
                "--replicas",
                n,
            ],
            None,
        )
    };
    scale("0");
    until("the operator to stop", 60, || operator.pods().is_empty());
    let lost = write(&old, 4, 50);
    runtime().block_on(async {
        let mut c = etcd_client::Client::connect([old.as_str()], None)
            .await
            .unwrap();
        c.compact(lost, None).await.unwrap();
    });
    scale("1");
    operator.wait_ready(1);
    until_status(&k, ns, "etcdbackup/archived", 120, |s| {
        s["archive"]["lastGap"]["to"].as_i64() == Some(lost - 1)
            && s["etcdRevision"].as_i64().unwrap_or(0) >= lost
    });
    assert!(
        e2e::event_count(&k, ns, "archived", "ArchiveGap") >= 1,
        "an ArchiveGap Event"
    );
    let highest = write(&old, 5, 20);
    until("archiving after the gap", 60, || {
        archived_revision(&k, ns) >= highest
    });

    // The cluster destroyed: the EtcdCluster and every member go; an empty one is made again.
    let cluster = get(&k, ns, "etcdcluster/example");
    k.ok(
        &["delete", "etcdcluster/example", "-n", ns, "--wait=true"],
        None,
    );
    until("every member to go", 120, || {
        e2e::pod_names(&k, ns, "example").is_empty()
    });
    let again = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": cluster["spec"]});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&again.to_string()));
    until("3 healthy members, empty", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });

    // Back to the last revision before the gap, to the middle revision, then to the middle
    // moment through `kubectl etcd restore --to-time`.
    for (name, to, expected, target) in [
        (
            "to-last",
            json!({"revision": last_revision}),
            &at_last,
            last_revision,
        ),
        (
            "to-middle",
            json!({"revision": middle_revision}),
            &at_middle,
            middle_revision,
        ),
        (
            "",
            json!({"time": middle_time.to_string()}),
            &at_middle,
            middle_revision,
        ),
    ] {
        let name = if name.is_empty() {
            plugin_restore(&k, ns, &middle_time.to_string())
        } else {
            restore(&k, ns, name, to, &moto);
            name.to_string()
        };
        let s = status(&k, ns, &format!("etcdrestore/{name}"));
        assert_eq!(s["targetRevision"], json!(target), "{s}");
        let (restored, revision) = key_space(&endpoint(&k, ns), 0);
        eprintln!("{name}: {} keys at revision {revision}", restored.len());
        assert!(&restored == expected, "{name}: {s}");
        assert!(
            revision > highest,
            "{name}: revision {revision} passes the old cluster's {highest}"
        );
    }
    drop(operator);
}
