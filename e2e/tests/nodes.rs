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
use std::sync::Mutex;
use std::time::Duration;

use e2e::nodes::{
    FaultFigures, drain, node_death, node_names, node_returns, placement, stop_under_writes,
};
use e2e::{Kubectl, Operator, events, healthy_at_size, until};

static NODES: Mutex<()> = Mutex::new(());

/// Whether the cluster has the 3 nodes these scenarios need (else the test is skipped).
fn enough_nodes(k: &Kubectl) -> bool {
    let n = node_names(k).len();
    if n < 3 {
        eprintln!("skipped: {n} node(s); these scenarios need 3 (NODES=3 hack/cluster.sh up)");
    }
    n >= 3
}

fn apply_cluster(k: &Kubectl, ns: &str, size: usize) {
    // Members with no volume: their data goes with their node.
    let c = serde_json::json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "metadata": {"name": "example"},
        "spec": {"size": size, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
}

/// Installs the operator in `ns` (namespaced, allowed to read Nodes) and a 3-member cluster;
/// waits until it is healthy with its members on 3 distinct nodes. Returns the operator and
/// the node it runs on, which the scenarios leave alone (one replica).
fn three_members<'k>(k: &'k Kubectl, ns: &str) -> (Operator<'k>, String) {
    let op = Operator::install(k, ns, &["readNodes=true"]);
    apply_cluster(k, ns, 3);
    until("3 healthy members", 240, || {
        healthy_at_size(k, ns, "example", 3)
    });
    let on: BTreeSet<String> = placement(k, ns, "example")
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(on.len(), 3, "members are spread over nodes: {on:?}");
    let node = op.pods()[0]["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_string();
    (op, node)
}

/// The ClusterRole that `readNodes` made outlives the namespace.
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

fn assert_nothing_lost(f: &FaultFigures) {
    assert!(
        f.lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        f.lost.len(),
        f.acked,
        &f.lost[..f.lost.len().min(5)]
    );
}

#[test]
fn a_member_on_a_node_that_dies_is_replaced_on_another_and_never_comes_back() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    if !enough_nodes(&k) {
        return;
    }
    k.apply_crds();
    let ns = k.namespace("node-death");
    let ns = ns.name.as_str();
    let (_op, spare) = three_members(&k, ns);
    let (f, restart) = node_death(&k, ns, "example", 3, Some(&spare));
    eprintln!(
        "node {} (member {}, leader: {}) stopped hard: writes waited at most {:.1} s, 3 healthy \
         members elsewhere after {:.1} s; {} writes acknowledged, longest stall {:.1} s",
        f.node,
        f.member,
        f.was_leader,
        f.writable.as_secs_f64(),
        f.healed.as_secs_f64(),
        f.acked,
        f.longest_stall.as_secs_f64()
    );
    assert!(
        f.healed < Duration::from_secs(60),
        "back at full size after {:?}",
        f.healed
    );
    assert_nothing_lost(&f);
    let replaced = events(&k, ns, "example", "MemberReplaced");
    assert!(
        replaced
            .iter()
            .any(|m| m.contains(&f.member) && m.contains("node")),
        "the replacement names the lost node: {replaced:?}"
    );
    // The node comes back: its old member stays out (its pod was deleted, and its ID removed
    // from etcd for good), and nothing else changes.
    node_returns(&k, ns, "example", restart, &f.member);
    assert!(healthy_at_size(&k, ns, "example", 3));
    drop_node_reader(&k, ns);
}

#[test]
fn a_drained_node_s_member_moves_within_the_budget_and_no_write_is_lost() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    if !enough_nodes(&k) {
        return;
    }
    k.apply_crds();
    let ns = k.namespace("node-drain");
    let ns = ns.name.as_str();
    let (_op, spare) = three_members(&k, ns);
    let f = drain(&k, ns, "example", 3, Some(&spare));
    eprintln!(
        "drain of {} (member {}): 3 healthy members elsewhere after {:.1} s; {} writes \
         acknowledged, longest stall {:.1} s",
        f.node,
        f.member,
        f.healed.as_secs_f64(),
        f.acked,
        f.longest_stall.as_secs_f64()
    );
    assert!(
        f.healed < Duration::from_secs(30),
        "member back at full size after {:?}",
        f.healed
    );
    assert_nothing_lost(&f);
    drop_node_reader(&k, ns);
}

#[test]
fn a_lost_zone_holding_two_of_five_members_costs_no_quorum_and_both_are_replaced() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    if !enough_nodes(&k) {
        return;
    }
    k.apply_crds();
    let ns = k.namespace("zone-loss");
    let ns = ns.name.as_str();
    let op = Operator::install(&k, ns, &["readNodes=true"]);
    let spare = op.pods()[0]["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_string();
    apply_cluster(&k, ns, 5);
    until("5 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 5)
    });
    // Spread by zone (one node per zone here): 2, 2 and 1. The zone of two without the
    // operator goes.
    let placed = placement(&k, ns, "example");
    let count = |node: &str| placed.iter().filter(|(_, n)| n == node).count();
    let mut per_zone: Vec<usize> = node_names(&k).iter().map(|n| count(n)).collect();
    per_zone.sort();
    assert_eq!(per_zone, [1, 2, 2], "members spread over zones: {placed:?}");
    let zone = node_names(&k)
        .into_iter()
        .find(|n| count(n) == 2 && *n != spare)
        .unwrap();
    let (f, restart) = stop_under_writes(&k, ns, "example", 5, &zone);
    eprintln!(
        "zone of {zone} (2 of 5 members) lost: writes waited at most {:.1} s, 5 healthy members \
         elsewhere after {:.1} s; {} writes acknowledged, longest stall {:.1} s",
        f.writable.as_secs_f64(),
        f.healed.as_secs_f64(),
        f.acked,
        f.longest_stall.as_secs_f64()
    );
    assert_nothing_lost(&f);
    assert!(
        f.healed < Duration::from_secs(120),
        "back at full size after {:?}",
        f.healed
    );
    drop(restart);
    drop_node_reader(&k, ns);
}
