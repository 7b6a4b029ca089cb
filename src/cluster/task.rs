//! The loop of one cluster: observe, plan, act (at most one membership change), write status;
//! then sleep until the spec changes, one of its pods changes, or a timer fires. It keeps no
//! truth of its own: after a restart everything is observed again. What it remembers between
//! passes only paces it: since when members have been unhealthy (observe's [`HealthMemory`]),
//! and when it last wrote the figures that change with every write to etcd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, info, info_span, warn};

use super::act::{self, Outcome};
use super::handles::{Handles, Pass};
use super::observe::{self, HealthMemory, Observed};
use super::plan::{self, Action, Target};
use super::recovery;
use super::resources;
use super::status;
use super::upkeep;
use super::version;
use crate::api::{ClusterPhase, EtcdCluster, EtcdClusterStatus, RestoreHandoff, RestoreRecord};
use crate::kube::cache::{Caches, Expectations};
use crate::kube::invalid::Invalid;
use crate::kube::names::MANAGER;
use crate::report::Reporter;
use crate::tls;

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

/// How long a learner may take to start before its addition is undone.
const LEARNER_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a new member pod may take to answer before silence counts as lost quorum.
const STARTUP_GRACE: Duration = Duration::from_secs(60);

/// How soon to look again while a change is in flight. etcd's refusals (a learner catching up,
/// the 5 s health interval after a promotion) end at moments no event announces, and every
/// second of polling granularity adds to each member's addition; a pass costs a few requests.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(250);
/// How soon to look again at a cluster whose pods are all waiting to run: their events wake it.
const PENDING_POLL: Duration = Duration::from_secs(10);
/// How soon to look again at a cluster that is as asked (or paused). Also the longest that the
/// figures which change with every write (`raftIndex`, `dbSize`) go without being refreshed.
const RESYNC: Duration = Duration::from_secs(30);
/// How often a cluster at rest is looked at while the operator runs few: what no event
/// announces (a NOSPACE alarm, a member whose node died silently) is seen within it.
const RESYNC_FEW: Duration = Duration::from_secs(5);
/// Passes a second that all clusters at rest take together at most, between [`RESYNC_FEW`]
/// and [`RESYNC`] each: 10 clusters are looked at every 5 s, 60 or more every 30 s, so that
/// an operator of a thousand clusters still idles near zero CPU.
const RESTING_PASSES_PER_SECOND: f64 = 2.0;

/// How often each cluster at rest is looked at while the operator runs `clusters`.
fn resync_for(clusters: usize) -> Duration {
    Duration::from_secs_f64(clusters as f64 / RESTING_PASSES_PER_SECOND).clamp(RESYNC_FEW, RESYNC)
}
/// How long a cluster whose members serve, but whose client Service does not reach them yet, is
/// looked at every [`IN_FLIGHT_POLL`]: no event announces that a node's proxy has programmed
/// the Service's endpoints. After that (a proxy that does not work, say), every
/// [`UNSERVED_POLL`].
const UNSERVED_FAST: Duration = Duration::from_secs(30);
/// See [`UNSERVED_FAST`].
const UNSERVED_POLL: Duration = Duration::from_secs(5);
/// How soon to look again at a spec that cannot be acted on: a Secret may be created at any
/// time, and nothing announces it.
const INVALID_RECHECK: Duration = Duration::from_secs(10);

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
        }
    }

    /// Whether the error waits for the user rather than for time.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::Invalid(Invalid { .. }))
    }
}

/// What a task remembers between its passes.
#[derive(Default)]
struct Memory {
    health: HealthMemory,
    /// When the status was last written in full (fast-changing figures included).
    refreshed: Option<Instant>,
    /// Pods and claims this task created or deleted that the caches do not show yet.
    expect: Expectations,
    /// Since when the members have served while clients of the Service were not reached.
    unserved_since: Option<Instant>,
    /// The refusal met by the last pass, and how many passes in a row met it.
    refused: Option<(String, u32)>,
    /// What the last reclaim found when the data did not fit: the revision and the quota it
    /// looked at, and why (for the status, until NOSPACE is gone).
    exhausted: Option<(i64, i64, String)>,
    /// The newest revision a member reported: a recovery from lost quorum raises the restored
    /// revision past it (and reports the difference as what was lost).
    revision_seen: Option<i64>,
    /// The defragmentation schedule armed, and when.
    armed: upkeep::Armed,
    /// The record of the recovery this pass starts, written before its hand-off.
    recovering: Option<crate::api::RecoveryRecord>,
    /// The defragmentation asked for by annotation, as this pass saw it.
    defrag_request: Option<crate::api::DefragRequest>,
    /// The defragmentation the last act made, for the report.
    defragmented: Option<crate::api::DefragmentationRecord>,
}

impl Memory {
    /// Counts one more pass refused with `why` for `action`: 1 for a new refusal.
    fn refused_again(&mut self, action: &Action, why: &str) -> u32 {
        let key = format!("{action:?}: {why}");
        match &mut self.refused {
            Some((k, n)) if *k == key => {
                *n = n.saturating_add(1);
                *n
            }
            _ => {
                self.refused = Some((key, 1));
                1
            }
        }
    }
}

