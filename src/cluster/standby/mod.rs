//! The task's side of standby clusters (issue 53): `spec.standby` (bootstrapped from the
//! source's archive by an EtcdRestore, then fed by a [`replayer::Replayer`]), its promotion
//! when the section is removed, and a primary's demotion by annotation for a switchover.
//!
//! Clients' writes are refused by etcd itself: while the cluster is a copy, or is being
//! demoted, the access-control stage gives every role its read permissions only
//! ([`read_only`]); root, the operator's, replays.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};

use super::auth::Finding;
use super::handles::Handles;
use super::observe::Observed;
use crate::api::{
    DEMOTE_ANNOTATION, EtcdCluster, EtcdRestore, EtcdRestoreSpec, Handover, RecoveryStore,
    RestorePhase, RestoreTo, StandbyPhase, StandbyStatus, StorageSection,
};
use crate::store::location::{Storage, target};

pub mod replayer;

use replayer::{Feed, Replayer};

/// Labels the EtcdRestores that bootstrap a standby, with the cluster's name.
pub const STANDBY_LABEL: &str = "etcd.database.coreos.com/standby-of";

/// How soon a task looks again while a standby follows, promotes or a primary is demoted:
/// the status reports the replay's progress.
pub const LOOK_AGAIN: Duration = Duration::from_secs(2);
/// What a demotion says while nothing archives the cluster: the user must act, so the task
/// does not look every [`SWITCHING`] meanwhile (each look lists the EtcdBackups).
const NO_ARCHIVE: &str = "no EtcdBackup archives this cluster continuously";

/// How soon while a demotion or a promotion is under way.
const SWITCHING: Duration = Duration::from_millis(250);

/// etcd's default `--max-txn-ops`.
const DEFAULT_MAX_TXN_OPS: usize = 128;

/// What the stage keeps between passes.
#[derive(Default)]
pub struct Memory {
    replayer: Option<Replayer>,
}

/// Whether etcd must refuse clients' writes: a standby, one promoting, a demoted primary.
pub fn read_only(cluster: &EtcdCluster) -> bool {
    cluster.spec.standby.is_some()
        || cluster.annotations().contains_key(DEMOTE_ANNOTATION)
        || previous(cluster).is_some_and(|s| s.read_only())
}

/// How soon the task must look again for the stage: every [`LOOK_AGAIN`] while the cluster
/// follows (its status reports the replay), at once while a demotion or a promotion is under
/// way (each pass then is a moment clients can write nowhere).
pub fn look_again(cluster: &EtcdCluster) -> Option<Duration> {
    let phase = previous(cluster).and_then(|s| s.phase);
    let stuck = previous(cluster).is_some_and(|s| s.message.starts_with(NO_ARCHIVE));
    let demoting = cluster.annotations().contains_key(DEMOTE_ANNOTATION)
        && phase != Some(StandbyPhase::Demoted)
        && !stuck;
    let promoting = cluster.spec.standby.is_none()
        && matches!(phase, Some(StandbyPhase::Standby | StandbyPhase::Promoting));
    if demoting || promoting {
        Some(SWITCHING)
    } else {
        read_only(cluster).then_some(LOOK_AGAIN)
    }
}

/// The Warning the stage's status carries when it starts to (reason, message): a demotion
/// that cannot finish until the user acts, or a standby that stops following (a gap in the
/// archive, a silent source). Once per start.
pub fn warning(
    cluster: &EtcdCluster,
    now: Option<&StandbyStatus>,
) -> Option<(&'static str, String)> {
    let now = now?;
    let before = previous(cluster);
    let message = &now.message;
    let was = before.map(|s| s.message.as_str()).unwrap_or_default();
    if message.starts_with(NO_ARCHIVE) && !was.starts_with(NO_ARCHIVE) {
        return Some(("DemotionWaiting", message.clone()));
    }
    let stalled = STALLS.iter().find(|r| **r == now.stalled)?;
    let same = before.is_some_and(|b| b.stalled == now.stalled);
    (!same).then(|| (*stalled, message.clone()))
}

/// The stalls a standby warns of: those that need a human ([`replayer::Stalled`]).
const STALLS: [&str; 2] = [replayer::Stalled::GAP, replayer::Stalled::SILENT];

