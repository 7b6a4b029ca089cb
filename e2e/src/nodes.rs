//! Node faults on the multi-node local cluster, as the node tests and the benchmark run them:
//! a member's node powered off, a member's node drained, each under a client writing unique keys
//! through the client Service, every acknowledged key read back at the end.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{
    Keys, Kubectl, Timeouts, Writer, client_endpoint, get, healthy_at_size, holds_for, keys_under,
    member_pods, repo_root, until,
};

/// A client writing unique keys through `endpoint` that fails over as etcd's clients do
/// ([`Timeouts::FAILOVER`]): a connection to a member whose node is gone would otherwise hold
/// it for the patient client's whole deadline.
fn failover_writer(endpoint: &str) -> Writer {
    Writer::start_timed(
        endpoint,
        Duration::from_secs(600),
        Keys::Unique,
        Timeouts::FAILOVER,
    )
}

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

/// How a node is taken away from the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A power cut (`hack/cluster.sh node stop`): every process of the node killed at once,
    /// its link gone.
    Stop,
    /// Cut off from the other nodes and the control plane (`hack/cluster.sh node partition`);
    /// its processes keep running.
    Partition,
}

impl Fault {
    /// The `hack/cluster.sh node` verbs that make and undo it.
    fn verbs(self) -> (&'static str, &'static str) {
        match self {
            Fault::Stop => ("stop", "start"),
            Fault::Partition => ("partition", "heal"),
        }
    }
}

/// Undoes a node fault however the scenario ends: a stopped node starts again, a partitioned
/// one is healed.
pub struct Restart(pub String, pub Fault);

impl Restart {
    /// Undoes the fault now, failing unless that works.
    pub fn undo(self) {
        cluster_sh(&["node", self.1.verbs().1, &self.0]);
        std::mem::forget(self);
    }
}

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("hack/cluster.sh"))
            .args(["node", self.1.verbs().1, &self.0])
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
    /// When the fault was made.
    pub at: Instant,
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
    node_lost(k, ns, cluster, size, avoid, Fault::Stop)
}

/// [`node_death`] for any [`Fault`]: a member's node (the leader's unless `avoid`) taken away
/// under writes; returns once the cluster is back at full size elsewhere.
pub fn node_lost(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    avoid: Option<&str>,
    fault: Fault,
) -> (FaultFigures, Restart) {
    let (member, node, was_leader) = victim(k, ns, cluster, avoid);
    let mut f = fault_under_writes(k, ns, cluster, size, &node, fault);
    (f.0.member, f.0.was_leader) = (member, was_leader);
    f
}

/// [`fault_under_writes`] with the node stopped hard.
pub fn stop_under_writes(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    node: &str,
) -> (FaultFigures, Restart) {
    fault_under_writes(k, ns, cluster, size, node, Fault::Stop)
}

/// `fault` done to `node` while a client writes to `cluster`; returns once the cluster is back
/// at `size` healthy members, none on `node`, which stays faulted until the guard is dropped.
pub fn fault_under_writes(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    node: &str,
    fault: Fault,
) -> (FaultFigures, Restart) {
    let endpoint = client_endpoint(k, ns, cluster);
    let writer = failover_writer(&endpoint);
    std::thread::sleep(Duration::from_secs(2));
    let restart = Restart(node.to_string(), fault);
    let stopped = Instant::now();
    cluster_sh(&["node", fault.verbs().0, node]);
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
        at: stopped,
    };
    (figures, restart)
}

/// Whether some node holds more of `placed` than a cluster of `size` can lose (then that
/// node's loss costs quorum).
pub fn crowded(placed: &[(String, String)], size: usize) -> bool {
    let nodes: BTreeSet<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
    let can_lose = size.saturating_sub(1) / 2;
    nodes
        .iter()
        .any(|n| placed.iter().filter(|(_, m)| m == n).count() > can_lose)
}

