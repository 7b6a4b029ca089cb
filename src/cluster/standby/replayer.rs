//! A standby's replay: one task per standby cluster, while this replica leads, that applies
//! the source's archived changes to the standby's etcd as they arrive, and finishes a
//! promotion. The cluster's task feeds it (where the members are, whether to promote) and
//! reads its progress; it never blocks a pass.
//!
//! Exactly once: how far the data has replayed is the marker key in the standby's own etcd
//! ([`MARKER_KEY`]), moved in the same transaction as the changes it counts, and every
//! transaction holds only if the marker still says what was read. A restart, a second leader
//! for a moment, or a lost answer cannot apply a change twice or skip one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use object_store::ObjectStore;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::api::{MARKER_KEY, RecoveryStore};
use crate::etcd::{Endpoint, Etcd, Guarded};
use crate::store::chunk::ChunkError;
use crate::store::follow::{self, Batch};
use crate::store::location::{Storage, target};

/// How often the archive is listed for new chunks.
pub const POLL: Duration = Duration::from_millis(500);
/// Bounds each etcd request.
const ETCD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a promotion waits for a source store that does not answer before it promotes at
/// what it has, and says so.
const PROMOTE_GIVE_UP: Duration = Duration::from_secs(30);
/// Bytes of changes per transaction (etcd refuses requests over 1.5 MiB by default).
const MAX_BYTES: usize = 1 << 20;

/// What the cluster's task tells the replayer, each pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Feed {
    /// The healthy voters' client endpoints, the leader's first.
    pub endpoints: Vec<Endpoint>,
    /// The EtcdRestore the data came from: a marker of another restore is not this data's.
    pub restore: String,
    /// The source's revision that restore reached.
    pub start: i64,
    /// Keys per transaction, the marker's included (the members' `--max-txn-ops`).
    pub max_ops: usize,
    /// Replay what remains, then delete the marker: the cluster becomes writable.
    pub promote: bool,
}

/// What the replayer reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// The source's revision the data holds.
    pub replayed: Option<i64>,
    /// The newest revision the archive holds without a gap.
    pub archived: Option<i64>,
    /// The source's newest revision its archive's head reports: what the source has
    /// acknowledged, whether or not the archive holds it yet.
    pub source: Option<i64>,
    /// Since when (Unix milliseconds) the oldest change the source made and this data does
    /// not hold has waited: when the archive received it, or, for a change the archive does
    /// not hold yet, when its archiver first knew of it; when nothing vouches for the source
    /// any more, since its last word. `None`: every change the source is known to have made
    /// is applied.
    pub waiting_since_ms: Option<i64>,
    /// When the lag was measured (Unix milliseconds): the last round's listing of the
    /// archive. Every change stored before then is applied, or counted in the lag.
    pub measured_ms: Option<i64>,
    /// Why the replay cannot go on, while it cannot.
    pub stalled: Option<Stalled>,
    /// What went wrong last, if the last attempt failed.
    pub error: Option<String>,
    /// The promotion is done: at which revision, whether at a demoted primary's handover
    /// (a switchover), and why it stopped short, if it did.
    pub promoted: Option<Promoted>,
}

/// Why a standby does not follow its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stalled {
    /// The archive lacks revisions `from..=to`, right after what is applied: replay stops
    /// there (stepping over them would serve data the source never had).
    Gap {
        /// First revision missing.
        from: i64,
        /// Last revision missing.
        to: i64,
    },
    /// The archive's head has not been written for too long: no archiver vouches for the
    /// source since then (Unix milliseconds of its last head).
    Silent {
        /// When the last head was written.
        since_ms: i64,
    },
}

impl Stalled {
    /// The reason of [`Stalled::Gap`].
    pub const GAP: &'static str = "ArchiveGap";
    /// The reason of [`Stalled::Silent`].
    pub const SILENT: &'static str = "SourceSilent";