/// The Event of a change of `status.standby.phase` to `now`, if it changed: reason and
/// message.
pub fn event(cluster: &EtcdCluster, now: Option<&StandbyStatus>) -> Option<(&'static str, String)> {
    let now = now?;
    let phase = now.phase?;
    if previous(cluster).and_then(|s| s.phase) == Some(phase) {
        return None;
    }
    let at = |r: Option<i64>| {
        r.map_or("an unknown revision".to_string(), |r| {
            format!("revision {r}")
        })
    };
    Some(match phase {
        StandbyPhase::Bootstrapping => ("StandbyBootstrapping", now.message.clone()),
        StandbyPhase::Standby => (
            "StandbyFollowing",
            format!(
                "restored at the source's {}; following its archive, clients' writes refused",
                at(now.replayed_revision)
            ),
        ),
        StandbyPhase::Promoting => (
            "Promoting",
            "spec.standby removed: replaying what remains of the archive".into(),
        ),
        StandbyPhase::Promoted => (
            "Promoted",
            format!(
                "promoted at the source's {} ({}); clients may write{}",
                at(now.promoted_revision),
                now.promotion,
                if now.message.is_empty() {
                    String::new()
                } else {
                    format!("; {}", now.message)
                }
            ),
        ),
        StandbyPhase::Demoting => (
            "Demoting",
            "clients' writes refused: waiting for the archive to hold the last revision".into(),
        ),
        StandbyPhase::Demoted => (
            "Demoted",
            format!(
                "the archive holds the last {}: a standby of it may promote",
                at(now.demoted_revision)
            ),
        ),
    })
}

/// Whether the cluster is a standby whose data has not come from its source yet.
pub fn bootstrapping(cluster: &EtcdCluster) -> bool {
    cluster.spec.standby.is_some()
        && previous(cluster).and_then(|s| s.phase) != Some(StandbyPhase::Standby)
}

/// Whether `now` records a promotion the cluster's status did not show yet.
pub fn just_promoted(cluster: &EtcdCluster, now: &StandbyStatus) -> bool {
    now.phase == Some(StandbyPhase::Promoted)
        && previous(cluster).and_then(|s| s.phase) != Some(StandbyPhase::Promoted)
}

fn previous(cluster: &EtcdCluster) -> Option<&StandbyStatus> {
    cluster.status.as_ref()?.standby.as_ref()
}

/// The stage: returns `status.standby` as it must now be, or `None` to leave it.
pub async fn stage(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    auth: Option<&Finding>,
    memory: &mut Memory,
) -> Option<Option<StandbyStatus>> {
    let before = previous(cluster).cloned();
    let phase = before.as_ref().and_then(|s| s.phase);
    let demote = cluster.annotations().contains_key(DEMOTE_ANNOTATION);
    let now = match (&cluster.spec.standby, phase) {
        (Some(s), Some(StandbyPhase::Bootstrapping | StandbyPhase::Standby))
            if before.as_ref().and_then(|b| b.source.as_ref()) == Some(&s.source) =>
        {
            let before = before.clone().unwrap_or_default();
            if phase == Some(StandbyPhase::Bootstrapping) {
                let settled = access_settled(cluster, auth);
                bootstrapped(handles, before, settled).await
            } else {
                follow(handles, cluster, obs, before, false, memory)
            }
        }
        (Some(s), _) => {
            memory.replayer = None;
            bootstrap(handles, cluster, &s.source).await
        }
        (None, Some(StandbyPhase::Standby | StandbyPhase::Promoting)) => {
            let before = before.clone().unwrap_or_default();
            follow(handles, cluster, obs, before, true, memory)
        }
        (None, Some(StandbyPhase::Bootstrapping)) => StandbyStatus {
            message: "spec.standby was removed before the standby was bootstrapped: the \
                      cluster keeps what its restore brought, writable"
                .into(),
            ..StandbyStatus::default()
        },
        (None, Some(StandbyPhase::Demoting | StandbyPhase::Demoted)) if !demote => {
            undemote(handles, cluster).await;
            return Some(None);
        }
        (None, Some(StandbyPhase::Demoting)) => {
            demoting(
                handles,
                cluster,
                obs,
                auth,
                before.clone().unwrap_or_default(),
            )
            .await
        }
        (None, Some(StandbyPhase::Demoted)) => return None,
        (None, _) if demote => StandbyStatus {
            phase: Some(StandbyPhase::Demoting),
            message: "making every role read-only".into(),
            ..StandbyStatus::default()
        },
        (None, _) => return None,
    };
    (Some(&now) != before.as_ref()).then_some(Some(now))
}

