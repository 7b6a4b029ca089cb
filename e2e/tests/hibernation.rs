//! Hibernation end to end, with the operator installed by the chart and the final snapshot in
//! moto (S3): a 3-member cluster on volume claims sleeps (the final snapshot verified in the
//! store, no member pod, its claims kept, no request to the API server at rest) and wakes as
//! the same members on their claims; a cluster without claims sleeps on its final snapshot
//! alone and wakes restored from it. Both with every key, at a revision never lower than
//! before.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use e2e::backups::{aws_secret, store_host};
use e2e::stores::Moto;
use e2e::{
    Kubectl, Operator, api_requests, get, healthy_at_size, keys_under, member_ip, patch_spec,
    pod_names, put_keys, requests_since, revision, until,
};
use serde_json::{Value, json};

const BUCKET: &str = "etcd-hibernation";
const KEYS: usize = 2_000;

/// GET `/metrics` of the operator's pod, through the API server's proxy.
fn metrics(k: &Kubectl, op: &Operator) -> String {
    let pod = op.pods()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("/api/v1/namespaces/{}/pods/{pod}:8080/proxy/metrics", op.ns);
    k.ok(&["get", "--raw", &url], None)
}

fn store(moto: &Moto, prefix: &str) -> Value {
    json!({"backupStorageType": "S3", "s3": {"path": format!("{BUCKET}/{prefix}"),
        "awsSecret": "aws", "endpoint": moto.url, "forcePathStyle": true}})
}

/// Sets up moto, a namespace with the operator and the `aws` Secret, and cluster `name` of 3
/// members with `pod` as its pod policy, `KEYS` keys written. Returns the revision after them.
fn cluster_with_keys<'k>(
    k: &'k Kubectl,
    prefix: &str,
    pod: Value,
) -> (Moto, e2e::Namespace<'k>, Operator<'k>, i64) {
    k.apply_crds();
    let moto = Moto::start(&store_host());
    moto.create_bucket(BUCKET);
    let namespace = k.namespace(prefix);
    let ns = namespace.name.clone();
    let operator = Operator::install(k, &ns, &[]);
    aws_secret(k, &ns);
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": {"size": 3, "version": "3.6.16", "pod": pod}});
    k.ok(&["apply", "-n", &ns, "-f", "-"], Some(&c.to_string()));
    until("3 healthy members", 300, || {
        healthy_at_size(k, &ns, "example", 3)
    });
    let ep = format!("http://{}:2379", member_ip(k, &ns, "example"));
    put_keys(&ep, "key", KEYS);
    let rev = revision(&ep);
    (moto, namespace, operator, rev)
}

/// Puts the cluster to sleep with `hibernation` and waits for `Hibernated` with no pod left;
/// returns how long it took and the status.
fn sleep(k: &Kubectl, ns: &str, hibernation: Value) -> (Duration, Value) {
    let start = Instant::now();
    patch_spec(k, ns, "example", json!({"hibernation": hibernation}));
    until("Hibernated, no member pod left", 240, || {
        let c = get(k, ns, "etcdcluster/example");
        c["status"]["phase"] == "Hibernated" && pod_names(k, ns, "example").is_empty()
    });
    let status = get(k, ns, "etcdcluster/example")["status"].clone();
    (start.elapsed(), status)
}

/// Wakes the cluster and waits for 3 healthy members, Available; then every key is there at a
/// revision no lower than `before`, and status.hibernation is gone.
fn wake(k: &Kubectl, ns: &str, before: i64) -> Duration {
    let start = Instant::now();
    patch_spec(k, ns, "example", json!({"hibernation": {"enabled": false}}));
    until("3 healthy members again", 300, || {
        healthy_at_size(k, ns, "example", 3)
    });
    let took = start.elapsed();
    let ep = format!("http://{}:2379", member_ip(k, ns, "example"));
    let keys = keys_under(&ep, "key-").unwrap();
    assert_eq!(keys.len(), KEYS, "keys after waking");
    let now = revision(&ep);
    assert!(
        now >= before,
        "revision {now} after waking, {before} before"
    );
    until("status.hibernation cleared once Available", 60, || {
        get(k, ns, "etcdcluster/example")["status"]["hibernation"].is_null()
    });
    took
}

