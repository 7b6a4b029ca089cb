//! Continuous archiving (issue 29): every change a cluster makes, from a periodic backup's
//! full snapshot on, written to the backup's storage in gap-free chunks ([`crate::store::chunk`]).
//!
//! One task per periodic EtcdBackup with `backupPolicy.continuous`, while this replica leads,
//! with one watch of the whole key space. It starts from what the store holds: after the
//! chunks that follow the newest full snapshot, or after that snapshot itself
//! ([`chunk::resume`]), so an operator restart, a leader change, a member change or a cut
//! watch archive every change once, with no gap (chunks are named by their revisions; one
//! written twice after a crash covers the same revisions and a restore takes it once). A
//! chunk is written when it is due (the flush interval or its size); until then it is all the
//! task holds. A write that fails drops the watch: archiving starts again from what the store
//! holds, so nothing is lost while etcd keeps its history, and memory stays one chunk.
//! If etcd has compacted changes the archive lacks, the gap is recorded in status and an
//! Event, and a full snapshot is taken at once, from which archiving goes on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Api, Client, ResourceExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::{ArchiveGap, ArchiveStatus, ContinuousArchive, EtcdBackup, EtcdBackupSpec};
use crate::etcd::{Endpoint, Etcd};
use crate::report::Reporter;
use crate::store::chunk::{self, Change, Chunker, Event, Resume};
use crate::store::endpoint::{CONNECT_TIMEOUT, backup_endpoint};
use crate::store::location::{Storage, target};
use crate::store::{follow, pitr};

/// The field manager of `status.archive` (the backup controller's never owns it).
const MANAGER: &str = "etcd-operator-archive";
/// How often the task looks at the open chunk.
const TICK: Duration = Duration::from_millis(100);
/// How often the status is written at most, and the EtcdBackup read again.
const STATUS_EVERY: Duration = Duration::from_secs(5);
const RECHECK_EVERY: Duration = Duration::from_secs(30);
/// Between attempts after a failure, growing to the maximum.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a backup without a full snapshot yet is looked at again.
const WAIT_FOR_SNAPSHOT: Duration = Duration::from_secs(2);

/// Takes a full snapshot of a backup now (the backup controller's own way), after a gap.
pub type SnapshotNow =
    Arc<dyn Fn(EtcdBackup) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What every archiving task shares.
#[derive(Clone)]
pub struct Shared {
    /// API client.
    pub client: Client,
    /// Publishes Events.
    pub events: Reporter,
    /// The process's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Whether this replica leads: tasks run only while it does.
    pub leading: watch::Receiver<bool>,
    /// A full snapshot now.
    pub snapshot_now: SnapshotNow,
}

struct Running {
    /// The backup's spec it was started with: any change (the store, the path, the cluster,
    /// the settings) starts it again.
    spec: EtcdBackupSpec,
    handle: tokio::task::JoinHandle<()>,
}

/// The archiving tasks, by EtcdBackup UID.
#[derive(Default)]
pub struct Archives {
    running: Mutex<HashMap<String, Running>>,
}

impl Archives {
    /// Runs a task for `backup` if it archives (one, with its current settings), and stops
    /// the one it had if it no longer does. Called on every reconcile of the backup.
    pub fn ensure(&self, shared: &Shared, backup: &EtcdBackup) {
        let Some(uid) = backup.metadata.uid.clone() else {
            return;
        };
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|_, r| !r.handle.is_finished());
        if let Some(r) = running.get(&uid)
            && r.spec != backup.spec
            && let Some(old) = running.remove(&uid)
        {
            old.handle.abort();
        }
        let Some(settings) = backup.spec.continuous() else {
            return;
        };
        if running.contains_key(&uid) || !*shared.leading.borrow() {
            return;
        }
        let task = Task {
            shared: shared.clone(),
            backup: backup.clone(),
            spec: settings,
            failing_since: Mutex::new(None),
        };
        let handle = tokio::spawn(task.run());
        let spec = backup.spec.clone();
        running.insert(uid, Running { spec, handle });
    }
}

/// Why one attempt of a task ended.
enum Ended {
    /// For good: the backup is gone or changed, or this replica no longer leads.
    Stop,
    /// Start again at once (after a gap and its snapshot).
    Again,
    /// No full snapshot yet to start from: look again shortly.
    Waiting,
}

struct Task {
    shared: Shared,
    backup: EtcdBackup,
    spec: ContinuousArchive,
    /// Since when archiving has failed without a watch opened since: the lag then counts
    /// from it (nothing received is stored, and nothing is received).
    failing_since: Mutex<Option<std::time::Instant>>,
}

