//! The EtcdRestore controller: checks a snapshot, keeps what it replaces, and hands the restore
//! to the cluster's task, which stays the only writer of the cluster's membership.
//!
//! A kube-runtime `Controller`, leader-only, like the backup controller. One pass:
//!
//! 1. The EtcdCluster must exist (else phase Pending, condition `ClusterNotFound`, looked at
//!    again), and no other restore may be pending on it (else Failed: `RestoreInProgress`).
//! 2. **Verifying**: the snapshot is read through once: etcd's own hash (its last 32 bytes)
//!    must match the rest, and the sha256 of the whole object must match what is known of it
//!    (the object's `sha256` metadata, or the status of the EtcdBackup that wrote that path).
//!    A missing, corrupt or mismatching snapshot fails the restore; the cluster is untouched.
//! 3. **Nothing lost**, while step 2 reads the store: if the cluster still answers, a
//!    snapshot of it is taken to `<path>.pre-restore-<time>` in the same storage; its revision
//!    sets how far the restored revision is raised, so that watchers never see it go back. One
//!    taken beside a snapshot that failed step 2 is deleted.
//! 4. **Hand-off**: the EtcdCluster gets the annotation [`RESTORE_ANNOTATION`] (the restore,
//!    a fresh token, the sha256, the revision bump). Its spec is never changed. Its task deletes
//!    the members, creates a seed that fetches the snapshot from this operator
//!    ([`super::serve`]), and records in its status when the seed serves.
//! 5. **Restoring**, until the cluster is Available at its full size: then Completed, the
//!    restored revision recorded, and the annotation removed.
//!
//! Every step can be cut short (the operator killed) and done again: before the hand-off the
//! cluster is untouched (a second pass takes another safety snapshot); after it, the annotation
//! is the record, and the task finishes the restore.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Client, ResourceExt};
use object_store::path::Path;
use object_store::{Attribute, GetOptions, ObjectStore, ObjectStoreExt, PutMultipartOptions};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::handoff::{BUMP_MARGIN, bump_for};
use crate::api::{
    Condition, ConditionType, EtcdBackup, EtcdCluster, EtcdRestore, EtcdRestoreStatus,
    RESTORE_ANNOTATION, RestoreHandoff, RestorePhase, VerifiedObject, find_condition, handoff,
};
use crate::kube::restore_token;
use crate::report::Reporter;
use crate::store::compress::Unpack;
use crate::store::endpoint::cluster_endpoint;
use crate::store::error::Error as BackupError;
use crate::store::location::{Storage, target};
use crate::store::naming;
use crate::store::pitr;
use crate::store::snapshot::{self, Verifier};
use crate::store::storage;

/// The field manager of restore status writes.
const MANAGER: &str = handoff::RESTORE_MANAGER;
/// Keeps an EtcdRestore from going while its cluster is being rebuilt from it: the seed reads
/// the snapshot's location from it, and a restore deleted half-way would strand the seed.
/// Set just before the hand-off, removed once the hand-off is off the cluster (completed, or
/// the cluster gone). Deleting the restore meanwhile lets it finish, then it goes.
pub const FINALIZER: &str = "etcd.database.coreos.com/restore";
/// Bounds each connection to etcd.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds the safety snapshot.
const SAFETY_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a restore in progress is looked at.
const POLL: Duration = Duration::from_secs(2);

/// Shared by every reconcile.
pub struct Context {
    /// API client for requests (bounded in time).
    pub client: Client,
    /// Publishes Events.
    pub events: Reporter,
}

