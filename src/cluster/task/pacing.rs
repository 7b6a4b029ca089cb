//! When to look again: soon while something moves, by the number of clusters at rest, less
//! often while a refusal lasts; and the Event and metrics of what a pass did.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::{debug, info};

use super::memory::Memory;
use super::{Context, Error};
use crate::api::{AvailableReason, ConditionType, EtcdCluster, EtcdClusterStatus, find_condition};
use crate::cluster::act::{self, Outcome};
use crate::cluster::observe::Observed;
use crate::cluster::plan::{self, Action, Counted, Rest};

/// How soon to look again while a change is in flight. etcd's refusals (a learner catching up,
/// the 5 s health interval after a promotion) end at moments no event announces, and every
/// second of polling granularity adds to each member's addition; a pass costs a few requests.
pub(super) const IN_FLIGHT_POLL: Duration = Duration::from_millis(250);
/// How soon, at the soonest, to look again at a cluster whose pods are all waiting to run:
/// their events wake it. With many clusters, no sooner than those at rest ([`resync_for`]):
/// 10,000 clusters left Pending (a control plane with no room for them) were 1,000 passes a
/// second at 10 s each.
pub(super) const PENDING_POLL: Duration = Duration::from_secs(10);
/// How soon to look again at a cluster that is as asked (or paused). Also the longest that the
/// figures which change with every write (`raftIndex`, `dbSize`) go without being refreshed.
pub(super) const RESYNC: Duration = Duration::from_secs(30);
/// How often a cluster at rest is looked at while the operator runs few: what no event
/// announces (a NOSPACE alarm, a member whose node died silently) is seen within it.
pub(super) const RESYNC_FEW: Duration = Duration::from_secs(5);
/// Passes a second that all clusters at rest take together at most, between [`RESYNC_FEW`]
/// and [`RESYNC`] each: 10 clusters are looked at every 5 s, 60 or more every 30 s, so that
/// an operator of a thousand clusters still idles near zero CPU.
pub(super) const RESTING_PASSES_PER_SECOND: f64 = 2.0;

/// How often each cluster at rest is looked at while the operator runs `clusters`.
pub(super) fn resync_for(clusters: usize) -> Duration {
    Duration::from_secs_f64(clusters as f64 / RESTING_PASSES_PER_SECOND).clamp(RESYNC_FEW, RESYNC)
}
/// How long a cluster whose members serve, but whose client Service does not reach them yet, is
/// looked at every [`IN_FLIGHT_POLL`]: no event announces that a node's proxy has programmed
/// the Service's endpoints. After that (a proxy that does not work, say), every
/// [`UNSERVED_POLL`].
pub(super) const UNSERVED_FAST: Duration = Duration::from_secs(30);
/// See [`UNSERVED_FAST`].
pub(super) const UNSERVED_POLL: Duration = Duration::from_secs(5);
/// How soon to look again at a spec that cannot be acted on: a Secret may be created at any
/// time, and nothing announces it.
pub(super) const INVALID_RECHECK: Duration = Duration::from_secs(10);

/// How long a refusal is asked again every [`IN_FLIGHT_POLL`]. etcd's strict reconfiguration
/// check refuses a membership change ("unhealthy cluster") until every voter has been connected
/// to the member asked for 5 s (its `HealthInterval`): each change right after a member started
/// is refused for up to 5 s, then accepted at a moment no event announces. Backing off within
/// that (250 ms, 500 ms, 1 s, 2 s) added 1.8 s to each member of a roll (issue 54's timeline).
pub(super) const REFUSED_FAST: Duration = Duration::from_secs(6);
/// How often a refusal that outlasts [`REFUSED_FAST`] (a peer etcd does not count as
/// connected, a learner fetching a large snapshot) is asked again: a request every 2 s, not
/// every quarter second.
pub(super) const REFUSED_POLL: Duration = Duration::from_secs(2);