/// The final snapshot's EtcdBackup succeeded at `before` or later, and its object is in moto.
fn final_snapshot_stored(k: &Kubectl, ns: &str, moto: &Moto, status: &Value, before: i64) {
    let h = &status["hibernation"];
    let backup = h["backup"].as_str().unwrap();
    assert!(h["revision"].as_i64().unwrap() >= before, "{h}");
    let b = get(k, ns, &format!("etcdbackup/{backup}"));
    assert_eq!(b["status"]["succeeded"], true, "{b}");
    assert!(
        b["status"]["etcdRevision"].as_i64().unwrap() >= before,
        "{b}"
    );
    let key = b["status"]["path"]
        .as_str()
        .unwrap()
        .strip_prefix(&format!("{BUCKET}/"))
        .unwrap()
        .to_string();
    assert_eq!(moto.keys(BUCKET, &key).len(), 1, "{key} not stored");
}

#[test]
fn a_cluster_on_claims_sleeps_without_pods_or_requests_and_wakes_as_the_same_members() {
    let k = Kubectl::from_env();
    let pod = json!({"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "256Mi"}}}});
    let (moto, namespace, operator, before) = cluster_with_keys(&k, "hibernate-claims", pod);
    let ns = namespace.name.as_str();
    let members = pod_names(&k, ns, "example");

    let (slept, status) = sleep(
        &k,
        ns,
        json!({"enabled": true, "store": store(&moto, "claims")}),
    );
    final_snapshot_stored(&k, ns, &moto, &status, before);
    assert_eq!(status["hibernation"]["phase"], "Hibernated", "{status}");
    let claims = k.ok(&["get", "pvc", "-n", ns, "-o", "name"], None);
    assert_eq!(claims.lines().count(), 3, "claims kept: {claims}");
    let available = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Available")
        .unwrap()
        .clone();
    assert_eq!(available["reason"], "Hibernated", "{available}");

    // At rest: no request to the API server for the cluster; the operator's own are the
    // Lease's and its read of the API servers' addresses (EndpointSlice default/kubernetes,
    // every 30 s), whatever it runs: up to three in a window a little over 60 s (one at each
    // end and one between; CI saw three once).
    let first = api_requests(&metrics(&k, &operator));
    std::thread::sleep(Duration::from_secs(60));
    let moved: Vec<_> = requests_since(&first, &api_requests(&metrics(&k, &operator)))
        .into_iter()
        .filter(|((verb, resource), n)| {
            resource != "leases" && !(verb == "get" && resource == "endpointslices" && *n <= 3.0)
        })
        .collect();
    assert!(
        moved.is_empty(),
        "requests from a sleeping cluster: {moved:?}"
    );

    let woke = wake(&k, ns, before);
    let mut again = pod_names(&k, ns, "example");
    again.sort();
    let mut members = members;
    members.sort();
    assert_eq!(again, members, "the same members, on their claims");
    eprintln!(
        "hibernation on claims ({KEYS} keys, revision {before}): asleep in {slept:?} (final \
         snapshot included), 0 API requests in 60 s at rest, awake in {woke:?}"
    );
}

#[test]
fn a_cluster_without_claims_sleeps_on_its_final_snapshot_and_wakes_restored_from_it() {
    let k = Kubectl::from_env();
    let (moto, namespace, _operator, before) =
        cluster_with_keys(&k, "hibernate-snapshot", json!({}));
    let ns = namespace.name.as_str();
    let (slept, status) = sleep(
        &k,
        ns,
        json!({"enabled": true, "store": store(&moto, "ephemeral")}),
    );
    final_snapshot_stored(&k, ns, &moto, &status, before);
    let woke = wake(&k, ns, before);
    eprintln!(
        "hibernation without claims ({KEYS} keys, revision {before}): asleep in {slept:?}, \
         awake (restored from the final snapshot) in {woke:?}"
    );
}