/// Why a restore cannot go on. Every message names its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage section, its Secret, or the cluster to snapshot.
    #[error(transparent)]
    Source(#[from] BackupError),
    /// The snapshot object does not exist.
    #[error("the snapshot {0} does not exist")]
    Missing(String),
    /// Reading the snapshot failed.
    #[error("reading the snapshot {url}: {source}")]
    Read {
        /// Where.
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// The snapshot is not whole: etcd's own hash does not match its contents.
    #[error("the snapshot {url} is corrupt: {source}")]
    Corrupt {
        /// Where.
        url: String,
        #[source]
        source: snapshot::Error,
    },
    /// The snapshot's sha256 is not the one recorded when it was written.
    #[error("the snapshot {url} has sha256 {computed}, but {known_from} says {known}")]
    Mismatch {
        /// Where.
        url: String,
        /// What it hashes to.
        computed: String,
        /// What was recorded.
        known: String,
        /// Where that was recorded.
        known_from: String,
    },
    /// Another restore is pending on the cluster.
    #[error("EtcdCluster {cluster} is being restored by EtcdRestore {other}")]
    Busy {
        /// The cluster.
        cluster: String,
        /// The other restore.
        other: String,
    },
    /// The cluster answered but its safety snapshot failed: nothing is replaced without one.
    #[error("taking the safety snapshot of EtcdCluster {cluster}: {source}")]
    Safety {
        /// The cluster.
        cluster: String,
        #[source]
        source: snapshot::Error,
    },
    /// A point-in-time restore the archive cannot give (or a store that did not answer).
    #[error("spec.restoreTo: {0}")]
    Pitr(#[from] pitr::Error),
    /// `spec.restoreTo.time` is not RFC 3339.
    #[error("spec.restoreTo.time {0:?} is not an RFC 3339 time")]
    BadTime(String),
    /// The API server.
    #[error("{what}: {source}")]
    Kube {
        /// What was read or written.
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Source(_) => "InvalidSource",
            Error::Missing(_) => "SnapshotMissing",
            Error::Read { .. } => "SnapshotUnreadable",
            Error::Corrupt { .. } => "SnapshotCorrupt",
            Error::Mismatch { .. } => "SnapshotHashMismatch",
            Error::Busy { .. } => "RestoreInProgress",
            Error::Safety { .. } => "SafetySnapshotFailed",
            Error::Pitr(pitr::Error::Store { .. }) => "SnapshotUnreadable",
            Error::Pitr(_) => "ArchiveUnusable",
            Error::BadTime(_) => "InvalidSource",
            Error::Kube { .. } => "ApiError",
        }
    }

    /// Whether trying again cannot help until the spec changes: the snapshot itself is wrong,
    /// or another restore holds the cluster.
    fn is_final(&self) -> bool {
        match self {
            Error::Pitr(e) => e.is_final(),
            e => matches!(
                e,
                Error::Missing(_)
                    | Error::Corrupt { .. }
                    | Error::Mismatch { .. }
                    | Error::Busy { .. }
                    | Error::BadTime(_)
            ),
        }
    }
}

fn condition(
    previous: &[Condition],
    generation: Option<i64>,
    done: bool,
    reason: &str,
    message: String,
) -> Condition {
    Condition::computed(
        previous,
        ConditionType::Completed,
        generation,
        done,
        reason,
        message,
    )
}

/// The status with `phase`, and the condition's reason and message.
fn with_phase(
    restore: &EtcdRestore,
    phase: RestorePhase,
    reason: &str,
    message: String,
) -> EtcdRestoreStatus {
    let previous = restore.status.clone().unwrap_or_default();
    let generation = restore.metadata.generation;
    EtcdRestoreStatus {
        succeeded: phase == RestorePhase::Completed,
        reason: if phase == RestorePhase::Failed {
            message.clone()
        } else {
            String::new()
        },
        phase: Some(phase),
        conditions: vec![condition(
            &previous.conditions,
            generation,
            phase == RestorePhase::Completed,
            reason,
            message,
        )],
        observed_generation: generation,
        ..previous
    }
}

async fn write_status(
    ctx: &Context,
    restore: &EtcdRestore,
    status: &EtcdRestoreStatus,
) -> Result<(), Error> {
    if restore.status.as_ref() == Some(status) {
        return Ok(());
    }
    crate::report::apply_status(&ctx.client, restore, MANAGER, status)
        .await
        .map_err(|source| Error::Kube {
            what: "writing status".into(),
            source,
        })
}

/// The handoff on `cluster`, whether or not the cluster has carried it out.
fn handoff_of(cluster: &EtcdCluster) -> Option<RestoreHandoff> {
    let value = cluster.annotations().get(RESTORE_ANNOTATION)?;
    serde_json::from_str(value).ok()
}

/// Whether the hand-off on `cluster` is the one this restore (`status`) wrote.
fn is_ours(cluster: &EtcdCluster, status: &EtcdRestoreStatus) -> bool {
    cluster
        .annotations()
        .get(RESTORE_ANNOTATION)
        .is_some_and(|v| {
            !status.handoff_sha256.is_empty() && handoff::digest(v) == status.handoff_sha256
        })
}

/// What is known of a snapshot's sha256 before it is read: its object metadata, or the status
/// of the EtcdBackup that wrote that path; with where it was found.
async fn known_sha256(
    client: &Client,
    ns: &str,
    store: &dyn ObjectStore,
    location: &Path,
    path: &str,
) -> Result<Option<(String, String)>, Error> {
    let head = store
        .get_opts(
            location,
            GetOptions {
                head: true,
                ..GetOptions::default()
            },
        )
        .await;
    if let Ok(head) = head
        && let Some(sha) = head.attributes.get(&Attribute::Metadata("sha256".into()))
    {
        return Ok(Some((sha.to_string(), "its sha256 metadata".into())));
    }
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), ns);
    let list = backups
        .list(&Default::default())
        .await
        .map_err(|source| Error::Kube {
            what: "listing EtcdBackups".into(),
            source,
        })?;
    Ok(list.items.into_iter().find_map(|b| {
        let s = b.status?;
        (s.path == path && !s.sha256.is_empty()).then(|| {
            (
                s.sha256,
                format!("EtcdBackup {}", b.metadata.name.unwrap_or_default()),
            )
        })
    }))
}

