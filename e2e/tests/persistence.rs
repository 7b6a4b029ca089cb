//! Members with persistent volumes on the real local cluster, in a namespace that enforces the
//! `restricted` Pod Security Standard: every pod deleted at once comes back on its claim with
//! its data and member ID and no membership change; an evicted pod (the Eviction API) and a pod
//! whose phase turned Failed come back the same way; a deleted claim leads to a replacement,
//! never to a member restarted empty; the claims of removed members are deleted.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::{
    Keys, Kubectl, Operator, RollView, Volumes, Writer, assert_acked_present, client_endpoint,
    enforce_restricted, event_count, events, evict, get, healthy_at_size, patch_spec, pod_names,
    until,
};
use serde_json::json;

/// The UID of `pod`, or "" while there is none.
fn pod_uid(k: &Kubectl, ns: &str, pod: &str) -> String {
    let out = k.run(
        &[
            "get",
            "-n",
            ns,
            &format!("pod/{pod}"),
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn claims(k: &Kubectl, ns: &str) -> BTreeSet<String> {
    k.ok(
        &[
            "get",
            "pvc",
            "-n",
            ns,
            "-l",
            "etcd_cluster=example",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    )
    .split_whitespace()
    .map(String::from)
    .collect()
}

/// Every key the writer had acknowledged is still served through the client Service, read
/// once: every caller has just waited for Available, which promises that such a read is
/// answered.
#[test]
fn persistent_members_come_back_with_their_data_and_ids_and_lost_claims_are_replaced() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let volumes = Volumes::create(&k, "persist", 4);
    let namespace = k.namespace("persist");
    let ns = namespace.name.as_str();
    enforce_restricted(&k, ns);
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"},
        "spec": {"size": 3, "version": "3.6.16",
                 "pod": {"persistentVolumeClaimSpec": volumes.claim_spec()}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members on volumes", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let endpoint = client_endpoint(&k, ns, "example");
    let tally = Writer::until_acked(&endpoint, 20, Duration::from_secs(60), Keys::Unique);
    // Nothing disturbs the cluster here: right after Available, every write must succeed.
    assert_eq!(tally.errors, 0, "writes failed: {}", tally.last_error);
    let acked = tally.acked;
    assert!(acked.len() >= 20, "too few writes in 60 s: {}", acked.len());
    let ids = RollView::of(&k, ns, "example").ids();
    assert_eq!(claims(&k, ns), ids.iter().map(|m| m.0.clone()).collect());
    let changes = |k: &Kubectl| {
        event_count(k, ns, "example", "MemberAdded")
            + event_count(k, ns, "example", "MemberRemoved")
            + event_count(k, ns, "example", "MemberReplaced")
    };
    let membership_changes = changes(&k);

    // Every pod at once (a node reboot, say): no member answers, and each comes back on its
    // claim, same name, same member ID.
    k.ok(
        &[
            "delete",
            "pods",
            "-n",
            ns,
            "-l",
            "etcd_cluster=example",
            "--wait=false",
        ],
        None,
    );
    until("the same 3 members back on their claims", 300, || {
        healthy_at_size(&k, ns, "example", 3) && RollView::of(&k, ns, "example").ids() == ids
    });
    assert_acked_present(&endpoint, &acked);
    assert!(event_count(&k, ns, "example", "PodRecreated") >= 3);
    assert_eq!(changes(&k), membership_changes, "the membership changed");

    // Evicted, as `kubectl drain` does, and ended by the kubelet (phase Failed).
    let pods = pod_names(&k, ns, "example");
    let (evicted, failed) = (&pods[0], &pods[1]);
    let uids = (pod_uid(&k, ns, evicted), pod_uid(&k, ns, failed));
    until("the budget to allow one disruption", 60, || {
        get(&k, ns, "poddisruptionbudget/example")["status"]["disruptionsAllowed"] == 1
    });
    let (allowed, answer) = evict(&k, ns, evicted);
    assert!(allowed, "the eviction keeps a quorum: {answer}");
    until("the evicted member back", 240, || {
        let uid = pod_uid(&k, ns, evicted);
        !uid.is_empty() && uid != uids.0 && healthy_at_size(&k, ns, "example", 3)
    });
    k.ok(
        &[
            "patch",
            &format!("pod/{failed}"),
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Failed","reason":"Evicted","message":"e2e: the node ran out of memory"}}"#,
        ],
        None,
    );
    until("the ended member back", 240, || {
        let uid = pod_uid(&k, ns, failed);
        !uid.is_empty() && uid != uids.1 && healthy_at_size(&k, ns, "example", 3)
    });
    assert_eq!(RollView::of(&k, ns, "example").ids(), ids);
    assert_eq!(changes(&k), membership_changes, "the membership changed");
    assert_acked_present(&endpoint, &acked);

    // A claim deleted while its pod runs: that member's data goes with the pod, so it is
    // replaced by a new member (on the fourth volume), never restarted empty under its ID.
    let (lost, lost_id) = ids[2].clone();
    k.ok(&["delete", "pvc", &lost, "-n", ns, "--wait=false"], None);
    until("the member without a claim replaced", 300, || {
        let now = RollView::of(&k, ns, "example").ids();
        healthy_at_size(&k, ns, "example", 3)
            && now.iter().all(|m| m.0 != lost && m.1 != lost_id)
            && !claims(&k, ns).contains(&lost)
    });
    assert!(!events(&k, ns, "example", "MemberReplaced").is_empty());
    assert_acked_present(&endpoint, &acked);
    assert_eq!(
        claims(&k, ns),
        RollView::of(&k, ns, "example")
            .ids()
            .into_iter()
            .map(|m| m.0)
            .collect()
    );

    // Scaled down: the removed members' claims are deleted.
    patch_spec(&k, ns, "example", json!({"size": 1}));
    until("one member and one claim", 240, || {
        healthy_at_size(&k, ns, "example", 1) && claims(&k, ns).len() == 1
    });
    assert!(event_count(&k, ns, "example", "ClaimDeleted") >= 2);
    assert_acked_present(&endpoint, &acked);
}

/// The PersistentVolume `name` as JSON, or `Value::Null` once it is gone.
fn volume(k: &Kubectl, name: &str) -> serde_json::Value {
    let out = k.run(&["get", "pv", name, "-o", "json"], None);
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn the_pod_policy_example_s_claims_bind_on_the_nodes_its_members_land_on_and_go_with_it() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("pod-policy");
    let ns = ns.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    // The example as users find it: its claims name no class, so the cluster's default class
    // provisions them (on the local cluster, local-path: a directory on one node's disk).
    let example = e2e::repo_root().join("examples/cluster-pod-policy.yaml");
    k.ok(&["apply", "-n", ns, "-f", example.to_str().unwrap()], None);
    let name = "example-durable";
    let took = until("3 healthy members on provisioned volumes", 300, || {
        healthy_at_size(&k, ns, name, 3)
    });
    eprintln!("pod-policy example applied to healthy at 3 members: {took:?}");
    let mut volumes = Vec::new();
    for member in pod_names(&k, ns, name) {
        let pod = get(&k, ns, &format!("pod/{member}"));
        let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();
        let claim_name = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
            .unwrap_or_else(|| panic!("{member} mounts no claim"))
            .to_string();
        let claim = get(&k, ns, &format!("pvc/{claim_name}"));
        assert_eq!(claim["status"]["phase"], "Bound", "{claim}");
        let pv_name = claim["spec"]["volumeName"].as_str().unwrap().to_string();
        let pv = volume(&k, &pv_name);
        assert_eq!(pv["spec"]["storageClassName"], "local-path", "{pv}");
        // Bound to the node the member runs on, as a local disk is.
        let term = &pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0];
        assert_eq!(
            term["matchExpressions"][0]["values"],
            json!([node]),
            "{member}'s volume is not bound to its node {node}: {pv}"
        );
        let path = pv["spec"]["hostPath"]["path"]
            .as_str()
            .or_else(|| pv["spec"]["local"]["path"].as_str())
            .unwrap()
            .to_string();
        // On that node's own disk, and holding the member's data.
        assert!(
            path.contains(&format!("/nodes/{node}/")),
            "{member}'s volume {path} is not on {node}'s disk"
        );
        let entries = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .count();
        assert!(entries > 0, "{member}'s volume {path} is empty");
        volumes.push((pv_name, path));
    }
    // The cluster deleted: its claims go with it (they are its), and the provisioner deletes
    // their volumes and the directories (reclaim policy Delete).
    k.ok(
        &["delete", "etcdcluster", name, "-n", ns, "--wait=false"],
        None,
    );
    let took = until("the volumes and their directories deleted", 180, || {
        volumes
            .iter()
            .all(|(pv, path)| volume(&k, pv).is_null() && !std::path::Path::new(path).exists())
    });
    eprintln!("cluster deleted to its volumes gone: {took:?}");
}
