//! The loop of one cluster: observe, plan, act (at most one membership change), write status;
//! then sleep until the spec changes, one of its pods changes, or a timer fires. It keeps no
//! truth of its own: after a restart everything is observed again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{Instrument, info, info_span, warn};

use super::act::{self, Apis, Outcome};
use super::observe::{self, Observed};
use super::plan::{self, Action, Target};
use super::resources::{self, MANAGER};
use super::status;
use crate::api::{ClusterPhase, EtcdCluster};

/// Shared by every cluster task.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Publishes Kubernetes Events.
    pub recorder: Recorder,
    /// The process's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The operator's own image, whose `etcd-gate` new member pods run (see
    /// [`super::resources::Gate`]).
    pub gate_image: Option<String>,
}

/// How long a learner may take to start before its addition is undone.
const LEARNER_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a new member pod may take to answer before silence counts as lost quorum.
const STARTUP_GRACE: Duration = Duration::from_secs(60);

/// How soon to look again while a change is in flight. etcd's refusals (a learner catching up,
/// the 5 s health interval after a promotion) end at moments no event announces, and every
/// second of polling granularity adds to each member's addition; a pass costs a few requests.
const IN_FLIGHT: Duration = Duration::from_millis(250);

/// One pass. Returns how soon to look again.
async fn reconcile(ctx: &Context, cluster: &EtcdCluster) -> Result<Duration, String> {
    let ns = cluster.namespace().unwrap_or_default();
    let apis = Apis {
        pods: Api::namespaced(ctx.client.clone(), &ns),
        services: Api::<Service>::namespaced(ctx.client.clone(), &ns),
        pvcs: Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns),
        slices: Api::namespaced(ctx.client.clone(), &ns),
        gate_image: ctx.gate_image.clone(),
    };
    let paused = cluster.spec.is_paused();
    if let Some(missing) = missing_secret(ctx, cluster, &ns).await? {
        return report_invalid(ctx, cluster, &apis, "SecretNotFound", missing).await;
    }
    if !paused {
        act::ensure_services(&apis, cluster)
            .await
            .map_err(|e| e.to_string())?;
    }
    let obs: Observed = observe::observe(&apis.pods, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let target = Target {
        size: cluster.spec.size.max(0) as usize,
        paused,
        persistent: cluster
            .spec
            .pod
            .as_ref()
            .is_some_and(|p| p.persistent_volume_claim_spec.is_some()),
        learner_timeout: LEARNER_TIMEOUT,
        startup_grace: STARTUP_GRACE,
    };
    let action = plan::plan(&obs.plan, &target);
    let outcome = act::act(&apis, cluster, &obs, &action).await;

    let new_status = status::compute(cluster, &obs, &action);
    record_state(ctx, cluster, &new_status);
    let was_failed = cluster.status.as_ref().and_then(|s| s.phase) == Some(ClusterPhase::Failed);
    let patch = serde_json::json!({
        "apiVersion": EtcdCluster::api_version(&()),
        "kind": EtcdCluster::kind(&()),
        "status": new_status,
    });
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    clusters
        .patch_status(
            &cluster.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|e| format!("writing status: {e}"))?;

    let reference = cluster.object_ref(&());
    let publish = |type_, reason: &str, note: String| {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        let reference = reference.clone();
        async move {
            if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
                warn!("publishing an event: {e}");
            }
        }
    };
    if let Action::QuorumLost { reason } = &action {
        if !was_failed {
            warn!(reason, "quorum lost");
            publish(EventType::Warning, "QuorumLost", reason.clone()).await;
        }
        return Ok(Duration::from_secs(5));
    }
    match outcome {
        Ok(Outcome::Done(Some(change))) => {
            info!(?action, "{change}");
            ctx.metrics
                .membership_change(&ns, &cluster.name_any(), reason_of(&action));
            publish(EventType::Normal, reason_of(&action), change).await;
            Ok(IN_FLIGHT)
        }
        Ok(Outcome::Done(None)) if action == Action::Steady || action == Action::Paused => {
            Ok(Duration::from_secs(30))
        }
        Ok(Outcome::Done(None)) => Ok(2 * IN_FLIGHT),
        Ok(Outcome::Retry(why)) => {
            info!(?action, "not yet: {why}");
            Ok(IN_FLIGHT)
        }
        Err(e) => {
            publish(
                EventType::Warning,
                "ReconcileFailed",
                format!("{action:?}: {e}"),
            )
            .await;
            Err(e.to_string())
        }
    }
}

