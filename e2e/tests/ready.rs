//! Ready means ready, shown as a script uses the operator: `kubectl apply` a cluster,
//! `kubectl wait --for=condition=Available`, then write through the client Service at once,
//! with no retry. Twenty clusters in a row, each with a new Service (a new cluster IP, which the
//! node's proxy must have programmed): every first write must succeed.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use e2e::{Kubectl, Operator, client_endpoint, manifest, write_once};
use serde_json::json;

const ROUNDS: u64 = 20;

#[test]
fn the_first_write_through_the_service_after_available_succeeds_twenty_times_in_a_row() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("ready");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);

    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("ready-{round}");
        let start = Instant::now();
        k.ok(
            &["apply", "-n", ns, "-f", "-"],
            Some(&manifest("EtcdCluster", &name, &json!({"size": 3}))),
        );
        k.ok(
            &[
                "wait",
                "-n",
                ns,
                "--for=condition=Available",
                &format!("etcdcluster/{name}"),
                "--timeout=180s",
            ],
            None,
        );
        let available = start.elapsed();
        let endpoint = client_endpoint(&k, ns, &name);
        let written = write_once(&endpoint, round);
        eprintln!(
            "round {round}: Available after {:.1} s; first write through {endpoint}: {written:?}",
            available.as_secs_f64()
        );
        if let Err(e) = written {
            failed.push(format!("round {round} ({endpoint}): {e}"));
        }
        // The next round's Service may be given this one's address once it is gone.
        k.ok(
            &[
                "delete",
                "-n",
                ns,
                &format!("etcdcluster/{name}"),
                "--wait=false",
            ],
            None,
        );
    }
    assert!(
        failed.is_empty(),
        "{} of {ROUNDS} first writes failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