/// Starts a standby: an EtcdRestore of the source's newest snapshot and archived changes
/// (to now), owned by the cluster.
async fn bootstrap(
    handles: &Handles,
    cluster: &EtcdCluster,
    source: &RecoveryStore,
) -> StandbyStatus {
    let uid = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{}-standby-{}", cluster.name_any(), &uid[..8]);
    let section = StorageSection::from(source);
    let path = section.path().unwrap_or_default().to_string();
    let mut spec = EtcdRestoreSpec::of(section, &path, &cluster.name_any());
    spec.restore_to = Some(RestoreTo {
        revision: None,
        time: Some(Timestamp::now().to_string()),
    });
    let mut restore = EtcdRestore::new(&name, spec);
    restore.metadata = ObjectMeta {
        name: Some(name.clone()),
        labels: Some([(STANDBY_LABEL.to_string(), cluster.name_any())].into()),
        owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    };
    let mut status = StandbyStatus {
        phase: Some(StandbyPhase::Bootstrapping),
        source: Some(source.clone()),
        restore: name.clone(),
        message: format!("EtcdRestore {name} restores the source's newest snapshot and archive"),
        ..StandbyStatus::default()
    };
    // One made by an earlier pass whose status write this pass does not see yet: taken up,
    // never a second restore beside it.
    match made_before(handles, cluster, &path).await {
        Ok(Some(made)) => {
            status.message =
                format!("EtcdRestore {made} restores the source's newest snapshot and archive");
            status.restore = made;
            return status;
        }
        Ok(None) => {}
        Err(e) => {
            status.restore = String::new();
            status.message = format!("listing EtcdRestores: {e}");
            return status;
        }
    }
    if let Err(e) = handles
        .restores
        .create(&PostParams::default(), &restore)
        .await
    {
        status.restore = String::new();
        status.message = format!("creating EtcdRestore {name}: {e}");
    }
    status
}

/// The newest standby EtcdRestore of `cluster` from `path` that has not failed.
async fn made_before(
    handles: &Handles,
    cluster: &EtcdCluster,
    path: &str,
) -> Result<Option<String>, kube::Error> {
    let selector = format!("{STANDBY_LABEL}={}", cluster.name_any());
    let list = handles
        .restores
        .list(&ListParams::default().labels(&selector))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|r| StorageSection::from(&r.spec).path() == Some(path))
        .filter(|r| r.status.as_ref().and_then(|s| s.phase) != Some(RestorePhase::Failed))
        .max_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0))
        .map(|r| r.name_any()))
}

/// Whether the cluster's access control, if it has any, is what a standby's must be on the
/// data its members serve now: applied this pass or since the data last changed (the
/// access-control stage reapplies when the cluster ID changes), every role read-only.
///
/// The restored data carries the source's users and password hashes: the first pass after a
/// restore sets each user's password from this cluster's Secrets, and etcd revokes every token
/// a user holds when its password is set, even to the same value. A client that connected in
/// between (told by `phase: Standby` that the standby serves) would have every later request
/// refused with `invalid auth token` (issue 64).
fn access_settled(cluster: &EtcdCluster, auth: Option<&Finding>) -> Result<(), String> {
    if !crate::access::wanted(cluster) {
        return Ok(());
    }
    match auth {
        Some(a) if a.read_only && a.error.is_none() => Ok(()),
        Some(Finding { error: Some(e), .. }) => {
            Err(format!("applying access control to the restored data: {e}"))
        }
        _ => Err("applying access control to the restored data".into()),
    }
}