/// How soon to look again after the `n`th pass in a row that etcd refused the same way: soon at
/// first (most refusals end within a second: a learner catching up, the 5 s health interval),
/// then less often, so that a refusal that lasts (a peer etcd does not count as connected) costs
/// neither a request nor a log line every quarter second.
fn refused_poll(n: u32) -> Duration {
    IN_FLIGHT_POLL * 2u32.pow(n.saturating_sub(1).min(3))
}

/// How soon to look again at a cluster that is as asked: at [`RESYNC`] when it is Available;
/// while its members serve but the Service does not reach them yet, soon (see
/// [`UNSERVED_FAST`]).
fn steady_poll(
    status: &EtcdClusterStatus,
    memory: &mut Memory,
    now: Instant,
    resync: Duration,
) -> Duration {
    let unserved =
        crate::api::common::find_condition(&status.conditions, "Available").is_some_and(|c| {
            !c.is_true()
                && matches!(
                    c.reason.as_str(),
                    "EndpointsNotReady" | "ServiceUnreachable" | "UnhealthyEndpoints"
                )
        });
    if !unserved {
        memory.unserved_since = None;
        return resync;
    }
    let since = *memory.unserved_since.get_or_insert(now);
    if now.saturating_duration_since(since) < UNSERVED_FAST {
        IN_FLIGHT_POLL
    } else {
        UNSERVED_POLL
    }
}

/// The status without the figures that change with every write to etcd, for deciding whether
/// a write is due.
fn settled(status: &EtcdClusterStatus) -> EtcdClusterStatus {
    let mut s = status.clone();
    for m in &mut s.member_statuses {
        m.db_size = None;
        m.raft_index = None;
    }
    s
}

/// Whether `new` must be written: something but the fast-changing figures differs from the
/// status on the object, or those figures have not been refreshed for [`RESYNC`].
fn status_due(
    current: Option<&EtcdClusterStatus>,
    new: &EtcdClusterStatus,
    refreshed: Option<Instant>,
    now: Instant,
) -> bool {
    let stale = refreshed.is_none_or(|at| now.saturating_duration_since(at) >= RESYNC);
    current.is_none_or(|c| settled(c) != settled(new)) || (stale && current != Some(new))
}

impl From<tls::Error> for Error {
    fn from(e: tls::Error) -> Self {
        match e {
            tls::Error::Invalid(invalid) => Error::Invalid(invalid),
            e => Error::Tls(e),
        }
    }
}

/// The first problem that keeps the spec from being acted on: a Secret it names that does not
/// exist or cannot be used; then what the pass needs of TLS (see [`tls::prepare`]).
async fn validate(
    handles: &Handles,
    cluster: &EtcdCluster,
    ns: &str,
) -> Result<tls::Material, Error> {
    let secrets = &handles.secrets;
    for (field, name) in resources::referenced_secrets(&cluster.spec) {
        match secrets.exists(&name).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::Invalid(Invalid {
                    reason: "SecretNotFound",
                    message: format!("{field}: Secret {ns}/{name} does not exist"),
                }));
            }
            Err(source) => return Err(Error::ReadSecret { name, source }),
        }
    }
    Ok(tls::prepare(secrets, cluster, time::OffsetDateTime::now_utc()).await?)
}

/// The cluster as the actions must build it: the spec, unless its version is not a step etcd
/// allows from what the members run; then what [`version::held_back`] keeps. Returns the
/// message that reports the held-back change, naming the field.
fn effective_spec(cluster: &EtcdCluster, obs: &Observed) -> (EtcdCluster, Option<String>) {
    let running: Vec<&str> = obs.statuses.values().map(|s| s.version.as_str()).collect();
    let live: Vec<String> = obs
        .pods
        .values()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(observe::etcd_image)
        .collect();
    let Some(held) = version::held_back(cluster.spec.version(), &running, &live) else {
        return (cluster.clone(), None);
    };
    let mut effective = cluster.clone();
    effective.spec.repository = Some(held.repository);
    effective.spec.version = Some(held.version);
    let keep = effective.spec.image();
    let message = format!(
        "spec.version: {}; members keep {keep} until the upgrade to {} is allowed",
        held.why,
        cluster.spec.version()
    );
    (effective, Some(message))
}

/// Whether the last reclaim found that the data does not fit and nothing changed since (the
/// same revision, the same quota the members run with), for the planner; forgotten once
/// NOSPACE is gone. Returns the revision and quota looked at now.
fn space_exhausted(obs: &mut Observed, memory: &mut Memory) -> (i64, i64) {
    let space = (
        obs.statuses.values().map(|s| s.revision).max().unwrap_or(0),
        observe::running_quota(obs),
    );
    if obs.plan.nospace.is_empty() {
        memory.exhausted = None;
    }
    obs.plan.space_exhausted = memory
        .exhausted
        .as_ref()
        .is_some_and(|(revision, quota, _)| (*revision, *quota) == space);
    space
}

