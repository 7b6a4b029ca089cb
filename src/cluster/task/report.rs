//! The status stage: the status a pass computed, written when due, its warnings published
//! once, and the metrics of the cluster's state.

use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::memory::Memory;
use super::pacing::RESYNC;
use super::{Context, Error};
use crate::api::{
    ClusterPhase, ConditionType, EtcdCluster, EtcdClusterStatus, RestoreHandoff, RestoreRecord,
    find_condition,
};
use crate::cluster::act::{self, Outcome};
use crate::cluster::handles::Handles;
use crate::cluster::observe::{self, Observed};
use crate::cluster::plan::Action;
use crate::cluster::status;
use crate::etcd::Access;
use crate::kube::names::MANAGER;
use crate::tls;

/// The status without the figures that change with every write to etcd, for deciding whether
/// a write is due.
pub(super) fn settled(status: &EtcdClusterStatus) -> EtcdClusterStatus {
    let mut s = status.clone();
    for m in &mut s.member_statuses {
        m.db_size = None;
        m.raft_index = None;
    }
    // A standby's progress moves with every write to its source: refreshed with the other
    // figures, not written on every look.
    if let Some(standby) = &mut s.standby {
        standby.replayed_revision = None;
        standby.archived_revision = None;
        standby.lag_milliseconds = None;
    }
    s
}

/// Whether `new` must be written: something but the fast-changing figures differs from the
/// status on the object, or those figures have not been refreshed for [`RESYNC`].
pub(super) fn status_due(
    current: Option<&EtcdClusterStatus>,
    new: &EtcdClusterStatus,
    refreshed: Option<Instant>,
    now: Instant,
) -> bool {
    let stale = refreshed.is_none_or(|at| now.saturating_duration_since(at) >= RESYNC);
    current.is_none_or(|c| settled(c) != settled(new)) || (stale && current != Some(new))
}

