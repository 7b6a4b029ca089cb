//! Upgrading the operator as users do, with `helm upgrade`, from the previous release (its chart,
//! CRDs and image: hack/previous.sh). What the old operator made is left as it is: no member pod
//! replaced or restarted, no roll, the backups as they were, and a client writing through the
//! upgrade never refused. The new operator installs the new CRDs at start (Helm never upgrades
//! CRDs), so a field they brought is used at once.
//!
//! It puts the previous release's CRDs back first, as a cluster still at that release has them:
//! it runs alone, after every other test (hack/e2e.sh).

// The e2e crate is test code against a real cluster: a failing unwrap fails the test with the
// error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::backups::{aws_secret, manifest, s3_spec, status, store_host, until_status};
use e2e::stores::Moto;
use e2e::{
    Keys, Kubectl, Operator, Writer, assert_acked_present, client_endpoint, event_count, get,
    healthy_at_size, image, member_pods, operator_pod_ready, repo_root, until,
};
use serde_json::{Value, json};

const BUCKET: &str = "etcd-upgrade";
const CLUSTER: &str = "example";

/// The previous release's directory (chart/, crds/, tag), built by `hack/previous.sh`.
fn previous_release() -> PathBuf {
    let out = Command::new(repo_root().join("hack/previous.sh"))
        .arg("dir")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} (make e2e builds it)",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Replaces the served CRDs with those in `dir` (a whole update: applying them would leave the
/// newer fields, which another field manager owns).
fn replace_crds(k: &Kubectl, dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = entry.unwrap().path();
        if file.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let file = file.to_str().unwrap();
        let mut crd: Value = serde_json::from_str(&k.ok(
            &["create", "--dry-run=client", "-o", "json", "-f", file],
            None,
        ))
        .unwrap();
        let name = crd["metadata"]["name"].as_str().unwrap().to_string();
        let live = k.run(&["get", &format!("crd/{name}"), "-o", "json"], None);
        if !live.status.success() {
            // A cluster where no operator ran yet.
            k.ok(&["create", "-f", file], None);
            continue;
        }
        let live: Value = serde_json::from_slice(&live.stdout).unwrap();
        crd["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
        k.ok(&["replace", "-f", "-"], Some(&crd.to_string()));
    }
    k.wait_established(dir);
}

/// Whether the served EtcdCluster schema has `status.defragRequest` (new since the previous
/// release).
fn serves_defrag_request(k: &Kubectl) -> bool {
    let crd = get(k, "default", "crd/etcdclusters.etcd.database.coreos.com");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        ["defragRequest"]
        .is_object()
}

/// Each member pod's UID, restart count and container IDs: what a roll, a replacement or a
/// restart changes.
fn pods_as_they_are(k: &Kubectl, ns: &str) -> BTreeMap<String, Value> {
    member_pods(k, ns, CLUSTER)
        .iter()
        .map(|p| {
            let containers: Vec<Value> = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| json!([c["name"], c["containerID"], c["restartCount"]]))
                .collect();
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                json!({"uid": p["metadata"]["uid"], "containers": containers,
                    "node": p["spec"]["nodeName"]}),
            )
        })
        .collect()
}

/// How many Events of each membership change the cluster has had.
fn membership_events(k: &Kubectl, ns: &str) -> Vec<(&'static str, u64)> {
    [
        "MemberAdded",
        "MemberRemoved",
        "MemberReplaced",
        "MemberRolled",
        "MembersSpread",
    ]
    .into_iter()
    .map(|reason| (reason, event_count(k, ns, CLUSTER, reason)))
    .collect()
}

/// Whether every operator pod runs `image` and `n` of them are Ready, none being deleted.
fn operator_on(operator: &Operator, image: &str, n: usize) -> bool {
    let pods = operator.pods();
    pods.len() == n
        && pods
            .iter()
            .all(|p| p["spec"]["containers"][0]["image"] == image && operator_pod_ready(p))
}

