//! Recovery from lost quorum on the local cluster: a 3-member cluster without volumes loses two
//! member pods for good (deleted at once, their data with them). With the default `Manual`
//! policy the status says what to do; the approval annotation rebuilds the cluster from the
//! survivor (the operator killed once in the middle), and every key acknowledged before the
//! loss is there. With `ForceNewCluster` and
//! `after: 0s` it happens without a human, timed; one pod lost (a majority left) is only ever
//! replaced, never recovered. With `RestoreLatestBackup`, a cluster whose every member is gone
//! comes back from its newest backup (in moto's S3), the revision above the old one: one found
//! by its name in the store `spec.recovery.backups` names, newer than the EtcdBackup that
//! remains.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use e2e::backups::{manifest, s3_spec, setup, until_status};
use e2e::{
    Keys, Kubectl, Operator, Writer, assert_acked_present, client_endpoint, condition, event_count,
    events, force_delete_pods, get, healthy_at_size, patch_spec, pod_names, put_cluster_id,
    revision, until, write_once,
};
use serde_json::{Value, json};

const ANNOTATION: &str = "etcd.database.coreos.com/recover";
const BUCKET: &str = "etcd-recoveries";

/// A 3-member cluster, healthy, with keys written and acknowledged (the writer stopped, so the
/// members have all applied them); returns the client endpoint and the keys.
fn three_with_data(k: &Kubectl, ns: &str, recovery: Value) -> (String, Vec<u64>) {
    let mut spec = json!({"size": 3, "version": "3.6.16"});
    if !recovery.is_null() {
        spec["recovery"] = recovery;
    }
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": spec});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
    until("3 healthy members", 300, || {
        healthy_at_size(k, ns, "example", 3)
    });
    let endpoint = client_endpoint(k, ns, "example");
    let tally = Writer::until_acked(&endpoint, 20, Duration::from_secs(60), Keys::Unique);
    assert!(
        tally.acked.len() >= 20,
        "too few writes in 60 s: {}",
        tally.acked.len()
    );
    // Every member applies what was committed within moments; the survivor then holds it all.
    std::thread::sleep(Duration::from_secs(2));
    (endpoint, tally.acked)
}

/// Deletes all member pods but the first, at once and without grace; returns the survivor.
fn lose_two(k: &Kubectl, ns: &str) -> String {
    let pods = pod_names(k, ns, "example");
    assert_eq!(pods.len(), 3, "{pods:?}");
    force_delete_pods(k, ns, &pods[1..]);
    pods[0].clone()
}

fn recovery_of(k: &Kubectl, ns: &str) -> Value {
    get(k, ns, "etcdcluster/example")["status"]["recovery"].clone()
}

/// After a rebuild from `survivor`: the record says so, the approval is gone, the cluster is
/// whole again and holds every key acknowledged before the loss.
fn check_recovered(k: &Kubectl, ns: &str, survivor: &str, endpoint: &str, acked: &[u64]) {
    until("back at 3 healthy members", 300, || {
        healthy_at_size(k, ns, "example", 3)
    });
    until("the recovery recorded as completed", 60, || {
        recovery_of(k, ns)["completed"] == true
    });
    let r = recovery_of(k, ns);
    assert_eq!(r["reason"], "ForceNewCluster", "{r}");
    assert_eq!(r["source"], survivor, "{r}");
    assert!(r["appliedIndex"].as_i64().unwrap_or(0) > 0, "{r}");
    let c = get(k, ns, "etcdcluster/example");
    assert_eq!(condition(&c, "Recovering"), "False", "{c}");
    assert!(
        c["metadata"]["annotations"][ANNOTATION].is_null(),
        "the approval stays: {c}"
    );
    assert!(
        !pod_names(k, ns, "example").contains(&survivor.to_string()),
        "the survivor's old pod was kept"
    );
    assert!(event_count(k, ns, "example", "Recovered") >= 1);
    assert_acked_present(endpoint, acked);
    write_once(endpoint, 2_000_001).unwrap();
}