/// One pass: observe, plan, act, report. Returns how soon to look again.
async fn reconcile(
    ctx: &Context,
    handles: &Handles,
    cluster: &EtcdCluster,
    memory: &mut Memory,
) -> Result<Duration, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    // A cache behind the task's own writes would have it, say, bootstrap a second seed:
    // until it shows them, the pods and claims are listed from the API server.
    let cached = ctx
        .caches
        .show(&ns, &cluster.name_any(), &mut memory.expect);
    let material = match validate(handles, cluster, &ns).await {
        Ok(m) => m,
        Err(e) => {
            if let Error::Invalid(Invalid { reason, message }) = &e {
                report_invalid(ctx, handles, cached, cluster, memory, reason, message).await?;
            }
            return Err(e);
        }
    };
    let pass = Pass::new(handles, &material, cached);
    // Prepare: the Services every member's address depends on, before anything is observed.
    if !cluster.spec.is_paused() {
        act::ensure_services(handles, cluster).await?;
    }
    let mut obs: Observed = observe::observe(
        handles,
        pass.cached,
        cluster,
        material.client.clone(),
        &mut memory.health,
    )
    .await?;
    let space = space_exhausted(&mut obs, memory);
    let (effective, pin) = effective_spec(cluster, &obs);
    observe::mark_current(&mut obs, &effective, &material.revision);
    obs.plan.ca_rotation_due =
        tls::rotation_due(&material, cluster, time::OffsetDateTime::now_utc());
    let restore = pending_restore(ctx, handles, &pass, cluster, memory).await?;
    let action = decide(ctx, handles, cluster, &mut obs, restore.as_ref(), memory).await?;
    // Every pass at debug level: what a slow reaction spent its time on (LOG_LEVEL).
    debug!(?action, "pass");
    early_status(ctx, cluster, &obs, &action, memory).await?;
    let outcome = act::act(&pass, &effective, &obs, &action).await;
    after_act(&pass, &action, &outcome, space, memory);
    let new_status = report(
        ctx,
        cluster,
        &obs,
        &action,
        &outcome,
        restore.as_ref(),
        &pin,
        memory,
    )
    .await?;
    if matches!(action, Action::QuorumLost { .. }) {
        return Ok(Duration::from_secs(5));
    }
    next_look(ctx, cluster, &obs, &action, outcome, &new_status, memory).await
}

/// The restore handed over, if any, once its source vouches for it
/// ([`crate::api::handoff`]); one that is malformed, forged or replayed is reported
/// (`InvalidRestore`) and ends the pass before anything is touched.
async fn pending_restore(
    ctx: &Context,
    handles: &Handles,
    pass: &Pass<'_>,
    cluster: &EtcdCluster,
    memory: &mut Memory,
) -> Result<Option<RestoreHandoff>, Error> {
    let pending = crate::kube::handoff::pending(&handles.restores, cluster)
        .await
        .map_err(Error::ReadRestore)?;
    match pending {
        Some(Ok(verified)) => Ok(Some(verified.handoff)),
        Some(Err(message)) => {
            let reason = "InvalidRestore";
            report_invalid(ctx, handles, pass.cached, cluster, memory, reason, &message).await?;
            Err(Error::Invalid(Invalid { reason, message }))
        }
        None => Ok(None),
    }
}

/// What the status must say before the act: why writes are refused, before a NOSPACE reclaim
/// (a defragmentation per voter, seconds to minutes); what a recovery chose, before its
/// hand-off (an operator that stops right after the hand-off would otherwise never record it,
/// and its successor only carries the recovery on).
async fn early_status(
    ctx: &Context,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    memory: &mut Memory,
) -> Result<(), Error> {
    let recovering = matches!(
        action,
        Action::RecoverFromMember { .. } | Action::RecoverFromBackup { .. }
    );
    if *action != Action::ReclaimSpace && !recovering {
        return Ok(());
    }
    let mut early = status::compute(cluster, obs, action);
    if recovering {
        let seen = memory.revision_seen;
        recovery::report(cluster, obs, action, true, &mut early, seen, None);
        memory.recovering = early.recovery.clone();
    }
    write_status_if_due(ctx, cluster, &early, memory).await
}

/// What the act stage leaves for the next passes: the writes to expect in the caches, what a
/// space reclaim found, the defragmentation made.
fn after_act(
    pass: &Pass<'_>,
    action: &Action,
    outcome: &Result<Outcome, act::Error>,
    space: (i64, i64),
    memory: &mut Memory,
) {
    if *action == Action::ReclaimSpace {
        memory.exhausted = match outcome {
            Ok(Outcome::Retry(why)) => Some((space.0, space.1, why.clone())),
            _ => None,
        };
    }
    memory.expect.add(pass.take_writes());
    memory.defragmented = pass
        .defragmented
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
}

/// Tells the snapshot server where the member a recovery restores from is, while one is
/// pending (and forgets it otherwise).
fn register_source(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    restore: Option<&RestoreHandoff>,
) {
    let source = restore
        .filter(|h| !h.member.is_empty())
        .and_then(|h| Some((h.member.clone(), obs.pod_endpoint(&h.member)?)));
    handles.sources.set(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        source,
    );
}