/// Why [`archive`] returned without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It was asked to stop (the open chunk was written first).
    Stopped,
    /// etcd had compacted revisions `from..=to`, which the archive lacks: a full snapshot is
    /// needed before archiving goes on.
    Compacted {
        /// First revision lost.
        from: i64,
        /// Last revision lost.
        to: i64,
    },
}

use crate::store::chunk::now_ms;

fn ms_to_rfc3339(ms: i64) -> Option<String> {
    Timestamp::from_millisecond(ms).ok().map(|t| t.to_string())
}

/// Where archiving of `key`'s backup starts: after the chunks that follow its newest full
/// snapshot (or after that snapshot); `None` before the first full snapshot. Also sets the
/// archive's first revision and time (the oldest full snapshot) in `status`.
pub async fn start_after(
    store: &dyn ObjectStore,
    key: &str,
    status: &watch::Sender<ArchiveStatus>,
) -> Result<Option<i64>, String> {
    let snapshots = pitr::snapshots(store, key)
        .await
        .map_err(|e| crate::report::scrub(&e.to_string()))?;
    let ranges = pitr::chunk_ranges(store, key)
        .await
        .map_err(|e| crate::report::scrub(&e.to_string()))?;
    let after = match chunk::resume(&ranges, snapshots.last().map(|s| s.0), 0) {
        Resume::After(r) => Some(r),
        Resume::NoSnapshot | Resume::Gap { .. } => None,
    };
    status.send_modify(|s| {
        s.first_revision = snapshots.first().map(|s| s.0);
        s.first_time = snapshots.first().map(|s| s.1.to_string());
        if let Some(a) = after {
            s.last_revision = Some(s.last_revision.unwrap_or(a).max(a));
        }
    });
    Ok(after)
}

/// The changes of one watch response, received now.
fn events_of(response: &etcd_client::WatchResponse, received: i64) -> Vec<Event> {
    response
        .events()
        .iter()
        .filter_map(|e| {
            let kv = e.kv()?;
            let change = match e.event_type() {
                etcd_client::EventType::Put => Change::Put {
                    key: kv.key().to_vec(),
                    value: kv.value().to_vec(),
                },
                etcd_client::EventType::Delete => Change::Delete {
                    key: kv.key().to_vec(),
                },
            };
            Some(Event {
                revision: kv.mod_revision(),
                unix_ms: received,
                change,
            })
        })
        .collect()
}

/// Archives `endpoint`'s changes after revision `after` into `key`'s archive in `store`, chunk
/// by chunk as they fall due, until `stop` resolves, etcd reports the changes compacted, or the
/// watch breaks (each time the open chunk is written first), or a write fails (the next run
/// starts from what the store holds). `status` follows what is stored, and the lag; the head
/// next to the archive ([`follow::Head`]) says every [`HEAD_EVERY`] how far the source has gone.
pub async fn archive(
    endpoint: &Endpoint,
    store: &dyn ObjectStore,
    key: &str,
    settings: &ContinuousArchive,
    after: i64,
    status: &watch::Sender<ArchiveStatus>,
    stop: impl Future<Output = ()>,
) -> Result<Outcome, String> {
    let mut etcd = Etcd::connect_streaming(endpoint, CONNECT_TIMEOUT)
        .await
        .map_err(|e| crate::report::scrub(&e.to_string()))?;
    let mut watch = etcd
        .watch_all(after + 1)
        .await
        .map_err(|e| crate::report::scrub(&e.to_string()))?;
    let interval_ms = i64::try_from(settings.flush_interval().as_millis()).unwrap_or(5000);
    let mut chunker = Chunker::new(after, settings.max_chunk_bytes(), interval_ms);
    let mut source = Source::new(after);
    let mut head_due = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(TICK);
    let out = Out { store, key, status };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            message = watch.message() => {
                let response = match message {
                    Ok(Some(r)) => r,
                    broken => {
                        // What was received is whole up to its last revision (etcd sends a
                        // revision's changes together): stored now, it is not lost with the
                        // cluster, which may be what broke the watch.
                        out.flush(&mut chunker, &mut source).await?;
                        return Err(match broken {
                            Err(e) => format!("the watch broke: {e}"),
                            _ => "the watch ended".into(),
                        });
                    }
                };
                if response.canceled() {
                    out.flush(&mut chunker, &mut source).await?;
                    let compacted = response.compact_revision();
                    if compacted <= 0 {
                        return Err(format!("etcd cancelled the watch: {}", response.cancel_reason()));
                    }
                    return Ok(Outcome::Compacted { from: chunker.covered() + 1, to: compacted - 1 });
                }
                let received = now_ms();
                chunker.push(events_of(&response, received), received);
                source.seen(chunker.covered(), received);
                // A watch that has fallen behind gets the current revision in its headers
                // while its events are still older ones.
                if let Some(header) = response.header() {
                    source.seen(header.revision(), received);
                }
            }
            _ = tick.tick() => {
                if chunker.due(now_ms()) {
                    out.flush(&mut chunker, &mut source).await?;
                }
                if tokio::time::Instant::now() >= head_due {
                    head_due = tokio::time::Instant::now() + HEAD_EVERY;
                    out.head(&mut etcd, &mut source).await;
                }
                out.lag(&source);
            }
            _ = &mut stop => {
                out.flush(&mut chunker, &mut source).await?;
                out.write_head(&source).await;
                return Ok(Outcome::Stopped);
            }
        }
    }
}