/// Reads the snapshot through: etcd's own hash must match, and so must what is known.
async fn verify(
    client: &Client,
    ns: &str,
    target: &storage::Target,
    path: &str,
) -> Result<snapshot::Verified, Error> {
    let url = target.url.clone();
    let got = match target.store.get(&target.location).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Err(Error::Missing(url)),
        Err(source) => return Err(Error::Read { url, source }),
    };
    let mut stream = got.into_stream();
    let mut verifier = Verifier::default();
    // The snapshot (decompressed, if it was stored with zstd) is checked against etcd's own
    // hash; what was stored is hashed apart only when it is not the snapshot itself.
    let mut stored = (
        0u64,
        Some(aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256)),
    );
    let mut unpack = Unpack::default();
    let corrupt = |e: std::io::Error| Error::Corrupt {
        url: url.clone(),
        source: snapshot::Error::Compress(e.to_string()),
    };
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|source| Error::Read {
            url: url.clone(),
            source,
        })?;
        stored.0 += chunk.len() as u64;
        if let Some(hash) = &mut stored.1 {
            hash.update(&chunk);
        }
        unpack
            .push_each(&chunk, |piece| verifier.update(piece))
            .map_err(corrupt)?;
        if unpack.plain() {
            stored.1 = None;
        }
    }
    verifier.update(&unpack.finish());
    let verified = verifier.finish().map_err(|source| Error::Corrupt {
        url: url.clone(),
        source,
    })?;
    let verified = match stored.1 {
        Some(hash) => verified.stored_as(stored.0, snapshot::hex(hash.finish().as_ref())),
        None => verified,
    };
    if let Some((known, known_from)) =
        known_sha256(client, ns, target.store.as_ref(), &target.location, path).await?
        && known != verified.sha256
    {
        return Err(Error::Mismatch {
            url,
            computed: verified.sha256,
            known,
            known_from,
        });
    }
    Ok(verified)
}

/// What a pass may take from an earlier one: the object verified for this generation, if the
/// object is still the one that was read (same version and size).
fn still_verified(
    earlier: Option<&VerifiedObject>,
    generation: i64,
    version: &str,
    size: u64,
) -> Option<VerifiedObject> {
    earlier
        .filter(|v| {
            v.generation == generation
                && v.version == version
                && u64::try_from(v.size).ok() == Some(size)
        })
        .cloned()
}

