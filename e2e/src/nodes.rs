//! Node faults on the multi-node local cluster, as the node tests and the benchmark run them:
//! a member's node powered off, a member's node drained, each under a client writing unique keys
//! through the client Service, every acknowledged key read back at the end.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{
    Keys, Kubectl, Writer, client_endpoint, get, healthy_at_size, holds_for, keys_under,
    member_pods, repo_root, until,
};

/// Runs `hack/cluster.sh ARGS` and fails unless it succeeds.
pub fn cluster_sh(args: &[&str]) {
    let status = Command::new(repo_root().join("hack/cluster.sh"))
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "hack/cluster.sh {}", args.join(" "));
}

/// The cluster's node names.
pub fn node_names(k: &Kubectl) -> Vec<String> {
    let list: Value = serde_json::from_str(&k.ok(&["get", "nodes", "-o", "json"], None)).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// `cluster`'s member pods, each with its node.
pub fn placement(k: &Kubectl, ns: &str, cluster: &str) -> Vec<(String, String)> {
    member_pods(k, ns, cluster)
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The acknowledged writes (of a [`Keys::Unique`] writer) missing from the cluster behind
/// `endpoint`, read linearizably.
pub fn lost_writes(endpoint: &str, acked: &[u64]) -> Vec<u64> {
    let keys = keys_under(endpoint, "e2e-writer/").expect("reading the keys back");
    acked
        .iter()
        .filter(|n| !keys.contains(&format!("e2e-writer/{n}")))
        .copied()
        .collect()
}

/// Starts a stopped node again however the scenario ends.
pub struct Restart(pub String);

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("hack/cluster.sh"))
            .args(["node", "start", &self.0])
            .status();
    }
}

/// What a node fault cost a cluster.
#[derive(Debug)]
pub struct FaultFigures {
    /// The node and the member on it.
    pub node: String,
    pub member: String,
    /// Whether that member led.
    pub was_leader: bool,
    /// The longest the writer (serial, through the Service) waited for an acknowledgement from
    /// the fault on: how long writes stopped, if they did.
    pub writable: Duration,
    /// From the fault to the cluster at full size and healthy, none of it on that node.
    pub healed: Duration,
    /// Acknowledged writes, and those missing at the end.
    pub acked: usize,
    pub lost: Vec<u64>,
    /// The longest the writer waited for an acknowledgement.
    pub longest_stall: Duration,
}

/// The member of `cluster` to fault: the leader's, unless its node is `avoid` (the node the
/// operator runs on), else the first member elsewhere. Returns (member, node, was leader).
fn victim(k: &Kubectl, ns: &str, cluster: &str, avoid: Option<&str>) -> (String, String, bool) {
    let c = get(k, ns, &format!("etcdcluster/{cluster}"));
    let leader = c["status"]["memberStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "leader")
        .map(|m| m["name"].as_str().unwrap().to_string());
    let placed = placement(k, ns, cluster);
    let allowed = |n: &String| Some(n.as_str()) != avoid;
    let (member, node) = placed
        .iter()
        .find(|(p, n)| Some(p) == leader.as_ref() && allowed(n))
        .or_else(|| placed.iter().find(|(_, n)| allowed(n)))
        .cloned()
        .unwrap();
    let was_leader = leader.as_ref() == Some(&member);
    (member, node, was_leader)
}

/// `cluster` (healthy, `size` members, no volumes) has a member's node stopped hard under
/// writes (the leader's unless `avoid`); returns once the cluster is back at full size
/// elsewhere. The node stays stopped until the returned guard is dropped.
pub fn node_death(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    avoid: Option<&str>,
) -> (FaultFigures, Restart) {
    let (member, node, was_leader) = victim(k, ns, cluster, avoid);
    let mut f = stop_under_writes(k, ns, cluster, size, &node);
    (f.0.member, f.0.was_leader) = (member, was_leader);
    f
}

/// `node` stopped hard while a client writes to `cluster`; returns once the cluster is back at
/// `size` healthy members, none on `node`, which stays stopped until the guard is dropped.
pub fn stop_under_writes(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    node: &str,
) -> (FaultFigures, Restart) {
    let endpoint = client_endpoint(k, ns, cluster);
    let writer = Writer::start_with(&endpoint, Duration::from_secs(600), Keys::Unique);
    std::thread::sleep(Duration::from_secs(2));
    let restart = Restart(node.to_string());
    let stopped = Instant::now();
    cluster_sh(&["node", "stop", node]);
    until(
        &format!("{cluster} back at {size} healthy members"),
        240,
        || {
            healthy_at_size(k, ns, cluster, size)
                && placement(k, ns, cluster).iter().all(|(_, n)| n != node)
        },
    );
    let healed = stopped.elapsed();
    let tally = writer.report();
    // The longest the client waited for an acknowledgement from the stop on (the stop itself
    // takes a moment, so the first acknowledgements after `stopped` may predate the cut).
    let from = tally
        .acked_at
        .partition_point(|t| *t < stopped)
        .saturating_sub(1);
    let writable = tally.acked_at[from..]
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]))
        .max()
        .unwrap_or(healed);
    let figures = FaultFigures {
        node: node.to_string(),
        member: String::new(),
        was_leader: false,
        writable,
        healed,
        acked: tally.acked.len(),
        lost: lost_writes(&endpoint, &tally.acked),
        longest_stall: tally.longest_stall,
    };
    (figures, restart)
}

/// The stopped node of `restart` starts again; `cluster`'s membership must not change.
pub fn node_returns(k: &Kubectl, ns: &str, cluster: &str, restart: Restart, gone: &str) {
    let members: BTreeSet<String> = placement(k, ns, cluster)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    cluster_sh(&["node", "start", &restart.0]);
    std::mem::forget(restart);
    holds_for("no member change after the node's return", 20, || {
        let now: BTreeSet<String> = placement(k, ns, cluster)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        now == members && !now.contains(gone)
    });
}

/// A member's node of `cluster` drained as users do (the Eviction API, which the cluster's
/// PodDisruptionBudget governs) under writes, then uncordoned.
pub fn drain(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    avoid: Option<&str>,
) -> FaultFigures {
    let (member, node, was_leader) = victim(k, ns, cluster, avoid);
    let endpoint = client_endpoint(k, ns, cluster);
    let writer = Writer::start_with(&endpoint, Duration::from_secs(600), Keys::Unique);
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let selector = format!("--pod-selector=etcd_cluster={cluster}");
    let out = k.run(
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            &selector,
            "--timeout=180s",
        ],
        None,
    );
    let drained = out.status.success();
    if drained {
        until(
            &format!("{cluster} back at {size} healthy members"),
            180,
            || {
                healthy_at_size(k, ns, cluster, size)
                    && placement(k, ns, cluster)
                        .iter()
                        .all(|(p, n)| *n != node && *p != member)
            },
        );
    }
    let healed = started.elapsed();
    k.run(&["uncordon", &node], None);
    assert!(
        drained,
        "drain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tally = writer.report();
    FaultFigures {
        node,
        member,
        was_leader,
        writable: Duration::ZERO,
        healed,
        acked: tally.acked.len(),
        lost: lost_writes(&endpoint, &tally.acked),
        longest_stall: tally.longest_stall,
    }
}