/// The status stage: the status this pass computed ([`status::finish`]), written when due,
/// and the warnings it carries published once. Returns the status.
pub(super) async fn report(
    ctx: &Context,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    found: status::Findings,
    memory: &mut Memory,
) -> Result<EtcdClusterStatus, Error> {
    let finished = status::finish(cluster, obs, action, found);
    if finished.available {
        memory.carried.available_at = Some(Instant::now());
    }
    let new_status = finished.status;
    log_availability(cluster, &new_status);
    record_state(ctx, cluster, &new_status);
    let was_failed = cluster.status.as_ref().and_then(|s| s.phase) == Some(ClusterPhase::Failed);
    write_status_if_due(ctx, cluster, &new_status, memory).await?;
    if let Some((reason, message)) = finished.warning
        && !already_reported(cluster, reason, &message)
    {
        ctx.events
            .publish(cluster, EventType::Warning, reason, message)
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
    let standby = new_status.standby.as_ref();
    if let Some((reason, message)) = crate::cluster::standby::event(cluster, standby) {
        ctx.events
            .publish(cluster, EventType::Normal, reason, message)
            .await;
    }
    if let Some((reason, message)) = crate::cluster::standby::warning(cluster, standby) {
        ctx.events
            .publish(cluster, EventType::Warning, reason, message)
            .await;
    }
    if let Some(r) = finished.recovered {
        let message = format!(
            "the rebuilt cluster serves: {}",
            status::recovery_summary(&r)
        );
        ctx.events
            .publish(cluster, EventType::Normal, "Recovered", message)
            .await;
    }
    Ok(new_status)
}

/// Logs a change of the Available condition, with its reason: why a cluster was reported
/// unavailable must be found in the operator's log afterwards.
fn log_availability(cluster: &EtcdCluster, new: &EtcdClusterStatus) {
    let available = |s: Option<&EtcdClusterStatus>| {
        s.and_then(|s| find_condition(&s.conditions, ConditionType::Available))
            .cloned()
    };
    let (Some(before), Some(now)) = (available(cluster.status.as_ref()), available(Some(new)))
    else {
        return;
    };
    if before.status != now.status {
        info!(
            available = now.status,
            reason = now.reason,
            "{}",
            now.message
        );
    }
}

/// What the pass found beside the observation and the action, for the status
/// ([`status::Findings`]).
pub(super) fn findings(
    obs: &Observed,
    action: &Action,
    outcome: &Result<Outcome, act::Error>,
    restore: Option<&RestoreHandoff>,
    held_back: Option<String>,
    defragmented: Option<crate::api::DefragmentationRecord>,
    memory: &mut Memory,
) -> status::Findings {
    let rotation_step = match (action, outcome) {
        (Action::RotateCa, Ok(Outcome::Done(Some(step)))) => Some(step.clone()),
        _ => None,
    };
    status::Findings {
        restore: restore_record(action, outcome, restore),
        held_back,
        acted: matches!(outcome, Ok(Outcome::Done(_))),
        rotation_step,
        revision_seen: memory.carried.revision_seen,
        early_recovery: memory.carried.recovering.take(),
        defragmented,
        defrag_request: memory.carried.defrag_request.clone(),
        available_ago: memory.carried.available_at.map(|at| at.elapsed()),
        exceeded: memory
            .carried
            .exhausted
            .as_ref()
            .filter(|_| !obs.plan.nospace.is_empty())
            .map(|(_, _, why)| why.clone()),
        auth: None,
        standby: None,
    }
}

/// The defragmentation the act made, counted in the metrics, for the status.
pub(super) fn counted(
    ctx: &Context,
    cluster: &EtcdCluster,
    made: Option<crate::api::DefragmentationRecord>,
) -> Option<crate::api::DefragmentationRecord> {
    if let Some(d) = &made {
        let ns = cluster.namespace().unwrap_or_default();
        let seconds = d.milliseconds as f64 / 1000.0;
        let reclaimed = d.size_before - d.size_after;
        ctx.metrics
            .defragmented(&ns, &cluster.name_any(), seconds, reclaimed);
    }
    made
}

/// The record of the restore under way, if one is.
pub(super) fn restore_record(
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

/// Whether the object's status already carries this Degraded reason and message, so its Event
/// is published once per problem, not on every look.
pub(super) fn already_reported(cluster: &EtcdCluster, reason: &str, message: &str) -> bool {
    cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
        .iter()
        .any(|c| {
            c.type_ == ConditionType::Degraded.as_str()
                && c.reason == reason
                && c.message == message
        })
}

/// Reports a spec the operator cannot act on (a Degraded condition and a Warning Event naming
/// the field) and changes nothing.
pub(super) async fn report_invalid(
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
    let access = Access {
        tls: tls::cluster_client(&handles.secrets, cluster)
            .await
            .ok()
            .flatten(),
        root: if crate::access::wanted(cluster) {
            crate::access::read_root(&handles.secrets, cluster)
                .await
                .ok()
                .flatten()
                .map(|p| std::sync::Arc::new(crate::etcd::Root::new(p)))
        } else {
            None
        },
        cert_is_root: crate::access::tls_is_root(cluster),
    };
    // The reason may be the refusal itself: then nothing is dialed.
    let dials = observe::external_dials(handles, cluster)
        .await
        .unwrap_or_default();
    let obs = observe::observe(
        handles,
        cached,
        cluster,
        (access, &dials),
        &mut memory.carried.health,
    )
    .await?;
    let wait = Action::Wait {
        reason: message.into(),
    };
    let mut new_status = status::compute(cluster, &obs, &wait);
    status::mark_degraded(&mut new_status, reason, message);
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
pub(super) async fn write_status_if_due(
    ctx: &Context,
    cluster: &EtcdCluster,
    status: &EtcdClusterStatus,
    memory: &mut Memory,
) -> Result<(), Error> {
    let now = Instant::now();
    if !status_due(cluster.status.as_ref(), status, memory.pace.refreshed, now) {
        return Ok(());
    }
    crate::report::apply_status(&ctx.client, cluster, MANAGER, status)
        .await
        .map_err(Error::WriteStatus)?;
    memory.pace.refreshed = Some(now);
    Ok(())
}

pub(super) fn record_state(ctx: &Context, cluster: &EtcdCluster, status: &EtcdClusterStatus) {
    let phase = status
        .phase
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "None".into());
    let available =
        find_condition(&status.conditions, ConditionType::Available).is_some_and(|c| c.is_true());
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use crate::api::MemberStatus;

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
}
