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
//! the storage the spec names, recorded in status, and, for periodic backups with
//! `maxBackups`, the oldest of this backup's own objects beyond that many are deleted. Failures
//! set phase Failed, `Reason`, a Degraded condition and a Warning Event naming the cause, and
//! are retried. Deleting an EtcdBackup never deletes stored snapshots.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMultipartOptions};
use tokio::sync::watch;
use tracing::{info, warn};

use super::naming;
use super::snapshot::{self, Verified};
use super::storage::{self, SecretData, Target};
use crate::api::{
    BackupPhase, Condition, EtcdBackup, EtcdBackupStatus, EtcdCluster, MemberRole,
    SCHEDULE_KEEP_ANNOTATION, SCHEDULE_PREFIX_ANNOTATION, StorageType,
};
use crate::etcd::{self, ClientTls, Endpoint, Etcd};

/// The field manager of backup status writes.
const MANAGER: &str = "etcd-operator-backup";
/// Bounds each connection to etcd (the snapshot as a whole has `timeoutInSecond`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// coreos's default for `timeoutInSecond` 0.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Shared by every reconcile.
pub struct Context {
    /// API client for requests (bounded in time).
    pub client: Client,
    /// Publishes Events.
    pub recorder: Recorder,
    /// The process's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Why a backup could not be taken. Every message names its cause (field, Secret, cluster,
/// endpoint), since it becomes the status `Reason`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `clusterName` names no EtcdCluster.
    #[error("spec.clusterName: EtcdCluster {0} does not exist")]
    ClusterNotFound(String),
    /// The cluster has no member that can give a snapshot.
    #[error("EtcdCluster {cluster} has no healthy member to take a snapshot from ({detail})")]
    NoHealthyMember {
        /// The cluster.
        cluster: String,
        /// Its phase and reason, as its status says.
        detail: String,
    },
    /// None of the endpoints answers as a member that knows a leader.
    #[error("no etcd endpoint answers as a member with a leader: {0}")]
    Unreachable(String),
    /// A field this operator does not implement yet.
    #[error("{0}")]
    Unsupported(String),
    /// A Secret the spec names does not exist.
    #[error("{field}: Secret {name} does not exist")]
    SecretNotFound {
        /// The field naming it.
        field: &'static str,
        /// The Secret.
        name: String,
    },
    /// The storage section or its Secret is unusable.
    #[error(transparent)]
    Storage(#[from] storage::Error),
    /// The snapshot failed (etcd, the stream's hash, the store, the time limit).
    #[error(transparent)]
    Snapshot(#[from] snapshot::Error),
    /// The client certificate Secret of a TLS cluster is missing or unusable.
    #[error(transparent)]
    Tls(#[from] crate::cluster::tls::Error),
    /// Reading from the API server failed.
    #[error("reading {what}: {source}")]
    Kube {
        /// What was being read or written.
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::ClusterNotFound(_) => "cluster_not_found",
            Error::NoHealthyMember { .. } => "no_healthy_member",
            Error::Unreachable(_) => "etcd_unreachable",
            Error::Unsupported(_) => "unsupported_field",
            Error::SecretNotFound { .. } => "secret_not_found",
            Error::Storage(_) => "storage_config",
            Error::Snapshot(e) => e.metric_label(),
            Error::Tls(crate::cluster::tls::Error::Invalid { .. }) => "invalid_tls_secret",
            Error::Tls(_) => "kube",
            Error::Kube { .. } => "kube",
        }
    }

    /// The Event reason.
    fn reason(&self) -> &'static str {
        match self {
            Error::ClusterNotFound(_) => "ClusterNotFound",
            Error::NoHealthyMember { .. } => "NoHealthyMember",
            Error::Unreachable(_) => "EtcdUnreachable",
            Error::Unsupported(_) => "UnsupportedField",
            Error::SecretNotFound { .. } => "SecretNotFound",
            Error::Storage(_) => "InvalidStorage",
            Error::Snapshot(_) => "SnapshotFailed",
            Error::Tls(crate::cluster::tls::Error::Invalid { reason, .. }) => reason,
            Error::Tls(_) => "ApiError",
            Error::Kube { .. } => "ApiError",
        }
    }

    /// How soon to try again: a spec or Secret problem waits for the user (a Secret created
    /// later is not announced), anything else is retried sooner.
    fn retry_after(&self) -> Duration {
        match self {
            Error::ClusterNotFound(_)
            | Error::Unsupported(_)
            | Error::SecretNotFound { .. }
            | Error::Storage(_) => Duration::from_secs(20),
            _ => Duration::from_secs(10),
        }
    }
}

/// A snapshot taken.
struct Taken {
    verified: Verified,
    revision: i64,
    version: String,
    /// coreos-style `<bucket>/<key>` of the object written.
    path: String,
    /// Why the object's sha256 metadata could not be set, if it could not (the snapshot
    /// itself is good, and status has the hash).
    metadata_error: Option<String>,
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

/// The client endpoint of a member to take the snapshot from: a healthy follower of the named
/// EtcdCluster (so the leader is not loaded), else its leader; reached with `tls`, else the
/// cluster's own client certificate when it runs TLS.
pub(crate) async fn cluster_endpoint(
    client: &Client,
    ns: &str,
    name: &str,
    tls: Option<Arc<ClientTls>>,
) -> Result<Endpoint, Error> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let cluster = clusters
        .get_opt(name)
        .await
        .map_err(|source| Error::Kube {
            what: format!("EtcdCluster {name}"),
            source,
        })?
        .ok_or_else(|| Error::ClusterNotFound(name.into()))?;
    let tls = match tls {
        Some(tls) => Some(tls),
        None => {
            let secrets = crate::kube::cache::SecretApi::live(client, ns);
            crate::cluster::tls::cluster_client(&secrets, &cluster).await?
        }
    };
    let addr = crate::kube::names::addressing(&cluster);
    let status = cluster.status.unwrap_or_default();
    let mut candidates: Vec<_> = status
        .member_statuses
        .iter()
        .filter(|m| m.healthy && m.role != Some(MemberRole::Learner))
        .collect();
    candidates.sort_by_key(|m| m.role == Some(MemberRole::Leader));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for m in candidates {
        let pod = pods.get_opt(&m.name).await.map_err(|source| Error::Kube {
            what: format!("pod {}", m.name),
            source,
        })?;
        if let Some(ip) = pod.and_then(|p| p.status?.pod_ip) {
            let endpoint = Endpoint::new(
                addr.client_url_at(&ip),
                tls.clone(),
                Some(addr.host(&m.name)),
            );
            if etcd::status(&endpoint, CONNECT_TIMEOUT)
                .await
                .is_ok_and(|s| s.leader != 0)
            {
                return Ok(endpoint);
            }
        }
    }
    Err(Error::NoHealthyMember {
        cluster: name.into(),
        detail: format!(
            "phase {:?}{}",
            status.phase,
            if status.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", status.reason)
            }
        ),
    })
}

