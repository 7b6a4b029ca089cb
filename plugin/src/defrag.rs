//! `kubectl etcd defrag`: every voter defragmented now by the operator, one at a time as a
//! scheduled defragmentation is (followers first, the leader last after leadership moved; never
//! during a roll, a restore or a recovery), asked for by the annotation
//! `etcd.database.coreos.com/defrag` with a new token, then followed member by member.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use etcd_operator::api::{DEFRAG_ANNOTATION, EtcdCluster};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::explain;

/// Asks for the defragmentation and prints each member's as it is recorded, until every voter
/// is done or `timeout` passes.
pub async fn run(client: Client, ns: &str, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client, ns);
    let token = format!("kubectl-etcd-{}", Timestamp::now().as_nanosecond());
    let patch = serde_json::json!({"metadata": {"annotations": {DEFRAG_ANNOTATION: token}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| explain(e, "patch", &format!("EtcdCluster {name}"), ns))?;
    println!("asked the operator to defragment every voter of EtcdCluster {name} ({token})");
    let start = Instant::now();
    let mut shown = BTreeSet::new();
    let mut waiting = String::new();
    while start.elapsed() < timeout {
        let cluster = clusters
            .get(name)
            .await
            .map_err(|e| explain(e, "get", &format!("EtcdCluster {name}"), ns))?;
        let status = cluster.status.unwrap_or_default();
        let Some(request) = status.defrag_request.filter(|r| r.token == token) else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let since: Timestamp = request.at.parse().context("the request's time")?;
        for d in &status.defragmentations {
            let at: Option<Timestamp> = d.at.parse().ok();
            if at.is_some_and(|at| at >= since) && shown.insert(d.member.clone()) {
                println!(
                    "[{:6.1}s] defragmented {} in {:.1} s: {:.1} MiB -> {:.1} MiB",
                    start.elapsed().as_secs_f64(),
                    d.member,
                    d.milliseconds as f64 / 1000.0,
                    d.size_before as f64 / f64::from(1u32 << 20),
                    d.size_after as f64 / f64::from(1u32 << 20)
                );
            }
        }
        if request.done {
            println!("every voter is defragmented");
            return Ok(());
        }
        // Why it waits, when the operator says (a roll, an unhealthy member, a restore).
        let why = status
            .conditions
            .iter()
            .find(|c| {
                c.type_ == etcd_operator::api::ConditionType::Progressing.as_str()
                    && c.status == "True"
            })
            .map(|c| c.message.clone())
            .unwrap_or_default();
        if !why.is_empty() && why != waiting {
            println!("[{:6.1}s] waiting: {why}", start.elapsed().as_secs_f64());
            waiting = why;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!(
        "not every voter of EtcdCluster {name} was defragmented within {} s; \
         `kubectl etcd status {name}` says why",
        timeout.as_secs()
    )
}