#[test]
fn manual_reports_lost_quorum_and_the_approval_rebuilds_from_the_survivor() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("recover-manual");
    let ns = namespace.name.as_str();
    let operator = Operator::install(&k, ns, &[]);
    let (endpoint, acked) = three_with_data(&k, ns, Value::Null);
    let survivor = lose_two(&k, ns);

    until("Failed with what to do next", 120, || {
        let c = get(&k, ns, "etcdcluster/example");
        c["status"]["phase"] == "Failed"
            && c["status"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("recover=force-new-cluster") && r.contains(&survivor))
    });
    let lost = events(&k, ns, "example", "QuorumLost");
    assert!(
        lost.iter().any(|m| m.contains("recover=force-new-cluster")),
        "{lost:?}"
    );
    // Nothing is done without the approval.
    std::thread::sleep(Duration::from_secs(10));
    assert!(recovery_of(&k, ns).is_null());
    assert!(pod_names(&k, ns, "example").contains(&survivor));

    k.ok(
        &[
            "annotate",
            "-n",
            ns,
            "etcdcluster/example",
            &format!("{ANNOTATION}=force-new-cluster"),
        ],
        None,
    );
    let approved = Instant::now();
    // The operator killed as soon as the recovery is handed over: its successor carries it on
    // (the seed made again where the old one fetched from the dead replica), and the survivor
    // is kept until then.
    until("the recovery handed over", 60, || {
        !get(&k, ns, "etcdcluster/example")["metadata"]["annotations"]
            ["etcd.database.coreos.com/restore"]
            .is_null()
    });
    operator.kill();
    until("writes served again", 180, || {
        write_once(&endpoint, 2_000_000).is_ok()
    });
    println!(
        "approval → writes served again, the operator killed once in between: {:.1} s",
        approved.elapsed().as_secs_f64()
    );
    check_recovered(&k, ns, &survivor, &endpoint, &acked);
    assert_eq!(recovery_of(&k, ns)["approved"], true);
}

#[test]
fn force_new_cluster_recovers_without_a_human_and_never_while_a_majority_remains() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("recover-auto");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let policy = json!({"quorumLoss": "ForceNewCluster", "after": "0s"});
    let (endpoint, acked) = three_with_data(&k, ns, policy);

    // One pod lost: a majority remains, and the member is replaced, not recovered from.
    let victim = pod_names(&k, ns, "example")[2].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
    until("healthy at 3 without the deleted pod", 180, || {
        !pod_names(&k, ns, "example").contains(&victim) && healthy_at_size(&k, ns, "example", 3)
    });
    assert!(
        recovery_of(&k, ns).is_null(),
        "recovered while a majority answered"
    );
    let replaced = events(&k, ns, "example", "MemberReplaced");
    assert!(replaced.iter().any(|m| m.contains(&victim)), "{replaced:?}");
    std::thread::sleep(Duration::from_secs(2));

    let before = put_cluster_id(&endpoint, "probe", Duration::from_secs(5)).unwrap();
    let survivor = lose_two(&k, ns);
    let lost = Instant::now();
    // The deleted pods' containers stop moments after their objects are gone, and until then
    // the old cluster may still take writes: served again means served by the rebuilt cluster
    // (another cluster ID), timed from the deletion.
    until("writes served by the rebuilt cluster", 120, || {
        put_cluster_id(&endpoint, "probe", Duration::from_secs(2)).is_ok_and(|id| id != before)
    });
    let served = lost.elapsed();
    until("back at 3 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let whole = lost.elapsed();
    println!(
        "quorum lost (2 of 3 pods gone), ForceNewCluster after 0s: writes served by the rebuilt \
         cluster {:.1} s (target < 15 s), full size and healthy {:.1} s (target < 25 s), from \
         the deletion",
        served.as_secs_f64(),
        whole.as_secs_f64()
    );
    check_recovered(&k, ns, &survivor, &endpoint, &acked);
    assert_eq!(recovery_of(&k, ns)["approved"], false);
    assert!(event_count(&k, ns, "example", "ForceNewCluster") >= 1);
}

