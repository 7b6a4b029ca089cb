//! The EtcdBackup controller.
//!
//! A kube-runtime `Controller`, unlike the EtcdCluster side's task per cluster: a backup has no
//! long-lived state to watch over, only "is one due, and if so take it". The Controller
//! dedups events, runs different backups concurrently and one backup never twice at once, and
//! its `requeue_after` carries the periodic schedule. It runs only while this replica leads.
//!
//! Each pass: a one-shot backup that succeeded for this generation is done; a periodic one
//! waits until one interval after the last success recorded in status (so a restart or a
//! leader hand-over neither skips nor doubles a slot); otherwise a snapshot is taken from a
//! healthy follower (the leader only when no follower is healthy), streamed and verified into
//! the storage the spec names, recorded in status (Succeeded), then given its sha256 as
//! metadata, and, for periodic backups with `maxBackups`, the oldest of this backup's own
//! objects beyond that many are deleted. Failures
//! set phase Failed, `Reason`, a Degraded condition and a Warning Event naming the cause, and
//! are retried. Deleting an EtcdBackup never deletes stored snapshots.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMultipartOptions};
use tokio::sync::watch;
use tracing::{info, warn};

use super::archive;
use crate::api::{
    BackupPhase, Condition, ConditionType, EtcdBackup, EtcdBackupStatus, SCHEDULE_KEEP_ANNOTATION,
    SCHEDULE_PREFIX_ANNOTATION, StorageSection,
};
use crate::etcd::{self, Etcd};
use crate::report::Reporter;
use crate::store::endpoint::{CONNECT_TIMEOUT, backup_endpoint};
pub use crate::store::error::Error;
use crate::store::location::target;
use crate::store::naming;
use crate::store::snapshot::{self, Verified};
use crate::store::storage::{Metadata, Target};

/// The field manager of backup status writes.
const MANAGER: &str = "etcd-operator-backup";
/// coreos's default for `timeoutInSecond` 0.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Shared by every reconcile.
pub struct Context {
    /// API client for requests (bounded in time).
    pub client: Client,
    /// Publishes Events.
    pub events: Reporter,
    /// The process's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Whether this replica leads (archiving tasks stop when it no longer does).
    pub leading: watch::Receiver<bool>,
    /// The continuous archives' tasks.
    pub archives: archive::Archives,
}

/// What the archiving tasks need of this controller: its client, Events, metrics, and a full
/// snapshot taken its own way when etcd compacted changes the archive lacks.
fn archive_shared(ctx: &Arc<Context>) -> archive::Shared {
    let for_snapshots = ctx.clone();
    archive::Shared {
        client: ctx.client.clone(),
        events: ctx.events.clone(),
        metrics: ctx.metrics.clone(),
        leading: ctx.leading.clone(),
        snapshot_now: Arc::new(move |backup: EtcdBackup| {
            let ctx = for_snapshots.clone();
            Box::pin(async move {
                let ns = backup.namespace().unwrap_or_default();
                let previous = backup.status.clone().unwrap_or_default();
                let taken = take(&ctx, &backup, &ns)
                    .await
                    .map_err(|e| crate::report::scrub(&e.to_string()))?;
                record_success(&ctx, &backup, &previous, &taken)
                    .await
                    .map_err(|e| e.to_string())?;
                finish(&ctx, &backup, &taken).await;
                Ok(())
            })
        }),
    }
}

/// A snapshot taken.
struct Taken {
    verified: Verified,
    revision: i64,
    version: String,
    /// coreos-style `<bucket>/<key>` of the object written.
    path: String,
    /// Where it was written, for what follows the status: its metadata, then retention.
    target: Target,
    location: Path,
}