    /// The reason, as the `Following` condition and the Event give it.
    pub fn reason(&self) -> &'static str {
        match self {
            Stalled::Gap { .. } => Self::GAP,
            Stalled::Silent { .. } => Self::SILENT,
        }
    }

    /// What it means, for the status and the Event.
    pub fn message(&self) -> String {
        match self {
            Stalled::Gap { from, to } => format!(
                "the source's archive lacks revisions {from} to {to}: replay stops before \
                 them; bootstrap the standby again (remove spec.standby's source and set it \
                 back) from a newer full snapshot"
            ),
            Stalled::Silent { since_ms } => format!(
                "no archiver has written the source's archive head since {}: the lag counts \
                 from then, as nothing vouches for the source's changes after it",
                k8s_openapi::jiff::Timestamp::from_millisecond(*since_ms)
                    .map_or_else(|_| since_ms.to_string(), |t| t.to_string())
            ),
        }
    }
}

/// A finished promotion.
#[derive(Clone, Debug, PartialEq)]
pub struct Promoted {
    /// The source's revision the data holds.
    pub revision: i64,
    /// At the revision a demoted primary recorded: nothing was lost.
    pub switchover: bool,
    /// Why it promoted before the end of the archive, if it did.
    pub short: Option<String>,
}

/// The marker's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Marker {
    restore: String,
    revision: i64,
    /// Promoted at `revision`: nothing is replayed any more (the cluster takes writes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    promoted: bool,
    /// The promotion stopped at a demoted source's recorded revision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    switchover: bool,
}

/// A running replayer, held by its cluster's task.
pub struct Replayer {
    feed: watch::Sender<Feed>,
    progress: watch::Receiver<Progress>,
    handle: tokio::task::JoinHandle<()>,
    /// The archive it follows.
    pub source: RecoveryStore,
}

impl Replayer {
    /// Starts one for the cluster in `ns` following `source` (its store resolved with the
    /// namespace's credentials).
    pub fn start(client: Client, ns: String, source: RecoveryStore, feed: Feed) -> Self {
        Self::spawn(Archive::Resolve { client, ns }, source, feed)
    }

    /// Starts one following the archive at `key` in `store`, already resolved (`source` is
    /// what it is reported as).
    pub fn start_on(
        store: Arc<dyn ObjectStore>,
        key: String,
        source: RecoveryStore,
        feed: Feed,
    ) -> Self {
        Self::spawn(Archive::Given { store, key }, source, feed)
    }

    fn spawn(archive: Archive, source: RecoveryStore, feed: Feed) -> Self {
        let (feed_tx, feed_rx) = watch::channel(feed);
        let (progress_tx, progress) = watch::channel(Progress::default());
        let run = Run {
            archive: Some(archive),
            source: source.clone(),
            feed: feed_rx,
            progress: progress_tx,
        };
        Replayer {
            feed: feed_tx,
            progress,
            handle: tokio::spawn(run.run()),
            source,
        }
    }

    /// Tells it what this pass saw.
    pub fn feed(&self, feed: Feed) {
        self.feed.send_if_modified(|f| {
            let changed = *f != feed;
            *f = feed;
            changed
        });
    }

    /// What it has done so far.
    pub fn progress(&self) -> Progress {
        self.progress.borrow().clone()
    }

    /// Whether it has ended (a promotion done).
    pub fn finished(&self) -> bool {
        self.handle.is_finished()
    }
}

