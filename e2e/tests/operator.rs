//! The operator as users run it: installed by the chart, two replicas with leader election,
//! `/metrics` and `/readyz` scraped through the API server's pod proxy.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::{Kubectl, Operator, get, healthy_at_size, lease_holder, manifest, series, until};
use serde_json::{Value, json};

/// GET `path` on port 8080 of an operator pod, through the API server's proxy.
fn scrape(k: &Kubectl, ns: &str, pod: &str, path: &str) -> Option<String> {
    let url = format!("/api/v1/namespaces/{ns}/pods/{pod}:8080/proxy{path}");
    let out = k.run(&["get", "--raw", &url], None);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn pod_names(op: &Operator) -> Vec<String> {
    op.pods()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// The replicas that say they lead, by their metrics.
fn leaders(k: &Kubectl, op: &Operator) -> Vec<String> {
    pod_names(op)
        .into_iter()
        .filter(|p| {
            scrape(k, &op.ns, p, "/metrics")
                .is_some_and(|m| series(&m, "etcd_operator_leader") == Some(1.0))
        })
        .collect()
}

/// (event name, reportingInstance) of every Event about the EtcdCluster.
fn cluster_events(k: &Kubectl, ns: &str) -> BTreeSet<(String, String)> {
    let list = get(k, ns, "events.events.k8s.io");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == "EtcdCluster")
        .map(|e| {
            (
                e["metadata"]["name"].as_str().unwrap_or("").to_string(),
                e["reportingInstance"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn one_of_two_replicas_acts_and_a_killed_leader_hands_over_within_the_lease() {
    const LEASE: u64 = 10; // leaderElection.leaseDuration as Operator::install sets it
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("leader");
    let ns = ns.name.as_str();
    let op = Operator::install(&k, ns, &["replicas=2"]);
    op.wait_ready(2);

    // Exactly one leader, and it is the Lease's holder; the other stands by, ready.
    until("one leader", 60, || leaders(&k, &op).len() == 1);
    let first = leaders(&k, &op).remove(0);
    assert!(lease_holder(&k, ns).starts_with(&format!("{first}_")));
    let standby: Vec<String> = pod_names(&op).into_iter().filter(|p| *p != first).collect();
    assert_eq!(standby.len(), 1);
    let standby = &standby[0];
    assert_eq!(
        scrape(&k, ns, standby, "/readyz").as_deref(),
        Some("ok: standby\n")
    );
    assert_eq!(
        scrape(&k, ns, &first, "/readyz").as_deref(),
        Some("ok: leader\n")
    );

    // A cluster: only the leader reconciles it, reports it and writes Events.
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest("EtcdCluster", "example", &json!({"size": 1}))),
    );
    until("1 healthy member", 120, || {
        healthy_at_size(&k, ns, "example", 1)
    });
    let m = scrape(&k, ns, &first, "/metrics").unwrap();
    let labels = format!("{{namespace=\"{ns}\",name=\"example\"}}");
    for (name, at_least) in [
        ("etcd_operator_clusters{phase=\"Running\"}".to_string(), 1.0),
        (format!("etcd_operator_cluster_members_ready{labels}"), 1.0),
        (
            format!("etcd_operator_cluster_members_desired{labels}"),
            1.0,
        ),
        (
            "etcd_operator_reconciles_total{controller=\"etcdcluster\"}".into(),
            1.0,
        ),
        (
            "etcd_operator_reconcile_duration_seconds_count{controller=\"etcdcluster\"}".into(),
            1.0,
        ),
        (
            format!(
                "etcd_operator_membership_changes_total{{namespace=\"{ns}\",name=\"example\",change=\"SeedCreated\"}}"
            ),
            1.0,
        ),
    ] {
        let v = series(&m, &name);
        assert!(
            v.is_some_and(|v| v >= at_least),
            "{name} = {v:?} on the leader:\n{m}"
        );
    }
    let s = scrape(&k, ns, standby, "/metrics").unwrap();
    assert_eq!(series(&s, "etcd_operator_leader"), Some(0.0), "{s}");
    assert!(
        series(
            &s,
            "etcd_operator_reconciles_total{controller=\"etcdcluster\"}"
        )
        .is_none(),
        "the standby reconciled:\n{s}"
    );
    let before = cluster_events(&k, ns);
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|(_, by)| *by == first),
        "events not from the leader {first}: {before:?}"
    );

    // Crash the leader: SIGKILL to its process when this host runs it (the local cluster), else
    // a forced delete. Another process takes the Lease once it expires, never while the old one
    // may still act, and never two at once.
    let old_holder = lease_holder(&k, ns);
    let killed = Instant::now();
    match e2e::host_pid(&first) {
        Some(pid) => {
            eprintln!("SIGKILL to the leader's process {pid}");
            let status = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
        None => {
            eprintln!("the leader's process is not on this host: deleting its pod without grace");
            k.ok(
                &[
                    "delete",
                    "pod",
                    "-n",
                    ns,
                    &first,
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                ],
                None,
            );
        }
    }
    let mut seen_two = false;
    let handover = until("another process to hold the Lease", 3 * LEASE, || {
        let now = leaders(&k, &op);
        seen_two |= now.len() > 1;
        let holder = lease_holder(&k, ns);
        !holder.is_empty() && holder != old_holder && now.len() == 1
    });
    assert!(!seen_two, "two replicas said they lead at once");
    eprintln!(
        "leader handover after a crash: {:.1} s (lease {LEASE} s)",
        handover.as_secs_f64()
    );
    assert!(
        killed.elapsed() <= Duration::from_secs(LEASE + 3),
        "handover took {:?}, the lease is {LEASE} s",
        killed.elapsed()
    );
    let second = leaders(&k, &op).remove(0);
    assert!(lease_holder(&k, ns).starts_with(&format!("{second}_")));

    // The new leader acts: it grows the cluster, and every new Event is its own.
    k.ok(
        &[
            "patch",
            "-n",
            ns,
            "etcdcluster/example",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":3}}"#,
        ],
        None,
    );
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let after: Vec<(String, String)> = cluster_events(&k, ns)
        .difference(&before)
        .cloned()
        .collect();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|(_, by)| *by == second),
        "events after the handover not from {second}: {after:?}"
    );
    // The other replica stands by.
    op.wait_ready(2);
    assert_eq!(leaders(&k, &op), vec![second]);
}

#[test]
fn a_graceful_shutdown_releases_the_lease_and_metrics_follow_a_deleted_cluster() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("metrics");
    let ns = ns.name.as_str();
    let op = Operator::install(&k, ns, &[]);
    until("one leader", 60, || leaders(&k, &op).len() == 1);
    let pod = leaders(&k, &op).remove(0);

    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest("EtcdCluster", "example", &json!({"size": 1}))),
    );
    until("1 healthy member", 120, || {
        healthy_at_size(&k, ns, "example", 1)
    });
    let name =
        format!("etcd_operator_cluster_members_ready{{namespace=\"{ns}\",name=\"example\"}}");
    assert_eq!(
        series(&scrape(&k, ns, &pod, "/metrics").unwrap(), &name),
        Some(1.0)
    );
    let available =
        format!("etcd_operator_cluster_available{{namespace=\"{ns}\",name=\"example\"}}");
    until("the cluster_available series at 1", 30, || {
        series(
            &scrape(&k, ns, &pod, "/metrics").unwrap_or_default(),
            &available,
        ) == Some(1.0)
    });
    // The chart's default crds.install: the operator applied its CRDs at start, marked with its
    // version, through the ClusterRole limited to them.
    let crd: Value = serde_json::from_str(&k.ok(
        &[
            "get",
            "crd/etcdclusters.etcd.database.coreos.com",
            "-o",
            "json",
            "--show-managed-fields",
        ],
        None,
    ))
    .unwrap();
    let managers: Vec<&str> = crd["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["manager"].as_str())
        .collect();
    assert!(managers.contains(&"etcd-operator"), "{managers:?}");
    assert!(
        crd["metadata"]["annotations"]["etcd.database.coreos.com/operator-version"].is_string(),
        "{}",
        crd["metadata"]
    );
    k.ok(&["delete", "-n", ns, "etcdcluster/example"], None);
    until("the cluster's series to go", 30, || {
        scrape(&k, ns, &pod, "/metrics").is_some_and(|m| series(&m, &name).is_none())
    });

    // SIGTERM (a normal delete) releases the Lease: once the pod is gone the Lease is free or
    // held by the successor, without waiting for it to run out.
    k.ok(&["delete", "pod", "-n", ns, &pod, "--wait=true"], None);
    let holder = lease_holder(&k, ns);
    assert!(
        !holder.starts_with(&format!("{pod}_")),
        "the Lease still names the stopped replica: {holder}"
    );
    op.wait_ready(1);
    let lease: Value = get(&k, ns, "lease/etcd-operator");
    assert!(lease["spec"]["leaseDurationSeconds"].as_i64().is_some());
}
