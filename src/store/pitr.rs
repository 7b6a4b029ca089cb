//! Point-in-time restores (issue 29): which full snapshot and which archived changes bring a
//! cluster back to a revision or a moment, read from the store and checked before anything
//! of them is used; and the changes a seed replays, as it receives them.
//!
//! A periodic backup of `path` stores its full snapshots as `<path>_v<revision>_<time>`
//! ([`super::naming`]) and its archive as `<path>_chunks/<from>-<to>` ([`super::chunk`]).
//! A restore to revision T starts from the newest full snapshot at or before T whose archive
//! reaches T without a gap; a restore to a moment goes to the last change archived at or
//! before it.

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::path::Path;

use super::chunk::{self, Chunk, ChunkError};
use super::naming;

/// Why a point-in-time restore cannot be planned or served. Every message names its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing or reading the store.
    #[error("{what}: {source}")]
    Store {
        /// What was read.
        what: String,
        #[source]
        source: object_store::Error,
    },
    /// A chunk is corrupt, or the archive has a gap or ends too soon.
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    /// No full snapshot of the backup is old enough.
    #[error("no full snapshot of {path} at or before {target}: the oldest kept is {oldest}")]
    TooEarly {
        /// The backup's path.
        path: String,
        /// The point asked for.
        target: String,
        /// The oldest snapshot there is (or "none").
        oldest: String,
    },
    /// An object larger than what may be read of it.
    #[error("{what} holds {size} bytes, more than the {limit} such an object may hold: not read")]
    TooLarge {
        /// The object.
        what: String,
        /// Its size.
        size: u64,
        /// The most that is read.
        limit: u64,
    },
    /// The snapshot the seed restored already holds changes after the target (taken while
    /// it was written): an older snapshot is needed.
    #[error("the restored snapshot holds revision {after}, past the target {target}")]
    Beyond {
        /// The snapshot's revision.
        after: i64,
        /// The target.
        target: i64,
    },
}

impl Error {
    /// Whether the archive itself cannot give this restore (as opposed to a store that did
    /// not answer).
    pub fn is_final(&self) -> bool {
        !matches!(self, Error::Store { .. })
    }
}

/// Where a restore goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// A revision of the backed-up cluster.
    Revision(i64),
    /// A moment.
    Time(Timestamp),
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::Revision(r) => write!(f, "revision {r}"),
            Point::Time(t) => write!(f, "{t}"),
        }
    }
}

/// A restore to a point, planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The full snapshot's key.
    pub object: Path,
    /// Its revision (by its name: it may hold a few more, written while it was taken).
    pub snapshot_revision: i64,
    /// The revision the changes are replayed up to.
    pub target: i64,
    /// The chunks replayed, checked.
    pub chunks: usize,
    /// The last revision the archive holds after that snapshot without a gap.
    pub archived: i64,
    /// The highest revision anything in the archive holds (a later snapshot, a chunk after a
    /// gap): the old cluster went at least that far.
    pub highest: i64,
}

