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
    Fault, FaultFigures, brief_partition, drain, node_death, node_lost, node_names, node_returns,
    placement, stop_under_writes,
};
use e2e::{Kubectl, Operator, event_count, events, healthy_at_size, lease_holder, until};

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
    three_members_with(k, ns, &[])
}

/// [`three_members`] with more chart values.
fn three_members_with<'k>(k: &'k Kubectl, ns: &str, values: &[&str]) -> (Operator<'k>, String) {
    let mut all = vec!["readNodes=true"];
    all.extend(values);
    let op = Operator::install(k, ns, &all);
    apply_cluster(k, ns, 3);
    until("3 healthy members", 240, || {
        healthy_at_size(k, ns, "example", 3)
    });
    let on: BTreeSet<String> = placement(k, ns, "example")
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(on.len(), 3, "members are spread over nodes: {on:?}");
    let node = operator_node(&op);
    (op, node)
}

/// The node of the operator's (only) replica: the pod that is not on its way out (right after
/// a reinstall, the previous replica's pod may still be listed, terminating, on another node;
/// taking its node for the spare once made the test partition the operator's own node).
fn operator_node(op: &Operator) -> String {
    let pods = op.pods();
    let live: Vec<&serde_json::Value> = pods
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    assert_eq!(live.len(), 1, "one operator replica: {pods:?}");
    live[0]["spec"]["nodeName"].as_str().unwrap().to_string()
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
    assert_none_lost(&f.lost, f.acked);
}

