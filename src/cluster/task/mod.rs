//! The loop of one cluster: observe, plan, act (at most one membership change), write status;
//! then sleep until the spec changes, one of its pods changes, or a timer fires. It keeps no
//! truth of its own: after a restart everything is observed again.
//!
//! - `mod.rs`: the loop, what every task shares ([`Context`]), and what a pass can fail on;
//! - `pass.rs`: one pass, its stages in order: prepare, observe, plan, act, status;
//! - `memory.rs`: what a task remembers between passes: what only paces it, apart from what
//!   earlier passes found that changes what is planned or reported;
//! - `pacing.rs`: when to look again, and the Event and metrics of what a pass did;
//! - `report.rs`: the status stage: the status written when due, warnings published once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::{Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, info_span, warn};

use super::act;
use super::handles::Handles;
use super::observe;
use crate::api::EtcdCluster;
use crate::kube::cache::Caches;
use crate::kube::invalid::Invalid;
use crate::report::Reporter;
use crate::tls;
use memory::Memory;
use pacing::INVALID_RECHECK;
use pass::reconcile;

mod memory;
mod pacing;
mod pass;
mod report;

/// Shared by every cluster task.
pub struct Context {
    /// API client for requests; every request it makes is bounded in time (see `main.rs`).
    pub client: Client,
    /// Publishes Kubernetes Events.
    pub events: Reporter,
    /// The process's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The operator's own image, whose `etcd-gate` new member pods run (see
    /// [`super::resources::Gate`]).
    pub gate_image: Option<String>,
    /// Timings of the planner that users may tune.
    pub timings: Timings,
    /// Where etcd pods reach this operator's snapshot server, for a restore's seed.
    pub snapshot: Option<crate::seed::SnapshotServer>,
    /// The watch caches the passes read (fed by the supervisor).
    pub caches: Arc<Caches>,
    /// The surviving members that recoveries restore from, which the snapshot server streams.
    pub sources: Arc<crate::seed::Sources>,
    /// How many cluster tasks run (kept by the supervisor): how often one at rest is looked
    /// at depends on it.
    pub tasks: std::sync::atomic::AtomicUsize,
    /// What each cluster's NetworkPolicy is made from.
    pub network: super::network_policy::PolicySettings,
}

/// How long the planner gives members before it acts on their silence.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// A member unhealthy this long while its pod runs is replaced.
    pub replace_unhealthy_after: Duration,
    /// Silent members are counted as lost (phase Failed) only after this long.
    pub quorum_grace: Duration,
    /// A silent member whose node has not been Ready this long is replaced; zero: never, and
    /// Nodes are not watched.
    pub node_loss_grace: Duration,
    /// A silent member with a volume whose node has not been Ready this long is replaced on
    /// another node with a new claim; zero: it waits for its node.
    pub volume_loss_after: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            replace_unhealthy_after: Duration::from_secs(300),
            quorum_grace: Duration::from_secs(30),
            node_loss_grace: Duration::from_secs(30),
            volume_loss_after: Duration::ZERO,
        }
    }
}

