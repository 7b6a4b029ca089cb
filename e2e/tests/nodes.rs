//! Node faults on the multi-node local cluster (`hack/cluster.sh up`, NODES=3 by default): a
//! member's node powered off, and a member's node drained, each under a client writing unique
//! keys through the client Service the whole time, every acknowledged key checked at the end.
//! Skipped, saying so, on a cluster with fewer than 3 nodes.
//!
//! The faults touch whole nodes, which every test of this binary shares, so the scenarios take
//! turns (a lock); other test binaries run before or after this one, never beside it.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test with the
// error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::{
    Keys, Kubectl, Operator, Writer, client_endpoint, events, get, healthy_at_size, holds_for,
    keys_under, member_pods, repo_root, until, write_once,
};
use serde_json::Value;

static NODES: Mutex<()> = Mutex::new(());

fn cluster_sh(args: &[&str]) {
    let status = Command::new(repo_root().join("hack/cluster.sh"))
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "hack/cluster.sh {}", args.join(" "));
}

/// The Ready nodes, or `None` (the test is skipped) when there are fewer than 3.
fn nodes(k: &Kubectl) -> Option<Vec<String>> {
    let list: Value = serde_json::from_str(&k.ok(&["get", "nodes", "-o", "json"], None)).unwrap();
    let names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    if names.len() < 3 {
        eprintln!(
            "skipped: {} node(s); these scenarios need 3 (NODES=3 hack/cluster.sh up)",
            names.len()
        );
        return None;
    }
    Some(names)
}

/// Member pod name → node name.
fn placement(k: &Kubectl, ns: &str) -> Vec<(String, String)> {
    member_pods(k, ns, "example")
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn apply_cluster(k: &Kubectl, ns: &str, size: usize) {
    let c = serde_json::json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "metadata": {"name": "example"},
        "spec": {"size": size, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
}

/// The node the operator runs on, which the scenarios leave alone (one replica).
fn operator_node(op: &Operator) -> String {
    op.pods()[0]["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Whether every acknowledged key is there, read linearizably through the Service.
fn assert_no_acked_write_lost(endpoint: &str, acked: &[u64]) {
    let keys = keys_under(endpoint, "e2e-writer/").expect("reading the keys back");
    let lost: Vec<&u64> = acked
        .iter()
        .filter(|n| !keys.contains(&format!("e2e-writer/{n}")))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
}

/// Starts a stopped node again however the test ends.
struct Restart(String);

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("hack/cluster.sh"))
            .args(["node", "start", &self.0])
            .status();
    }
}

/// Installs the operator in `ns` (namespaced, allowed to read Nodes), a 3-member cluster, and
/// waits until it is healthy with its members on 3 distinct nodes.
fn three_members<'k>(k: &'k Kubectl, ns: &str) -> Operator<'k> {
    let op = Operator::install(k, ns, &["readNodes=true"]);
    apply_cluster(k, ns, 3);
    until("3 healthy members", 240, || {
        healthy_at_size(k, ns, "example", 3)
    });
    let on: BTreeSet<String> = placement(k, ns).into_iter().map(|(_, n)| n).collect();
    assert_eq!(on.len(), 3, "members are spread over nodes: {on:?}");
    op
}

fn drop_node_reader(k: &Kubectl, ns: &str) {
    let name = format!("etcd-operator-{ns}-nodes");
    k.run(
        &[
            "delete",
            "clusterrolebinding,clusterrole",
            &name,
            "--ignore-not-found",
        ],
        None,
    );
}