/// The node of `restart` comes back (started, or healed); the member `gone` (removed while
/// its node was away) must never return. A cluster its replacement left crowded on one node
/// (see [`crowded`]) spreads onto the returned node (a member added there, one of the crowded
/// node's removed) within 3 minutes, and says how long it took; any other cluster's membership
/// must not change.
pub fn node_returns(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    restart: Restart,
    gone: &str,
) -> Option<Duration> {
    let before = placement(k, ns, cluster);
    let size = before.len();
    let members: BTreeSet<String> = before.iter().map(|(p, _)| p.clone()).collect();
    restart.undo();
    let returned = Instant::now();
    if !crowded(&before, size) {
        holds_for("no member change after the node's return", 20, || {
            let now: BTreeSet<String> = placement(k, ns, cluster)
                .into_iter()
                .map(|(p, _)| p)
                .collect();
            now == members && !now.contains(gone)
        });
        return None;
    }
    // The spread is two membership changes: under writes, every acknowledged one kept.
    let endpoint = client_endpoint(k, ns, cluster);
    let writer = failover_writer(&endpoint);
    until("the members spread over the nodes again", 180, || {
        let now = placement(k, ns, cluster);
        assert!(
            now.iter().all(|(p, _)| p != gone),
            "{gone} came back: {now:?}"
        );
        now.len() == size && !crowded(&now, size) && healthy_at_size(k, ns, cluster, size)
    });
    let spread = returned.elapsed();
    let tally = writer.report();
    let lost = lost_writes(&endpoint, &tally.acked);
    assert!(
        lost.is_empty(),
        "{} of {} writes acknowledged during the spread lost, e.g. {:?}",
        lost.len(),
        tally.acked.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "spread over the nodes again {:.1} s after the node's return; {} writes acknowledged \
         meanwhile, none lost, longest stall {:.1} s",
        spread.as_secs_f64(),
        tally.acked.len(),
        tally.longest_stall.as_secs_f64()
    );
    Some(spread)
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
    let writer = failover_writer(&endpoint);
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
        at: started,
    }
}

/// What a partition shorter than the grace cost a cluster.
#[derive(Debug)]
pub struct BriefPartition {
    /// The node cut off, the member on it, and whether that member led.
    pub node: String,
    pub member: String,
    pub was_leader: bool,
    /// The members (pod names) before the partition and after the heal.
    pub before: BTreeSet<String>,
    pub after: BTreeSet<String>,
    /// Writes acknowledged while the node was cut off: the majority side kept serving.
    pub acked_during: usize,
    /// From the heal to every member healthy again.
    pub caught_up: Duration,
    /// Acknowledged writes, those missing at the end, the longest wait for one.
    pub acked: usize,
    pub lost: Vec<u64>,
    pub longest_stall: Duration,
}

/// A member's node of `cluster` (the leader's unless it is `avoid`) partitioned for `length`
/// under writes, then healed; returns once every member is healthy again.
pub fn brief_partition(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    size: usize,
    avoid: Option<&str>,
    length: Duration,
) -> BriefPartition {
    let (member, node, was_leader) = victim(k, ns, cluster, avoid);
    let members = || -> BTreeSet<String> {
        placement(k, ns, cluster)
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    };
    let before = members();
    let endpoint = client_endpoint(k, ns, cluster);
    let writer = failover_writer(&endpoint);
    std::thread::sleep(Duration::from_secs(2));
    let guard = Restart(node.clone(), Fault::Partition);
    let cut = Instant::now();
    cluster_sh(&["node", "partition", &node]);
    // The operator must see the member go silent, or the partition showed nothing.
    until(&format!("{member} reported unhealthy"), 60, || {
        let c = get(k, ns, &format!("etcdcluster/{cluster}"));
        c["status"]["memberStatuses"].as_array().is_some_and(|ms| {
            ms.iter()
                .any(|m| m["name"] == member && m["healthy"] == false)
        })
    });
    std::thread::sleep(length.saturating_sub(cut.elapsed()));
    let healed_at = Instant::now();
    guard.undo();
    until(&format!("{cluster} healthy again"), 120, || {
        healthy_at_size(k, ns, cluster, size)
    });
    let caught_up = healed_at.elapsed();
    let tally = writer.report();
    let acked_during = tally
        .acked_at
        .iter()
        .filter(|t| **t > cut && **t < healed_at)
        .count();
    BriefPartition {
        node,
        member,
        was_leader,
        before,
        after: members(),
        acked_during,
        caught_up,
        acked: tally.acked.len(),
        lost: lost_writes(&endpoint, &tally.acked),
        longest_stall: tally.longest_stall,
    }
}