/// What a pass can fail on. Invalid specs are reported on the object and waited out; the rest
/// are transient and retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be acted on as it is (a missing Secret, a field not implemented): a
    /// Degraded condition and an Event name the field; nothing is changed until it is fixed.
    #[error(transparent)]
    Invalid(Invalid),
    /// Reading a Secret the spec names failed.
    #[error("reading Secret {name}: {source}")]
    ReadSecret {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Reading or writing the cluster's TLS Secrets failed.
    #[error(transparent)]
    Tls(tls::Error),
    /// Observing the cluster failed.
    #[error(transparent)]
    Observe(#[from] observe::Error),
    /// Carrying out the planned action failed.
    #[error(transparent)]
    Act(#[from] act::Error),
    /// Writing the status failed.
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
    /// Reading the EtcdRestore a restore hand-off names, to verify it, failed.
    #[error("reading the EtcdRestore of the restore hand-off: {0}")]
    ReadRestore(#[source] kube::Error),
    /// Listing the EtcdBackups of a hibernation's final snapshot failed.
    #[error("listing the final snapshot's EtcdBackups: {0}")]
    ReadBackups(#[source] kube::Error),
    /// Reading or annotating the members' claims for their growth failed.
    #[error("reading the members' volume claims for their storage: {0}")]
    ReadClaims(#[source] kube::Error),
    /// Reading or keeping root's password failed.
    #[error(transparent)]
    Access(crate::access::Error),
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Invalid(Invalid { .. }) => "invalid_spec",
            Error::ReadSecret { .. } => "read_secret",
            Error::Tls(tls::Error::Invalid(Invalid { .. })) => "invalid_spec",
            Error::Tls(tls::Error::Api { .. }) => "tls_secret",
            Error::Tls(tls::Error::Pki { .. }) => "tls_certificate",
            Error::Observe(e) => e.metric_label(),
            Error::Act(e) => e.metric_label(),
            Error::WriteStatus(_) => "write_status",
            Error::ReadRestore(_) => "read_restore",
            Error::ReadBackups(_) => "read_backups",
            Error::ReadClaims(_) => "read_claims",
            Error::Access(_) => "root_secret",
        }
    }

    /// Whether the error waits for the user rather than for time.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::Invalid(Invalid { .. }))
    }
}

impl From<crate::access::Error> for Error {
    fn from(e: crate::access::Error) -> Self {
        match e {
            crate::access::Error::Invalid(invalid) => Error::Invalid(invalid),
            crate::access::Error::Tls(e) => e.into(),
            e => Error::Access(e),
        }
    }
}

impl From<tls::Error> for Error {
    fn from(e: tls::Error) -> Self {
        match e {
            tls::Error::Invalid(invalid) => Error::Invalid(invalid),
            e => Error::Tls(e),
        }
    }
}

/// Backoff after transient failures: exponential from 1 s to 60 s, with jitter so that clusters
/// failing together (the API server restarting) do not retry together.
fn backoff() -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder;
    crate::kube::exponential(Duration::from_secs(1), Duration::from_secs(60)).build()
}

/// Runs the loop of one cluster until its spec channel closes (the cluster was deleted).
/// `passed` is set, and counted in `etcd_operator_clusters_passed`, once a pass has finished.
pub async fn run(
    ctx: Arc<Context>,
    mut spec: watch::Receiver<Arc<EtcdCluster>>,
    wake: Arc<Notify>,
    passed: Arc<AtomicBool>,
) {
    // A task's cluster never moves to another namespace: the supervisor keys tasks by it.
    let ns = spec.borrow().namespace().unwrap_or_default();
    let handles = Handles::new(
        &ctx.client,
        &ns,
        ctx.gate_image.clone(),
        ctx.snapshot.clone(),
        ctx.caches.clone(),
        ctx.sources.clone(),
    )
    .with_network(ctx.network.clone());
    let mut memory = Memory::default();
    let mut retries = backoff();
    loop {
        // A task idles far longer than it passes, and what its future holds across the wait is
        // held by every cluster at once: the pass is boxed, so that its state lives only while
        // it runs (unboxed, each idle task held a 40 KiB allocation for it: 400 MiB at 10,000
        // clusters).
        let cluster = spec.borrow_and_update().clone();
        let span = info_span!("cluster", namespace = %cluster.namespace().unwrap_or_default(), name = %cluster.name_any());
        let started = Instant::now();
        let pass = Box::pin(reconcile(&ctx, &handles, &cluster, &mut memory));
        let result = pass.instrument(span.clone()).await;
        drop(cluster);
        ctx.metrics.reconciled(
            "etcdcluster",
            started.elapsed(),
            result.as_ref().err().map(Error::metric_label),
        );
        if !passed.swap(true, Ordering::Relaxed) {
            ctx.metrics.cluster_passed(true);
        }
        let delay = match result {
            Ok(d) => {
                retries = backoff();
                span.in_scope(|| debug!(?d, took = ?started.elapsed(), "next look"));
                d
            }
            Err(e) if e.is_invalid() => {
                retries = backoff();
                INVALID_RECHECK
            }
            Err(e) => {
                let delay = retries.next().unwrap_or(Duration::from_secs(60));
                span.in_scope(|| warn!(error = e.metric_label(), ?delay, "reconcile failed: {e}"));
                delay
            }
        };
        tokio::select! {
            changed = spec.changed() => if changed.is_err() { return },
            _ = wake.notified() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_is_bounded() {
        let delays: Vec<Duration> = backoff().take(12).collect();
        assert!(delays[0] >= Duration::from_secs(1));
        assert!(delays[5] > delays[0]);
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(120)));
        let other: Vec<Duration> = backoff().take(12).collect();
        assert_ne!(delays, other, "jitter makes two series differ");
    }
}