#[test]
fn a_member_on_a_node_that_dies_is_replaced_on_another_and_never_comes_back() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    let Some(_) = nodes(&k) else { return };
    k.apply_crds();
    let ns = k.namespace("node-death");
    let ns = ns.name.as_str();
    let op = three_members(&k, ns);
    let spare = operator_node(&op);
    let c = get(&k, ns, "etcdcluster/example");
    let leader = c["status"]["memberStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "Leader")
        .map(|m| m["name"].as_str().unwrap().to_string());
    // The leader's node if the operator is elsewhere (an election on top of the loss), else
    // any member's node but the operator's.
    let placed = placement(&k, ns);
    let (victim, node) = placed
        .iter()
        .find(|(p, n)| Some(p) == leader.as_ref() && *n != spare)
        .or_else(|| placed.iter().find(|(_, n)| *n != spare))
        .cloned()
        .unwrap();
    let endpoint = client_endpoint(&k, ns, "example");
    let writer = Writer::start_with(&endpoint, Duration::from_secs(600), Keys::Unique);
    std::thread::sleep(Duration::from_secs(2));

    let _restart = Restart(node.clone());
    let stopped = Instant::now();
    cluster_sh(&["node", "stop", &node]);
    // A new connection each time, as a new client would make: through the Service to any
    // member the proxy still lists, the dead one included until its pod is marked not Ready.
    let mut probe = 1_000_000;
    let writable = until("a write to succeed after the node stopped", 60, || {
        probe += 1;
        write_once(&endpoint, probe).is_ok()
    });
    until("the cluster back at 3 healthy members", 120, || {
        healthy_at_size(&k, ns, "example", 3) && placement(&k, ns).iter().all(|(_, n)| *n != node)
    });
    let healed = stopped.elapsed();
    let tally = writer.report();
    eprintln!(
        "node {node} (member {victim}, leader: {}) stopped hard: writable again after {:.1} s, \
         3 healthy members elsewhere after {:.1} s; {} writes acknowledged, longest stall {:.1} s",
        leader.as_deref() == Some(victim.as_str()),
        writable.as_secs_f64(),
        healed.as_secs_f64(),
        tally.writes,
        tally.longest_stall.as_secs_f64()
    );
    assert!(
        healed < Duration::from_secs(60),
        "back at full size after {healed:?}"
    );
    assert_no_acked_write_lost(&endpoint, &tally.acked);
    let replaced = events(&k, ns, "example", "MemberReplaced");
    assert!(
        replaced
            .iter()
            .any(|m| m.contains(&victim) && m.contains("node")),
        "the replacement names the lost node: {replaced:?}"
    );

    // The node comes back: its old member stays out (its pod was deleted, and its ID removed
    // from etcd for good), and nothing else changes.
    let members: BTreeSet<String> = placement(&k, ns).into_iter().map(|(p, _)| p).collect();
    cluster_sh(&["node", "start", &node]);
    holds_for("no member change after the node's return", 20, || {
        let now: BTreeSet<String> = placement(&k, ns).into_iter().map(|(p, _)| p).collect();
        now == members && !now.contains(&victim)
    });
    assert!(healthy_at_size(&k, ns, "example", 3));
    drop_node_reader(&k, ns);
}

#[test]
fn a_drained_node_s_member_moves_within_the_budget_and_no_write_is_lost() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    let Some(_) = nodes(&k) else { return };
    k.apply_crds();
    let ns = k.namespace("node-drain");
    let ns = ns.name.as_str();
    let op = three_members(&k, ns);
    let spare = operator_node(&op);
    let (victim, node) = placement(&k, ns)
        .into_iter()
        .find(|(_, n)| *n != spare)
        .unwrap();
    let endpoint = client_endpoint(&k, ns, "example");
    let writer = Writer::start_with(&endpoint, Duration::from_secs(600), Keys::Unique);
    std::thread::sleep(Duration::from_secs(2));

    let started = Instant::now();
    // As users drain: the Eviction API, which the cluster's PodDisruptionBudget governs.
    let out = k.run(
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--pod-selector=etcd_cluster=example",
            "--timeout=180s",
        ],
        None,
    );
    let uncordon = |k: &Kubectl| k.run(&["uncordon", &node], None);
    if !out.status.success() {
        uncordon(&k);
        panic!("drain failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    until("the cluster back at 3 healthy members", 120, || {
        healthy_at_size(&k, ns, "example", 3)
            && placement(&k, ns)
                .iter()
                .all(|(p, n)| *n != node && *p != victim)
    });
    let moved = started.elapsed();
    uncordon(&k);
    let tally = writer.report();
    eprintln!(
        "drain of {node} (member {victim}): 3 healthy members elsewhere after {:.1} s; {} writes \
         acknowledged, longest stall {:.1} s",
        moved.as_secs_f64(),
        tally.writes,
        tally.longest_stall.as_secs_f64()
    );
    assert!(
        moved < Duration::from_secs(30),
        "member back at full size after {moved:?}"
    );
    assert_no_acked_write_lost(&endpoint, &tally.acked);
    drop_node_reader(&k, ns);
}