/// Of `endpoints`, one that answers as a member that knows a leader, a follower first; `https`
/// ones reached with `tls`.
async fn any_endpoint(
    endpoints: &[String],
    tls: Option<Arc<ClientTls>>,
) -> Result<Endpoint, Error> {
    let mut leader = None;
    for url in endpoints {
        let ep = Endpoint::new(url.clone(), tls.clone(), None);
        match etcd::status(&ep, CONNECT_TIMEOUT).await {
            Ok(s) if s.leader != 0 && s.leader != s.member_id && !s.is_learner => {
                return Ok(ep);
            }
            Ok(s) if s.leader != 0 && !s.is_learner => leader = leader.or(Some(ep.clone())),
            _ => {}
        }
    }
    leader.ok_or_else(|| Error::Unreachable(endpoints.join(", ")))
}

/// The named Secret's data as text, or why not.
async fn secret_data(
    client: &Client,
    ns: &str,
    field: &'static str,
    name: &str,
) -> Result<SecretData, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|source| Error::Kube {
            what: format!("Secret {name}"),
            source,
        })?
        .ok_or_else(|| Error::SecretNotFound {
            field,
            name: name.into(),
        })?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .chain(secret.string_data.unwrap_or_default())
        .collect())
}

/// Where a snapshot is (an EtcdBackup's or an EtcdRestore's storage section).
pub(crate) struct Storage<'a> {
    /// `storageType` (EtcdBackup) or `backupStorageType` (EtcdRestore).
    pub kind: StorageType,
    /// The S3 section.
    pub s3: Option<&'a crate::api::S3Source>,
    /// The ABS section.
    pub abs: Option<&'a crate::api::AbsSource>,
    /// The GCS section.
    pub gcs: Option<&'a crate::api::GcsSource>,
}

impl<'a> From<&'a crate::api::EtcdBackupSpec> for Storage<'a> {
    fn from(spec: &'a crate::api::EtcdBackupSpec) -> Self {
        Storage {
            kind: spec.storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
        }
    }
}