/// A bootstrap's EtcdRestore looked at: once it completed and the cluster's access control is
/// `settled` on the restored data, the standby follows from the revision it reached.
async fn bootstrapped(
    handles: &Handles,
    mut before: StandbyStatus,
    settled: Result<(), String>,
) -> StandbyStatus {
    let restore = match handles.restores.get_opt(&before.restore).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            // Deleted, or never made: made again.
            before.phase = None;
            before.message = format!("EtcdRestore {} is gone", before.restore);
            return before;
        }
        Err(e) => {
            before.message = format!("reading EtcdRestore {}: {e}", before.restore);
            return before;
        }
    };
    let status = restore.status.unwrap_or_default();
    match (status.phase, status.target_revision) {
        (Some(RestorePhase::Completed), Some(_)) if settled.is_err() => {
            before.message = settled.err().unwrap_or_default();
        }
        (Some(RestorePhase::Completed), Some(revision)) => {
            before.phase = Some(StandbyPhase::Standby);
            before.replayed_revision = Some(revision);
            before.message = String::new();
        }
        (Some(RestorePhase::Failed), _) => {
            before.message = format!(
                "EtcdRestore {} failed: {}; delete it to try again",
                before.restore, status.reason
            );
        }
        (phase, _) => {
            before.message = format!(
                "EtcdRestore {} restores the source's newest snapshot and archive ({})",
                before.restore,
                phase.map_or("Pending".to_string(), |p| format!("{p:?}"))
            );
        }
    }
    before
}

/// Feeds the replayer (started if it is not running) and reports its progress; with
/// `promote`, until the promotion is done.
fn follow(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    mut before: StandbyStatus,
    promote: bool,
    memory: &mut Memory,
) -> StandbyStatus {
    let Some(source) = before.source.clone() else {
        before.message = "status.standby names no source to follow".into();
        return before;
    };
    let feed = Feed {
        endpoints: super::act::voter_endpoints(obs),
        restore: before.restore.clone(),
        start: before.replayed_revision.unwrap_or_default(),
        max_ops: max_txn_ops(cluster),
        promote,
    };
    if memory
        .replayer
        .as_ref()
        .is_none_or(|r| r.source != source || (r.finished() && r.progress().promoted.is_none()))
    {
        let client = handles.clusters.clone().into_client();
        let ns = cluster.namespace().unwrap_or_default();
        memory.replayer = Some(Replayer::start(client, ns, source, feed.clone()));
    }
    let Some(replayer) = &memory.replayer else {
        return before;
    };
    replayer.feed(feed);
    let progress = replayer.progress();
    report_progress(&mut before, &progress);
    before.phase = Some(if promote {
        StandbyPhase::Promoting
    } else {
        StandbyPhase::Standby
    });
    if let Some(done) = progress.promoted {
        memory.replayer = None;
        before.phase = Some(StandbyPhase::Promoted);
        before.promoted_revision = Some(done.revision);
        before.promoted_at = Some(Timestamp::now().to_string());
        before.promotion = if done.switchover {
            "Switchover"
        } else {
            "Failover"
        }
        .into();
        before.lag_milliseconds = None;
        before.lag_measured_at = None;
        before.stalled = String::new();
        before.message = done.short.unwrap_or_default();
    }
    before
}

/// What the replayer's `progress` says in `status.standby`: the lag from the oldest change of
/// the source not served here, as of the replayer's last look at the archive, and why the
/// standby is stalled, if it is. The measurement's time moves only with what was measured, so
/// a standby at rest writes nothing.
fn report_progress(status: &mut StandbyStatus, progress: &replayer::Progress) {
    let replayed = progress.replayed.or(status.replayed_revision);
    if let Some(measured) = progress.measured_ms {
        let lag = progress
            .waiting_since_ms
            .map_or(0, |ms| (measured - ms).max(0));
        if status.lag_milliseconds != Some(lag) || status.replayed_revision != replayed {
            status.lag_measured_at = Timestamp::from_millisecond(measured)
                .ok()
                .map(|t| t.to_string());
        }
        status.lag_milliseconds = Some(lag);
    }
    status.replayed_revision = replayed;
    status.archived_revision = progress.archived.or(status.archived_revision);
    status.source_revision = progress.source.or(status.source_revision);
    (status.stalled, status.message) = match (&progress.stalled, &progress.error) {
        (Some(s), _) => (s.reason().to_string(), s.message()),
        (None, Some(e)) => (REPLAY_FAILING.to_string(), e.clone()),
        (None, None) => (String::new(), String::new()),
    };
}

