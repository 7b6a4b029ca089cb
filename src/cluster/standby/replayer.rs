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
use crate::store::follow::{self, Batch};
use crate::store::location::{Storage, target};

/// How often the archive is listed for new chunks.
const POLL: Duration = Duration::from_millis(500);
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
    /// When the archive received the oldest change not yet applied (Unix milliseconds).
    pub waiting_since_ms: Option<i64>,
    /// What went wrong last, if the last attempt failed.
    pub error: Option<String>,
    /// The promotion is done: at which revision, whether at a demoted primary's handover
    /// (a switchover), and why it stopped short, if it did.
    pub promoted: Option<Promoted>,
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
    /// Starts one for the cluster in `ns` following `source`.
    pub fn start(client: Client, ns: String, source: RecoveryStore, feed: Feed) -> Self {
        let (feed_tx, feed_rx) = watch::channel(feed);
        let (progress_tx, progress) = watch::channel(Progress::default());
        let run = Run {
            client,
            ns,
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

struct Run {
    client: Client,
    ns: String,
    source: RecoveryStore,
    feed: watch::Receiver<Feed>,
    progress: watch::Sender<Progress>,
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
}

impl Run {
    async fn run(mut self) {
        let mut state = loop {
            match target(&self.client, &self.ns, Storage::from(&self.source)).await {
                Ok((t, _)) => {
                    break State {
                        store: t.store,
                        key: t.location.to_string(),
                        etcd: None,
                        listed_from: 0,
                        goal: None,
                        failing_since: None,
                    };
                }
                Err(e) => self.report(|p| p.error = Some(format!("spec.standby.source: {e}"))),
            }
            tokio::time::sleep(POLL * 10).await;
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

    /// One round: the marker read, the new chunks applied; at a promotion's goal, the marker
    /// deleted. Returns the finished promotion.
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
            return self.unmarked(etcd, raw, feed).await;
        };
        if marker.promoted {
            // Promoted already (an answer lost, a restart since): the cluster may take writes,
            // and nothing may ever be replayed over them.
            return Ok(Some(Promoted {
                revision: marker.revision,
                switchover: marker.switchover,
                short: None,
            }));
        }
        let mut applied = marker.revision;
        self.report(|p| p.replayed = Some(applied));
        let plan = match self.listed(state, feed, applied).await {
            Ok(plan) => plan,
            Err(Listing::Failed(e)) => return Err(e),
            Err(Listing::GiveUp(why)) => {
                let etcd = state.etcd.as_mut().ok_or("no connection")?;
                return finish(etcd, &marker, raw.as_deref(), Some(why), false).await;
            }
        };
        let upto = state.goal.map_or(i64::MAX, |(g, _)| g);
        let mut current = raw.clone();
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
                self.report(|p| p.waiting_since_ms = batch.first_ms.or(p.waiting_since_ms));
                let next = Marker {
                    restore: feed.restore.clone(),
                    revision: batch.to,
                    promoted: false,
                    switchover: false,
                };
                let value = serde_json::to_vec(&next).unwrap_or_default();
                if !apply(etcd, &batch, current.as_deref(), &value).await? {
                    // Someone else moved the marker: read it again next round.
                    return Ok(None);
                }
                applied = batch.to;
                current = Some(value);
                self.report(|p| p.replayed = Some(applied));
            }
            state.listed_from = range.0;
        }
        self.report(|p| p.waiting_since_ms = None);
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

    /// No marker of this data's restore: data fresh from its restore (or holding the marker
    /// of the data it came from), whose marker is set to the restore's revision.
    async fn unmarked(
        &self,
        etcd: &mut Etcd,
        raw: Option<Vec<u8>>,
        feed: &Feed,
    ) -> Result<Option<Promoted>, String> {
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
        etcd.apply_guarded(&g).await.map_err(|e| e.to_string())?;
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
    /// A promotion waited long enough for the store: it ends at what is applied.
    GiveUp(String),
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