/// How soon to look again at a refusal that has lasted `refused_for`: see [`REFUSED_FAST`].
pub(super) fn refused_poll(refused_for: Duration) -> Duration {
    if refused_for < REFUSED_FAST {
        IN_FLIGHT_POLL
    } else {
        REFUSED_POLL
    }
}

/// How soon to look again at a cluster that is as asked: at [`RESYNC`] when it is Available;
/// while its members serve but the Service does not reach them yet, soon (see
/// [`UNSERVED_FAST`]).
pub(super) fn steady_poll(
    status: &EtcdClusterStatus,
    memory: &mut Memory,
    now: Instant,
    resync: Duration,
) -> Duration {
    let unserved = find_condition(&status.conditions, ConditionType::Available).is_some_and(|c| {
        !c.is_true() && AvailableReason::of(c).is_some_and(AvailableReason::members_serve_unreached)
    });
    if !unserved {
        memory.pace.unserved_since = None;
        return resync;
    }
    let since = *memory.pace.unserved_since.get_or_insert(now);
    if now.saturating_duration_since(since) < UNSERVED_FAST {
        IN_FLIGHT_POLL
    } else {
        UNSERVED_POLL
    }
}

/// What the action's outcome means for the next pass: its Event, and how soon to look again.
pub(super) async fn next_look(
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
            let (name, reason) = (cluster.name_any(), action.event_reason());
            match action.counted_as() {
                Counted::Not => {}
                Counted::Maintenance => ctx.metrics.maintenance(&ns, &name, reason),
                Counted::Membership => ctx.metrics.membership_change(&ns, &name, reason),
            }
            ctx.events
                .publish_related(
                    cluster,
                    member_pod_ref(cluster, action),
                    EventType::Normal,
                    reason,
                    change.clone(),
                )
                .await;
        }
        Outcome::Retry(why) => {
            let (n, refused_for) = memory.pace.refused_again(action, why, Instant::now());
            // The first refusal, then the 2nd, 4th, 8th...: a lasting one stays visible
            // without filling the log.
            if n.is_power_of_two() {
                info!(?action, passes = n, "not yet: {why}");
            } else {
                debug!(?action, passes = n, "not yet: {why}");
            }
            return Ok(refused_poll(refused_for));
        }
        Outcome::Done(None) => {}
    }
    memory.pace.refused = None;
    let resync = resync_for(ctx.tasks.load(std::sync::atomic::Ordering::Relaxed));
    Ok(next_pass(&obs.plan, action, &outcome, resync)
        .unwrap_or_else(|| steady_poll(new_status, memory, Instant::now(), resync)))
}

/// How soon to look again after `outcome` of `action` on `obs`, while clusters at rest are
/// looked at every `resync`; `None` for a steady cluster, whose poll depends on what its
/// status says ([`steady_poll`]).
pub(super) fn next_pass(
    obs: &plan::Observation,
    action: &Action,
    outcome: &Outcome,
    resync: Duration,
) -> Option<Duration> {
    Some(match (outcome, action.rest()) {
        // Something changed, or etcd refused for now: the next step, shortly.
        (Outcome::Done(Some(_)) | Outcome::Retry(_), _) => IN_FLIGHT_POLL,
        (Outcome::Done(None), Rest::Steady) => return None,
        (Outcome::Done(None), Rest::Paused) => RESYNC,
        // Waits for the user (a spec change) or for the stuck pod's own events, which wake the
        // task; polling it fast would only repeat the same observation.
        (Outcome::Done(None), Rest::WaitsForUser) => INVALID_RECHECK,
        // Looked at again when the window opens, or at the resting interval before: a member
        // lost meanwhile is not left waiting.
        (Outcome::Done(None), Rest::Until(opens)) => {
            let left = opens.duration_since(k8s_openapi::jiff::Timestamp::now());
            Duration::try_from(left)
                .unwrap_or_default()
                .clamp(Duration::from_secs(1), RESYNC)
        }
        // Nothing runs yet (scheduling, pulling): the pods' own events wake the task when that
        // changes; polling would only repeat the observation (2 passes a second per cluster).
        (Outcome::Done(None), Rest::InFlight)
            if obs.members.is_none()
                && !obs.pods.is_empty()
                && obs.pods.iter().all(|p| p.state == plan::PodState::Pending) =>
        {
            PENDING_POLL.max(resync)
        }
        (Outcome::Done(None), Rest::InFlight) => 2 * IN_FLIGHT_POLL,
    })
}

