//! One pass, its stages in order: prepare, observe, plan, act, status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tracing::{debug, info};

use super::memory::Memory;
use super::pacing::next_look;
use super::report::{counted, findings, report, report_invalid, write_status_if_due};
use super::{Context, Error};
use crate::access;
use crate::api::{EtcdCluster, RestoreHandoff};
use crate::cluster::act::{self, Outcome};
use crate::cluster::external;
use crate::cluster::handles::{Handles, Pass};
use crate::cluster::hibernation;
use crate::cluster::observe::{self, Observed};
use crate::cluster::plan::{self, Action, Target};
use crate::cluster::recovery;
use crate::cluster::resources;
use crate::cluster::standby;
use crate::cluster::status;
use crate::cluster::upkeep;
use crate::cluster::version;
use crate::cluster::volumes;
use crate::etcd::Access;
use crate::kube::invalid::Invalid;
use crate::reference::{self, Dial};
use crate::tls;

/// How long a learner may take to start before its addition is undone.
pub(super) const LEARNER_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a new member pod may take to answer before silence counts as lost quorum.
pub(super) const STARTUP_GRACE: Duration = Duration::from_secs(60);

/// The first problem that keeps the spec from being acted on: a Secret it names that does not
/// exist or cannot be used, or an etcd it would join that its namespace may not reach; then
/// what the pass needs of TLS (see [`tls::prepare`]), what it presents to etcd (root's
/// password kept once access control is declared) and where the etcd it joins is dialed.
pub(super) async fn validate(
    handles: &Handles,
    cluster: &EtcdCluster,
    ns: &str,
) -> Result<(tls::Material, Access, Vec<Dial>), Error> {
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
    // Where the cluster joins an etcd that runs elsewhere: only where its namespace may reach
    // (src/reference), before anything dials it.
    let dials = observe::external_dials(handles, cluster)
        .await
        .map_err(|refused| {
            Error::Invalid(Invalid {
                reason: reference::REFUSED,
                message: refused.to_string(),
            })
        })?;
    let material = tls::prepare(secrets, cluster, time::OffsetDateTime::now_utc()).await?;
    // The identity for the external cluster is read while it is joined (observe reads it
    // again, from the same cache): a Secret that is missing or cannot be used is reported
    // with its field rather than taken for an external cluster that does not answer.
    if let Some(name) = external::joining(cluster).and_then(|e| e.client_tls_secret.as_deref()) {
        let field = "spec.bootstrap.existing.clientTLSSecret";
        tls::read_client(secrets, field, name, time::OffsetDateTime::now_utc()).await?;
    }
    // Without access control declared (or left on), root's Secret is not read: a Secret that
    // does not exist is not cached, and would cost a request every pass.
    let root = if access::wanted(cluster) {
        Some(access::ensure_root(secrets, cluster).await?)
    } else {
        None
    };
    let access = Access {
        tls: material.client.clone(),
        root: root.map(|p| Arc::new(crate::etcd::Root::new(p))),
        cert_is_root: access::tls_is_root(cluster),
    };
    Ok((material, access, dials))
}