/// The previous release, as its users run it, in `ns`: two operator replicas (installed from
/// the release's chart in `previous`), a 3-member cluster and a backup of it into `moto`.
fn previous_release_running<'k>(
    k: &'k Kubectl,
    ns: &str,
    previous: &Path,
    moto: &Moto,
) -> Operator<'k> {
    let old_image = std::fs::read_to_string(previous.join("tag"))
        .unwrap()
        .trim()
        .to_string();
    let old = Operator::install_chart(
        k,
        ns,
        &previous.join("chart"),
        Some(&old_image),
        &["replicas=2"],
    );
    until("the previous release's two replicas", 120, || {
        operator_on(&old, &old_image, 2)
    });
    aws_secret(k, ns);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": CLUSTER}, "spec": {"size": 3, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members under the previous release", 240, || {
        healthy_at_size(k, ns, CLUSTER, 3)
    });
    let backup = manifest(
        "EtcdBackup",
        "before",
        json!({"clusterName": CLUSTER, "storageType": "S3",
            "s3": s3_spec(moto, BUCKET, "etcd/before.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(k, ns, "etcdbackup/before", 120, |s| s["succeeded"] == true);
    old
}

#[test]
fn helm_upgrade_from_the_previous_release_leaves_clusters_untouched_and_brings_new_fields() {
    let k = Kubectl::from_env();
    let previous = previous_release();
    replace_crds(&k, &previous.join("crds"));
    assert!(!serves_defrag_request(&k), "the previous CRDs are served");

    let moto = Moto::start(&store_host());
    moto.create_bucket(BUCKET);
    let namespace = k.namespace("upgrade");
    let ns = namespace.name.as_str();
    let _old = previous_release_running(&k, ns, &previous, &moto);
    let backup_before = status(&k, ns, "etcdbackup/before");
    let pods_before = pods_as_they_are(&k, ns);
    let events_before = membership_events(&k, ns);
    assert_eq!(pods_before.len(), 3, "{pods_before:?}");

    // The upgrade, under a client's writes.
    let endpoint = client_endpoint(&k, ns, CLUSTER);
    let writer = Writer::start_with(&endpoint, Duration::from_secs(300), Keys::Unique);
    let new_image = image();
    let new = Operator::install(&k, ns, &["replicas=2"]);
    until("the new release's two replicas", 180, || {
        operator_on(&new, &new_image, 2)
    });
    until("the new CRDs, installed by the new operator", 60, || {
        serves_defrag_request(&k)
    });
    until("the new release leading", 60, || {
        // The holder's identity is its pod's name and a per-process suffix.
        let holder = e2e::lease_holder(&k, ns);
        let pod = holder.split('_').next().unwrap_or_default();
        new.pods().iter().any(|p| p["metadata"]["name"] == pod)
    });
    // Long enough for the new leader to have looked at everything: its first pass over the
    // cluster follows its start at once, and the next looks come every 5 s.
    std::thread::sleep(Duration::from_secs(10));
    let tally = writer.report();
    assert_eq!(
        tally.errors, 0,
        "writes refused during the upgrade: {tally:?}"
    );
    assert!(tally.writes > 0);
    assert_acked_present(&endpoint, &tally.acked);
    assert_eq!(
        pods_as_they_are(&k, ns),
        pods_before,
        "member pods changed by the upgrade"
    );
    assert!(healthy_at_size(&k, ns, CLUSTER, 3));
    assert_eq!(membership_events(&k, ns), events_before);
    let backup_after = status(&k, ns, "etcdbackup/before");
    assert_eq!(backup_after, backup_before, "the backup's status changed");

    // A field the new CRDs brought, used at once: a defragmentation asked for by annotation,
    // followed in status.defragRequest (which the previous CRDs would prune).
    k.ok(
        &[
            "annotate",
            "-n",
            ns,
            &format!("etcdcluster/{CLUSTER}"),
            "etcd.database.coreos.com/defrag=after-upgrade",
        ],
        None,
    );
    until_status(&k, ns, &format!("etcdcluster/{CLUSTER}"), 120, |s| {
        s["defragRequest"]["token"] == "after-upgrade" && s["defragRequest"]["done"] == true
    });
    // And a backup taken by the new release.
    let backup = manifest(
        "EtcdBackup",
        "after",
        json!({"clusterName": CLUSTER, "storageType": "S3",
            "s3": s3_spec(&moto, BUCKET, "etcd/after.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(&k, ns, "etcdbackup/after", 120, |s| s["succeeded"] == true);
    assert_eq!(pods_as_they_are(&k, ns), pods_before);
}