/// The snapshot verified: read through once per generation and object version, the result kept
/// in the status, so a pass retried before the hand-off (a safety snapshot that failed) does
/// not read a large object again.
async fn verified_object(
    ctx: &Context,
    restore: &EtcdRestore,
    target: &storage::Target,
    path: &str,
) -> Result<VerifiedObject, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let url = target.url.clone();
    let head = match target.store.head(&target.location).await {
        Ok(head) => head,
        Err(object_store::Error::NotFound { .. }) => return Err(Error::Missing(url)),
        Err(source) => return Err(Error::Read { url, source }),
    };
    let version = head
        .e_tag
        .clone()
        .unwrap_or_else(|| head.last_modified.to_rfc3339());
    let generation = restore.metadata.generation.unwrap_or_default();
    let current = restore.status.clone().unwrap_or_default();
    if let Some(v) = still_verified(current.verified.as_ref(), generation, &version, head.size) {
        return Ok(v);
    }
    let reading = "reading the snapshot through and checking its hashes, while a safety \
                   snapshot keeps the cluster as it is";
    let mut status = with_phase(
        restore,
        RestorePhase::Verifying,
        "Verifying",
        reading.into(),
    );
    write_status(ctx, restore, &status).await?;
    let verified = verify(&ctx.client, &ns, target, path).await?;
    let object = VerifiedObject {
        generation,
        version,
        size: i64::try_from(verified.size).unwrap_or(i64::MAX),
        sha256: verified.sha256,
        snapshot_sha256: verified.snapshot_sha256,
        snapshot_size: i64::try_from(verified.snapshot_size).ok(),
    };
    status.verified = Some(object.clone());
    status.conditions[0].message = "verified; keeping the cluster as it is".into();
    write_status(ctx, restore, &status).await?;
    Ok(object)
}

/// A safety snapshot taken: its coreos-style path, the revision it holds, its key, and what
/// was verified of it as it streamed.
struct Safety {
    path: String,
    revision: i64,
    location: Path,
    verified: snapshot::Verified,
}

/// Sets a kept safety snapshot's sha256 as its metadata, in the background: that is a copy of
/// the object onto itself (2 s of a 1 GiB restore here), which the members being replaced need
/// not wait for; a copy that fails is a warning, the snapshot good without it (etcd's own hash
/// is inside, and a restore from it checks that). Only once the restored snapshot is verified,
/// so that no copy races the deletion of a safety snapshot taken beside a bad one.
fn tag_in_background(target: &storage::Target, safety: &Safety) {
    let (how, location) = (target.metadata.clone(), safety.location.clone());
    let (path, size, sha256) = (
        safety.path.clone(),
        safety.verified.size,
        safety.verified.sha256.clone(),
    );
    tokio::spawn(async move {
        if let Err(why) =
            snapshot::set_metadata(&how, &location, size, &[("sha256", &sha256)]).await
        {
            warn!(path, "sha256 metadata not set: {why}");
        }
    });
}

/// What the safety snapshot kept, for the restore's note.
fn kept(safety: Option<&Safety>) -> String {
    match safety {
        Some(s) => format!(
            "the cluster as it was (revision {}) is kept at {}",
            s.revision, s.path
        ),
        None => "the cluster did not answer, so there was nothing to keep".into(),
    }
}

/// A safety snapshot taken beside a verification that failed: the restore goes no further, so
/// the cluster as it is needs no copy (a retry takes a new one).
async fn discard(target: &storage::Target, safety: Result<Option<Safety>, Error>) {
    if let Ok(Some(s)) = safety
        && let Err(why) = target.store.delete(&s.location).await
    {
        warn!(
            path = s.path,
            "the unneeded safety snapshot was not deleted: {why}"
        );
    }
}

