//! Speed and cost on the real local cluster, with the operator as a local process whose
//! metrics the test reads: on etcd 3.6 the members beyond the seed start together as learners
//! (their pods are made in one batch); a cluster at rest costs the API server nothing (every
//! pass reads the watch caches, and nothing is applied or written that has not changed); a
//! member whose pod is deleted is removed and replaced in one step.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use e2e::{Kubectl, OperatorProcess, events, get, healthy_at_size, pod_names, until};
use serde_json::json;

/// Seconds between the creation of the first and the last of `pods`.
fn creation_spread(k: &Kubectl, ns: &str, pods: &[String]) -> i64 {
    let epoch = |time: &str| -> i64 {
        let out = std::process::Command::new("date")
            .args(["-u", "-d", time, "+%s"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let times: Vec<i64> = pods
        .iter()
        .map(|p| {
            let pod = get(k, ns, &format!("pod/{p}"));
            epoch(pod["metadata"]["creationTimestamp"].as_str().unwrap())
        })
        .collect();
    times.iter().max().unwrap() - times.iter().min().unwrap()
}

/// A status without the figures that change with every raft entry.
fn without_figures(status: &serde_json::Value) -> serde_json::Value {
    let mut s = status.clone();
    if let Some(members) = s["memberStatuses"].as_array_mut() {
        for m in members {
            if let Some(m) = m.as_object_mut() {
                m.remove("raftIndex");
                m.remove("dbSize");
            }
        }
    }
    s
}

#[test]
fn members_start_together_a_cluster_at_rest_costs_nothing_and_a_lost_member_is_replaced_at_once() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("at-rest");
    let ns = ns.name.as_str();
    let operator = OperatorProcess::start(ns);
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": {"size": 5, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
    until("5 healthy members", 180, || {
        healthy_at_size(&k, ns, "example", 5)
    });

    // The four members beyond the seed: one batch, their pods made together (members added
    // one at a time would be 5 s apart, etcd's health interval after each promotion).
    let seed = events(&k, ns, "example", "SeedCreated");
    assert_eq!(seed.len(), 1, "{seed:?}");
    let pods = pod_names(&k, ns, "example");
    let batch: Vec<String> = pods
        .iter()
        .filter(|p| !seed[0].contains(&format!("seed member {p}")))
        .cloned()
        .collect();
    assert_eq!(batch.len(), 4, "{pods:?} / {seed:?}");
    let spread = creation_spread(&k, ns, &batch);
    assert!(spread <= 1, "the batch's pods were made {spread} s apart");
    for p in &pods {
        let pod = get(&k, ns, &format!("pod/{p}"));
        let args = pod["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains("--max-learners=6"), "{p}: {args}");
    }

    // At rest: passes go on (every 5 s per cluster while few run, 30 s with many), requests do
    // not. The status settles first (the last write of a starting cluster), then a window
    // longer than a resync. The figures that change with every raft entry (raftIndex, dbSize)
    // may still have moved after that last write (new members publish their attributes
    // through raft once they start): they are refreshed once within a resync, and that one
    // write, with nothing else changed, is all a cluster at rest may cost.
    std::thread::sleep(Duration::from_secs(5));
    let status_before = get(&k, ns, "etcdcluster/example")["status"].clone();
    let (passes, before) = (operator.reconciles(), operator.api_requests());
    std::thread::sleep(Duration::from_secs(40));
    let (passes_after, after) = (operator.reconciles(), operator.api_requests());
    let status_after = get(&k, ns, "etcdcluster/example")["status"].clone();
    assert!(passes_after > passes, "no pass in 40 s");
    let made: Vec<String> = e2e::requests_since(&before, &after)
        .into_iter()
        // The operator's own upkeep, not the cluster's: its Lease, and its read of the
        // kubernetes Service's EndpointSlice every 30 s (the API servers' own addresses).
        .filter(|((verb, resource), n)| {
            resource != "leases" && !(verb == "get" && resource == "endpointslices" && *n <= 2.0)
        })
        .map(|((verb, resource), n)| format!("{verb} {resource}: {n}"))
        .collect();
    let refresh = made == ["patch etcdclusters/status: 1"]
        && status_before != status_after
        && without_figures(&status_before) == without_figures(&status_after);
    assert!(
        made.is_empty() || refresh,
        "requests in 40 s at rest ({} passes): {made:?}\nstatus before: {status_before:#}\nstatus after: {status_after:#}",
        passes_after - passes
    );

    // A member's pod deleted: removed and its replacement added in the same step.
    let victim = pods[1].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
    until(
        "the cluster healthy at 5 without the deleted pod",
        120,
        || !pod_names(&k, ns, "example").contains(&victim) && healthy_at_size(&k, ns, "example", 5),
    );
    let replaced = events(&k, ns, "example", "MemberReplaced");
    assert!(
        replaced
            .iter()
            .any(|m| m.contains(&format!("removed member {victim}")) && m.contains("as a learner")),
        "{replaced:?}"
    );
}