/// The cluster as the actions must build it: the spec, unless its version is not a step etcd
/// allows from what the members run; then what [`version::held_back`] keeps. Returns the
/// message that reports the held-back change, naming the field.
pub(super) fn effective_spec(
    cluster: &EtcdCluster,
    obs: &Observed,
) -> (EtcdCluster, Option<String>) {
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

/// What the observe stage gives the rest of the pass.
pub(super) struct Seen {
    /// The planner's input, complete.
    pub(super) obs: Observed,
    /// The spec as the actions build it.
    pub(super) effective: EtcdCluster,
    /// Why its version is held back, if it is.
    pub(super) held_back: Option<String>,
    /// The revision and quota space was judged at.
    pub(super) space: (i64, i64),
}

/// The observe stage: the cluster's objects and members ([`observe::observe`]), then what the
/// planner must know beside them ([`observe::complete`]), found from the task's memory and
/// given as plain values. The memory learns what this observation shows.
pub(super) async fn observe_stage(
    handles: &Handles,
    cached: bool,
    cluster: &EtcdCluster,
    (material, access, dials): (&tls::Material, &Access, &[Dial]),
    memory: &mut Memory,
) -> Result<Seen, Error> {
    let carried = &mut memory.carried;
    let mut obs = observe::observe(
        handles,
        cached,
        cluster,
        (access.clone(), dials),
        &mut carried.health,
    )
    .await?;
    let space = observe::space_now(&obs);
    // What the last reclaim found is forgotten once NOSPACE is gone.
    if obs.plan.nospace.is_empty() {
        carried.exhausted = None;
    }
    let (effective, held_back) = effective_spec(cluster, &obs);
    let now = Timestamp::now();
    carried.defrag_request = upkeep::requested(cluster, now);
    let request = carried.defrag_request.as_ref();
    let defrag_due = upkeep::due(cluster, &obs, &mut carried.armed, request, now);
    carried.revision_seen = obs
        .statuses
        .values()
        .map(|s| s.revision)
        .chain(carried.revision_seen)
        .max();
    let known = observe::Known {
        effective: &effective,
        tls_revision: &material.revision,
        rotation_due: tls::rotation_due(material, cluster, time::OffsetDateTime::now_utc()),
        exhausted_at: carried.exhausted.as_ref().map(|(r, q, _)| (*r, *q)),
        defrag_due,
    };
    observe::complete(&mut obs, known);
    let found = hibernation::final_snapshot(handles, cluster, &obs)
        .await
        .map_err(Error::ReadBackups)?;
    obs.plan.final_snapshot =
        hibernation::remembered(found, &mut carried.final_snapshot, cluster, &obs);
    let refused = &mut carried.expansion_refused;
    obs.plan.volumes = volumes::observe(handles, cluster, &obs, cached, refused)
        .await
        .map_err(Error::ReadClaims)?;
    Ok(Seen {
        obs,
        effective,
        held_back,
        space,
    })
}

/// One pass: observe, plan, act, report. Returns how soon to look again.
pub(super) async fn reconcile(
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
        .show(&ns, &cluster.name_any(), &mut memory.carried.expect);
    let (material, mut access, dials) = match validate(handles, cluster, &ns).await {
        Ok(m) => m,
        Err(e) => {
            if let Error::Invalid(Invalid { reason, message }) = &e {
                report_invalid(ctx, handles, cached, cluster, memory, reason, message).await?;
            }
            return Err(e);
        }
    };
    access.root = memory.carried.keep_root(access.root);
    let pass = Pass::new(handles, &material, cached);
    // Prepare: the Services every member's address depends on, before anything is observed.
    if !cluster.spec.is_paused() {
        act::ensure_services(handles, cluster).await?;
    }
    let Seen {
        mut obs,
        effective,
        held_back,
        space,
    } = observe_stage(
        handles,
        cached,
        cluster,
        (&material, &access, &dials),
        memory,
    )
    .await?;
    let restore = pending_restore(ctx, handles, &pass, cluster, memory).await?;
    let action = decide(ctx, handles, cluster, &mut obs, restore.as_ref(), memory).await?;
    // Every pass at debug level: what a slow reaction spent its time on (LOG_LEVEL).
    debug!(?action, "pass");
    early_status(ctx, cluster, &obs, &action, memory).await?;
    let (outcome, effects) = act::act(&pass, &effective, &obs, &action).await;
    after_act(&action, &outcome, effects.writes, space, memory);
    if let Some((bytes, why)) = effects.expansion_refused {
        memory.carried.expansion_refused.record(bytes, why);
    }
    let defragmented = counted(ctx, cluster, effects.defragmented);
    let restore = restore.as_ref();
    let auth = auth_stage(handles, cluster, &obs, restore, memory).await;
    let (auth, standby) = standby_stage(handles, cluster, &obs, auth, memory).await;
    let mut found = findings(
        &obs,
        &action,
        &outcome,
        restore,
        held_back,
        defragmented,
        memory,
    );
    found.auth = auth;
    found.standby = standby;
    let new_status = report(ctx, cluster, &obs, &action, found, memory).await?;
    if matches!(action, Action::QuorumLost { .. }) {
        return Ok(Duration::from_secs(5));
    }
    let look = next_look(ctx, cluster, &obs, &action, outcome, &new_status, memory).await?;
    Ok(standby::look_again(cluster).map_or(look, |soon| look.min(soon)))
}

/// The standby stage ([`standby::stage`]), unless the cluster is paused; a promotion it
/// records gets the roles their write permissions back in the same pass (every second until
/// then is a second clients cannot write anywhere).
fn standby_stage<'a>(
    handles: &'a Handles,
    cluster: &'a EtcdCluster,
    obs: &'a Observed,
    auth: Option<crate::cluster::auth::Finding>,
    memory: &'a mut Memory,
) -> futures::future::BoxFuture<'a, StandbyFound> {
    // Boxed: its state (store and API calls) would otherwise sit in every pass's own, and a
    // debug build's pass then overflowed a worker's stack on the NOSPACE path (chaos, seed 4).
    Box::pin(async move {
        if cluster.spec.is_paused() {
            return (auth, None);
        }
        let kept = &mut memory.carried.standby;
        let standby = standby::stage(handles, cluster, obs, auth.as_ref(), kept).await;
        let auth = match &standby {
            Some(Some(s)) if auth.is_some() && standby::just_promoted(cluster, s) => {
                let carried = &mut memory.carried.auth;
                crate::cluster::auth::reconcile(handles, cluster, obs, false, carried).await
            }
            _ => auth,
        };
        (auth, standby)
    })
}