fn interval_of(backup: &EtcdBackup) -> Option<Duration> {
    let secs = backup
        .spec
        .backup_policy
        .as_ref()
        .and_then(|p| p.backup_interval_in_second)
        .unwrap_or(0);
    u64::try_from(secs)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

fn timeout_of(backup: &EtcdBackup) -> Duration {
    let secs = backup
        .spec
        .backup_policy
        .as_ref()
        .and_then(|p| p.timeout_in_second)
        .unwrap_or(0);
    match u64::try_from(secs) {
        Ok(s) if s > 0 => Duration::from_secs(s),
        _ => DEFAULT_TIMEOUT,
    }
}

/// Prunes what the backup's retention no longer keeps: `maxBackups` of a periodic backup, and
/// a schedule's `--keep-snapshots`.
async fn retain(backup: &EtcdBackup, target: &Target) {
    if let Some(retention) = periodic_retention(backup) {
        prune(
            target.store.as_ref(),
            target.location.as_ref(),
            retention,
            naming::parse,
        )
        .await;
        crate::store::pitr::prune_chunks(target.store.as_ref(), target.location.as_ref()).await;
    }
    if let Some((prefix, keep)) = scheduled_retention(backup) {
        prune(
            target.store.as_ref(),
            &prefix,
            naming::Retention::newest(keep),
            naming::parse_scheduled,
        )
        .await;
    }
}

/// A one-shot backup writes to the exact path it names: an object there that this EtcdBackup
/// did not write (its status names another path, or none) is someone's data, and is kept.
async fn refuse_overwrite(
    backup: &EtcdBackup,
    target: &crate::store::storage::Target,
    path: &str,
) -> Result<(), Error> {
    let ours = backup.status.as_ref().is_some_and(|s| s.path == path);
    match target.store.head(&target.location).await {
        Ok(_) if !ours => Err(Error::Exists(path.to_string())),
        Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(source) => Err(Error::List {
            url: target.url.clone(),
            source,
        }),
    }
}

/// Takes one snapshot as the spec asks.
async fn take(ctx: &Context, backup: &EtcdBackup, ns: &str) -> Result<Taken, Error> {
    let spec = &backup.spec;
    let endpoint = backup_endpoint(&ctx.client, backup, ns).await?;
    let (target, spec_path) = target(&ctx.client, ns, spec.into()).await?;
    let status = etcd::status(&endpoint, CONNECT_TIMEOUT)
        .await
        .map_err(snapshot::Error::Etcd)?;
    let (location, path) = match interval_of(backup) {
        Some(_) => {
            let name =
                naming::periodic_name(target.location.as_ref(), status.revision, Timestamp::now());
            let bucket = spec_path.split_once('/').map_or("", |(b, _)| b);
            (Path::from(name.as_str()), format!("{bucket}/{name}"))
        }
        None => {
            refuse_overwrite(backup, &target, &spec_path).await?;
            (target.location.clone(), spec_path)
        }
    };
    let _slot = crate::store::slots::take(ns, 1).await;
    let mut etcd = Etcd::connect_streaming(&endpoint, CONNECT_TIMEOUT)
        .await
        .map_err(snapshot::Error::Etcd)?;
    let stream = etcd.snapshot().await.map_err(snapshot::Error::Etcd)?;
    let level = spec.compression.as_ref().map(|c| c.level());
    let verified = snapshot::upload_compressed(
        stream,
        target.store.as_ref(),
        &location,
        PutMultipartOptions::default(),
        timeout_of(backup),
        level,
    )
    .await?;
    Ok(Taken {
        verified,
        revision: status.revision,
        version: status.version,
        path,
        target,
        location,
    })
}

/// After the status says Succeeded: the object's sha256 metadata (known only once the stream
/// ended, so set by a copy of the object onto itself, which on a large object takes seconds:
/// the status, which holds the hash, does not wait for it), then retention. A metadata that
/// could not be set is a Warning; the backup stays good.
async fn finish(ctx: &Context, backup: &EtcdBackup, taken: &Taken) {
    let revision = taken.revision.to_string();
    let metadata_error = match taken.target.metadata {
        Metadata::Unsupported => None,
        ref how => snapshot::set_metadata(
            how,
            &taken.location,
            taken.verified.size,
            &[
                ("sha256", &taken.verified.sha256),
                ("etcd_revision", &revision),
            ],
        )
        .await
        .err(),
    };
    if let Some(other) = sharing_prefix(ctx, backup).await {
        let message = format!(
            "EtcdBackup {other} writes periodic snapshots under the same path: neither prunes \
             the other's, so this one's retention is not applied; give each its own path"
        );
        warn!(backup = backup.name_any(), "{message}");
        ctx.events
            .publish(backup, EventType::Warning, "SharedPrefix", message)
            .await;
        return;
    }
    if let Some(why) = metadata_error {
        warn!(path = taken.path, "sha256 metadata not set: {why}");
        ctx.events
            .publish(
                backup,
                EventType::Warning,
                "MetadataNotSet",
                format!(
                    "{} is saved and verified, but its sha256 metadata could not be set: {why}",
                    taken.path
                ),
            )
            .await;
    }
    retain(backup, &taken.target).await;
}

/// A periodic backup's retention: its tiers, else its `maxBackups`; `None` when it keeps
/// everything or is not periodic.
fn periodic_retention(backup: &EtcdBackup) -> Option<naming::Retention> {
    interval_of(backup)?;
    let policy = backup.spec.backup_policy.as_ref()?;
    let count = |n: Option<i64>| n.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let retention = match &policy.retention {
        Some(t) => naming::Retention {
            last: count(t.last),
            hourly: count(t.hourly),
            daily: count(t.daily),
            weekly: count(t.weekly),
            monthly: count(t.monthly),
        },
        None => naming::Retention::newest(count(policy.max_backups)),
    };
    (retention != naming::Retention::default()).then_some(retention)
}

/// For a backup made by a schedule (`etcd-operator backup create --keep-snapshots M`): the key
/// prefix of the schedule's objects (without the bucket) and how many of them to keep. Only
/// when this backup's own path is one of them.
/// Another periodic EtcdBackup of the namespace writing under the same path as `backup` (a
/// periodic one), whose snapshots this one's retention would prune as its own.
async fn sharing_prefix(ctx: &Context, backup: &EtcdBackup) -> Option<String> {
    interval_of(backup)?;
    let place = StorageSection::from(&backup.spec).place()?;
    let api: kube::Api<EtcdBackup> =
        kube::Api::namespaced(ctx.client.clone(), &backup.namespace().unwrap_or_default());
    let all = api.list(&kube::api::ListParams::default()).await.ok()?;
    all.items
        .into_iter()
        .filter(|b| b.metadata.uid != backup.metadata.uid && interval_of(b).is_some())
        .find(|b| StorageSection::from(&b.spec).place() == Some(place))
        .map(|b| b.name_any())
}

fn scheduled_retention(backup: &EtcdBackup) -> Option<(String, usize)> {
    let annotations = backup.metadata.annotations.as_ref()?;
    let keep: usize = annotations.get(SCHEDULE_KEEP_ANNOTATION)?.parse().ok()?;
    let prefix = annotations.get(SCHEDULE_PREFIX_ANNOTATION)?;
    let (_, _, path) = StorageSection::from(&backup.spec).place()?;
    naming::parse_scheduled(prefix, path)?;
    let (_, key) = prefix.split_once('/')?;
    (keep > 0).then(|| (key.to_string(), keep))
}

/// Deletes this backup's periodic objects that `keep` does not keep. A failure is only logged: the
/// snapshot itself succeeded, and the next success tries again.
async fn prune(
    store: &dyn ObjectStore,
    key: &str,
    keep: naming::Retention,
    parse: fn(&str, &str) -> Option<(k8s_openapi::jiff::civil::DateTime, i64)>,
) {
    let prefix = key.rsplit_once('/').map(|(dir, _)| Path::from(dir));
    let mut names = Vec::new();
    let mut listing = store.list(prefix.as_ref());
    while let Some(item) = listing.next().await {
        match item {
            Ok(meta) => names.push(meta.location.to_string()),
            Err(e) => {
                warn!(key, "listing backups for retention: {e}");
                return;
            }
        }
    }
    for name in naming::to_delete_by(parse, key, &names, keep) {
        match store.delete(&Path::from(name)).await {
            Ok(()) => info!(name, "deleted an old backup (retention {keep:?})"),
            Err(e) => warn!(name, "deleting an old backup: {e}"),
        }
    }
}

fn condition(
    previous: &[Condition],
    generation: Option<i64>,
    degraded: bool,
    reason: &str,
    message: String,
) -> Condition {
    Condition::computed(
        previous,
        ConditionType::Degraded,
        generation,
        degraded,
        reason,
        message,
    )
}

async fn write_status(
    ctx: &Context,
    backup: &EtcdBackup,
    status: &EtcdBackupStatus,
) -> Result<(), Error> {
    crate::report::apply_status(&ctx.client, backup, MANAGER, status)
        .await
        .map_err(|source| Error::Kube {
            what: "writing status".into(),
            source,
        })
}

/// Whether a backup is due now, and if not, how long until it is.
fn due(backup: &EtcdBackup, now: Timestamp) -> Option<Duration> {
    let status = backup.status.clone().unwrap_or_default();
    match interval_of(backup) {
        None => {
            let done = status.phase == Some(BackupPhase::Succeeded)
                && status.observed_generation == backup.metadata.generation
                || status.finished_by_coreos();
            // Done for good: Duration::MAX stands for "never again".
            done.then_some(Duration::MAX)
        }
        Some(interval) => {
            let last = last_success(backup);
            let wait = naming::next_due(last, interval, now);
            (!wait.is_zero()).then_some(wait)
        }
    }
}

/// When the backup last succeeded, by its status.
fn last_success(backup: &EtcdBackup) -> Option<Timestamp> {
    backup
        .status
        .as_ref()?
        .last_success_date
        .as_deref()?
        .parse()
        .ok()
}

async fn reconcile(backup: Arc<EtcdBackup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    ctx.archives.ensure(&archive_shared(&ctx), &backup);
    let result = reconcile_inner(&backup, &ctx).await;
    ctx.metrics.reconciled(
        "etcdbackup",
        started.elapsed(),
        result.as_ref().err().map(Error::metric_label),
    );
    result
}

async fn reconcile_inner(backup: &EtcdBackup, ctx: &Context) -> Result<Action, Error> {
    let ns = backup.namespace().unwrap_or_default();
    let cluster = backup.spec.cluster_name.clone().unwrap_or_default();
    // From the status, so that a restarted operator exports what was taken before it.
    let last = last_success(backup).map(|t| t.as_second());
    let interval = interval_of(backup).and_then(|i| i64::try_from(i.as_secs()).ok());
    if !cluster.is_empty() {
        ctx.metrics.backup_seen(&ns, &cluster, last, interval);
    }
    match due(backup, Timestamp::now()) {
        Some(Duration::MAX) => return Ok(Action::await_change()),
        Some(wait) => return Ok(Action::requeue(wait)),
        None => {}
    }
    let previous = backup.status.clone().unwrap_or_default();
    let generation = backup.metadata.generation;
    match take(ctx, backup, &ns).await {
        Ok(taken) => {
            record_success(ctx, backup, &previous, &taken).await?;
            if !cluster.is_empty() {
                let now = Some(Timestamp::now().as_second());
                ctx.metrics.backup_seen(&ns, &cluster, now, None);
                ctx.metrics.backup_result(&ns, &cluster, true);
            }
            finish(ctx, backup, &taken).await;
            Ok(match interval_of(backup) {
                Some(interval) => Action::requeue(interval),
                None => Action::await_change(),
            })
        }
        Err(e) => {
            if !cluster.is_empty() {
                ctx.metrics.backup_result(&ns, &cluster, false);
            }
            // Object store errors name their URL: no signed query may reach a status or Event.
            let message = crate::report::scrub(&e.to_string());
            let reported = previous.reason == message;
            let status = EtcdBackupStatus {
                succeeded: false,
                reason: message.clone(),
                phase: Some(BackupPhase::Failed),
                conditions: vec![condition(
                    &previous.conditions,
                    generation,
                    true,
                    e.reason(),
                    message.clone(),
                )],
                observed_generation: generation,
                archive: None,
                ..previous
            };
            write_status(ctx, backup, &status).await?;
            if !reported {
                ctx.events
                    .publish(backup, EventType::Warning, e.reason(), message)
                    .await;
            }
            Err(e)
        }
    }
}

/// The status and Event of a snapshot taken: where, how big, its revision and hash.
async fn record_success(
    ctx: &Context,
    backup: &EtcdBackup,
    previous: &EtcdBackupStatus,
    taken: &Taken,
) -> Result<(), Error> {
    let generation = backup.metadata.generation;
    let status = EtcdBackupStatus {
        succeeded: true,
        reason: String::new(),
        etcd_version: taken.version.clone(),
        etcd_revision: Some(taken.revision),
        last_success_date: Some(Timestamp::now().to_string()),
        phase: Some(BackupPhase::Succeeded),
        conditions: vec![condition(
            &previous.conditions,
            generation,
            false,
            "BackupSucceeded",
            format!("{} ({} bytes)", taken.path, taken.verified.size),
        )],
        observed_generation: generation,
        size: Some(i64::try_from(taken.verified.size).unwrap_or(i64::MAX)),
        snapshot_size: (taken.verified.snapshot_size != taken.verified.size)
            .then(|| i64::try_from(taken.verified.snapshot_size).unwrap_or(i64::MAX)),
        sha256: taken.verified.sha256.clone(),
        path: taken.path.clone(),
        // The archiver's own field (its own field manager): this manager never owns it.
        archive: None,
    };
    write_status(ctx, backup, &status).await?;
    info!(
        path = taken.path,
        size = taken.verified.size,
        "backup taken"
    );
    ctx.events
        .publish(
            backup,
            EventType::Normal,
            "BackupSucceeded",
            format!(
                "saved {} ({} bytes, revision {}, sha256 {})",
                taken.path, taken.verified.size, taken.revision, taken.verified.sha256
            ),
        )
        .await;
    Ok(())
}

fn error_policy(_: Arc<EtcdBackup>, error: &Error, _: Arc<Context>) -> Action {
    // A little jitter, so that backups failing together do not retry together.
    let jitter = Duration::from_millis(u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 8);
    Action::requeue(error.retry_after() + jitter)
}

/// Runs the controller while `leading` is true, over `namespaces` (empty: every namespace).
pub async fn run(
    ctx: Arc<Context>,
    watch_client: Client,
    namespaces: Vec<String>,
    leading: watch::Receiver<bool>,
) {
    crate::runner::run(
        "backup controller",
        ctx,
        watch_client,
        namespaces,
        leading,
        reconcile,
        error_policy,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BackupPolicy, EtcdBackupSpec, S3Source, StorageType};

    fn backup(interval: i64, status: EtcdBackupStatus) -> EtcdBackup {
        let mut b = EtcdBackup::new(
            "b",
            EtcdBackupSpec {
                etcd_endpoints: vec![],
                cluster_name: Some("c".into()),
                storage_type: StorageType::S3,
                backup_policy: Some(BackupPolicy {
                    backup_interval_in_second: Some(interval),
                    ..Default::default()
                }),
                s3: Some(S3Source {
                    path: "bucket/key".into(),
                    ..Default::default()
                }),
                abs: None,
                gcs: None,
                oss: None,
                client_tls_secret: None,
                compression: None,
            },
        );
        b.metadata.generation = Some(1);
        b.status = Some(status);
        b
    }

    #[test]
    fn periodic_backups_are_kept_by_their_tiers_else_by_max_backups() {
        let mut b = backup(3600, Default::default());
        assert_eq!(periodic_retention(&b), None, "keeps everything");
        let policy = b.spec.backup_policy.as_mut().unwrap();
        policy.max_backups = Some(5);
        assert_eq!(periodic_retention(&b), Some(naming::Retention::newest(5)));
        b.spec.backup_policy.as_mut().unwrap().retention = Some(crate::api::TieredRetention {
            last: Some(2),
            daily: Some(7),
            ..Default::default()
        });
        assert_eq!(
            periodic_retention(&b),
            Some(naming::Retention {
                last: 2,
                daily: 7,
                ..Default::default()
            })
        );
        // A one-shot backup has no periodic objects to prune.
        assert_eq!(periodic_retention(&backup(0, Default::default())), None);
    }

    #[test]
    fn a_one_shot_backup_is_taken_once_per_generation_and_retried_until_it_succeeds() {
        let now = Timestamp::now();
        assert_eq!(due(&backup(0, Default::default()), now), None);
        let failed = EtcdBackupStatus {
            phase: Some(BackupPhase::Failed),
            observed_generation: Some(1),
            ..Default::default()
        };
        assert_eq!(due(&backup(0, failed), now), None);
        let done = EtcdBackupStatus {
            phase: Some(BackupPhase::Succeeded),
            observed_generation: Some(1),
            ..Default::default()
        };
        assert_eq!(due(&backup(0, done.clone()), now), Some(Duration::MAX));
        let mut changed = backup(0, done);
        changed.metadata.generation = Some(2);
        assert_eq!(due(&changed, now), None);
    }

    #[test]
    fn a_one_shot_backup_the_coreos_operator_finished_is_never_taken_again() {
        let now = Timestamp::now();
        // As coreos wrote it: no phase, no generation; taking it again would overwrite the
        // snapshot kept at its path.
        let coreos = EtcdBackupStatus {
            succeeded: true,
            etcd_version: "3.5.9".into(),
            etcd_revision: Some(42),
            last_success_date: Some("2024-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        assert_eq!(due(&backup(0, coreos), now), Some(Duration::MAX));
        let failed = EtcdBackupStatus {
            reason: "failed to save snapshot".into(),
            ..Default::default()
        };
        assert_eq!(due(&backup(0, failed), now), Some(Duration::MAX));
        // This operator's own failure is retried.
        let ours = EtcdBackupStatus {
            reason: "x".into(),
            phase: Some(BackupPhase::Failed),
            observed_generation: Some(1),
            ..Default::default()
        };
        assert_eq!(due(&backup(0, ours), now), None);
    }

    #[test]
    fn a_periodic_backup_is_due_one_interval_after_its_last_success() {
        let last: Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        let status = EtcdBackupStatus {
            last_success_date: Some(last.to_string()),
            ..Default::default()
        };
        let b = backup(60, status);
        let soon: Timestamp = "2026-01-01T10:00:20Z".parse().unwrap();
        assert_eq!(due(&b, soon), Some(Duration::from_secs(40)));
        let late: Timestamp = "2026-01-01T11:00:00Z".parse().unwrap();
        assert_eq!(due(&b, late), None);
    }

    #[test]
    fn errors_name_their_cause() {
        let e = Error::SecretNotFound {
            field: "s3.awsSecret",
            name: "aws".into(),
        };
        assert_eq!(e.to_string(), "s3.awsSecret: Secret aws does not exist");
        assert_eq!(e.metric_label(), "secret_not_found");
        assert_eq!(
            Error::ClusterNotFound("prod".into()).to_string(),
            "spec.clusterName: EtcdCluster prod does not exist"
        );
    }
}
