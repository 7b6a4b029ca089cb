//! EtcdBackup end to end: the operator (installed by the chart, in a pod) snapshots a cluster
//! into moto's S3 server and Azurite's Azure Blob server, which the test starts on the local
//! cluster's bridge address so that pods reach them (`$E2E_S3_HOST`, default 10.244.0.1, the
//! bridge of hack/cluster.sh). The manifests are coreos-style; only the endpoint and the Secret
//! are ours.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use e2e::backups::{
    abs_secret, manifest, s3_spec, setup, sha256_hex, snapshot_status, status, store_host,
    until_failed, until_status,
};
use e2e::stores::{Azurite, Moto};
use e2e::{Kubectl, get, until};
use serde_json::json;

const BUCKET: &str = "etcd-backups";

/// Puts `n` keys through a member's JSON gateway, from this host: all of them, however long a
/// loaded machine takes (a fixed 2 s of writing once gave 189 of 200 with other tests running
/// beside this one).
fn put_keys(k: &Kubectl, ns: &str, cluster: &str, n: u64) {
    let endpoint = format!("http://{}:2379", e2e::member_ip(k, ns, cluster));
    for key in 0..n {
        let mut tries = 0;
        while let Err(e) = e2e::write_once(&endpoint, key) {
            tries += 1;
            assert!(tries < 5, "key {key} of {n} not written: {e}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn backups_to_s3_and_abs_one_shot_periodic_with_retention_and_failures_named() {
    let k = Kubectl::from_env();
    let (moto, namespace, operator) = setup(&k, "backup", BUCKET, 3);
    let ns = namespace.name.as_str();
    put_keys(&k, ns, "example", 200);

    // 1. One-shot, by clusterName: the object is etcd's snapshot, its hash the status's.
    let one = manifest(
        "EtcdBackup",
        "one-shot",
        json!({"clusterName": "example", "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, "etcd/one-shot.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&one));
    until_status(&k, ns, "etcdbackup/one-shot", 120, |s| {
        s["succeeded"] == true
    });
    let s = status(&k, ns, "etcdbackup/one-shot");
    assert_eq!(s["phase"], "Succeeded", "{s}");
    assert_eq!(s["path"], format!("{BUCKET}/etcd/one-shot.db"));
    let object = moto.curl(&[], &format!("/{BUCKET}/etcd/one-shot.db"));
    assert_eq!(s["size"], json!(object.len()));
    assert_eq!(s["sha256"], sha256_hex(&object), "{s}");
    // The metadata follows the status (a copy of the object onto itself, after Succeeded).
    until("the object's sha256 metadata", 30, || {
        moto.metadata(BUCKET, "etcd/one-shot.db", "sha256")
            .as_deref()
            == s["sha256"].as_str()
    });
    let file = std::env::temp_dir().join(format!("one-shot-{ns}.db"));
    std::fs::write(&file, &object).unwrap();
    let snap = snapshot_status(&file);
    let _ = std::fs::remove_file(&file);
    assert!(snap["totalKey"].as_u64().unwrap() >= 200, "{snap}");
    assert_eq!(snap["revision"], s["etcdRevision"], "{snap} vs {s}");
    assert!(
        s["etcdVersion"].as_str().unwrap().starts_with("3.6."),
        "{s}"
    );

    // The same to Azure Blob: a coreos ABS manifest and Secret, plus our storage-endpoint.
    let azurite = Azurite::start(&store_host());
    azurite.create_container("etcd-backups");
    abs_secret(&k, ns, &azurite);
    let abs = manifest(
        "EtcdBackup",
        "to-abs",
        json!({"clusterName": "example", "storageType": "ABS",
            "abs": {"path": "etcd-backups/etcd/one-shot.db", "absSecret": "abs"}}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&abs));
    until_status(&k, ns, "etcdbackup/to-abs", 120, |s| s["succeeded"] == true);
    let s = status(&k, ns, "etcdbackup/to-abs");
    let file = std::env::temp_dir().join(format!("to-abs-{ns}.db"));
    // The metadata follows the status (Set Blob Metadata, after Succeeded).
    let mut blob = serde_json::Value::Null;
    until("the blob's sha256 metadata", 30, || {
        blob = azurite.get("etcd-backups", "etcd/one-shot.db", &file);
        blob["metadata"]["sha256"] == s["sha256"]
    });
    let object = std::fs::read(&file).unwrap();
    let snap = snapshot_status(&file);
    let _ = std::fs::remove_file(&file);
    assert_eq!(s["sha256"], sha256_hex(&object), "{s}");
    assert_eq!(
        blob["metadata"]["sha256"],
        s["sha256"],
        "{blob}; the operator:\n{}",
        operator.logs()
    );
    assert_eq!(blob["size"], s["size"], "{blob}");
    assert_eq!(snap["revision"], s["etcdRevision"], "{snap} vs {s}");

    // 2. Periodic every 2 s keeping 3: at least 5 taken, exactly the newest 3 kept.
    let periodic = manifest(
        "EtcdBackup",
        "periodic",
        json!({"clusterName": "example", "storageType": "S3",
            "backupPolicy": {"backupIntervalInSecond": 2, "maxBackups": 3},
            "s3": s3_spec(&moto, BUCKET, "etcd/periodic", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&periodic));
    let mut seen = std::collections::BTreeSet::new();
    until("5 periodic backups", 120, || {
        if let Some(d) = status(&k, ns, "etcdbackup/periodic")["lastSuccessDate"].as_str() {
            seen.insert(d.to_string());
        }
        seen.len() >= 5
    });
    let kept = until("exactly 3 kept", 30, || {
        moto.keys(BUCKET, "etcd/periodic").len() == 3
    });
    let keys = moto.keys(BUCKET, "etcd/periodic");
    for key in &keys {
        let rest = key
            .strip_prefix("etcd/periodic_v")
            .unwrap_or_else(|| panic!("{key}"));
        let (revision, time) = rest.split_once('_').unwrap_or_else(|| panic!("{key}"));
        assert!(revision.parse::<u64>().is_ok() && time.len() == 19, "{key}");
    }
    eprintln!(
        "periodic: {} successes seen, kept {keys:?} ({kept:?})",
        seen.len()
    );
    // The one-shot object is not this backup's: never pruned.
    assert_eq!(moto.keys(BUCKET, "etcd/one-shot").len(), 1);

    // 3. A missing Secret and an unknown cluster: Failed, with a Reason that names them.
    let missing = manifest(
        "EtcdBackup",
        "missing-secret",
        json!({"clusterName": "example", "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, "etcd/x.db", "nope")}),
    );
    let ghost = manifest(
        "EtcdBackup",
        "unknown-cluster",
        json!({"clusterName": "ghost", "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, "etcd/y.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&missing));
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&ghost));
    until_failed(
        &k,
        ns,
        "etcdbackup/missing-secret",
        60,
        "s3.awsSecret: Secret nope does not exist",
    );
    until_failed(
        &k,
        ns,
        "etcdbackup/unknown-cluster",
        60,
        "EtcdCluster ghost does not exist",
    );
    assert!(moto.keys(BUCKET, "etcd/x.db").is_empty() && moto.keys(BUCKET, "etcd/y.db").is_empty());

    // Deleting an EtcdBackup never deletes its snapshots.
    k.ok(&["delete", "etcdbackup/one-shot", "-n", ns], None);
    assert_eq!(moto.keys(BUCKET, "etcd/one-shot").len(), 1);

    plugin_status_and_backup_now(&k, ns, &moto);
}

/// `kubectl etcd` (the plugin, found by kubectl on the PATH): the status names the members,
/// the leader and the last backup; a backup now, with no flags, takes the storage settings of
/// the cluster's newest succeeded EtcdBackup (here the periodic one) and waits for it.
fn plugin_status_and_backup_now(k: &Kubectl, ns: &str, moto: &Moto) {
    let dir = e2e::repo_root().join("target/debug");
    assert!(
        dir.join("kubectl-etcd").exists(),
        "target/debug/kubectl-etcd is missing: cargo build -p kubectl-etcd (make e2e does)"
    );
    let report: serde_json::Value = serde_json::from_str(
        &k.plugin_ok(&dir, &["etcd", "status", "example", "-n", ns, "-o", "json"]),
    )
    .unwrap();
    let members = report["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{report}");
    assert!(
        members
            .iter()
            .all(|m| m["healthy"] == true && m["podReady"] == true),
        "{report}"
    );
    assert!(
        report["leader"].is_string() && report["available"] == true,
        "{report}"
    );
    // A member's bytes in use come with its size, never beyond it.
    assert!(
        members
            .iter()
            .all(|m| m["dbSize"].as_i64().is_none_or(|size| m["dbSizeInUse"]
                .as_i64()
                .is_some_and(|used| used > 0 && used <= size))),
        "{report}"
    );
    assert!(report["lastBackup"]["path"].is_string(), "{report}");
    let out = k.plugin_ok(
        &dir,
        &[
            "etcd",
            "backup",
            "example",
            "-n",
            ns,
            "--backup-name",
            "now",
        ],
    );
    assert!(out.contains("succeeded: "), "{out}");
    let s = status(k, ns, "etcdbackup/now");
    let path = s["path"].as_str().unwrap();
    let key = path
        .strip_prefix(&format!("{BUCKET}/"))
        .unwrap_or_else(|| panic!("{path}"));
    assert!(key.starts_with("etcd/periodic_2"), "{path}");
    assert_eq!(moto.keys(BUCKET, key).len(), 1, "{path}");
    // To a path of one's choosing, without waiting: the command returns at once, the backup
    // goes on and writes exactly there.
    let quick = k.plugin_ok(
        &dir,
        &[
            "etcd",
            "backup",
            "example",
            "-n",
            ns,
            "--backup-name",
            "to-path",
            "--to",
            &format!("{BUCKET}/adhoc/to-path.db"),
            "--no-wait",
        ],
    );
    assert!(
        quick.contains("created EtcdBackup to-path") && !quick.contains("succeeded: "),
        "{quick}"
    );
    until_status(k, ns, "etcdbackup/to-path", 120, |s| s["succeeded"] == true);
    assert_eq!(
        status(k, ns, "etcdbackup/to-path")["path"],
        format!("{BUCKET}/adhoc/to-path.db")
    );
    assert_eq!(moto.keys(BUCKET, "adhoc/to-path.db").len(), 1);
    let text = k.plugin_ok(&dir, &["etcd", "status", "example", "-n", ns]);
    assert!(text.contains("Available, 3 of 3 members ready"), "{text}");
    println!("kubectl etcd status:\n{text}\nkubectl etcd backup:\n{out}");

    // etcdctl from a pod in the namespace, through the client Service.
    let list = k.plugin_ok(
        &dir,
        &[
            "etcd", "etcdctl", "example", "-n", ns, "--", "member", "list",
        ],
    );
    for m in members {
        let name = m["name"].as_str().unwrap();
        assert!(list.contains(name), "{name} not in {list}");
    }
    // Leadership moved to a follower, by its name.
    let follower = members
        .iter()
        .find(|m| m["role"] == "follower")
        .map(|m| (m["name"].as_str().unwrap(), m["id"].as_str().unwrap()))
        .unwrap();
    let moved = k.plugin_ok(
        &dir,
        &["etcd", "move-leader", "example", "-n", ns, follower.0],
    );
    plugin_report(k, ns, &dir, members);
    // Every voter defragmented now, by the operator, each printed as it is done.
    let defrag = k.plugin_ok(&dir, &["etcd", "defrag", "example", "-n", ns]);
    assert!(defrag.contains("every voter is defragmented"), "{defrag}");
    assert_eq!(defrag.matches("] defragmented ").count(), 3, "{defrag}");
    assert!(
        // etcdctl prints IDs in hex without leading zeros.
        moved.contains("Leadership transferred")
            && moved.contains(follower.1.trim_start_matches('0')),
        "{moved}"
    );
}

/// `kubectl etcd report`: a tarball with the cluster, every member's log and the operator's,
/// and the namespace's Secrets by key only (the aws Secret's credentials never in it).
fn plugin_report(k: &Kubectl, ns: &str, dir: &std::path::Path, members: &[serde_json::Value]) {
    let file = std::env::temp_dir().join(format!("report-{ns}.tar"));
    let out = k.plugin_ok(
        dir,
        &[
            "etcd",
            "report",
            "example",
            "-n",
            ns,
            "-f",
            file.to_str().unwrap(),
        ],
    );
    assert!(out.contains("wrote "), "{out}");
    let listing = Command::new("tar").arg("-tf").arg(&file).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    for m in members {
        let log = format!("example-report/logs/{}.log", m["name"].as_str().unwrap());
        assert!(listing.contains(&log), "{log} not in {listing}");
    }
    for f in [
        "etcdcluster.yaml",
        "pods.yaml",
        "events.yaml",
        "secrets-redacted.yaml",
    ] {
        assert!(
            listing.contains(&format!("example-report/{f}")),
            "{f} not in {listing}"
        );
    }
    let operators = k.ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "app.kubernetes.io/name=etcd-operator",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    );
    assert!(
        operators
            .split_whitespace()
            .any(|p| listing.contains(&format!("example-report/logs/{p}.log"))),
        "no log of the operator's pods ({operators}) in {listing}"
    );
    let tar = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&tar);
    assert!(
        text.contains("credentials") && text.contains("<redacted: "),
        "the aws Secret is not listed by key"
    );
    // Neither the value nor its base64 (as a Secret's data holds it).
    let encoded = k.ok(
        &[
            "get",
            "secret",
            "aws",
            "-n",
            ns,
            "-o",
            "jsonpath={.data.credentials}",
        ],
        None,
    );
    assert!(
        encoded.trim().len() > 20
            && !text.contains(encoded.trim())
            && !text.contains("aws_secret_access_key"),
        "a Secret's value is in the report"
    );
}

/// Times of this backup's periodic objects, parsed from their names, oldest first.
fn periodic_times(moto: &Moto, prefix: &str) -> Vec<i64> {
    let mut times: Vec<i64> = moto
        .keys(BUCKET, prefix)
        .iter()
        .filter_map(|k| {
            let time = k.rsplit_once('_')?.1;
            // 2006-01-02-15:04:05 -> seconds since the epoch, by date(1).
            let (day, clock) = time.split_at(10);
            let out = Command::new("date")
                .args(["-u", "-d", &format!("{day} {}", &clock[1..]), "+%s"])
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        })
        .collect();
    times.sort();
    times
}

#[test]
fn the_schedule_survives_an_operator_restart_and_lost_quorum_fails_clearly() {
    let k = Kubectl::from_env();
    let (moto, namespace, operator) = setup(&k, "backup-restart", BUCKET, 3);
    let ns = namespace.name.as_str();

    // 1. Every 10 s. The operator is killed (no grace) right after a success; its successor
    //    takes the next slot one interval after the last success in status: none skipped,
    //    none doubled.
    let prefix = format!("{ns}/hourly");
    let periodic = manifest(
        "EtcdBackup",
        "periodic",
        json!({"clusterName": "example", "storageType": "S3",
            "backupPolicy": {"backupIntervalInSecond": 10},
            "s3": s3_spec(&moto, BUCKET, &prefix, "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&periodic));
    until("the first periodic backup", 60, || {
        periodic_times(&moto, &prefix).len() == 1
    });
    operator.kill();
    until("two more periodic backups", 90, || {
        periodic_times(&moto, &prefix).len() >= 3
    });
    let times = periodic_times(&moto, &prefix);
    let gaps: Vec<i64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("periodic backups across an operator restart, gaps in seconds: {gaps:?}");
    assert!(
        gaps.iter().all(|g| (9..=19).contains(g)),
        "a slot was doubled or skipped across the restart: gaps {gaps:?}"
    );

    // 2. Without quorum: a one-shot backup fails at once with a Reason that says so, and
    //    writes nothing.
    let pods = e2e::pod_names(&k, ns, "example");
    k.ok(
        &[
            "delete",
            "pod",
            "-n",
            ns,
            &pods[0],
            &pods[1],
            "--wait=false",
        ],
        None,
    );
    // Lost, and seen as lost: the deleted pods gone and no member reported healthy (right after
    // the deletion the terminating members still serve, and a snapshot then is still a good one).
    // The operator may already have made a replacement pod for a deleted member before quorum
    // went (it replaces a deleted member at once), so the pods left are not counted, only the
    // deleted ones checked gone.
    until("quorum to be reported lost", 120, || {
        let c = get(&k, ns, "etcdcluster/example");
        let left = e2e::pod_names(&k, ns, "example");
        !left.contains(&pods[0])
            && !left.contains(&pods[1])
            && c["status"]["phase"] == "Failed"
            && c["status"]["memberStatuses"]
                .as_array()
                .is_some_and(|ms| ms.iter().all(|m| m["healthy"] != true))
    });
    let lost = manifest(
        "EtcdBackup",
        "without-quorum",
        json!({"clusterName": "example", "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, &format!("{ns}/lost.db"), "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&lost));
    until_failed(
        &k,
        ns,
        "etcdbackup/without-quorum",
        60,
        "EtcdCluster example has no healthy member",
    );
    assert!(moto.keys(BUCKET, &format!("{ns}/lost.db")).is_empty());
}