/// How often an archiver writes its head ([`follow::Head`]) and reads the source's revision.
pub const HEAD_EVERY: Duration = Duration::from_secs(5);
/// Bounds the read of the source's revision, which holds up the watch meanwhile.
const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How far the source has gone, as the archiver knows it, against what it has stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Source {
    /// The source's newest revision known.
    known: i64,
    /// Every change up to this revision is stored.
    stored: i64,
    /// Since when a change known of has not been stored (Unix milliseconds).
    behind_since_ms: Option<i64>,
}

impl Source {
    fn new(after: i64) -> Self {
        Source {
            known: after,
            stored: after,
            behind_since_ms: None,
        }
    }

    /// The source has reached `revision`, as learnt at `now_ms`.
    fn seen(&mut self, revision: i64, now_ms: i64) {
        self.known = self.known.max(revision);
        if self.known > self.stored && self.behind_since_ms.is_none() {
            self.behind_since_ms = Some(now_ms);
        }
    }

    /// Every change up to `revision` is stored, at `now_ms`.
    fn stored(&mut self, revision: i64, now_ms: i64) {
        self.stored = self.stored.max(revision);
        self.known = self.known.max(self.stored);
        self.behind_since_ms = if self.known > self.stored {
            // Known of, not even received: waiting since it was known, or since now.
            Some(self.behind_since_ms.unwrap_or(now_ms))
        } else {
            None
        };
    }

    fn head(&self, now_ms: i64) -> follow::Head {
        follow::Head {
            revision: self.known,
            archived: self.stored,
            behind_since_ms: self.behind_since_ms,
            at_ms: now_ms,
            every_ms: i64::try_from(HEAD_EVERY.as_millis()).unwrap_or(5000),
        }
    }
}

/// Where an archiver writes: the store, the archive's key, its status.
struct Out<'a> {
    store: &'a dyn ObjectStore,
    key: &'a str,
    status: &'a watch::Sender<ArchiveStatus>,
}

impl Out<'_> {
    /// Writes the open chunk, if it holds anything.
    async fn flush(&self, chunker: &mut Chunker, source: &mut Source) -> Result<(), String> {
        let Some(chunk) = chunker.take() else {
            return Ok(());
        };
        let name = chunk::name(self.key, chunk.from, chunk.to);
        let body = chunk.encode();
        let size = body.len();
        self.store
            .put(&Path::from(name.as_str()), PutPayload::from(body))
            .await
            .map_err(|e| format!("writing {name}: {e}"))?;
        crate::crash::point("after-archive-chunk");
        source.stored(chunk.to, now_ms());
        self.status.send_modify(|s| {
            s.chunks += 1;
            s.bytes += i64::try_from(size).unwrap_or(i64::MAX);
            s.last_revision = Some(chunk.to);
            if let Some(last) = chunk.events.last() {
                s.last_time = ms_to_rfc3339(last.unix_ms);
            }
        });
        Ok(())
    }

    /// Reads the source's revision, then writes the head. What the watch cannot say is that
    /// it has stalled: the read can. A failed read is only a head without news; the watch
    /// itself reports real trouble.
    async fn head(&self, etcd: &mut Etcd, source: &mut Source) {
        match etcd.revision(HEAD_READ_TIMEOUT).await {
            Ok(r) => source.seen(r, now_ms()),
            Err(e) => tracing::debug!(key = self.key, "reading the source's revision: {e}"),
        }
        self.write_head(source).await;
    }

    /// Writes the head; a failure is only logged (the next one tries again, and a standby
    /// that sees no head for long says so).
    async fn write_head(&self, source: &Source) {
        let head = source.head(now_ms());
        if let Err(e) = follow::write_head(self.store, self.key, &head).await {
            warn!(key = self.key, "writing the archive's head: {e}");
        }
    }

    /// The status's lag: since the oldest change known of and not stored.
    fn lag(&self, source: &Source) {
        let lag = source.behind_since_ms.map_or(0, |t| (now_ms() - t).max(0));
        self.status.send_if_modified(|s| {
            let changed =
                s.lag_milliseconds != Some(lag) || s.source_revision != Some(source.known);
            s.lag_milliseconds = Some(lag);
            s.source_revision = Some(source.known);
            changed
        });
    }
}