/// What the planner sees as the wanted state.
fn target_of(ctx: &Context, cluster: &EtcdCluster, obs: &Observed) -> Target {
    Target {
        size: cluster.spec.members(),
        paused: cluster.spec.is_paused(),
        persistent: cluster
            .spec
            .pod
            .as_ref()
            .is_some_and(|p| p.persistent_volume_claim_spec.is_some()),
        learner_timeout: LEARNER_TIMEOUT,
        startup_grace: STARTUP_GRACE,
        replace_after: ctx.timings.replace_unhealthy_after,
        quorum_grace: ctx.timings.quorum_grace,
        node_grace: ctx.timings.node_loss_grace,
        volume_loss_after: ctx.timings.volume_loss_after,
        max_learners: observe::max_learners(obs),
        spread: cluster.spec.pod.as_ref().is_none_or(|p| {
            p.persistent_volume_claim_spec.is_none()
                && p.node_selector.is_empty()
                && p.affinity.is_none()
                && !p.anti_affinity.unwrap_or(false)
        }),
    }
}

/// The plan stage: the one action of this pass. A restore handed over by the restore
/// controller replaces the normal plan until its seed serves; the cluster then grows back by
/// the normal plan.
async fn decide(
    ctx: &Context,
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &mut Observed,
    restore: Option<&RestoreHandoff>,
    memory: &mut Memory,
) -> Result<Action, Error> {
    register_source(handles, cluster, obs, restore);
    let now = Timestamp::now();
    memory.defrag_request = upkeep::requested(cluster, now);
    let request = memory.defrag_request.as_ref();
    obs.plan.defrag_due = upkeep::due(cluster, obs, &mut memory.armed, request, now);
    memory.revision_seen = obs
        .statuses
        .values()
        .map(|s| s.revision)
        .chain(memory.revision_seen)
        .max();
    let action = plan_stage(ctx, handles, cluster, obs, restore).await?;
    let target = target_of(ctx, cluster, obs);
    let seen = memory.revision_seen;
    Ok(recovery::consider(handles, cluster, obs, &target, action, seen).await?)
}

/// The planner's action (the restore's while one is pending), checked again against fresh
/// pods before a removal.
async fn plan_stage(
    ctx: &Context,
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &mut Observed,
    restore: Option<&RestoreHandoff>,
) -> Result<Action, Error> {
    let target = target_of(ctx, cluster, obs);
    let action = match restore {
        Some(handoff) => plan::restore(
            &obs.plan,
            &target,
            &plan::RestoreTarget {
                uid: handoff.uid.clone(),
                url: handles.snapshot_url_of(cluster),
                gate: handles.gate_image.is_some(),
                source: (!handoff.member.is_empty()).then(|| handoff.member.clone()),
            },
        ),
        None => plan::plan(&obs.plan, &target),
    };
    if !matches!(
        action,
        Action::RemoveMember { .. } | Action::ReplaceMember { .. }
    ) {
        return Ok(action);
    }
    // Immediately before a removal, the pods are listed again: one deleted since the
    // observation must not count as a healthy voter's.
    observe::recheck_pods(&handles.pods, cluster, &mut obs.plan).await?;
    let again = plan::plan(&obs.plan, &target);
    if again == action {
        return Ok(action);
    }
    info!(planned = ?action, now = ?again, "pods changed under a planned removal");
    Ok(Action::Wait {
        reason: "pods changed under a planned removal; looking again".into(),
    })
}

/// The status stage: the status this pass computed, written when due, and the warnings it
/// carries published once. Returns the status.
#[allow(clippy::too_many_arguments)]
async fn report(
    ctx: &Context,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    outcome: &Result<Outcome, act::Error>,
    restore: Option<&RestoreHandoff>,
    pin: &Option<String>,
    memory: &mut Memory,
) -> Result<EtcdClusterStatus, Error> {
    let mut new_status = status::compute(cluster, obs, action);
    new_status.restore = restore_record(action, outcome, restore).or(new_status.restore);
    if let Some(message) = pin {
        mark_degraded(&mut new_status, "UpgradeBlocked", message);
    }
    let started = matches!(outcome, Ok(Outcome::Done(_)));
    let seen = memory.revision_seen;
    let early = memory.recovering.take();
    let recovered = recovery::report(cluster, obs, action, started, &mut new_status, seen, early);
    new_status.defragmentations = defragmentations(ctx, cluster, &new_status, memory);
    if let Some(request) = memory.defrag_request.clone() {
        new_status.defrag_request = Some(upkeep::settle(request, &new_status));
    }
    // A schedule croner cannot read (the schema checks only its shape): no defragmentation,
    // everything else goes on.
    let bad_schedule = upkeep::schedule(cluster).err();
    if let Some(why) = &bad_schedule {
        mark_degraded(&mut new_status, "InvalidSpec", why);
    }
    if let (Action::RotateCa, Ok(Outcome::Done(Some(step)))) = (action, outcome) {
        status::mark_rotating(&mut new_status, cluster.metadata.generation, step);
    }
    // The data itself, compacted, leaves too little of the quota: nothing is disarmed, and
    // the status says why for as long as the alarm stays.
    let exceeded = memory
        .exhausted
        .as_ref()
        .filter(|_| !obs.plan.nospace.is_empty())
        .map(|(_, _, why)| why.clone());
    if let Some(why) = &exceeded {
        mark_degraded(&mut new_status, "QuotaExceeded", why);
    }
    record_state(ctx, cluster, &new_status);
    let was_failed = cluster.status.as_ref().and_then(|s| s.phase) == Some(ClusterPhase::Failed);
    write_status_if_due(ctx, cluster, &new_status, memory).await?;

    let warning = match (action, pin) {
        (Action::RollStalled { reason }, _) => Some(("RollStalled", reason)),
        _ if exceeded.is_some() => exceeded.as_ref().map(|why| ("QuotaExceeded", why)),
        (_, Some(message)) => Some(("UpgradeBlocked", message)),
        _ => bad_schedule.as_ref().map(|why| ("InvalidSpec", why)),
    };
    if let Some((reason, message)) = warning
        && !already_reported(cluster, reason, message)
    {
        ctx.events
            .publish(cluster, EventType::Warning, reason, message.clone())
            .await;
    }
    if let Action::QuorumLost { reason } = action
        && !was_failed
    {
        warn!(reason, "quorum lost");
        let message = reason.clone();
        ctx.events
            .publish(cluster, EventType::Warning, "QuorumLost", message)
            .await;
    }
    if let Some(r) = recovered {
        let message = format!("the rebuilt cluster serves: {}", recovery::summary(&r));
        ctx.events
            .publish(cluster, EventType::Normal, "Recovered", message)
            .await;
    }
    Ok(new_status)
}

