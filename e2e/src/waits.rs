//! Waiting for a state the public contract shows: conditions, Ready pods, healthy members.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::*;

/// Polls `check` every 200 ms until it holds; panics after `secs`. Returns the time it took.
pub fn until(what: &str, secs: u64, check: impl FnMut() -> bool) -> Duration {
    until_every(what, secs, Duration::from_millis(200), check)
}

/// Polls `check` every `period` until it holds; panics after `secs`. Returns the time it took.
/// A longer period than [`until`]'s for checks that cost the API server (bulk lists), a shorter
/// one for latencies.
pub fn until_every(
    what: &str,
    secs: u64,
    period: Duration,
    mut check: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}"
        );
        std::thread::sleep(period);
    }
    start.elapsed()
}

/// Polls `check` every 200 ms for `secs` seconds and panics the first time it does not hold: for
/// what must *not* happen, which no status can show. Wait for the status to show that the
/// operator has seen what it must not act on before starting the window, so that the window
/// measures the operator's decision rather than its latency.
pub fn holds_for(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        assert!(
            check(),
            "{what}: stopped holding after {:.1}s of {secs}s",
            start.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The status (`True`/`False`) of a condition of an object, or "".
pub fn condition(object: &Value, type_: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Whether `object` is `Degraded` with `reason` and a message that contains every one of
/// `parts` (a field, a Secret, the problem).
pub fn degraded_with(object: &Value, reason: &str, parts: &[&str]) -> bool {
    object["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "Degraded"
                && c["status"] == "True"
                && c["reason"] == reason
                && c["message"]
                    .as_str()
                    .is_some_and(|m| parts.iter().all(|p| m.contains(p)))
        })
    })
}

/// The floor of the benchmarks: one bare etcd 3.6.16 pod `floor-<i>` in `ns` (the image
/// imported, no operator involved), from create to Ready; the pod is deleted (without waiting)
/// afterwards.
pub fn etcd_pod_floor(k: &Kubectl, ns: &str, i: usize) -> Duration {
    let name = format!("floor-{i}");
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.16",
          "imagePullPolicy": "Never",
          "command": ["/usr/local/bin/etcd"],
          "args": ["--data-dir=/tmp/data", "--listen-client-urls=http://0.0.0.0:2379",
                   "--advertise-client-urls=http://127.0.0.1:2379",
                   "--listen-metrics-urls=http://0.0.0.0:2381"],
          "readinessProbe": {"httpGet": {"path": "/readyz", "port": 2381}, "periodSeconds": 2}}]}});
    let start = Instant::now();
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&pod.to_string()));
    k.ok(
        &[
            "wait",
            "-n",
            ns,
            &format!("pod/{name}"),
            "--for=condition=Ready",
            "--timeout=120s",
        ],
        None,
    );
    let took = start.elapsed();
    k.ok(
        &["delete", "-n", ns, &format!("pod/{name}"), "--wait=false"],
        None,
    );
    took
}

/// Names of the member pods of `cluster`, sorted.
pub fn pod_names(k: &Kubectl, ns: &str, cluster: &str) -> Vec<String> {
    names_of(&member_pods(k, ns, cluster))
}

/// Whether `cluster` has exactly `n` member pods, none being deleted, every one Ready.
pub fn pods_ready(k: &Kubectl, ns: &str, cluster: &str, n: usize) -> bool {
    all_ready(&member_pods(k, ns, cluster), n)
}

/// `cluster`'s member pods, as JSON, in one request.
pub fn member_pods(k: &Kubectl, ns: &str, cluster: &str) -> Vec<Value> {
    let selector = format!("etcd_cluster={cluster}");
    let out = k.ok(
        &["get", "pods", "-n", ns, "-l", &selector, "-o", "json"],
        None,
    );
    let pods: Value = serde_json::from_str(&out).unwrap();
    pods["items"].as_array().cloned().unwrap_or_default()
}

/// The names of `pods` (as [`member_pods`] gives them), sorted.
pub fn names_of(pods: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    names.sort();
    names
}

/// Whether `pods` are exactly `n`, none being deleted, every one Ready.
pub fn all_ready(pods: &[Value], n: usize) -> bool {
    pods.len() == n
        && pods.iter().all(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
}

/// Whether `cluster` is Available with `size` healthy voters whose names equal its pods.
pub fn healthy_at_size(k: &Kubectl, ns: &str, cluster: &str, size: usize) -> bool {
    let c = get(k, ns, &format!("etcdcluster/{cluster}"));
    cluster_healthy(&c, size, &pod_names(k, ns, cluster))
}

/// Whether the EtcdCluster `c` (as JSON) is Available with `size` healthy voters whose names
/// equal `pods` (its member pods' names, sorted): [`healthy_at_size`] on objects already read,
/// for checks of many clusters from one list.
pub fn cluster_healthy(c: &Value, size: usize, pods: &[String]) -> bool {
    let statuses = c["status"]["memberStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut members: Vec<String> = statuses
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_string())
        .collect();
    members.sort();
    condition(c, "Available") == "True"
        && c["status"]["readyMembers"] == serde_json::json!(size)
        && statuses.len() == size
        && statuses
            .iter()
            .all(|m| m["healthy"] == true && m["role"] != "learner")
        && members == pods
}

/// One observation of a cluster in the middle of a roll: each member's name, ID, role and
/// version from its status, and whether it is Available.
#[derive(Clone, Debug)]
pub struct RollView {
    /// `(name, id, role, version)` of each member.
    pub members: Vec<(String, String, String, String)>,
    /// Condition Available.
    pub available: bool,
    /// Condition Available's reason and message: a failed wait says why.
    pub why: String,
}

impl RollView {
    /// Reads the EtcdCluster `cluster`.
    pub fn of(k: &Kubectl, ns: &str, cluster: &str) -> Self {
        let c = get(k, ns, &format!("etcdcluster/{cluster}"));
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        RollView {
            members: c["status"]["memberStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| (s(&m["name"]), s(&m["id"]), s(&m["role"]), s(&m["version"])))
                .collect(),
            available: condition(&c, "Available") == "True",
            why: c["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Available")
                .map(|c| format!("{}: {}", s(&c["reason"]), s(&c["message"])))
                .unwrap_or_default(),
        }
    }

    /// The leader's name and version, if one is listed.
    pub fn leader(&self) -> Option<(&str, &str)> {
        self.members
            .iter()
            .find(|m| m.2 == "leader")
            .map(|m| (m.0.as_str(), m.3.as_str()))
    }

    /// `(name, id)` of each member, sorted.
    pub fn ids(&self) -> Vec<(String, String)> {
        let mut ids: Vec<(String, String)> = self
            .members
            .iter()
            .map(|m| (m.0.clone(), m.1.clone()))
            .collect();
        ids.sort();
        ids
    }

    /// Names of the members that do not run `version`.
    pub fn not_on(&self, version: &str) -> std::collections::BTreeSet<String> {
        self.members
            .iter()
            .filter(|m| m.3 != version)
            .map(|m| m.0.clone())
            .collect()
    }
}