/// The periodic snapshots of `key`: (revision, time, object key), oldest first.
pub async fn snapshots(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Vec<(i64, Timestamp, String)>, Error> {
    let dir = key.rsplit_once('/').map(|(d, _)| Path::from(d));
    let listed = store
        .list_with_delimiter(dir.as_ref())
        .await
        .map_err(|source| Error::Store {
            what: format!("listing the snapshots of {key}"),
            source,
        })?;
    let mut out: Vec<_> = listed
        .objects
        .into_iter()
        .filter_map(|o| {
            let name = o.location.to_string();
            let (at, revision) = naming::parse(key, &name)?;
            let at = at.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).ok()?;
            Some((revision, at.timestamp(), name))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The `(from, to)` of every chunk of `key`'s archive.
pub async fn chunk_ranges(store: &dyn ObjectStore, key: &str) -> Result<Vec<(i64, i64)>, Error> {
    let prefix = Path::from(format!("{key}_chunks"));
    let mut listing = store.list(Some(&prefix));
    let mut out = Vec::new();
    while let Some(item) = listing.next().await {
        let meta = item.map_err(|source| Error::Store {
            what: format!("listing the archive {prefix}"),
            source,
        })?;
        if let Some(range) = chunk::parse_name(meta.location.as_ref()) {
            out.push(range);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The most a chunk object may hold to be read: the largest chunk an archiver writes
/// (`maxChunkBytes`, at most 32 MiB) and the one revision that may take it past that, with
/// room to spare. A larger object was not written by an archiver and is refused unread: what
/// a tenant's store serves never sizes the operator's memory.
pub const MAX_CHUNK_OBJECT: u64 = 64 << 20;

/// One chunk, read and checked.
pub async fn read_chunk(
    store: &dyn ObjectStore,
    key: &str,
    (from, to): (i64, i64),
) -> Result<Chunk, Error> {
    let name = chunk::name(key, from, to);
    let path = Path::from(name.as_str());
    let bytes = read_bounded(store, &path, MAX_CHUNK_OBJECT)
        .await?
        .ok_or_else(|| Error::Store {
            what: format!("reading {name}"),
            source: object_store::Error::NotFound {
                path: name.clone(),
                source: "listed, then gone".into(),
            },
        })?;
    Ok(Chunk::decode(&name, &bytes)?)
}

/// The object `name`, if it exists, read whole only when it holds at most `limit` bytes: its
/// size is read first and a larger one refused before its body is (and a body longer than its
/// size said is cut off at the limit all the same).
pub async fn read_bounded(
    store: &dyn ObjectStore,
    name: &Path,
    limit: u64,
) -> Result<Option<Vec<u8>>, Error> {
    let what = || format!("reading {name}");
    let got = match store.get(name).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(source) => {
            return Err(Error::Store {
                what: what(),
                source,
            });
        }
    };
    let too_large = |size: u64| Error::TooLarge {
        what: name.to_string(),
        size,
        limit,
    };
    if got.meta.size > limit {
        return Err(too_large(got.meta.size));
    }
    let mut out = Vec::with_capacity(usize::try_from(got.meta.size).unwrap_or(0));
    let mut body = got.into_stream();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|source| Error::Store {
            what: what(),
            source,
        })?;
        out.extend_from_slice(&piece);
        if out.len() as u64 > limit {
            return Err(too_large(out.len() as u64));
        }
    }
    Ok(Some(out))
}

/// Reads and checks the chunks of `plan` one at a time, in order (none is held past its
/// turn); returns the last change received at or before `unix_ms`, if asked.
async fn check_all(
    store: &dyn ObjectStore,
    key: &str,
    plan: &[(i64, i64)],
    unix_ms: Option<i64>,
) -> Result<Option<i64>, Error> {
    let mut at = None;
    for range in plan {
        let chunk = read_chunk(store, key, *range).await?;
        if let Some(ms) = unix_ms {
            at = at.max(chunk::revision_at(std::slice::from_ref(&chunk), ms));
        }
    }
    Ok(at)
}

/// The last revision the archive holds without a gap after a snapshot at `snapshot`.
fn covered(chunks: &[(i64, i64)], snapshot: i64) -> i64 {
    match chunk::resume(chunks, Some(snapshot), 0) {
        chunk::Resume::After(r) => r,
        _ => snapshot,
    }
}

/// The last revision `key`'s archive holds without a gap after its newest full snapshot (0
/// without one): what a demoted primary waits for before a standby may promote.
pub async fn archived_through(store: &dyn ObjectStore, key: &str) -> Result<i64, Error> {
    let snaps = snapshots(store, key).await?;
    let ranges = chunk_ranges(store, key).await?;
    Ok(snaps.last().map_or(0, |(rev, _, _)| covered(&ranges, *rev)))
}

/// Plans a restore of `key`'s backup to `point`: the snapshot, the target revision, and every
/// chunk replayed read through and checked (sha256, names, no gap), so that a restore that
/// cannot be done whole is refused before the cluster is touched.
pub async fn plan(store: &dyn ObjectStore, key: &str, point: Point) -> Result<Plan, Error> {
    let snaps = snapshots(store, key).await?;
    let ranges = chunk_ranges(store, key).await?;
    let fits = |(rev, at, _): &&(i64, Timestamp, String)| match point {
        Point::Revision(t) => *rev <= t,
        Point::Time(t) => *at <= t,
    };
    let Some((rev, _, object)) = snaps.iter().rev().find(fits).cloned() else {
        return Err(Error::TooEarly {
            path: key.to_string(),
            target: point.to_string(),
            oldest: snaps.first().map_or("none".into(), |(r, t, _)| {
                format!("revision {r} taken at {t}")
            }),
        });
    };
    let archived = covered(&ranges, rev);
    let target = match point {
        Point::Revision(t) => t,
        Point::Time(t) => {
            let plan = chunk::replay_plan(&ranges, rev, archived)?;
            check_all(store, key, &plan, Some(t.as_millisecond()))
                .await?
                .map_or(rev, |r| r.max(rev))
        }
    };
    let replayed = chunk::replay_plan(&ranges, rev, target)?;
    // A time's chunks, read and checked just above, hold the target's: they are not read twice.
    if let Point::Revision(_) = point {
        check_all(store, key, &replayed, None).await?;
    }
    let highest = snaps
        .iter()
        .map(|s| s.0)
        .chain(ranges.iter().map(|r| r.1))
        .max()
        .unwrap_or(rev);
    Ok(Plan {
        highest,
        object: Path::from(object),
        snapshot_revision: rev,
        target,
        chunks: replayed.len(),
        archived,
    })
}

/// What the seed of a restore of `key`'s backup replays: the changes after `after` (the
/// revision its snapshot holds) up to `target`, as [`chunk::txn_lines`]. Every chunk is read
/// and checked before the first line is made.
pub async fn changes(
    store: &dyn ObjectStore,
    key: &str,
    snapshot_revision: i64,
    after: i64,
    target: i64,
) -> Result<Vec<String>, Error> {
    // The snapshot holds at least its name's revision (read before it was taken), whatever
    // the seed saw: a restored database that never held a key reports none.
    let after = after.max(snapshot_revision);
    if after > target {
        return Err(Error::Beyond { after, target });
    }
    let ranges = chunk_ranges(store, key).await?;
    let plan = chunk::replay_plan(&ranges, after, target)?;
    // One chunk at a time: what is held is the keys the range touched, not the range.
    let (mut last, mut applied) = (std::collections::BTreeMap::new(), after);
    for range in &plan {
        let chunk = read_chunk(store, key, *range).await?;
        chunk::fold(&mut last, &mut applied, &chunk, target);
    }
    Ok(chunk::txn_lines(
        &last,
        chunk::TXN_MAX_OPS,
        chunk::TXN_MAX_BYTES,
        after,
        target,
    ))
}

/// Deletes the chunks of `key`'s archive that no kept full snapshot needs (wholly at or
/// before the oldest one). A failure is only logged: the next success tries again.
pub async fn prune_chunks(store: &dyn ObjectStore, key: &str) {
    let (snaps, ranges) = match (snapshots(store, key).await, chunk_ranges(store, key).await) {
        (Ok(s), Ok(r)) => (s, r),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(key, "listing the archive for retention: {e}");
            return;
        }
    };
    let Some((oldest, _, _)) = snaps.first() else {
        return;
    };
    for (from, to) in chunk::expired(&ranges, *oldest) {
        let name = chunk::name(key, from, to);
        if let Err(e) = store.delete(&Path::from(name.as_str())).await {
            tracing::warn!(name, "deleting an expired chunk: {e}");
        }
    }
}

/// The revision of the snapshot object `name` of `key`'s backup, from its name.
pub fn snapshot_revision(key: &str, name: &str) -> Option<i64> {
    naming::parse(key, name).map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;
    use crate::store::chunk::{Change, Chunk, Event};

    fn put(revision: i64, key: &str) -> Event {
        Event {
            revision,
            unix_ms: revision,
            change: Change::Put {
                key: key.into(),
                value: b"v".to_vec(),
            },
        }
    }

    #[tokio::test]
    async fn the_changes_start_after_the_snapshots_own_revision_whatever_the_seed_reports() {
        let store = InMemory::new();
        let chunk = Chunk {
            from: 2,
            to: 3,
            events: vec![put(2, "a"), put(3, "b")],
        };
        store
            .put(
                &Path::from(chunk::name("b/k", 2, 3)),
                PutPayload::from(chunk.encode()),
            )
            .await
            .unwrap();
        // A snapshot of a cluster that never held a key (revision 1) restores to a database
        // whose revision reads 0 beneath the bump.
        let lines = changes(&store, "b/k", 1, 0, 3).await.unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].contains(r#""after":1"#), "{lines:?}");
        // A seed whose snapshot holds more than its name says replays only what follows.
        let lines = changes(&store, "b/k", 1, 2, 3).await.unwrap();
        assert!(lines[0].contains("Yg=="), "only b: {lines:?}");
        assert!(matches!(
            changes(&store, "b/k", 1, 3, 2).await,
            Err(Error::Beyond {
                after: 3,
                target: 2
            })
        ));
        assert!(matches!(
            changes(&store, "b/k", 1, 1, 5).await,
            Err(Error::Chunk(ChunkError::Short { last: 3, target: 5 }))
        ));
    }

    #[tokio::test]
    async fn retention_deletes_the_chunks_no_kept_snapshot_needs() {
        let store = InMemory::new();
        let at = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        // Snapshots at 10 and 30 kept (the one at 1 already deleted by retention); chunks
        // from 2 on.
        for (rev, t) in [(10, "2026-11-27T10:00:00Z"), (30, "2026-11-27T11:00:00Z")] {
            let name = naming::periodic_name("b/k", rev, at(t));
            store
                .put(&Path::from(name), PutPayload::from_static(b"db"))
                .await
                .unwrap();
        }
        for (from, to) in [(2, 5), (6, 10), (11, 20), (21, 40)] {
            let chunk = Chunk {
                from,
                to,
                events: vec![],
            };
            store
                .put(
                    &Path::from(chunk::name("b/k", from, to)),
                    PutPayload::from(chunk.encode()),
                )
                .await
                .unwrap();
        }
        prune_chunks(&store, "b/k").await;
        assert_eq!(
            chunk_ranges(&store, "b/k").await.unwrap(),
            vec![(11, 20), (21, 40)],
            "chunks wholly at or before the oldest kept snapshot (10) go"
        );
        let s = snapshots(&store, "b/k").await.unwrap();
        assert_eq!(s.iter().map(|s| s.0).collect::<Vec<_>>(), vec![10, 30]);
    }

    #[tokio::test]
    async fn an_object_larger_than_what_it_may_hold_is_refused_unread() {
        let store = InMemory::new();
        let name = Path::from("b/k_head");
        assert!(read_bounded(&store, &name, 8).await.unwrap().is_none());
        store
            .put(&name, PutPayload::from(vec![7u8; 8]))
            .await
            .unwrap();
        assert_eq!(
            read_bounded(&store, &name, 8).await.unwrap(),
            Some(vec![7u8; 8])
        );
        store
            .put(&name, PutPayload::from(vec![7u8; 9]))
            .await
            .unwrap();
        let refused = read_bounded(&store, &name, 8).await.unwrap_err();
        assert!(
            matches!(
                refused,
                Error::TooLarge {
                    size: 9,
                    limit: 8,
                    ..
                }
            ),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("b/k_head holds 9 bytes"),
            "{refused}"
        );
        // Where a chunk belongs, more than a chunk can be: refused, the archive's reader
        // untouched by its size.
        let big = chunk::name("b/k", 1, 5);
        let size = usize::try_from(MAX_CHUNK_OBJECT).unwrap() + 1;
        store
            .put(&Path::from(big.as_str()), PutPayload::from(vec![0u8; size]))
            .await
            .unwrap();
        assert!(matches!(
            read_chunk(&store, "b/k", (1, 5)).await,
            Err(Error::TooLarge { .. })
        ));
    }
}