/// The status's defragmentation records, with the one this pass made (also counted in the
/// metrics).
fn defragmentations(
    ctx: &Context,
    cluster: &EtcdCluster,
    status: &EtcdClusterStatus,
    memory: &mut Memory,
) -> Vec<crate::api::DefragmentationRecord> {
    let made = memory.defragmented.take();
    if let Some(d) = &made {
        let ns = cluster.namespace().unwrap_or_default();
        let seconds = d.milliseconds as f64 / 1000.0;
        let reclaimed = d.size_before - d.size_after;
        ctx.metrics
            .defragmented(&ns, &cluster.name_any(), seconds, reclaimed);
    }
    upkeep::records(cluster, status, made)
}

/// The record of the restore under way, if one is.
fn restore_record(
    action: &Action,
    outcome: &Result<Outcome, act::Error>,
    restore: Option<&RestoreHandoff>,
) -> Option<RestoreRecord> {
    let handoff = restore?;
    let completed = matches!(
        (action, outcome),
        (Action::RestoreDone { .. }, Ok(Outcome::Done(_)))
    );
    Some(RestoreRecord {
        name: handoff.name.clone(),
        uid: handoff.uid.clone(),
        seed: match action {
            Action::RestoreDone { seed } => seed.clone(),
            _ => String::new(),
        },
        completed,
    })
}

/// What the action's outcome means for the next pass: its Event, and how soon to look again.
async fn next_look(
    ctx: &Context,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    outcome: Result<Outcome, act::Error>,
    new_status: &EtcdClusterStatus,
    memory: &mut Memory,
) -> Result<Duration, Error> {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            let message = format!("{action:?}: {e}");
            ctx.events
                .publish(cluster, EventType::Warning, "ReconcileFailed", message)
                .await;
            return Err(e.into());
        }
    };
    match &outcome {
        Outcome::Done(Some(change)) => {
            info!(?action, "{change}");
            let ns = cluster.namespace().unwrap_or_default();
            match action {
                Action::RotateCa => {}
                Action::ReclaimSpace | Action::Defragment { .. } => {
                    ctx.metrics
                        .maintenance(&ns, &cluster.name_any(), reason_of(action))
                }
                _ => ctx
                    .metrics
                    .membership_change(&ns, &cluster.name_any(), reason_of(action)),
            }
            ctx.events
                .publish_related(
                    cluster,
                    member_pod_ref(cluster, action),
                    EventType::Normal,
                    reason_of(action),
                    change.clone(),
                )
                .await;
        }
        Outcome::Retry(why) => {
            let n = memory.refused_again(action, why);
            // The first refusal, then the 2nd, 4th, 8th...: a lasting one stays visible
            // without filling the log.
            if n.is_power_of_two() {
                info!(?action, passes = n, "not yet: {why}");
            } else {
                debug!(?action, passes = n, "not yet: {why}");
            }
            return Ok(refused_poll(n));
        }
        Outcome::Done(None) => {}
    }
    memory.refused = None;
    Ok(next_pass(&obs.plan, action, &outcome).unwrap_or_else(|| {
        let clusters = ctx.tasks.load(std::sync::atomic::Ordering::Relaxed);
        steady_poll(new_status, memory, Instant::now(), resync_for(clusters))
    }))
}