#[test]
fn restore_latest_backup_brings_back_a_cluster_whose_every_member_is_gone() {
    let k = Kubectl::from_env();
    let (moto, namespace, _operator) = setup(&k, "recover-backup", BUCKET, 3);
    let ns = namespace.name.as_str();
    // The store is named from the start: the recovery reads the spec it has when it decides.
    patch_spec(
        &k,
        ns,
        "example",
        json!({"recovery": {"quorumLoss": "RestoreLatestBackup", "after": "0s",
            "backups": {"backupStorageType": "S3",
                "s3": s3_spec(&moto, BUCKET, "etcd/example", "aws")}}}),
    );
    let endpoint = client_endpoint(&k, ns, "example");
    let acked = Writer::until_acked(&endpoint, 20, Duration::from_secs(60), Keys::Unique).acked;
    assert!(acked.len() >= 20, "too few writes in 60 s: {}", acked.len());
    let backup = manifest(
        "EtcdBackup",
        "nightly",
        json!({"clusterName": "example", "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, "etcd/nightly.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(&k, ns, "etcdbackup/nightly", 120, |s| {
        s["succeeded"] == true
    });
    // Keys after nightly, then a newer backup whose EtcdBackup is deleted: its snapshot stays
    // in the store `spec.recovery.backups` names, which the recovery searches by name, and is
    // newer than nightly, so it is the one restored (nightly lacks these keys).
    let later: Vec<u64> = (1_000_000..1_000_020).collect();
    for n in &later {
        write_once(&endpoint, *n).unwrap();
    }
    let hourly = manifest(
        "EtcdBackup",
        "hourly",
        json!({"clusterName": "example", "storageType": "S3",
            "backupPolicy": {"backupIntervalInSecond": 3600},
            "s3": s3_spec(&moto, BUCKET, "etcd/example", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&hourly));
    let mut stored = String::new();
    until("the hourly backup stored with its sha256", 120, || {
        let keys = moto.keys(BUCKET, "etcd/example_v");
        match keys.first() {
            Some(key) if moto.metadata(BUCKET, key, "sha256").is_some() => {
                stored = key.clone();
                true
            }
            _ => false,
        }
    });
    k.ok(&["delete", "-n", ns, "etcdbackup/hourly"], None);
    let before = revision(&endpoint);

    // Every member pod gone at once, their data with them.
    let pods = pod_names(&k, ns, "example");
    force_delete_pods(&k, ns, &pods);
    let lost = Instant::now();
    until("writes served again", 240, || {
        write_once(&endpoint, 2_000_000).is_ok()
    });
    println!(
        "every member gone, RestoreLatestBackup after 0s: writes served again {:.1} s",
        lost.elapsed().as_secs_f64()
    );
    until("back at 3 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    until("the recovery recorded as completed", 60, || {
        recovery_of(&k, ns)["completed"] == true
    });
    let r = recovery_of(&k, ns);
    assert_eq!(r["reason"], "RestoredFromBackup", "{r}");
    assert_eq!(r["source"], format!("{BUCKET}/{stored}"), "{r}");
    let restore = r["restore"].as_str().unwrap().to_string();
    assert!(restore.starts_with("example-recovery-"), "{r}");
    until_status(&k, ns, &format!("etcdrestore/{restore}"), 60, |s| {
        s["succeeded"] == true
    });
    // One recovery, one EtcdRestore.
    let made = get(&k, ns, "etcdrestores")["items"]
        .as_array()
        .map(Vec::len)
        .unwrap_or_default();
    assert_eq!(made, 1, "EtcdRestores made by the recovery");
    assert_acked_present(&endpoint, &acked);
    assert_acked_present(&endpoint, &later);
    let after = revision(&endpoint);
    assert!(
        after > before,
        "revision {after} after the restore, {before} before"
    );
}
