//! The supervisor's wake-ups, counted by the operator's own `/metrics`: an update that touches
//! only an EtcdCluster's status (the operator's own writes, or anyone's) is no reason for a
//! reconcile pass; a spec change is. Needs an API server only: the cluster is paused, so no pod
//! is ever created (on a control plane without a node they would stay Pending anyway), and it
//! runs the same on the full local cluster.
//!
//! The operator runs as a host process (`target/debug/etcd-operator`, or `$ETCD_OPERATOR_BIN`),
//! which `cargo test -p e2e` does not build: `cargo build --bin etcd-operator` first.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use e2e::{Kubectl, OperatorProcess, get, manifest, until};
use serde_json::json;

/// How often the operator looks again at a paused cluster by itself. The status-only updates
/// are sent and judged well within one period after a pass, so that look cannot be among them.
const PAUSED_PERIOD: Duration = Duration::from_secs(30);

fn caught_up(k: &Kubectl, ns: &str, name: &str) -> bool {
    let c = get(k, ns, &format!("etcdcluster/{name}"));
    c["status"]["controlPaused"] == true
        && !c["metadata"]["generation"].is_null()
        && c["status"]["observedGeneration"] == c["metadata"]["generation"]
}

fn merge_patch(k: &Kubectl, ns: &str, what: &str, subresource: Option<&str>, patch: &str) {
    let sub = subresource.map(|s| format!("--subresource={s}"));
    let mut args = vec!["patch", what, "-n", ns, "--type=merge", "-p", patch];
    args.extend(sub.as_deref());
    k.ok(&args, None);
}

#[test]
fn a_status_only_update_causes_no_pass() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("supervisor");
    let ns = ns.name.as_str();
    // Declared after the namespace, so it is stopped (and its log printed on failure) before
    // the namespace goes.
    let op = OperatorProcess::start(ns);
    let name = "idle";
    let what = format!("etcdcluster/{name}");
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest(
            "EtcdCluster",
            name,
            &json!({"size": 3, "paused": true}),
        )),
    );

    // The operator has seen the cluster and written its status for this generation.
    until("the status to show the paused generation", 60, || {
        caught_up(&k, ns, name)
    });
    let seen = Instant::now();
    // Room for a pass that its own status write might still cause (that would be counted
    // before r0, not judged here).
    std::thread::sleep(Duration::from_secs(2));
    let r0 = op.reconciles();
    assert!(r0 >= 1.0, "no pass counted at {}", op.metrics_url());

    // Twenty status-only updates: each is a watch event that does not change the spec.
    for i in 0..20 {
        let patch = json!({"status": {"reason": format!("probe-{i}")}}).to_string();
        merge_patch(&k, ns, &what, Some("status"), &patch);
    }
    let c = get(&k, ns, &what);
    assert_eq!(
        c["status"]["observedGeneration"], c["metadata"]["generation"],
        "a status update changed the generation: {c}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let r1 = op.reconciles();
    let took = seen.elapsed();
    if r1 != r0 {
        assert!(
            took < PAUSED_PERIOD - Duration::from_secs(5),
            "{} passes, but the probe took {took:?}: the paused cluster's periodic look may be \
             among them; too slow a machine to judge",
            r1 - r0
        );
        panic!(
            "{} reconcile passes followed 20 status-only updates ({r0} before, {r1} after)",
            r1 - r0
        );
    }
    eprintln!("20 status-only updates in {took:?}: no pass ({r0} in all)");

    // A spec change, still paused: a pass, which writes the new generation's status.
    merge_patch(&k, ns, &what, None, r#"{"spec":{"size":1}}"#);
    let took = until("a pass for the spec change", 10, || {
        op.reconciles() >= r0 + 1.0 && caught_up(&k, ns, name)
    });
    eprintln!(
        "spec change to its status: {took:?}; passes {r0} -> {}",
        op.reconciles()
    );
}