/// How soon to look again after `outcome` of `action` on `obs`; `None` for a steady cluster,
/// whose poll depends on what its status says ([`steady_poll`]).
fn next_pass(obs: &plan::Observation, action: &Action, outcome: &Outcome) -> Option<Duration> {
    Some(match (outcome, action) {
        // Something changed, or etcd refused for now: the next step, shortly.
        (Outcome::Done(Some(_)) | Outcome::Retry(_), _) => IN_FLIGHT_POLL,
        (Outcome::Done(None), Action::Steady) => return None,
        (Outcome::Done(None), Action::Paused) => RESYNC,
        // Waits for the user (a spec change) or for the stuck pod's own events, which wake the
        // task; polling it fast would only repeat the same observation.
        (Outcome::Done(None), Action::RollStalled { .. }) => INVALID_RECHECK,
        // Nothing runs yet (scheduling, pulling): the pods' own events wake the task when that
        // changes; polling would only repeat the observation (2 passes a second per cluster).
        (Outcome::Done(None), _)
            if obs.members.is_none()
                && !obs.pods.is_empty()
                && obs.pods.iter().all(|p| p.state == plan::PodState::Pending) =>
        {
            PENDING_POLL
        }
        (Outcome::Done(None), _) => 2 * IN_FLIGHT_POLL,
    })
}

fn mark_degraded(status: &mut EtcdClusterStatus, reason: &str, message: &str) {
    for c in status
        .conditions
        .iter_mut()
        .filter(|c| c.type_ == "Degraded")
    {
        c.status = "True".into();
        c.reason = reason.into();
        c.message = message.into();
    }
}

/// Whether the object's status already carries this Degraded reason and message, so its Event
/// is published once per problem, not on every look.
fn already_reported(cluster: &EtcdCluster, reason: &str, message: &str) -> bool {
    cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Degraded" && c.reason == reason && c.message == message)
}

/// The pod of the member an action is about, for its Event.
fn member_pod_ref(cluster: &EtcdCluster, action: &Action) -> Option<ObjectReference> {
    let name = match action {
        Action::JoinMembers { names } => names.first()?,
        Action::Promote { name, .. }
        | Action::RemoveMember { name, .. }
        | Action::ReplaceMember { name, .. }
        | Action::RecreatePod { name }
        | Action::DeletePod { name, .. }
        | Action::MoveLeader { from: name, .. } => name,
        _ => return None,
    };
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.clone()),
        namespace: cluster.namespace(),
        ..ObjectReference::default()
    })
}

/// Reports a spec the operator cannot act on (a Degraded condition and a Warning Event naming
/// the field) and changes nothing.
async fn report_invalid(
    ctx: &Context,
    handles: &Handles,
    cached: bool,
    cluster: &EtcdCluster,
    memory: &mut Memory,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    // The client certificate may still be usable when another TLS Secret is not, and without
    // it the status would call every member of a TLS cluster silent.
    let tls = tls::cluster_client(&handles.secrets, cluster)
        .await
        .ok()
        .flatten();
    let obs = observe::observe(handles, cached, cluster, tls, &mut memory.health).await?;
    let wait = Action::Wait {
        reason: message.into(),
    };
    let mut new_status = status::compute(cluster, &obs, &wait);
    mark_degraded(&mut new_status, reason, message);
    record_state(ctx, cluster, &new_status);
    write_status_if_due(ctx, cluster, &new_status, memory).await?;
    if !already_reported(cluster, reason, message) {
        ctx.events
            .publish(cluster, EventType::Warning, reason, message.into())
            .await;
    }
    Ok(())
}

/// Writes the status when it changed (see [`status_due`]); never otherwise, so that a busy
/// cluster's raft index does not turn every pass into a write, and every write into a watch
/// event.
async fn write_status_if_due(
    ctx: &Context,
    cluster: &EtcdCluster,
    status: &EtcdClusterStatus,
    memory: &mut Memory,
) -> Result<(), Error> {
    let now = Instant::now();
    if !status_due(cluster.status.as_ref(), status, memory.refreshed, now) {
        return Ok(());
    }
    crate::report::apply_status(&ctx.client, cluster, MANAGER, status)
        .await
        .map_err(Error::WriteStatus)?;
    memory.refreshed = Some(now);
    Ok(())
}

fn record_state(ctx: &Context, cluster: &EtcdCluster, status: &EtcdClusterStatus) {
    let phase = status
        .phase
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "None".into());
    let available = crate::api::common::find_condition(&status.conditions, "Available")
        .is_some_and(|c| c.is_true());
    ctx.metrics.cluster_state(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        &phase,
        (
            i64::from(status.ready_members.unwrap_or(0)),
            i64::from(cluster.spec.size),
            available,
        ),
    );
}