fn assert_none_lost(lost: &[u64], acked: usize) {
    assert!(
        lost.is_empty(),
        "{} of {acked} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

/// Prints what a node fault that ended in a replacement cost (`what` says which), and checks
/// that no acknowledged write was lost and the cluster was back at full size within `bound`.
fn replaced_within(what: &str, f: &FaultFigures, bound: Duration) {
    eprintln!(
        "node {} (member {}, leader: {}) {what}: back at full size elsewhere after {:.1} s; {} \
         writes acknowledged, longest stall {:.1} s",
        f.node,
        f.member,
        f.was_leader,
        f.healed.as_secs_f64(),
        f.acked,
        f.longest_stall.as_secs_f64()
    );
    assert_nothing_lost(f);
    assert!(f.healed < bound, "back at full size after {:?}", f.healed);
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
    // from etcd for good). Its replacement went to a node that already held one, whose loss
    // would now cost quorum: a member moves onto the returned node.
    let spread = node_returns(&k, ns, "example", restart, &f.member);
    assert!(spread.is_some(), "the replacement did not crowd a node");
    assert!(healthy_at_size(&k, ns, "example", 3));
    assert!(event_count(&k, ns, "example", "MembersSpread") >= 2);
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
    let spare = operator_node(&op);
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

#[test]
fn a_partition_shorter_than_the_grace_replaces_nothing_and_a_longer_one_ends_like_node_death() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    if !enough_nodes(&k) {
        return;
    }
    k.apply_crds();
    let ns = k.namespace("node-partition");
    let ns = ns.name.as_str();
    // A grace longer than the partition: the member is silent for 60 s and must be waited for.
    let (op, spare) = three_members_with(&k, ns, &["members.nodeLossGrace=90"]);
    let p = brief_partition(&k, ns, "example", 3, Some(&spare), Duration::from_secs(60));
    eprintln!(
        "node {} (member {}, leader: {}) partitioned for 60 s: {} writes acknowledged meanwhile, \
         all members healthy {:.1} s after the heal; {} writes acknowledged in all, longest \
         stall {:.1} s",
        p.node,
        p.member,
        p.was_leader,
        p.acked_during,
        p.caught_up.as_secs_f64(),
        p.acked,
        p.longest_stall.as_secs_f64()
    );
    assert_none_lost(&p.lost, p.acked);
    assert!(p.acked_during > 0, "the majority side served no write");
    assert_eq!(p.before, p.after, "a member was replaced needlessly");
    for reason in ["MemberReplaced", "MemberRemoved"] {
        assert_eq!(event_count(&k, ns, "example", reason), 0, "{reason}");
    }

    // The grace at 30 s: a partition that outlasts it ends as a node death does, and the healed
    // node's member (removed from etcd for good) stays out.
    drop(op);
    let op = Operator::install(&k, ns, &["readNodes=true", "members.nodeLossGrace=30"]);
    k.ok(
        &[
            "rollout",
            "status",
            "deployment/etcd-operator",
            "-n",
            ns,
            "--timeout=120s",
        ],
        None,
    );
    op.wait_ready(1);
    let spare = operator_node(&op);
    let (f, heal) = node_lost(&k, ns, "example", 3, Some(&spare), Fault::Partition);
    replaced_within("partitioned past the grace", &f, Duration::from_secs(90));
    let spread = node_returns(&k, ns, "example", heal, &f.member);
    assert!(spread.is_some(), "the replacement did not crowd a node");
    assert!(healthy_at_size(&k, ns, "example", 3));
    drop_node_reader(&k, ns);
}

#[test]
fn on_the_chart_defaults_the_node_of_the_operator_leader_and_a_member_dies_and_the_standby_heals() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    if !enough_nodes(&k) {
        return;
    }
    k.apply_crds();
    let ns = k.namespace("operator-node");
    let ns = ns.name.as_str();
    // The chart's defaults (as `make demo` installs them): two replicas, Nodes read.
    let op = Operator::install_defaults(&k, ns);
    op.wait_ready(2);
    let replicas: Vec<(String, String)> = op
        .pods()
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    assert_ne!(
        replicas[0].1, replicas[1].1,
        "the chart spreads the replicas over nodes"
    );
    apply_cluster(&k, ns, 3);
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let holder = until_holder(&k, ns, "");
    let leader = holder.split('_').next().unwrap().to_string();
    let (_, node) = replicas.iter().find(|(p, _)| *p == leader).unwrap().clone();
    let standby = replicas
        .iter()
        .find(|(p, _)| *p != leader)
        .unwrap()
        .0
        .clone();
    assert!(
        placement(&k, ns, "example").iter().any(|(_, n)| *n == node),
        "a member shares the leader's node"
    );

    // The Lease watched from the side while the node dies and the cluster heals.
    let watch_ns = ns.to_string();
    let old = holder.clone();
    let changed = std::thread::spawn(move || {
        let k = Kubectl::from_env();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(240) {
            let now = lease_holder(&k, &watch_ns);
            if !now.is_empty() && now != old {
                return Some((std::time::Instant::now(), now));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    });
    let (f, restart) = stop_under_writes(&k, ns, "example", 3, &node);
    let (at, new_holder) = changed
        .join()
        .unwrap()
        .expect("no other replica took the Lease");
    let takeover = at.saturating_duration_since(f.at);
    eprintln!(
        "the operator leader's node {node} stopped hard: the standby leads after {:.1} s, 3 \
         healthy members elsewhere after {:.1} s; {} writes acknowledged, longest stall {:.1} s",
        takeover.as_secs_f64(),
        f.healed.as_secs_f64(),
        f.acked,
        f.longest_stall.as_secs_f64()
    );
    assert!(
        new_holder.starts_with(&format!("{standby}_")),
        "the Lease went to {new_holder}, not the standby {standby}"
    );
    // The Lease (10 s in the tests) expires at most its duration after the last renewal, and
    // the standby asks every second.
    assert!(
        takeover < Duration::from_secs(12),
        "the standby took over after {takeover:?}"
    );
    assert_nothing_lost(&f);
    assert!(
        f.healed < Duration::from_secs(90),
        "back at full size after {:?}",
        f.healed
    );
    drop(restart);
    drop_node_reader(&k, ns);
}

/// Waits for a Lease holder other than `not` and returns it.
fn until_holder(k: &Kubectl, ns: &str, not: &str) -> String {
    let mut holder = String::new();
    until("a Lease holder", 60, || {
        holder = lease_holder(k, ns);
        !holder.is_empty() && holder != not
    });
    holder
}

#[test]
fn a_member_with_a_volume_on_a_dead_node_is_replaced_with_a_new_claim_past_the_bound() {
    let _turn = NODES.lock().unwrap_or_else(|e| e.into_inner());
    let k = Kubectl::from_env();
    if !enough_nodes(&k) {
        return;
    }
    k.apply_crds();
    let ns = k.namespace("node-volume");
    let ns = ns.name.as_str();
    let op = Operator::install(&k, ns, &["readNodes=true", "members.volumeLossAfter=30"]);
    let spare = operator_node(&op);
    let c = serde_json::json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "metadata": {"name": "example"},
        "spec": {"size": 3, "version": "3.6.16",
                 // The local cluster's default class: a directory on the pod's node, bound to
                 // that node (WaitForFirstConsumer), so a member's data lives and dies with it.
                 "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let (f, restart) = node_lost(&k, ns, "example", 3, Some(&spare), Fault::Stop);
    replaced_within(
        "with a volume, stopped hard (new claims)",
        &f,
        Duration::from_secs(120),
    );
    // The lost member's claim is deleted (its pod was force-deleted first); every member has
    // a claim of its own.
    let claims = || -> BTreeSet<String> {
        let list = k.ok(
            &[
                "get",
                "pvc",
                "-n",
                ns,
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
            None,
        );
        list.split_whitespace().map(String::from).collect()
    };
    until("the lost member's claim deleted", 60, || {
        !claims().contains(&f.member)
    });
    let members: BTreeSet<String> = placement(&k, ns, "example")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(claims(), members, "one claim per member");
    drop(restart);
    drop_node_reader(&k, ns);
}