/// A snapshot of the cluster being replaced, beside the one restored; `None` when the cluster
/// does not answer (then there is nothing to keep).
async fn safety_snapshot(
    client: &Client,
    ns: &str,
    cluster: &str,
    target: &storage::Target,
    path: &str,
) -> Result<Option<Safety>, Error> {
    let endpoint = match cluster_endpoint(client, ns, cluster, None).await {
        Ok(e) => e,
        Err(BackupError::NoHealthyMember { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let name = naming::pre_restore_name(target.location.as_ref(), Timestamp::now());
    let location = Path::from(name.as_str());
    let saved = snapshot::save(
        &endpoint,
        target.store.as_ref(),
        &location,
        PutMultipartOptions::default(),
        SAFETY_TIMEOUT,
        CONNECT_TIMEOUT,
    )
    .await
    .map_err(|source| Error::Safety {
        cluster: cluster.into(),
        source,
    })?;
    let bucket = path.split_once('/').map_or("", |(b, _)| b);
    Ok(Some(Safety {
        path: format!("{bucket}/{name}"),
        revision: saved.revision,
        location,
        verified: saved.verified,
    }))
}

async fn patch_annotation(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    value: Option<String>,
) -> Result<(), Error> {
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": {RESTORE_ANNOTATION: value}}});
    // The cluster's task acts on a hand-off only when this field manager wrote it.
    let params = PatchParams {
        field_manager: Some(handoff::RESTORE_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(cluster, &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::Kube {
            what: format!("annotating EtcdCluster {cluster}"),
            source,
        })
}

/// Adds (`hold`) or removes this operator's finalizer on `restore`, if that changes anything.
async fn set_finalizer(ctx: &Context, restore: &EtcdRestore, hold: bool) -> Result<(), Error> {
    let mut finalizers = restore.finalizers().to_vec();
    let held = finalizers.iter().any(|f| f == FINALIZER);
    if held == hold {
        return Ok(());
    }
    if hold {
        finalizers.push(FINALIZER.into());
    } else {
        finalizers.retain(|f| f != FINALIZER);
    }
    let api: Api<EtcdRestore> =
        Api::namespaced(ctx.client.clone(), &restore.namespace().unwrap_or_default());
    // The whole list, without a resourceVersion precondition: the object read at the start of
    // the pass is older than its own status writes, and nothing else puts finalizers on an
    // EtcdRestore.
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    api.patch(
        &restore.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|source| Error::Kube {
        what: format!(
            "setting the finalizers of EtcdRestore {}",
            restore.name_any()
        ),
        source,
    })
}

/// The revision the cluster serves now, if a member answers.
async fn revision_of(ctx: &Context, ns: &str, cluster: &EtcdCluster) -> Option<i64> {
    let endpoint = cluster_endpoint(&ctx.client, ns, &cluster.name_any(), None)
        .await
        .ok()?;
    crate::etcd::status(&endpoint, CONNECT_TIMEOUT)
        .await
        .ok()
        .map(|s| s.revision)
}

/// The restore is handed over: follows the cluster until it is whole again.
async fn follow(
    ctx: &Context,
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    handoff: &RestoreHandoff,
) -> Result<Action, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let status = cluster.status.clone().unwrap_or_default();
    let seeded = status
        .restore
        .as_ref()
        .filter(|r| r.uid == handoff.uid && r.completed);
    let available = find_condition(&status.conditions, ConditionType::Available)
        .is_some_and(|c| c.status == "True");
    let whole = available
        && status.ready_members == Some(cluster.spec.size)
        && status.size == cluster.spec.size;
    let mut next = with_phase(
        restore,
        RestorePhase::Restoring,
        "Restoring",
        match seeded {
            Some(r) => format!(
                "seed {} serves the snapshot's data; the cluster grows back to {} members",
                r.seed, cluster.spec.size
            ),
            None => find_condition(&status.conditions, ConditionType::Progressing)
                .map(|c| c.message.clone())
                .unwrap_or_else(|| "the cluster's members are being replaced".into()),
        },
    );
    next.sha256 = handoff.sha256.clone();
    next.pre_restore_path = handoff.pre_restore_path.clone();
    if let Some(r) = seeded {
        next.seed = r.seed.clone();
    }
    if seeded.is_none() || !whole {
        write_status(ctx, restore, &next).await?;
        return Ok(Action::requeue(POLL));
    }
    let revision = revision_of(ctx, &ns, cluster).await;
    let message = format!(
        "EtcdCluster {} runs from the snapshot at {} members{}",
        cluster.name_any(),
        cluster.spec.size,
        revision
            .map(|r| format!(", revision {r}"))
            .unwrap_or_default()
    );
    let mut done = with_phase(
        restore,
        RestorePhase::Completed,
        "Completed",
        message.clone(),
    );
    done.sha256 = next.sha256;
    done.pre_restore_path = next.pre_restore_path;
    done.seed = next.seed;
    done.restored_revision = revision;
    write_status(ctx, restore, &done).await?;
    patch_annotation(ctx, &ns, &cluster.name_any(), None).await?;
    set_finalizer(ctx, restore, false).await?;
    info!(restore = restore.name_any(), "{message}");
    ctx.events
        .publish(
            restore,
            EventType::Normal,
            "RestoreCompleted",
            message.clone(),
        )
        .await;
    ctx.events
        .publish(cluster, EventType::Normal, "RestoreCompleted", message)
        .await;
    Ok(Action::await_change())
}

async fn reconcile_inner(restore: &EtcdRestore, ctx: &Context) -> Result<Action, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let uid = restore.metadata.uid.clone().unwrap_or_default();
    let current = restore.status.clone().unwrap_or_default();
    let this_generation = current.observed_generation == restore.metadata.generation;
    let deleting = restore.metadata.deletion_timestamp.is_some();
    if current.phase == Some(RestorePhase::Completed) && this_generation {
        set_finalizer(ctx, restore, false).await?;
        return Ok(Action::await_change());
    }
    // Finished under the coreos operator, whose cluster this one took over: history.
    if current.finished_by_coreos() {
        return Ok(Action::await_change());
    }
    let cluster_name = restore.spec.etcd_cluster.name.clone();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters
        .get_opt(&cluster_name)
        .await
        .map_err(|source| Error::Kube {
            what: format!("reading EtcdCluster {cluster_name}"),
            source,
        })?;
    // Deleted: it goes at once unless its hand-off is still on the cluster; then it is
    // followed to the end, and goes then.
    let handed_off = cluster
        .as_ref()
        .and_then(handoff_of)
        .is_some_and(|h| h.uid == uid);
    if deleting && !handed_off {
        set_finalizer(ctx, restore, false).await?;
        return Ok(Action::await_change());
    }
    let Some(cluster) = cluster else {
        let message = format!(
            "spec.etcdCluster.name: EtcdCluster {cluster_name} does not exist; waiting for it"
        );
        write_status(
            ctx,
            restore,
            &with_phase(restore, RestorePhase::Pending, "ClusterNotFound", message),
        )
        .await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    if let Some(handoff) = handoff_of(&cluster) {
        // Ours only if it is still exactly what this restore wrote: one changed since is
        // replaced by a fresh hand-off (the cluster's task refuses it meanwhile).
        if handoff.uid == uid && is_ours(&cluster, &current) {
            return follow(ctx, restore, &cluster, &handoff).await;
        }
        // Another restore's counts only when verified: a forged or stale annotation must not
        // keep a real restore out.
        let restores: Api<EtcdRestore> = Api::namespaced(ctx.client.clone(), &ns);
        let pending = crate::kube::handoff::pending(&restores, &cluster)
            .await
            .map_err(|source| Error::Kube {
                what: format!("reading EtcdRestore {}", handoff.name),
                source,
            })?;
        if handoff.uid != uid && matches!(pending, Some(Ok(_))) {
            return Err(Error::Busy {
                cluster: cluster_name,
                other: handoff.name,
            });
        }
    }
    if current.phase == Some(RestorePhase::Failed)
        && this_generation
        && current.conditions.iter().any(|c| c.reason == "Final")
    {
        return Ok(Action::await_change());
    }

    start(ctx, restore, &cluster, uid).await
}

/// Where `spec.restoreTo` goes, if it is set.
fn point_of(restore: &EtcdRestore) -> Result<Option<pitr::Point>, Error> {
    let Some(to) = &restore.spec.restore_to else {
        return Ok(None);
    };
    match (to.revision, to.time.as_deref()) {
        (Some(r), _) => Ok(Some(pitr::Point::Revision(r))),
        (None, Some(t)) => t
            .parse()
            .map(|t| Some(pitr::Point::Time(t)))
            .map_err(|_| Error::BadTime(t.to_string())),
        (None, None) => Ok(None),
    }
}

/// The snapshot to restore, its coreos-style path, and for a point-in-time restore its plan
/// (the spec's path then names the backup, and the plan picks the snapshot).
async fn source_of(
    ctx: &Context,
    restore: &EtcdRestore,
) -> Result<(storage::Target, String, Option<pitr::Plan>), Error> {
    let ns = restore.namespace().unwrap_or_default();
    let (target, path) = target(&ctx.client, &ns, Storage::from(&restore.spec)).await?;
    let Some(point) = point_of(restore)? else {
        return Ok((target, path, None));
    };
    let key = target.location.to_string();
    let plan = pitr::plan(target.store.as_ref(), &key, point).await?;
    let path = format!("{}{}", path.strip_suffix(&key).unwrap_or(""), plan.object);
    Ok((target.with_location(plan.object.clone()), path, Some(plan)))
}

/// The snapshot verified, and the safety snapshot of the cluster.
/// Both read as much from different ends (the store, the cluster), so they run together;
/// nothing is replaced before both have succeeded.
async fn verify_and_keep(
    ctx: &Context,
    restore: &EtcdRestore,
    cluster: &str,
    target: &storage::Target,
    path: &str,
) -> Result<(VerifiedObject, Option<Safety>), Error> {
    let ns = restore.namespace().unwrap_or_default();
    // Two reads at once, two slots: the safety snapshot is a backup like any other.
    let _slots = crate::store::slots::take(&ns, 2).await;
    let (verified, safety) = tokio::join!(
        verified_object(ctx, restore, target, path),
        safety_snapshot(&ctx.client, &ns, cluster, target, path),
    );
    match verified {
        Ok(v) => {
            let safety = safety?;
            if let Some(s) = &safety {
                tag_in_background(target, s);
            }
            Ok((v, safety))
        }
        Err(e) => {
            discard(target, safety).await;
            Err(e)
        }
    }
}

/// Verifies the snapshot, keeps the cluster as it is, and hands the restore to the cluster's
/// task (an annotation on the EtcdCluster).
async fn start(
    ctx: &Context,
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    uid: String,
) -> Result<Action, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    let (target, path, plan) = source_of(ctx, restore).await?;
    let (verified, safety) = verify_and_keep(ctx, restore, &cluster_name, &target, &path).await?;
    let token_sha256 = restore_token::issue(&ctx.client, cluster)
        .await
        .map_err(|source| Error::Kube {
            what: format!(
                "writing Secret {}",
                restore_token::secret_name(&cluster_name)
            ),
            source,
        })?;
    let mut bump = bump_for(safety.as_ref().map(|s| s.revision));
    if let Some(p) = &plan {
        // The archive shows how far the old cluster went past the snapshot.
        let past = u64::try_from(p.highest - p.snapshot_revision).unwrap_or(0);
        bump = bump.max(past + BUMP_MARGIN);
    }
    let handoff = RestoreHandoff {
        name: restore.name_any(),
        uid: uid.clone(),
        token_sha256,
        // What the seed receives: the snapshot itself (the operator decompresses it on the way).
        sha256: verified.snapshot_sha256.clone(),
        bump_revision: bump,
        pre_restore_path: safety.as_ref().map(|s| s.path.clone()).unwrap_or_default(),
        member: String::new(),
        object: plan
            .as_ref()
            .map(|p| p.object.to_string())
            .unwrap_or_default(),
        to_revision: plan.as_ref().map(|p| p.target),
        snapshot_size: verified.snapshot_size.and_then(|s| u64::try_from(s).ok()),
    };
    let value = serde_json::to_string(&handoff).unwrap_or_default();
    set_finalizer(ctx, restore, true).await?;
    let note = format!(
        "verified {} ({} bytes, sha256 {}){}; {}; the cluster's members are being replaced",
        target.url,
        verified.size,
        verified.sha256,
        plan.as_ref().map_or(String::new(), |p| format!(
            ", then {} chunks of archived changes up to revision {}",
            p.chunks, p.target
        )),
        kept(safety.as_ref())
    );
    let mut next = with_phase(restore, RestorePhase::Restoring, "Restoring", note.clone());
    next.sha256 = verified.sha256.clone();
    next.size = Some(verified.size);
    next.verified = Some(verified);
    next.pre_restore_path = handoff.pre_restore_path;
    next.target_revision = handoff.to_revision;
    // The status vouches for the hand-off before it exists: the cluster's task, which may see
    // the annotation at once, acts on it only once it finds its sha256 here.
    next.handoff_sha256 = handoff::digest(&value);
    write_status(ctx, restore, &next).await?;
    patch_annotation(ctx, &ns, &cluster_name, Some(value)).await?;
    info!(restore = restore.name_any(), "{note}");
    ctx.events
        .publish(restore, EventType::Normal, "RestoreStarted", note.clone())
        .await;
    ctx.events
        .publish(
            cluster,
            EventType::Normal,
            "RestoreStarted",
            format!("EtcdRestore {}: {note}", restore.name_any()),
        )
        .await;
    Ok(Action::requeue(POLL))
}

async fn reconcile(restore: Arc<EtcdRestore>, ctx: Arc<Context>) -> Result<Action, Error> {
    match reconcile_inner(&restore, &ctx).await {
        Ok(action) => Ok(action),
        Err(e) => {
            // As it is now: this pass may have written its status (the verified object, kept).
            let api: Api<EtcdRestore> =
                Api::namespaced(ctx.client.clone(), &restore.namespace().unwrap_or_default());
            let restore = match api.get_opt(&restore.name_any()).await {
                Ok(Some(now)) if now.metadata.uid == restore.metadata.uid => Arc::new(now),
                _ => restore,
            };
            // Object store errors name their URL: no signed query may reach a status or Event.
            let message = crate::report::scrub(&e.to_string());
            let reported = restore.status.as_ref().is_some_and(|s| s.reason == message);
            // A final failure is marked so: it is not tried again for this generation.
            let reason = if e.is_final() { "Final" } else { e.reason() };
            let mut status = with_phase(&restore, RestorePhase::Failed, reason, message.clone());
            status.conditions[0].message = format!("{}: {message}", e.reason());
            write_status(&ctx, &restore, &status).await?;
            if !reported {
                warn!(restore = restore.name_any(), "{message}");
                ctx.events
                    .publish(&*restore, EventType::Warning, e.reason(), message)
                    .await;
            }
            if e.is_final() {
                return Ok(Action::await_change());
            }
            Err(e)
        }
    }
}

fn error_policy(_: Arc<EtcdRestore>, _: &Error, _: Arc<Context>) -> Action {
    let jitter = Duration::from_millis(u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 8);
    Action::requeue(Duration::from_secs(10) + jitter)
}

/// Runs the controller while `leading` is true, over `namespaces` (empty: every namespace).
pub async fn run(
    ctx: Arc<Context>,
    watch_client: Client,
    namespaces: Vec<String>,
    leading: watch::Receiver<bool>,
) {
    crate::runner::run(
        "restore controller",
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
    use crate::api::handoff::{BUMP_MARGIN, UNKNOWN_BUMP};

    #[test]
    fn the_restored_revision_is_raised_past_the_replaced_clusters() {
        assert_eq!(bump_for(Some(12_345)), 12_345 + BUMP_MARGIN);
        assert_eq!(bump_for(None), UNKNOWN_BUMP);
    }

    #[test]
    fn a_verified_object_is_read_again_only_when_it_or_the_restore_changed() {
        let v = VerifiedObject {
            generation: 2,
            version: "\"etag-1\"".into(),
            size: 1 << 30,
            sha256: "ab".into(),
            snapshot_sha256: "cd".into(),
            snapshot_size: Some(1 << 31),
        };
        let etag = v.version.clone();
        assert_eq!(still_verified(Some(&v), 2, &etag, 1 << 30), Some(v.clone()));
        assert_eq!(
            still_verified(Some(&v), 3, &etag, 1 << 30),
            None,
            "spec changed"
        );
        assert_eq!(
            still_verified(Some(&v), 2, "\"etag-2\"", 1 << 30),
            None,
            "rewritten"
        );
        assert_eq!(still_verified(Some(&v), 2, &etag, 5), None, "other size");
        assert_eq!(still_verified(None, 2, &etag, 1 << 30), None);
    }

    #[test]
    fn only_a_wrong_snapshot_or_a_busy_cluster_is_final() {
        assert!(Error::Missing("s3://b/k".into()).is_final());
        assert!(
            Error::Busy {
                cluster: "c".into(),
                other: "r".into()
            }
            .is_final()
        );
        assert!(
            !Error::Source(BackupError::SecretNotFound {
                field: "s3.awsSecret",
                name: "aws".into()
            })
            .is_final()
        );
    }
}