fn reason_of(action: &Action) -> &'static str {
    match action {
        Action::Bootstrap => "SeedCreated",
        Action::AddMembers { .. } | Action::JoinMembers { .. } => "MemberAdded",
        Action::SpreadMember { .. }
        | Action::RemoveMember {
            reason: plan::RemoveReason::Spread,
            ..
        } => "MembersSpread",
        Action::ReplaceMember { .. } => "MemberReplaced",
        Action::Promote { .. } => "MemberPromoted",
        Action::RemoveMember {
            reason:
                plan::RemoveReason::Unhealthy
                | plan::RemoveReason::DataGone
                | plan::RemoveReason::NodeLost,
            ..
        } => "MemberReplaced",
        Action::RemoveMember {
            reason: plan::RemoveReason::Outdated,
            ..
        }
        | Action::DeletePod {
            reason: plan::DeleteReason::Outdated,
            ..
        } => "MemberRolled",
        Action::MoveLeader { .. } => "LeaderMoved",
        Action::DeleteClaim { .. } => "ClaimDeleted",
        Action::RemoveMember { .. } => "MemberRemoved",
        Action::RecreatePod { .. } => "PodRecreated",
        Action::DeletePod {
            reason: plan::DeleteReason::Restore,
            ..
        } => "RestoreReplacingMembers",
        Action::DeletePod { .. } => "PodDeleted",
        Action::RestoreSeed => "RestoreSeedCreated",
        Action::ReclaimSpace => "SpaceReclaimed",
        Action::Defragment { .. } => "Defragmented",
        Action::RestoreDone { .. } => "RestoreSeedServing",
        Action::WithdrawRestore { .. } => "RecoveryWithdrawn",
        Action::RecoverFromMember { .. } => "ForceNewCluster",
        Action::RecoverFromBackup { .. } => "RestoringFromBackup",
        Action::RotateCa => "CertificatesRotating",
        _ => "Reconciled",
    }
}

/// Backoff after transient failures: exponential from 1 s to 60 s, with jitter so that clusters
/// failing together (the API server restarting) do not retry together.
fn backoff() -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder;
    crate::kube::exponential(Duration::from_secs(1), Duration::from_secs(60)).build()
}