/// What the standby stage leaves: the access-control finding (again, after a promotion) and
/// `status.standby` (`None`: as it was).
type StandbyFound = (
    Option<crate::cluster::auth::Finding>,
    Option<Option<crate::api::StandbyStatus>>,
);

/// Whether the access-control stage may run: a leader serves and nothing holds the cluster
/// (a pause, a restore under way, a migration not yet `Complete`). While the cluster joins an
/// etcd that runs elsewhere, that etcd is not this operator's to lock: switching its
/// authentication on or writing its users would reach every client of it, whoever they are.
fn auth_may_run(cluster: &EtcdCluster, restoring: bool, leader: bool) -> bool {
    !restoring && !cluster.spec.is_paused() && leader && external::joining(cluster).is_none()
}

/// The access-control stage ([`crate::cluster::auth`]), when [`auth_may_run`].
pub(super) async fn auth_stage(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    restore: Option<&RestoreHandoff>,
    memory: &mut Memory,
) -> Option<crate::cluster::auth::Finding> {
    if !auth_may_run(cluster, restore.is_some(), obs.plan.leader.is_some()) {
        return None;
    }
    let read_only = standby::read_only(cluster);
    crate::cluster::auth::reconcile(handles, cluster, obs, read_only, &mut memory.carried.auth)
        .await
}