/// The pod of the member an action is about, for its Event.
fn member_pod_ref(cluster: &EtcdCluster, action: &Action) -> Option<ObjectReference> {
    let name = action.member()?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.to_string()),
        namespace: cluster.namespace(),
        ..ObjectReference::default()
    })
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
        assert_eq!(
            next_pass(&obs, &add, &done, RESYNC_FEW),
            Some(IN_FLIGHT_POLL)
        );
        let retry = Outcome::Retry("settling".into());
        assert_eq!(
            next_pass(&obs, &add, &retry, RESYNC_FEW),
            Some(IN_FLIGHT_POLL)
        );
        assert_eq!(next_pass(&obs, &Action::Steady, &nothing, RESYNC_FEW), None);
        assert_eq!(
            next_pass(&obs, &Action::Paused, &nothing, RESYNC_FEW),
            Some(RESYNC)
        );
        let stalled = Action::RollStalled {
            reason: "m2 does not start".into(),
        };
        assert_eq!(
            next_pass(&obs, &stalled, &nothing, RESYNC_FEW),
            Some(INVALID_RECHECK)
        );
        let wait = Action::Wait {
            reason: "learner starting".into(),
        };
        assert_eq!(
            next_pass(&obs, &wait, &nothing, RESYNC_FEW),
            Some(2 * IN_FLIGHT_POLL)
        );
        // Every pod still scheduling or pulling, no member answers: their events wake the task.
        let pending = plan::Observation {
            pods: vec![plan::PodView {
                name: "m1".into(),
                state: plan::PodState::Pending,
                age: Duration::ZERO,
                joining: None,
                restore: None,
                current: true,
                image_only: false,
                foreign: false,
                failing: None,
                node_lost: None,
                node: None,
            }],
            ..plan::Observation::default()
        };
        assert_eq!(
            next_pass(&pending, &wait, &nothing, RESYNC_FEW),
            Some(PENDING_POLL)
        );
        // With many clusters, no more often than those at rest.
        assert_eq!(
            next_pass(&pending, &wait, &nothing, resync_for(10_000)),
            Some(RESYNC)
        );
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
    fn a_refusal_is_asked_again_often_through_etcds_health_interval_then_less_often() {
        let mut memory = Memory::default();
        let add = Action::AddMembers {
            count: 1,
            avoid: vec![],
        };
        let start = Instant::now();
        let polls: Vec<(u32, u128)> = [0, 250, 4_900, 5_900, 6_000, 60_000]
            .iter()
            .map(|ms| {
                let now = start + Duration::from_millis(*ms);
                let (n, refused_for) = memory.pace.refused_again(&add, "unhealthy cluster", now);
                (n, refused_poll(refused_for).as_millis())
            })
            .collect();
        assert_eq!(
            polls,
            [(1, 250), (2, 250), (3, 250), (4, 250), (5, 2000), (6, 2000)]
        );
        // Another refusal (or another action) starts again from the fastest look.
        let later = start + Duration::from_secs(70);
        assert_eq!(
            memory.pace.refused_again(&add, "learner not ready", later),
            (1, Duration::ZERO)
        );
        assert_eq!(
            memory
                .pace
                .refused_again(&Action::Steady, "learner not ready", later)
                .0,
            1
        );
    }
}