/// Runs the loop of one cluster until its spec channel closes (the cluster was deleted).
pub async fn run(ctx: Arc<Context>, mut spec: watch::Receiver<EtcdCluster>, wake: Arc<Notify>) {
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
        let cluster = spec.borrow_and_update().clone();
        let span = info_span!("cluster", namespace = %cluster.namespace().unwrap_or_default(), name = %cluster.name_any());
        let started = Instant::now();
        let result = reconcile(&ctx, &handles, &cluster, &mut memory)
            .instrument(span.clone())
            .await;
        ctx.metrics.reconciled(
            "etcdcluster",
            started.elapsed(),
            result.as_ref().err().map(Error::metric_label),
        );
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
    fn the_next_pass_comes_soon_while_something_moves_and_late_while_waiting_for_events() {
        let obs = plan::Observation::default();
        let done = Outcome::Done(Some("added".into()));
        let nothing = Outcome::Done(None);
        let add = Action::AddMembers {
            count: 1,
            avoid: vec![],
        };
        assert_eq!(next_pass(&obs, &add, &done), Some(IN_FLIGHT_POLL));
        let retry = Outcome::Retry("settling".into());
        assert_eq!(next_pass(&obs, &add, &retry), Some(IN_FLIGHT_POLL));
        assert_eq!(next_pass(&obs, &Action::Steady, &nothing), None);
        assert_eq!(next_pass(&obs, &Action::Paused, &nothing), Some(RESYNC));
        let stalled = Action::RollStalled {
            reason: "m2 does not start".into(),
        };
        assert_eq!(next_pass(&obs, &stalled, &nothing), Some(INVALID_RECHECK));
        let wait = Action::Wait {
            reason: "learner starting".into(),
        };
        assert_eq!(next_pass(&obs, &wait, &nothing), Some(2 * IN_FLIGHT_POLL));
        // Every pod still scheduling or pulling, no member answers: their events wake the task.
        let pending = plan::Observation {
            pods: vec![plan::PodView {
                name: "m1".into(),
                state: plan::PodState::Pending,
                age: Duration::ZERO,
                joining: None,
                restore: None,
                current: true,
                failing: None,
                node_lost: None,
                node: None,
            }],
            ..plan::Observation::default()
        };
        assert_eq!(next_pass(&pending, &wait, &nothing), Some(PENDING_POLL));
    }
    use crate::api::{EtcdClusterSpec, MemberStatus};

    fn with_index(raft_index: i64) -> EtcdClusterStatus {
        EtcdClusterStatus {
            ready_members: Some(3),
            member_statuses: vec![MemberStatus {
                name: "m1".into(),
                raft_index: Some(raft_index),
                db_size: Some(raft_index * 100),
                healthy: true,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_cluster_not_reached_through_its_service_is_looked_at_soon_then_less_often() {
        let status = |available: &str, reason: &str| EtcdClusterStatus {
            conditions: vec![crate::api::Condition {
                type_: "Available".into(),
                status: available.into(),
                reason: reason.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut memory = Memory::default();
        let t0 = Instant::now();
        let unserved = status("False", "ServiceUnreachable");
        assert_eq!(
            steady_poll(&unserved, &mut memory, t0, RESYNC),
            IN_FLIGHT_POLL
        );
        let later = t0 + UNSERVED_FAST;
        assert_eq!(
            steady_poll(&unserved, &mut memory, later, RESYNC),
            UNSERVED_POLL
        );
        let served = status("True", "QuorumHealthy");
        assert_eq!(steady_poll(&served, &mut memory, later, RESYNC), RESYNC);
        // Served again: the fast looks start over.
        let unready = status("False", "EndpointsNotReady");
        assert_eq!(
            steady_poll(&unready, &mut memory, later, RESYNC),
            IN_FLIGHT_POLL
        );
        // Lost quorum is not waited for here.
        let lost = status("False", "QuorumUnavailable");
        assert_eq!(steady_poll(&lost, &mut memory, later, RESYNC), RESYNC);
    }

    #[test]
    fn a_few_clusters_at_rest_are_looked_at_often_and_many_less_often() {
        assert_eq!(resync_for(1), RESYNC_FEW);
        assert_eq!(resync_for(10), RESYNC_FEW);
        assert_eq!(resync_for(20), Duration::from_secs(10));
        assert_eq!(resync_for(60), RESYNC);
        assert_eq!(resync_for(1000), RESYNC);
    }

    #[test]
    fn a_busy_clusters_raft_index_is_written_only_at_the_resync_interval() {
        let now = Instant::now();
        let written = Some(now);
        // Only the raft index and database size moved: not due until RESYNC has passed.
        assert!(!status_due(
            Some(&with_index(10)),
            &with_index(11),
            written,
            now + Duration::from_secs(1)
        ));
        assert!(status_due(
            Some(&with_index(10)),
            &with_index(11),
            written,
            now + RESYNC
        ));
        // Nothing moved at all: never due, however long.
        assert!(!status_due(
            Some(&with_index(10)),
            &with_index(10),
            written,
            now + 10 * RESYNC
        ));
        // Anything else moved: due at once.
        let mut fewer = with_index(11);
        fewer.ready_members = Some(2);
        assert!(status_due(
            Some(&with_index(10)),
            &fewer,
            written,
            now + Duration::from_secs(1)
        ));
        // No status yet, or a restarted operator (never refreshed): due.
        assert!(status_due(None, &with_index(1), written, now));
        assert!(status_due(
            Some(&with_index(10)),
            &with_index(11),
            None,
            now
        ));
    }

    #[test]
    fn a_version_step_etcd_does_not_allow_keeps_the_newest_running_image() {
        use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
        let cluster = |version: &str| {
            EtcdCluster::new(
                "example",
                EtcdClusterSpec {
                    size: 3,
                    version: Some(version.into()),
                    ..Default::default()
                },
            )
        };
        let observed = |running: &[&str]| {
            let mut obs = Observed::default();
            for (i, v) in running.iter().enumerate() {
                let name = format!("m{i}");
                obs.pods.insert(
                    name.clone(),
                    Pod {
                        spec: Some(PodSpec {
                            containers: vec![Container {
                                name: "etcd".into(),
                                image: Some(format!("quay.io/coreos/etcd:v{v}")),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                );
                obs.statuses.insert(
                    i as u64,
                    crate::etcd::Status {
                        member_id: i as u64,
                        cluster_id: 1,
                        leader: 1,
                        version: v.to_string(),
                        db_size: 0,
                        db_size_in_use: 0,
                        raft_index: 0,
                        raft_term: 1,
                        revision: 1,
                        raft_applied_index: 0,
                        is_learner: false,
                        errors: vec![],
                    },
                );
            }
            obs
        };
        // A step etcd allows: the spec as it is.
        let (same, none) = effective_spec(&cluster("3.5.35"), &observed(&["3.4.23"; 3]));
        assert_eq!(same.spec.image(), "quay.io/coreos/etcd:v3.5.35");
        assert!(none.is_none());
        // 3.6 asked for while the 3.4 -> 3.5 roll is under way: it finishes on 3.5 first.
        let (effective, message) = effective_spec(
            &cluster("3.6.16"),
            &observed(&["3.4.23", "3.5.35", "3.4.23"]),
        );
        assert_eq!(effective.spec.image(), "quay.io/coreos/etcd:v3.5.35");
        let message = message.unwrap();
        assert!(message.starts_with("spec.version:"), "{message}");
        assert!(message.contains("still runs 3.4.23"), "{message}");
        // From a 3.5 release etcd does not support for the step to 3.6.
        let (effective, message) = effective_spec(&cluster("3.6.16"), &observed(&["3.5.21"; 3]));
        assert_eq!(effective.spec.image(), "quay.io/coreos/etcd:v3.5.21");
        assert!(message.unwrap().contains("3.5.32 or later"));
        // Nothing runs yet: the spec's image.
        let (fresh, none) = effective_spec(&cluster("3.6.16"), &Observed::default());
        assert_eq!(fresh.spec.image(), "quay.io/coreos/etcd:v3.6.16");
        assert!(none.is_none());
    }

    #[test]
    fn a_lasting_refusal_is_looked_at_less_often_and_a_new_one_soon_again() {
        let mut memory = Memory::default();
        let add = Action::AddMembers {
            count: 1,
            avoid: vec![],
        };
        let polls: Vec<Duration> = (0..6)
            .map(|_| refused_poll(memory.refused_again(&add, "unhealthy cluster")))
            .collect();
        let ms: Vec<u128> = polls.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 2000, 2000]);
        // Another refusal (or another action) starts again from the fastest look.
        assert_eq!(memory.refused_again(&add, "learner not ready"), 1);
        assert_eq!(
            memory.refused_again(&Action::Steady, "learner not ready"),
            1
        );
    }

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