/// The restore handed over, if any, once its source vouches for it
/// ([`crate::api::handoff`]); one that is malformed, forged or replayed is reported
/// (`InvalidRestore`) and ends the pass before anything is touched.
pub(super) async fn pending_restore(
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
pub(super) async fn early_status(
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
    let early = status::early(cluster, obs, action, memory.carried.revision_seen);
    if recovering {
        memory.carried.recovering = early.recovery.clone();
    }
    write_status_if_due(ctx, cluster, &early, memory).await
}

/// What the act stage leaves for the next passes: the writes to expect in the caches, what a
/// space reclaim found.
pub(super) fn after_act(
    action: &Action,
    outcome: &Result<Outcome, act::Error>,
    writes: Vec<crate::kube::cache::Expect>,
    space: (i64, i64),
    memory: &mut Memory,
) {
    if *action == Action::ReclaimSpace {
        memory.carried.exhausted = match outcome {
            Ok(Outcome::Retry(why)) => Some((space.0, space.1, why.clone())),
            _ => None,
        };
    }
    memory.carried.expect.add(writes);
}

/// Tells the snapshot server where the member a recovery restores from is, while one is
/// pending (and forgets it otherwise).
pub(super) fn register_source(
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
pub(super) fn target_of(ctx: &Context, cluster: &EtcdCluster, obs: &Observed) -> Target {
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
        remove_external: cluster.spec.existing().is_some_and(|e| e.remove_external),
        // A window croner cannot read counts as open; the status says why.
        window_opens: upkeep::window_opens(cluster, Timestamp::now()).unwrap_or(None),
        hibernate: cluster.spec.hibernating().map(|h| plan::Hibernate {
            store: h.store.is_some(),
            keep_volumes: h.keep_volumes(),
        }),
        standby_bootstrap: standby::bootstrapping(cluster),
    }
}

/// The plan stage: the one action of this pass. A restore handed over by the restore
/// controller replaces the normal plan until its seed serves; the cluster then grows back by
/// the normal plan.
pub(super) async fn decide(
    ctx: &Context,
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &mut Observed,
    restore: Option<&RestoreHandoff>,
    memory: &mut Memory,
) -> Result<Action, Error> {
    register_source(handles, cluster, obs, restore);
    let action = plan_stage(ctx, handles, cluster, obs, restore).await?;
    let target = target_of(ctx, cluster, obs);
    let seen = memory.carried.revision_seen;
    Ok(recovery::consider(handles, cluster, obs, &target, action, seen).await?)
}

/// The planner's action (the restore's while one is pending), checked again against fresh
/// pods before a removal.
pub(super) async fn plan_stage(
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::api::EtcdClusterSpec;

    #[test]
    fn access_control_leaves_an_etcd_that_runs_elsewhere_alone_until_the_migration_completes() {
        use crate::api::{
            Bootstrap, EtcdClusterStatus, ExistingCluster, MigrationPhase, MigrationStatus,
            auth::Auth,
        };
        let mut cluster = EtcdCluster::new(
            "thief",
            EtcdClusterSpec {
                size: 1,
                auth: Some(Auth {
                    enabled: true,
                    ..Auth::default()
                }),
                bootstrap: Some(Bootstrap {
                    existing: Some(ExistingCluster {
                        endpoints: vec!["http://10.20.0.5:2379".into()],
                        ..ExistingCluster::default()
                    }),
                }),
                ..EtcdClusterSpec::default()
            },
        );
        for phase in [
            None,
            Some(MigrationPhase::Joining),
            Some(MigrationPhase::Joined),
            Some(MigrationPhase::RemovingExternal),
        ] {
            cluster.status = Some(EtcdClusterStatus {
                migration: phase.map(|phase| MigrationStatus {
                    phase,
                    ..MigrationStatus::default()
                }),
                ..EtcdClusterStatus::default()
            });
            assert!(!auth_may_run(&cluster, false, true), "{phase:?}");
        }
        cluster.status = Some(EtcdClusterStatus {
            migration: Some(MigrationStatus {
                phase: MigrationPhase::Complete,
                ..MigrationStatus::default()
            }),
            ..EtcdClusterStatus::default()
        });
        assert!(auth_may_run(&cluster, false, true));
        assert!(!auth_may_run(&cluster, true, true), "a restore under way");
        assert!(!auth_may_run(&cluster, false, false), "no leader");
        cluster.spec.bootstrap = None;
        cluster.status = None;
        assert!(auth_may_run(&cluster, false, true));
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
}