/// The first Secret the spec names that does not exist, as a message naming the field.
async fn missing_secret(
    ctx: &Context,
    cluster: &EtcdCluster,
    ns: &str,
) -> Result<Option<String>, String> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    for (field, name) in resources::referenced_secrets(&cluster.spec) {
        match secrets.get_metadata_opt(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(Some(format!("{field}: Secret {ns}/{name} does not exist"))),
            Err(e) => return Err(format!("reading Secret {name}: {e}")),
        }
    }
    Ok(None)
}

/// Reports a spec the operator cannot act on (a Degraded condition and a Warning Event naming
/// the field) and changes nothing; the task wakes again on the next spec change or timer.
async fn report_invalid(
    ctx: &Context,
    cluster: &EtcdCluster,
    apis: &Apis,
    reason: &str,
    message: String,
) -> Result<Duration, String> {
    let obs = observe::observe(&apis.pods, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let wait = Action::Wait {
        reason: message.clone(),
    };
    let mut new_status = status::compute(cluster, &obs, &wait);
    record_state(ctx, cluster, &new_status);
    for c in new_status
        .conditions
        .iter_mut()
        .filter(|c| c.type_ == "Degraded")
    {
        c.status = "True".into();
        c.reason = reason.into();
        c.message = message.clone();
    }
    write_status(ctx, cluster, &new_status).await?;
    let previous = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let reported = previous
        .iter()
        .any(|c| c.type_ == "Degraded" && c.reason == reason && c.message == message);
    // The Event is published once per problem, not on every look.
    if !reported {
        let ev = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message),
            action: "Validate".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await {
            warn!("publishing an event: {e}");
        }
    }
    Ok(Duration::from_secs(10))
}

async fn write_status(
    ctx: &Context,
    cluster: &EtcdCluster,
    status: &crate::api::EtcdClusterStatus,
) -> Result<(), String> {
    let patch = serde_json::json!({
        "apiVersion": EtcdCluster::api_version(&()),
        "kind": EtcdCluster::kind(&()),
        "status": status,
    });
    let clusters: Api<EtcdCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    clusters
        .patch_status(
            &cluster.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("writing status: {e}"))
}

fn record_state(ctx: &Context, cluster: &EtcdCluster, status: &crate::api::EtcdClusterStatus) {
    let phase = status
        .phase
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "None".into());
    ctx.metrics.cluster_state(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        &phase,
        i64::from(status.ready_members.unwrap_or(0)),
        i64::from(cluster.spec.size),
    );
}

fn reason_of(action: &Action) -> &'static str {
    match action {
        Action::Bootstrap => "SeedCreated",
        Action::AddMember | Action::JoinMember { .. } => "MemberAdded",
        Action::Promote { .. } => "MemberPromoted",
        Action::RemoveMember { .. } => "MemberRemoved",
        Action::RecreatePod { .. } => "PodRecreated",
        Action::DeletePod { .. } => "PodDeleted",
        _ => "Reconciled",
    }
}

/// Runs the loop of one cluster until its spec channel closes (the cluster was deleted).
pub async fn run(ctx: Arc<Context>, mut spec: watch::Receiver<EtcdCluster>, wake: Arc<Notify>) {
    let mut failures = 0u32;
    loop {
        let cluster = spec.borrow_and_update().clone();
        let span = info_span!("cluster", namespace = %cluster.namespace().unwrap_or_default(), name = %cluster.name_any());
        let started = std::time::Instant::now();
        let result = reconcile(&ctx, &cluster).instrument(span.clone()).await;
        ctx.metrics
            .reconciled("etcdcluster", started.elapsed(), result.is_err());
        let delay = match result {
            Ok(d) => {
                failures = 0;
                d
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                span.in_scope(|| warn!(failures, "reconcile failed: {e}"));
                Duration::from_secs(1 << failures.min(5))
            }
        };
        tokio::select! {
            changed = spec.changed() => if changed.is_err() { return },
            _ = wake.notified() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