impl<'a> From<&'a crate::api::EtcdRestoreSpec> for Storage<'a> {
    fn from(spec: &'a crate::api::EtcdRestoreSpec) -> Self {
        Storage {
            kind: spec.backup_storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
        }
    }
}

/// The store and object location a storage section names, with its coreos-style path.
pub(crate) async fn target(
    client: &Client,
    ns: &str,
    spec: Storage<'_>,
) -> Result<(Target, String), Error> {
    let secret = storage::secret_of(spec.kind, spec.s3, spec.abs, spec.gcs);
    let data = match &secret {
        Some((field, name)) => Some(secret_data(client, ns, field, name).await?),
        None => None,
    };
    let missing = |section: &str| {
        storage::Error::Spec(format!(
            "the storage type is {:?} but spec.{section} is not set",
            spec.kind
        ))
    };
    let (target, path) = match spec.kind {
        StorageType::S3 => {
            let s3 = spec.s3.ok_or_else(|| missing("s3"))?;
            (storage::s3(s3, data.as_ref())?, s3.path.clone())
        }
        StorageType::Abs => {
            let abs = spec.abs.ok_or_else(|| missing("abs"))?;
            let data = data.unwrap_or_default();
            (storage::abs(abs, &data)?, abs.path.clone())
        }
        StorageType::Gcs => {
            let gcs = spec.gcs.ok_or_else(|| missing("gcs"))?;
            (storage::gcs(gcs, data.as_ref())?, gcs.path.clone())
        }
        StorageType::Oss => {
            return Err(Error::Unsupported(
                "OSS storage is not implemented by this operator".into(),
            ));
        }
    };
    Ok((target, path))
}

/// Takes one snapshot as the spec asks.
async fn take(ctx: &Context, backup: &EtcdBackup, ns: &str) -> Result<Taken, Error> {
    let spec = &backup.spec;
    // `clientTLSSecret` is the coreos way to reach endpoints that need a certificate; with
    // `clusterName` the cluster's own is used unless the spec names one.
    let tls = match spec.client_tls_secret.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => {
            let secrets = crate::kube::cache::SecretApi::live(&ctx.client, ns);
            Some(
                crate::cluster::tls::read_client(
                    &secrets,
                    "spec.clientTLSSecret",
                    name,
                    time::OffsetDateTime::now_utc(),
                )
                .await?,
            )
        }
        None => None,
    };
    let endpoint = match spec.cluster_name.as_deref().filter(|c| !c.is_empty()) {
        Some(cluster) => cluster_endpoint(&ctx.client, ns, cluster, tls).await?,
        None => any_endpoint(&spec.etcd_endpoints, tls).await?,
    };
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
        None => (target.location.clone(), spec_path),
    };
    let mut etcd = Etcd::connect_streaming(&endpoint, CONNECT_TIMEOUT)
        .await
        .map_err(snapshot::Error::Etcd)?;
    let stream = etcd.snapshot().await.map_err(snapshot::Error::Etcd)?;
    let verified = snapshot::upload(
        stream,
        target.store.as_ref(),
        &location,
        PutMultipartOptions::default(),
        timeout_of(backup),
    )
    .await?;
    let revision = status.revision.to_string();
    let metadata_error = match target.metadata {
        storage::Metadata::Unsupported => None,
        ref how => snapshot::set_metadata(
            how,
            &location,
            verified.size,
            &[("sha256", &verified.sha256), ("etcd_revision", &revision)],
        )
        .await
        .err(),
    };
    if let Some(keep) = backup
        .spec
        .backup_policy
        .as_ref()
        .and_then(|p| p.max_backups)
        .filter(|k| *k > 0 && interval_of(backup).is_some())
    {
        prune(
            target.store.as_ref(),
            target.location.as_ref(),
            usize::try_from(keep).unwrap_or(usize::MAX),
            naming::parse,
        )
        .await;
    }
    if let Some((prefix, keep)) = scheduled_retention(backup) {
        prune(
            target.store.as_ref(),
            &prefix,
            keep,
            naming::parse_scheduled,
        )
        .await;
    }
    Ok(Taken {
        verified,
        revision: status.revision,
        version: status.version,
        path,
        metadata_error,
    })
}