/// `status.standby.stalled` while applying or reading fails.
pub const REPLAY_FAILING: &str = "ReplayFailing";

fn max_txn_ops(cluster: &EtcdCluster) -> usize {
    cluster
        .spec
        .tuning
        .as_ref()
        .and_then(|t| t.max_txn_ops)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(DEFAULT_MAX_TXN_OPS)
}

/// The EtcdBackups that archive `cluster` continuously, with where their archives are.
async fn archives(
    handles: &Handles,
    cluster: &EtcdCluster,
) -> Result<Vec<(String, crate::store::storage::Target)>, String> {
    let list = handles
        .backups
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing EtcdBackups: {e}"))?;
    let client = handles.clusters.clone().into_client();
    let ns = cluster.namespace().unwrap_or_default();
    let mut out = Vec::new();
    for b in list.items {
        if b.spec.cluster_name.as_deref() != Some(cluster.name_any().as_str())
            || b.spec.continuous().is_none()
        {
            continue;
        }
        let (t, _) = target(&client, &ns, Storage::from(&b.spec))
            .await
            .map_err(|e| format!("EtcdBackup {}: {e}", b.name_any()))?;
        out.push((b.name_any(), t));
    }
    Ok(out)
}

/// A primary being demoted: once etcd holds every role read-only, its last revision is read,
/// and once every continuous archive of it holds that revision, the handover is recorded next
/// to each.
async fn demoting(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    auth: Option<&Finding>,
    mut before: StandbyStatus,
) -> StandbyStatus {
    if !auth.is_some_and(|a| a.read_only && a.error.is_none()) {
        before.message = "making every role read-only".into();
        return before;
    }
    if before.demoted_revision.is_none() {
        // Read after the roles changed: no client write can come after it.
        match last_revision(obs).await {
            Ok(r) => before.demoted_revision = Some(r),
            Err(e) => {
                before.message = e;
                return before;
            }
        }
    }
    let Some(revision) = before.demoted_revision else {
        return before;
    };
    let archives = match archives(handles, cluster).await {
        Ok(a) if a.is_empty() => {
            before.message = format!(
                "{NO_ARCHIVE} (backupPolicy.continuous): a standby cannot promote at its last \
                 revision; create one"
            );
            return before;
        }
        Ok(a) => a,
        Err(e) => {
            before.message = e;
            return before;
        }
    };
    let cluster_id = cluster
        .status
        .as_ref()
        .map(|s| s.cluster_id.clone())
        .unwrap_or_default();
    for (name, t) in &archives {
        let key = t.location.to_string();
        let covered = match crate::store::pitr::archived_through(t.store.as_ref(), &key).await {
            Ok(c) => c,
            Err(e) => {
                before.message = format!("EtcdBackup {name}: {e}");
                return before;
            }
        };
        if covered < revision {
            before.message = format!(
                "waiting for EtcdBackup {name}'s archive to hold revision {revision} (it holds {covered})"
            );
            return before;
        }
        let handover = Handover {
            revision,
            cluster_id: cluster_id.clone(),
            at: Timestamp::now().to_string(),
        };
        if let Err(e) =
            crate::store::follow::write_handover(t.store.as_ref(), &key, &handover).await
        {
            before.message = format!("EtcdBackup {name}: {e}");
            return before;
        }
    }
    before.phase = Some(StandbyPhase::Demoted);
    before.message =
        format!("the archive holds revision {revision}, the last: a standby of it may promote");
    before
}

/// The members' revision now, from the leader.
async fn last_revision(obs: &Observed) -> Result<i64, String> {
    let endpoint = super::act::voter_endpoints(obs)
        .into_iter()
        .next()
        .ok_or("no healthy member to read the last revision from")?;
    crate::etcd::status(&endpoint, Duration::from_secs(5))
        .await
        .map(|s| s.revision)
        .map_err(|e| e.to_string())
}