impl Task {
    fn ns(&self) -> String {
        self.backup.namespace().unwrap_or_default()
    }

    /// The cluster the metrics are labelled with: `clusterName`, else the backup's name.
    fn cluster(&self) -> String {
        self.backup
            .spec
            .cluster_name
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| self.backup.name_any())
    }

    async fn run(self) {
        let initial = self
            .backup
            .status
            .as_ref()
            .and_then(|s| s.archive.clone())
            .unwrap_or_default();
        let (status, seen) = watch::channel(initial);
        let mut leading = self.shared.leading.clone();
        let mut delay = RETRY_MIN;
        info!(
            backup = self.backup.name_any(),
            "continuous archiving starts"
        );
        loop {
            if !*leading.borrow() {
                return;
            }
            let attempt = self.attempt(&status);
            let result = tokio::select! {
                r = attempt => r,
                () = self.write_statuses(seen.clone()) => Ok(Ended::Stop),
            };
            match result {
                Ok(Ended::Stop) => return,
                Ok(Ended::Again) => delay = RETRY_MIN,
                // The backup controller takes the first snapshot soon after the backup appears;
                // waiting for it is not a failure to back off from.
                Ok(Ended::Waiting) => self.pause(&status, &mut leading, WAIT_FOR_SNAPSHOT).await,
                Err(why) => {
                    warn!(
                        backup = self.backup.name_any(),
                        "continuous archiving: {why}"
                    );
                    status.send_modify(|s| s.message = why);
                    self.pause(&status, &mut leading, delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Between attempts: the status as it stands written, then `wait`, cut short when
    /// leadership changes.
    async fn pause(
        &self,
        status: &watch::Sender<ArchiveStatus>,
        leading: &mut watch::Receiver<bool>,
        wait: Duration,
    ) {
        let current = status.borrow().clone();
        self.write_status(&current).await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = leading.changed() => {}
        }
    }

    /// Whether the backup is still there, with this UID and this spec (a changed one has its
    /// own task, started by its reconcile).
    async fn still_wanted(&self) -> Result<bool, String> {
        let api: Api<EtcdBackup> = Api::namespaced(self.shared.client.clone(), &self.ns());
        let current = api
            .get_opt(&self.backup.name_any())
            .await
            .map_err(|e| format!("reading EtcdBackup {}: {e}", self.backup.name_any()))?;
        Ok(current.is_some_and(|b| {
            b.metadata.uid == self.backup.metadata.uid
                && b.metadata.deletion_timestamp.is_none()
                && b.spec == self.backup.spec
        }))
    }

    /// Resolves when this replica stops leading or the backup is no longer archived.
    async fn until_unwanted(&self) {
        let mut leading = self.shared.leading.clone();
        loop {
            tokio::select! {
                _ = leading.changed() => {
                    if !*leading.borrow() {
                        return;
                    }
                }
                _ = tokio::time::sleep(RECHECK_EVERY) => {
                    if matches!(self.still_wanted().await, Ok(false)) {
                        return;
                    }
                }
            }
        }
    }

    /// One watch, from where the store's archive ends, until it fails or the task stops.
    async fn attempt(&self, status: &watch::Sender<ArchiveStatus>) -> Result<Ended, String> {
        if !self.still_wanted().await? {
            return Ok(Ended::Stop);
        }
        let ns = self.ns();
        let (store, _) = target(&self.shared.client, &ns, Storage::from(&self.backup.spec))
            .await
            .map_err(|e| crate::report::scrub(&e.to_string()))?;
        let key = store.location.to_string();
        let Some(after) = start_after(store.store.as_ref(), &key, status).await? else {
            status.send_modify(|s| {
                s.message = "waiting for the first full snapshot of this backup".into();
            });
            return Ok(Ended::Waiting);
        };
        let endpoint = backup_endpoint(&self.shared.client, &self.backup, &ns)
            .await
            .map_err(|e| crate::report::scrub(&e.to_string()))?;
        status.send_modify(|s| s.message.clear());
        *self.failing_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let outcome = archive(
            &endpoint,
            store.store.as_ref(),
            &key,
            &self.spec,
            after,
            status,
            self.until_unwanted(),
        )
        .await?;
        match outcome {
            Outcome::Stopped => Ok(Ended::Stop),
            Outcome::Compacted { from, to } => self.gap(status, from, to).await,
        }
    }

    /// etcd compacted changes the archive lacks: the gap is recorded and a full snapshot taken
    /// now; archiving then starts again after it.
    async fn gap(
        &self,
        status: &watch::Sender<ArchiveStatus>,
        from: i64,
        to: i64,
    ) -> Result<Ended, String> {
        let note = format!(
            "etcd compacted revisions {from} to {to} before they were archived: a restore can \
             never reach them; taking a full snapshot now, and archiving from it"
        );
        warn!(backup = self.backup.name_any(), "{note}");
        status.send_modify(|s| {
            s.last_gap = Some(ArchiveGap {
                from,
                to,
                time: Timestamp::now().to_string(),
            });
        });
        let current = status.borrow().clone();
        self.write_status(&current).await;
        self.shared
            .events
            .publish(&self.backup, EventType::Warning, "ArchiveGap", note)
            .await;
        (self.shared.snapshot_now)(self.backup.clone()).await?;
        Ok(Ended::Again)
    }

    /// Follows the archive's status: the metrics at every change (the lag alert and the
    /// benchmark read them), `status.archive` at most every [`STATUS_EVERY`], the last change
    /// always written in the end. Never returns.
    async fn write_statuses(&self, mut seen: watch::Receiver<ArchiveStatus>) {
        let mut written: Option<std::time::Instant> = None;
        let mut dirty = false;
        loop {
            let due = written.map_or(Duration::ZERO, |t| STATUS_EVERY.saturating_sub(t.elapsed()));
            let wait = if dirty {
                due
            } else {
                Duration::from_secs(3600)
            };
            match tokio::time::timeout(wait, seen.changed()).await {
                Ok(Err(_)) => std::future::pending::<()>().await,
                Ok(Ok(())) => {
                    let current = seen.borrow_and_update().clone();
                    let lag = u64::try_from(current.lag_milliseconds.unwrap_or(0)).unwrap_or(0);
                    self.shared.metrics.archive(
                        &self.ns(),
                        &self.cluster(),
                        Duration::from_millis(lag),
                        current.last_revision.unwrap_or(0),
                    );
                    dirty = true;
                }
                Err(_) => {}
            }
            if dirty && written.is_none_or(|t| t.elapsed() >= STATUS_EVERY) {
                let current = seen.borrow().clone();
                self.write_status(&current).await;
                written = Some(std::time::Instant::now());
                dirty = false;
            }
        }
    }

    async fn write_status(&self, archive: &ArchiveStatus) {
        let status = serde_json::json!({ "archive": archive });
        if let Err(e) =
            crate::report::apply_status(&self.shared.client, &self.backup, MANAGER, &status).await
        {
            warn!(
                backup = self.backup.name_any(),
                "writing the archive's status: {e}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_behind_from_the_first_change_known_and_not_stored() {
        let mut s = Source::new(10);
        assert_eq!(
            s.head(1_000).behind_since_ms,
            None,
            "nothing known beyond 10"
        );
        // Changes received at 1,000 (the chunk's last revision 12); a header says 15.
        s.seen(12, 1_000);
        s.seen(15, 1_100);
        let h = s.head(1_200);
        assert_eq!((h.revision, h.archived), (15, 10));
        assert_eq!(h.behind_since_ms, Some(1_000), "the oldest not stored");
        // Stored through 12: 13-15 are known and not even received, still since 1,000.
        s.stored(12, 1_500);
        assert_eq!(s.head(1_600).behind_since_ms, Some(1_000));
        // Stored through 15: nothing waits.
        s.stored(15, 2_000);
        let h = s.head(2_100);
        assert_eq!((h.revision, h.archived, h.behind_since_ms), (15, 15, None));
        // A linearizable read finds 16 while the watch is silent: waiting since then.
        s.seen(16, 3_000);
        assert_eq!(s.head(3_100).behind_since_ms, Some(3_000));
        assert_eq!(s.head(3_100).every_ms, 5_000);
        // A revision already stored changes nothing.
        let mut t = Source::new(20);
        t.seen(19, 1);
        assert_eq!(t.head(2).behind_since_ms, None);
    }
}