/// For a backup made by a schedule (`etcd-operator backup create --keep-snapshots M`): the key
/// prefix of the schedule's objects (without the bucket) and how many of them to keep. Only
/// when this backup's own path is one of them.
fn scheduled_retention(backup: &EtcdBackup) -> Option<(String, usize)> {
    let annotations = backup.metadata.annotations.as_ref()?;
    let keep: usize = annotations.get(SCHEDULE_KEEP_ANNOTATION)?.parse().ok()?;
    let prefix = annotations.get(SCHEDULE_PREFIX_ANNOTATION)?;
    let path = match backup.spec.storage_type {
        StorageType::S3 => &backup.spec.s3.as_ref()?.path,
        StorageType::Abs => &backup.spec.abs.as_ref()?.path,
        StorageType::Gcs => &backup.spec.gcs.as_ref()?.path,
        StorageType::Oss => return None,
    };
    naming::parse_scheduled(prefix, path)?;
    let (_, key) = prefix.split_once('/')?;
    (keep > 0).then(|| (key.to_string(), keep))
}

/// Deletes this backup's oldest periodic objects beyond `keep`. A failure is only logged: the
/// snapshot itself succeeded, and the next success tries again.
async fn prune(
    store: &dyn ObjectStore,
    key: &str,
    keep: usize,
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
            Ok(()) => info!(name, "deleted an old backup (maxBackups {keep})"),
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
    let status = if degraded { "True" } else { "False" }.to_string();
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .or_else(|| Some(Timestamp::now().to_string()));
    Condition {
        type_: "Degraded".into(),
        status,
        observed_generation: generation,
        last_transition_time,
        reason: reason.into(),
        message,
    }
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

async fn publish(ctx: &Context, backup: &EtcdBackup, type_: EventType, reason: &str, note: String) {
    crate::report::publish(&ctx.recorder, backup, "Backup", type_, reason, note).await;
}

/// Whether a backup is due now, and if not, how long until it is.
fn due(backup: &EtcdBackup, now: Timestamp) -> Option<Duration> {
    let status = backup.status.clone().unwrap_or_default();
    match interval_of(backup) {
        None => {
            let done = status.phase == Some(BackupPhase::Succeeded)
                && status.observed_generation == backup.metadata.generation;
            // Done for good: Duration::MAX stands for "never again".
            done.then_some(Duration::MAX)
        }
        Some(interval) => {
            let last = status
                .last_success_date
                .as_deref()
                .and_then(|d| d.parse::<Timestamp>().ok());
            let wait = naming::next_due(last, interval, now);
            (!wait.is_zero()).then_some(wait)
        }
    }
}

async fn reconcile(backup: Arc<EtcdBackup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
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
    match due(backup, Timestamp::now()) {
        Some(Duration::MAX) => return Ok(Action::await_change()),
        Some(wait) => return Ok(Action::requeue(wait)),
        None => {}
    }
    let previous = backup.status.clone().unwrap_or_default();
    let generation = backup.metadata.generation;
    match take(ctx, backup, &ns).await {
        Ok(taken) => {
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
                sha256: taken.verified.sha256.clone(),
                path: taken.path.clone(),
            };
            write_status(ctx, backup, &status).await?;
            info!(
                path = taken.path,
                size = taken.verified.size,
                "backup taken"
            );
            publish(
                ctx,
                backup,
                EventType::Normal,
                "BackupSucceeded",
                format!(
                    "saved {} ({} bytes, revision {}, sha256 {})",
                    taken.path, taken.verified.size, taken.revision, taken.verified.sha256
                ),
            )
            .await;
            if let Some(why) = &taken.metadata_error {
                warn!(path = taken.path, "sha256 metadata not set: {why}");
                publish(
                    ctx,
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
            Ok(match interval_of(backup) {
                Some(interval) => Action::requeue(interval),
                None => Action::await_change(),
            })
        }
        Err(e) => {
            let message = e.to_string();
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
                ..previous
            };
            write_status(ctx, backup, &status).await?;
            if !reported {
                publish(ctx, backup, EventType::Warning, e.reason(), message).await;
            }
            Err(e)
        }
    }
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
    crate::leader::while_leading(leading, "backup controller", || {
        let controllers = namespaced_apis::<EtcdBackup>(&watch_client, &namespaces)
            .into_iter()
            .map(|api| {
                Controller::new(api, watcher::Config::default())
                    .run(reconcile, error_policy, ctx.clone())
                    .for_each(|_| futures::future::ready(()))
            });
        futures::future::join_all(controllers).map(|_| ())
    })
    .await
}

/// One Api per namespace in `namespaces`, or one over all namespaces when it is empty.
pub(crate) fn namespaced_apis<K>(client: &Client, namespaces: &[String]) -> Vec<Api<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BackupPolicy, EtcdBackupSpec, S3Source};

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
            },
        );
        b.metadata.generation = Some(1);
        b.status = Some(status);
        b
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