/// The demotion withdrawn: the handover records are deleted (no standby may promote at them
/// any more); the roles get their permissions back on this pass.
async fn undemote(handles: &Handles, cluster: &EtcdCluster) {
    let Ok(archives) = archives(handles, cluster).await else {
        return;
    };
    for (name, t) in archives {
        let key = t.location.to_string();
        if let Err(e) = crate::store::follow::delete_handover(t.store.as_ref(), &key).await {
            tracing::warn!(backup = name, error = %e, "deleting the handover record");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EtcdClusterSpec, EtcdClusterStatus, Standby};

    fn cluster(standby: bool, demote: bool, phase: Option<StandbyPhase>) -> EtcdCluster {
        let source: RecoveryStore = serde_json::from_value(serde_json::json!({
            "backupStorageType": "S3", "s3": {"path": "bucket/etcd/primary"}
        }))
        .unwrap();
        let mut c = EtcdCluster::new(
            "c",
            EtcdClusterSpec {
                standby: standby.then_some(Standby { source }),
                ..EtcdClusterSpec::default()
            },
        );
        if demote {
            c.metadata.annotations = Some([(DEMOTE_ANNOTATION.to_string(), "now".into())].into());
        }
        c.status = Some(EtcdClusterStatus {
            standby: phase.map(|p| StandbyStatus {
                phase: Some(p),
                ..StandbyStatus::default()
            }),
            ..EtcdClusterStatus::default()
        });
        c
    }

    #[test]
    fn clients_write_nowhere_until_a_promotion_is_done_and_switches_are_watched_closely() {
        use StandbyPhase::*;
        // A standby, or a cluster asked to become one, or one still promoting: read-only.
        assert!(read_only(&cluster(true, false, None)));
        assert!(read_only(&cluster(false, false, Some(Promoting))));
        assert!(read_only(&cluster(false, true, None)));
        assert!(!read_only(&cluster(false, false, Some(Promoted))));
        assert!(!read_only(&cluster(false, false, None)));
        // Following: looked at every 2 s; spec.standby removed or a demotion under way: at
        // once; a plain or promoted cluster: not at all.
        assert_eq!(
            look_again(&cluster(true, false, Some(Standby))),
            Some(LOOK_AGAIN)
        );
        assert_eq!(
            look_again(&cluster(false, false, Some(Standby))),
            Some(SWITCHING)
        );
        assert_eq!(
            look_again(&cluster(false, true, Some(Demoting))),
            Some(SWITCHING)
        );
        assert_eq!(
            look_again(&cluster(false, true, Some(Demoted))),
            Some(LOOK_AGAIN)
        );
        assert_eq!(look_again(&cluster(false, false, Some(Promoted))), None);
        // A demotion nothing archives waits for the user: not looked at every 250 ms.
        let mut stuck = cluster(false, true, Some(Demoting));
        let message = format!("{NO_ARCHIVE} (backupPolicy.continuous)");
        stuck
            .status
            .as_mut()
            .unwrap()
            .standby
            .as_mut()
            .unwrap()
            .message = message.clone();
        assert_eq!(look_again(&stuck), Some(LOOK_AGAIN));
        let now = StandbyStatus {
            message,
            ..StandbyStatus::default()
        };
        assert!(warning(&cluster(false, true, Some(Demoting)), Some(&now)).is_some());
        assert!(warning(&stuck, Some(&now)).is_none(), "once");
        // A standby gets no seed of its own until it follows.
        assert!(bootstrapping(&cluster(true, false, Some(Bootstrapping))));
        assert!(!bootstrapping(&cluster(true, false, Some(Standby))));
    }

    #[test]
    fn a_phase_change_is_an_event_once() {
        let promoting = cluster(false, false, Some(StandbyPhase::Promoting));
        let promoted = StandbyStatus {
            phase: Some(StandbyPhase::Promoted),
            promoted_revision: Some(42),
            promotion: "Switchover".into(),
            ..StandbyStatus::default()
        };
        let (reason, message) = event(&promoting, Some(&promoted)).unwrap();
        assert_eq!(reason, "Promoted");
        assert!(message.contains("revision 42 (Switchover)"), "{message}");
        assert!(just_promoted(&promoting, &promoted));
        let already = cluster(false, false, Some(StandbyPhase::Promoted));
        assert_eq!(event(&already, Some(&promoted)), None);
        assert!(!just_promoted(&already, &promoted));
    }

    fn following(stalled: Option<replayer::Stalled>, error: Option<&str>) -> replayer::Progress {
        replayer::Progress {
            replayed: Some(90),
            archived: Some(95),
            source: Some(100),
            waiting_since_ms: Some(1_000),
            measured_ms: Some(4_000),
            stalled,
            error: error.map(String::from),
            promoted: None,
        }
    }

    #[test]
    fn the_status_reports_the_lag_against_the_source_and_why_it_stalls() {
        let mut s = StandbyStatus::default();
        report_progress(&mut s, &replayer::Progress::default());
        assert_eq!(s.lag_milliseconds, None, "nothing measured yet");
        report_progress(&mut s, &following(None, None));
        assert_eq!(
            s.lag_milliseconds,
            Some(3_000),
            "as of the look at the archive"
        );
        assert_eq!(
            (s.replayed_revision, s.archived_revision, s.source_revision),
            (Some(90), Some(95), Some(100))
        );
        assert_eq!(s.lag_measured_at.as_deref(), Some("1970-01-01T00:00:04Z"));
        assert!(s.stalled.is_empty() && s.message.is_empty(), "{s:?}");
        // A later look that found the same: the time stays, and the status with it.
        let before = s.clone();
        let mut again = following(None, None);
        again.measured_ms = Some(4_500);
        again.waiting_since_ms = Some(1_500);
        report_progress(&mut s, &again);
        assert_eq!(s, before);
        let gap = Some(replayer::Stalled::Gap { from: 91, to: 93 });
        report_progress(&mut s, &following(gap, Some("ignored")));
        assert_eq!(s.stalled, "ArchiveGap");
        assert!(s.message.contains("91 to 93"), "{}", s.message);
        report_progress(&mut s, &following(None, Some("etcd refused")));
        assert_eq!(
            (s.stalled.as_str(), s.message.as_str()),
            (REPLAY_FAILING, "etcd refused")
        );
    }

    #[test]
    fn a_stall_that_needs_a_human_is_a_warning_once() {
        let standby = cluster(true, false, Some(StandbyPhase::Standby));
        let now = StandbyStatus {
            phase: Some(StandbyPhase::Standby),
            stalled: "ArchiveGap".into(),
            message: "the source's archive lacks revisions 11 to 15".into(),
            ..StandbyStatus::default()
        };
        assert_eq!(
            warning(&standby, Some(&now)),
            Some(("ArchiveGap", now.message.clone()))
        );
        let mut already = standby.clone();
        already.status.as_mut().unwrap().standby = Some(now.clone());
        assert_eq!(warning(&already, Some(&now)), None);
        let failing = StandbyStatus {
            stalled: REPLAY_FAILING.into(),
            ..now.clone()
        };
        assert_eq!(
            warning(&standby, Some(&failing)),
            None,
            "retried, not a human's"
        );
    }

    #[test]
    fn a_standby_serves_only_once_its_access_control_holds_on_the_restored_data() {
        use crate::api::Auth;
        let mut c = cluster(true, false, Some(StandbyPhase::Bootstrapping));
        assert_eq!(
            access_settled(&c, None),
            Ok(()),
            "no access control: nothing to wait for"
        );
        c.spec.auth = Some(Auth {
            enabled: true,
            ..Auth::default()
        });
        assert!(
            access_settled(&c, None).is_err(),
            "the stage did not run (restore pending)"
        );
        let applied = Finding {
            read_only: true,
            ..Finding::default()
        };
        assert_eq!(access_settled(&c, Some(&applied)), Ok(()));
        let failed = Finding {
            read_only: true,
            error: Some("etcd refused".into()),
            ..Finding::default()
        };
        assert!(
            access_settled(&c, Some(&failed))
                .unwrap_err()
                .contains("etcd refused")
        );
        let writable = Finding::default();
        assert!(
            access_settled(&c, Some(&writable)).is_err(),
            "not read-only yet"
        );
    }
}