impl Drop for Replayer {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Where the archive is: resolved by the replayer, or given.
enum Archive {
    Resolve {
        client: Client,
        ns: String,
    },
    Given {
        store: Arc<dyn ObjectStore>,
        key: String,
    },
}

struct Run {
    archive: Option<Archive>,
    source: RecoveryStore,
    feed: watch::Receiver<Feed>,
    progress: watch::Sender<Progress>,
}

impl State {
    fn new(store: Arc<dyn ObjectStore>, key: String) -> Self {
        State {
            store,
            key,
            etcd: None,
            listed_from: 0,
            goal: None,
            failing_since: None,
            gap_since_ms: None,
            marked: false,
        }
    }
}

/// What one replayer keeps between its rounds.
struct State {
    store: Arc<dyn ObjectStore>,
    key: String,
    etcd: Option<Etcd>,
    /// The first chunk still to list (chunks before it are applied).
    listed_from: i64,
    /// Where a promotion ends, once chosen, and whether it is a switchover.
    goal: Option<(i64, bool)>,
    /// Since when the store has failed while promoting.
    failing_since: Option<Instant>,
    /// When the gap that stops the replay was first found (Unix milliseconds).
    gap_since_ms: Option<i64>,
    /// A marker of this restore has been read: the data is the one replayed into.
    marked: bool,
}

impl Run {
    async fn run(mut self) {
        let mut state = match self.archive.take() {
            Some(Archive::Given { store, key }) => State::new(store, key),
            Some(Archive::Resolve { client, ns }) => self.resolve(&client, &ns).await,
            None => return,
        };
        loop {
            let feed = self.feed.borrow_and_update().clone();
            match self.round(&mut state, &feed).await {
                Ok(Some(done)) => {
                    self.report(|p| {
                        p.error = None;
                        p.replayed = Some(done.revision);
                        p.promoted = Some(done);
                    });
                    return;
                }
                Ok(None) => self.report(|p| p.error = None),
                Err(e) => {
                    tracing::warn!(error = %e, "standby replay");
                    // The connection may be to a member that is gone: made again next round.
                    state.etcd = None;
                    self.report(|p| p.error = Some(e));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = self.feed.changed() => {}
            }
        }
    }

    /// The source's store, tried until it resolves.
    async fn resolve(&self, client: &Client, ns: &str) -> State {
        loop {
            match target(client, ns, Storage::from(&self.source)).await {
                Ok((t, _)) => return State::new(t.store, t.location.to_string()),
                Err(e) => self.report(|p| p.error = Some(format!("spec.standby.source: {e}"))),
            }
            tokio::time::sleep(POLL * 10).await;
        }
    }

    fn report(&self, f: impl FnOnce(&mut Progress)) {
        self.progress.send_modify(f);
    }

    async fn connect(state: &mut State, feed: &Feed) -> Result<(), String> {
        if state.etcd.is_some() {
            return Ok(());
        }
        let mut last = "no healthy member to replay into".to_string();
        for endpoint in &feed.endpoints {
            match Etcd::connect(endpoint, ETCD_TIMEOUT).await {
                Ok(etcd) => {
                    state.etcd = Some(etcd);
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// One round: the marker read, the archive's head and new chunks read, the chunks
    /// applied; at a promotion's goal, the marker marked promoted. Returns the finished
    /// promotion.
    async fn round(&self, state: &mut State, feed: &Feed) -> Result<Option<Promoted>, String> {
        Self::connect(state, feed).await?;
        let etcd = state.etcd.as_mut().ok_or("no connection")?;
        let raw = etcd
            .value(MARKER_KEY.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let marker = raw
            .as_deref()
            .and_then(|r| serde_json::from_slice::<Marker>(r).ok())
            .filter(|m| m.restore == feed.restore);
        let Some(marker) = marker else {
            return self.unmarked(state, raw, feed).await;
        };
        state.marked = true;
        if marker.promoted {
            // Promoted already (an answer lost, a restart since): the cluster may take writes,
            // and nothing may ever be replayed over them.
            return Ok(Some(Promoted {
                revision: marker.revision,
                switchover: marker.switchover,
                short: None,
            }));
        }
        self.report(|p| p.replayed = Some(marker.revision));
        // Read before the listing: every chunk the head counts as stored is then listed.
        let head = match follow::read_head(state.store.as_ref(), &state.key).await {
            Ok(head) => head,
            Err(e) => return Err(e.to_string()),
        };
        let listed_at = crate::store::chunk::now_ms();
        let plan = match self.listed(state, feed, marker.revision).await {
            Ok(plan) => plan,
            Err(Listing::Failed(e)) => return Err(e),
            Err(Listing::Gap) => {
                self.settle(state, marker.revision, head.as_ref(), listed_at);
                return Ok(None);
            }
            Err(Listing::GiveUp(why)) => {
                let etcd = state.etcd.as_mut().ok_or("no connection")?;
                return finish(etcd, &marker, raw.as_deref(), Some(why), false).await;
            }
        };
        let Some((applied, current)) = self.apply_plan(state, feed, &marker, raw, plan).await?
        else {
            // Someone else moved the marker: read it again next round.
            return Ok(None);
        };
        self.settle(state, applied, head.as_ref(), listed_at);
        match state.goal {
            Some((goal, switchover)) if applied >= goal => {
                let etcd = state.etcd.as_mut().ok_or("no connection")?;
                let marker = Marker {
                    restore: feed.restore.clone(),
                    revision: applied,
                    promoted: false,
                    switchover: false,
                };
                finish(etcd, &marker, current.as_deref(), None, switchover).await
            }
            _ => Ok(None),
        }
    }

    /// Applies the chunks of `plan` after `marker` (up to a promotion's goal), each batch with
    /// the marker moved in the same transaction. Returns how far it got and the marker's value
    /// then; `None` when the marker moved under it.
    async fn apply_plan(
        &self,
        state: &mut State,
        feed: &Feed,
        marker: &Marker,
        raw: Option<Vec<u8>>,
        plan: Vec<(i64, i64)>,
    ) -> Result<Option<(i64, Option<Vec<u8>>)>, String> {
        let upto = state.goal.map_or(i64::MAX, |(g, _)| g);
        let (mut applied, mut current) = (marker.revision, raw);
        for range in plan {
            if applied >= upto {
                break;
            }
            let chunk = follow::read(state.store.as_ref(), &state.key, range)
                .await
                .map_err(|e| e.to_string())?;
            let chunk = follow::truncated(chunk, upto);
            let etcd = state.etcd.as_mut().ok_or("no connection")?;
            let max_ops = feed.max_ops.saturating_sub(1).max(1);
            for batch in follow::batches(&chunk, applied, max_ops, MAX_BYTES, MARKER_KEY.as_bytes())
            {
                let next = Marker {
                    revision: batch.to,
                    ..marker.clone()
                };
                let value = serde_json::to_vec(&next).unwrap_or_default();
                if !apply(etcd, &batch, current.as_deref(), &value).await? {
                    return Ok(None);
                }
                applied = batch.to;
                current = Some(value);
                self.report(|p| p.replayed = Some(applied));
            }
            state.listed_from = range.0;
        }
        Ok(Some((applied, current)))
    }

    /// After a round that applied through `applied` every change the archive held when it
    /// was listed (at `listed_at`), the lag as of then: against what the source is known to
    /// have made, not only against what the archive holds. Measured at the listing, so that
    /// it never claims more than was seen: a change stored after it is not counted yet, and
    /// is at most one flush interval older than the change's acknowledgement.
    fn settle(&self, state: &State, applied: i64, head: Option<&follow::Head>, listed_at: i64) {
        let (since, silent) = waiting(applied, head, state.gap_since_ms, listed_at);
        self.report(|p| {
            p.source = head.map(|h| h.revision.max(applied));
            p.waiting_since_ms = since;
            p.measured_ms = Some(listed_at);
            match (&p.stalled, silent) {
                (Some(Stalled::Gap { .. }), _) if state.gap_since_ms.is_some() => {}
                (_, Some(since_ms)) => p.stalled = Some(Stalled::Silent { since_ms }),
                _ => p.stalled = None,
            }
        });
    }

    /// No marker of this data's restore: data fresh from its restore (or holding the marker
    /// of the data it came from), whose marker is set to the restore's revision.
    async fn unmarked(
        &self,
        state: &mut State,
        raw: Option<Vec<u8>>,
        feed: &Feed,
    ) -> Result<Option<Promoted>, String> {
        if state.marked {
            // This replayer applied changes to data that no longer says so: the members'
            // data was replaced under it. Marking it at `feed.start` could step over every
            // change in between; the cluster must be bootstrapped again.
            return Err(format!(
                "the standby's data lost its replay marker ({MARKER_KEY}) after changes were \
                 applied to it: replay stops; bootstrap the standby again"
            ));
        }
        let fresh = Marker {
            restore: feed.restore.clone(),
            revision: feed.start,
            promoted: false,
            switchover: false,
        };
        let value = serde_json::to_vec(&fresh).unwrap_or_default();
        let g = Guarded {
            marker: MARKER_KEY.as_bytes(),
            expected: raw.as_deref(),
            ops: &[],
            after: Some(&value),
        };
        let etcd = state.etcd.as_mut().ok_or("no connection")?;
        etcd.apply_guarded(&g).await.map_err(|e| e.to_string())?;
        tracing::info!(
            restore = feed.restore,
            revision = feed.start,
            "standby replay starts at the restore's revision"
        );
        self.report(|p| p.replayed = Some(feed.start));
        Ok(None)
    }

    /// The chunks after `applied`; when promoting, the goal chosen the first time: the
    /// revision a demoted source recorded, else the end of the archive.
    async fn listed(
        &self,
        state: &mut State,
        feed: &Feed,
        applied: i64,
    ) -> Result<Vec<(i64, i64)>, Listing> {
        let listed =
            follow::after(state.store.as_ref(), &state.key, applied, state.listed_from).await;
        let (plan, covered) = match listed {
            Ok(l) => l,
            Err(crate::store::pitr::Error::Chunk(ChunkError::Gap { from, to })) => {
                let gap = Stalled::Gap { from, to };
                if feed.promote {
                    return Err(Listing::GiveUp(format!(
                        "{}: promoted at what it had replayed",
                        gap.message()
                    )));
                }
                let now = crate::store::chunk::now_ms();
                state.gap_since_ms.get_or_insert(now);
                self.report(|p| {
                    p.archived = Some(applied);
                    p.stalled = Some(gap);
                });
                return Err(Listing::Gap);
            }
            Err(e) if feed.promote && !e.is_final() => {
                let since = *state.failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() < PROMOTE_GIVE_UP {
                    return Err(Listing::Failed(e.to_string()));
                }
                return Err(Listing::GiveUp(format!(
                    "the source's archive did not answer for {} s ({e}): promoted at what it \
                     had replayed",
                    PROMOTE_GIVE_UP.as_secs()
                )));
            }
            Err(e) => return Err(Listing::Failed(e.to_string())),
        };
        state.failing_since = None;
        state.gap_since_ms = None;
        self.report(|p| p.archived = Some(covered));
        if feed.promote && state.goal.is_none() {
            let handover = follow::read_handover(state.store.as_ref(), &state.key)
                .await
                .map_err(|e| Listing::Failed(e.to_string()))?;
            state.goal = Some(match handover {
                // Changes after it (leases expiring on the demoted primary) may be applied
                // already: nothing a client wrote is missing either way.
                Some(h) if h.revision <= covered => (h.revision.max(applied), true),
                _ => (covered, false),
            });
        }
        Ok(plan)
    }
}

/// Why the chunks could not be listed.
enum Listing {
    /// Try again next round.
    Failed(String),
    /// The archive lacks what comes next ([`Stalled::Gap`], reported): nothing to apply.
    Gap,
    /// A promotion waited long enough for the store: it ends at what is applied.
    GiveUp(String),
}

/// After applying through `applied`, since when the oldest change not applied has waited
/// (Unix milliseconds), and, when the archive's head is stale at `now_ms`, when it was
/// written: a gap met at `gap_since_ms` counts from then; a change the head says the source
/// made after `applied` from when the archiver knew of it; a silent head from its last word.
/// Without a head (an archive written before heads were), only the archive speaks.
pub fn waiting(
    applied: i64,
    head: Option<&follow::Head>,
    gap_since_ms: Option<i64>,
    now_ms: i64,
) -> (Option<i64>, Option<i64>) {
    let earliest = |a: Option<i64>, b: i64| Some(a.map_or(b, |a| a.min(b)));
    let mut since = gap_since_ms;
    let mut silent = None;
    if let Some(h) = head {
        if h.revision > applied {
            since = earliest(since, h.behind_since_ms.unwrap_or(h.at_ms));
        }
        if h.stale(now_ms) {
            since = earliest(since, h.at_ms);
            silent = Some(h.at_ms);
        }
    }
    (since, silent)
}

async fn apply(
    etcd: &mut Etcd,
    batch: &Batch,
    expected: Option<&[u8]>,
    value: &[u8],
) -> Result<bool, String> {
    let g = Guarded {
        marker: MARKER_KEY.as_bytes(),
        expected,
        ops: &batch.ops,
        after: Some(value),
    };
    Ok(etcd
        .apply_guarded(&g)
        .await
        .map_err(|e| e.to_string())?
        .is_some())
}

/// Marks the marker promoted: the data is the source's at `marker.revision`, and clients may
/// write; a replayer started later finds the promotion there and replays nothing.
async fn finish(
    etcd: &mut Etcd,
    marker: &Marker,
    expected: Option<&[u8]>,
    short: Option<String>,
    switchover: bool,
) -> Result<Option<Promoted>, String> {
    let done = Marker {
        promoted: true,
        switchover,
        ..marker.clone()
    };
    let value = serde_json::to_vec(&done).unwrap_or_default();
    let g = Guarded {
        marker: MARKER_KEY.as_bytes(),
        expected,
        ops: &[],
        after: Some(&value),
    };
    match etcd.apply_guarded(&g).await.map_err(|e| e.to_string())? {
        Some(_) => Ok(Some(Promoted {
            revision: marker.revision,
            switchover,
            short,
        })),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::follow::Head;

    fn head(revision: i64, behind: Option<i64>, at_ms: i64) -> Head {
        Head {
            revision,
            archived: revision.min(100),
            behind_since_ms: behind,
            at_ms,
            every_ms: 5_000,
        }
    }

    #[test]
    fn the_lag_counts_from_the_oldest_change_the_source_made_and_is_not_applied() {
        let now = 100_000;
        // No head (an archive from before heads): only the archive speaks.
        assert_eq!(waiting(100, None, None, now), (None, None));
        // Caught up with everything the source made, and the head is fresh.
        assert_eq!(
            waiting(100, Some(&head(100, None, now - 1_000)), None, now),
            (None, None)
        );
        // The source made 105; its archiver has known since 97,000.
        let h = head(105, Some(97_000), now - 1_000);
        assert_eq!(waiting(100, Some(&h), None, now), (Some(97_000), None));
        // ... and without saying since when: from the head's time.
        let h = head(105, None, now - 1_000);
        assert_eq!(waiting(100, Some(&h), None, now), (Some(99_000), None));
        // A gap met at 90,000 counts from then, the older of the two.
        let h = head(105, Some(97_000), now - 1_000);
        assert_eq!(
            waiting(100, Some(&h), Some(90_000), now),
            (Some(90_000), None)
        );
        // A head 20 s old (written every 5 s) is silent: the lag counts from its time.
        let h = head(100, None, now - 21_000);
        assert_eq!(
            waiting(100, Some(&h), None, now),
            (Some(79_000), Some(79_000))
        );
        // Still fresh at 19 s (three intervals and the slack: 20 s).
        let h = head(100, None, now - 19_000);
        assert_eq!(waiting(100, Some(&h), None, now), (None, None));
    }

    #[test]
    fn stalls_name_their_reason_and_what_to_do() {
        let gap = Stalled::Gap { from: 11, to: 15 };
        assert_eq!(gap.reason(), "ArchiveGap");
        assert!(
            gap.message().contains("revisions 11 to 15"),
            "{}",
            gap.message()
        );
        let silent = Stalled::Silent { since_ms: 0 };
        assert_eq!(silent.reason(), "SourceSilent");
        assert!(
            silent.message().contains("1970-01-01T00:00:00Z"),
            "{}",
            silent.message()
        );
    }
}
