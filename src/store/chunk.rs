//! The chunks of a continuous archive (issue 29): every change etcd made between two full
//! snapshots, in revision order, as a watch of the whole key space delivered it. Pure: the
//! format, the object names, which chunks a restore to a revision replays, and the replay.
//!
//! - A chunk covers the revisions `from..=to` with nothing missing: the next one starts at
//!   `to + 1`. Its name is `<path>_chunks/<from>-<to>`, both zero-padded to 19 digits, so the
//!   store lists chunks in revision order.
//! - Its body: `EOCHUNK1`, `from` and `to` (u64, little-endian), then each change: revision
//!   (u64), the time the archiver received it (Unix milliseconds, i64), 0 for a put or 1 for a
//!   delete, the key (u32 length, bytes) and for a put the value (u32 length, bytes); last, the
//!   sha256 of everything before it. A chunk checks itself: a truncated, altered or misnamed
//!   chunk is refused before anything of it is replayed.
//! - Several changes share a revision when one transaction made them; replay applies them as
//!   one step, in the order etcd reported them.

use std::collections::BTreeMap;

use aws_lc_rs::digest::{SHA256, digest};

/// The first bytes of every chunk.
const MAGIC: &[u8; 8] = b"EOCHUNK1";
/// The sha256 at the end.
const HASH_LEN: usize = 32;

/// One change to one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The key now holds the value.
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
    },
    /// The key is gone.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

/// A change as archived: at which revision, and when the archiver received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The revision of the write that made it.
    pub revision: i64,
    /// When the archiver received it (Unix milliseconds): what a restore to a time goes by.
    pub unix_ms: i64,
    /// What changed.
    pub change: Change,
}

/// A chunk: the revisions it covers and the changes made in them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// First revision covered.
    pub from: i64,
    /// Last revision covered.
    pub to: i64,
    /// The changes, in revision order.
    pub events: Vec<Event>,
}

/// Why a chunk or a set of chunks cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The bytes are not a chunk, or not the one the name says.
    #[error("chunk {name}: {why}")]
    Corrupt {
        /// The object's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The archive lacks revisions between two chunks (or after the snapshot).
    #[error("the archive has no changes for revisions {from} to {to}")]
    Gap {
        /// First revision missing.
        from: i64,
        /// Last revision missing (the one before the next chunk's first).
        to: i64,
    },
    /// The archive ends before the revision asked for.
    #[error("the archive ends at revision {last}, before revision {target}")]
    Short {
        /// The last archived revision.
        last: i64,
        /// The revision asked for.
        target: i64,
    },
}

impl Chunk {
    /// The chunk's bytes, ending with their sha256.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.events.len() * 64);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.from.to_le_bytes());
        out.extend_from_slice(&self.to.to_le_bytes());
        for e in &self.events {
            out.extend_from_slice(&e.revision.to_le_bytes());
            out.extend_from_slice(&e.unix_ms.to_le_bytes());
            match &e.change {
                Change::Put { key, value } => {
                    out.push(0);
                    put_bytes(&mut out, key);
                    put_bytes(&mut out, value);
                }
                Change::Delete { key } => {
                    out.push(1);
                    put_bytes(&mut out, key);
                }
            }
        }
        let hash = digest(&SHA256, &out);
        out.extend_from_slice(hash.as_ref());
        out
    }

    /// The chunk in `bytes`, read from the object `name` (whose revisions must be the
    /// chunk's); refused unless whole, unaltered and in revision order within its range.
    pub fn decode(name: &str, bytes: &[u8]) -> Result<Chunk, ChunkError> {
        let corrupt = |why: &str| ChunkError::Corrupt {
            name: name.to_string(),
            why: why.to_string(),
        };
        if bytes.len() < MAGIC.len() + 16 + HASH_LEN || !bytes.starts_with(MAGIC) {
            return Err(corrupt("not a chunk (too short, or no EOCHUNK1 header)"));
        }
        let (body, hash) = bytes.split_at(bytes.len() - HASH_LEN);
        if digest(&SHA256, body).as_ref() != hash {
            return Err(corrupt("its sha256 does not match its contents"));
        }
        let mut r = Reader {
            bytes: &body[MAGIC.len()..],
        };
        let (from, to) = (r.i64(), r.i64());
        let (from, to) = from.zip(to).ok_or_else(|| corrupt("truncated header"))?;
        if parse_name(name).is_some_and(|named| named != (from, to)) {
            return Err(corrupt(&format!(
                "it covers revisions {from} to {to}, not those of its name"
            )));
        }
        let mut events = Vec::new();
        while !r.bytes.is_empty() {
            let e = r.event().ok_or_else(|| corrupt("truncated change"))?;
            let last = events.last().map_or(from, |l: &Event| l.revision);
            if e.revision < last || e.revision > to {
                return Err(corrupt(&format!(
                    "revision {} out of order or outside {from} to {to}",
                    e.revision
                )));
            }
            events.push(e);
        }
        Ok(Chunk { from, to, events })
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys and values are bounded by etcd's request size (1.5 MiB by default), far below u32.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        Some(self.take(usize::try_from(len).ok()?)?.to_vec())
    }

    fn event(&mut self) -> Option<Event> {
        let (revision, unix_ms) = (self.i64()?, self.i64()?);
        let change = match self.take(1)?[0] {
            0 => Change::Put {
                key: self.bytes()?,
                value: self.bytes()?,
            },
            1 => Change::Delete { key: self.bytes()? },
            _ => return None,
        };
        Some(Event {
            revision,
            unix_ms,
            change,
        })
    }
}

/// The object name of the chunk of `path`'s archive covering `from..=to`.
pub fn name(path: &str, from: i64, to: i64) -> String {
    format!("{path}_chunks/{from:019}-{to:019}")
}

/// The revisions `from` and `to` of a chunk's object name (or just its last segment); `None`
/// for any other name.
pub fn parse_name(name: &str) -> Option<(i64, i64)> {
    let last = name.rsplit('/').next()?;
    let (from, to) = last.split_once('-')?;
    let digits = |s: &str| s.len() == 19 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(from) || !digits(to) {
        return None;
    }
    let (from, to) = (from.parse().ok()?, to.parse().ok()?);
    (from <= to).then_some((from, to))
}

/// The chunks, by their `(from, to)`, a restore replays after a full snapshot at revision
/// `snapshot` to reach revision `target`, in order: from the one holding `snapshot + 1`, each
/// starting right after the one before, to the one holding `target`. Chunks wholly covered by
/// another (an archiver that wrote a range twice) are left out; a gap or an archive that ends
/// too soon is an error naming the revisions.
pub fn replay_plan(
    chunks: &[(i64, i64)],
    snapshot: i64,
    target: i64,
) -> Result<Vec<(i64, i64)>, ChunkError> {
    let mut sorted = chunks.to_vec();
    sorted.sort_unstable();
    let mut covered = snapshot;
    let mut plan = Vec::new();
    for (from, to) in sorted {
        if covered >= target {
            break;
        }
        if to <= covered {
            continue;
        }
        if from > covered + 1 {
            return Err(ChunkError::Gap {
                from: covered + 1,
                to: from - 1,
            });
        }
        plan.push((from, to));
        covered = to;
    }
    if covered < target {
        return Err(ChunkError::Short {
            last: covered,
            target,
        });
    }
    Ok(plan)
}

/// Where an archiver starts, or starts again (after an operator restart, a leader change, a
/// watch cut), for a cluster whose archive it finds in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Archive the changes after this revision: the end of the chunks that follow the newest
    /// full snapshot without a gap, or that snapshot's own revision.
    After(i64),
    /// There is no full snapshot to start from: take one first.
    NoSnapshot,
    /// etcd has compacted the changes the archive lacks (revisions `after + 1` to `compacted`):
    /// take a full snapshot now, and report the gap.
    Gap {
        /// The last revision archived.
        after: i64,
        /// etcd's compaction revision: the changes up to it are gone.
        compacted: i64,
    },
}

/// Where to resume, from the chunks in the store (their `(from, to)`), the revision of the
/// newest full snapshot (if any), and etcd's compaction revision (a watch can start only
/// after it).
pub fn resume(chunks: &[(i64, i64)], snapshot: Option<i64>, compacted: i64) -> Resume {
    let Some(snapshot) = snapshot else {
        return Resume::NoSnapshot;
    };
    let mut sorted = chunks.to_vec();
    sorted.sort_unstable();
    let mut covered = snapshot;
    for (from, to) in sorted {
        if from <= covered + 1 && to > covered {
            covered = to;
        }
    }
    if covered < compacted {
        Resume::Gap {
            after: covered,
            compacted,
        }
    } else {
        Resume::After(covered)
    }
}

/// The chunks retention deletes: those wholly at or before the oldest full snapshot kept,
/// which no restore replays any more (a restore starts from a kept snapshot). A chunk that
/// reaches past it stays.
pub fn expired(chunks: &[(i64, i64)], oldest_kept_snapshot: i64) -> Vec<(i64, i64)> {
    chunks
        .iter()
        .copied()
        .filter(|(_, to)| *to <= oldest_kept_snapshot)
        .collect()
}

/// The changes of `chunks` (in replay order) after revision `after` up to `target`, one step
/// per revision, each step's changes in the order etcd reported them: what a restore applies
/// to the snapshot, one transaction per step. A revision replayed twice (chunks overlapping)
/// is taken once.
pub fn steps(chunks: &[Chunk], after: i64, target: i64) -> Vec<(i64, Vec<Change>)> {
    let mut out: Vec<(i64, Vec<Change>)> = Vec::new();
    let mut applied = after;
    for chunk in chunks {
        let mut current = applied;
        for e in &chunk.events {
            if e.revision <= applied || e.revision > target {
                continue;
            }
            match out.last_mut() {
                Some((rev, changes)) if *rev == e.revision => changes.push(e.change.clone()),
                _ => out.push((e.revision, vec![e.change.clone()])),
            }
            current = e.revision;
        }
        applied = applied.max(current);
    }
    out
}

/// The revision a restore to the time `unix_ms` goes to: the last archived change received at
/// or before it; `None` when every change came later.
pub fn revision_at(chunks: &[Chunk], unix_ms: i64) -> Option<i64> {
    chunks
        .iter()
        .flat_map(|c| &c.events)
        .filter(|e| e.unix_ms <= unix_ms)
        .map(|e| e.revision)
        .max()
}

/// Each key's last change in `steps`: all a replay has to apply, since what a key held
/// before its last change no longer shows at the target. `None` is a deletion.
pub fn last_changes(steps: &[(i64, Vec<Change>)]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let mut last = BTreeMap::new();
    for (_, changes) in steps {
        for c in changes {
            match c {
                Change::Put { key, value } => last.insert(key.clone(), Some(value.clone())),
                Change::Delete { key } => last.insert(key.clone(), None),
            };
        }
    }
    last
}

/// Folds one chunk (the next in revision order) into `last`, the value of each key at the
/// newest revision applied so far (`applied`, moved up), as [`last_changes`] of [`steps`]
/// would over every chunk at once: a point-in-time restore holds one chunk at a time and the
/// keys it touched, never the archive range.
pub fn fold(
    last: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    applied: &mut i64,
    chunk: &Chunk,
    target: i64,
) {
    let mut current = *applied;
    for e in &chunk.events {
        if e.revision <= *applied || e.revision > target {
            continue;
        }
        match &e.change {
            Change::Put { key, value } => last.insert(key.clone(), Some(value.clone())),
            Change::Delete { key } => last.insert(key.clone(), None),
        };
        current = e.revision;
    }
    *applied = (*applied).max(current);
}

/// Bounds of one replay transaction (the seed's etcd takes up to 10,000 operations and
/// 32 MiB per request).
pub const TXN_MAX_OPS: usize = 1000;
/// See [`TXN_MAX_OPS`].
pub const TXN_MAX_BYTES: usize = 4 << 20;

/// What the seed of a point-in-time restore applies: `last` as transactions of etcd's JSON
/// gateway (`POST /v3/kv/txn`), one per line, each of at most `max_ops` operations and about
/// `max_bytes`, then `{"end": {"txns": N, "keys": K, "after": A, "target": T}}`, which tells
/// a whole answer from a cut one. Every operation sets a key to its value at the target or
/// deletes it, so applying a line twice changes nothing.
pub fn txn_lines(
    last: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    max_ops: usize,
    max_bytes: usize,
    after: i64,
    target: i64,
) -> Vec<String> {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut lines = Vec::new();
    let mut ops: Vec<serde_json::Value> = Vec::new();
    let mut bytes = 0;
    let flush = |ops: &mut Vec<serde_json::Value>, lines: &mut Vec<String>| {
        if !ops.is_empty() {
            lines.push(serde_json::json!({ "success": std::mem::take(ops) }).to_string());
        }
    };
    for (key, value) in last {
        let size = key.len() + value.as_ref().map_or(0, Vec::len);
        if !ops.is_empty() && (ops.len() >= max_ops || bytes + size > max_bytes) {
            flush(&mut ops, &mut lines);
            bytes = 0;
        }
        bytes += size;
        ops.push(match value {
            Some(v) => serde_json::json!({"requestPut": {"key": b64(key), "value": b64(v)}}),
            None => serde_json::json!({"requestDeleteRange": {"key": b64(key)}}),
        });
    }
    flush(&mut ops, &mut lines);
    let end = serde_json::json!({"end": {
        "txns": lines.len(),
        "keys": last.len(),
        "after": after,
        "target": target,
    }});
    lines.push(end.to_string());
    lines
}

/// Now, in Unix milliseconds: the clock of an archive's times.
pub fn now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

/// Cuts the archive's stream of changes into chunks: from the revision after `after`, each
/// chunk due when it holds `max_bytes` of changes or has been open `interval_ms`, whichever
/// comes first, and covering every revision up to the last the watch has vouched for (its
/// last change, or a progress notification: nothing before that revision is still to come),
/// so that consecutive chunks leave no gap. Memory: one chunk's changes.
#[derive(Debug)]
pub struct Chunker {
    from: i64,
    covered: i64,
    events: Vec<Event>,
    bytes: usize,
    opened_ms: Option<i64>,
    max_bytes: usize,
    interval_ms: i64,
}

impl Chunker {
    /// The archive continues after revision `after` (a full snapshot's, or the last chunk's
    /// `to`).
    pub fn new(after: i64, max_bytes: usize, interval_ms: i64) -> Self {
        Chunker {
            from: after + 1,
            covered: after,
            events: Vec::new(),
            bytes: 0,
            opened_ms: None,
            max_bytes,
            interval_ms,
        }
    }

    /// The changes of one watch response (all of a revision come in one response), received
    /// at `now_ms`. Changes at or before what is covered already (a watch restarted from an
    /// earlier revision) are dropped.
    pub fn push(&mut self, events: impl IntoIterator<Item = Event>, now_ms: i64) {
        for e in events {
            // Beyond what is covered, or more of the revision just taken (one transaction).
            let same = self.events.last().is_some_and(|l| l.revision == e.revision);
            if e.revision < self.from || e.revision <= self.covered && !same {
                continue;
            }
            self.bytes += 24 + change_len(&e.change);
            self.covered = self.covered.max(e.revision);
            self.events.push(e);
            self.opened_ms.get_or_insert(now_ms);
        }
    }

    /// The watch vouches that every change up to `revision` has been delivered (a progress
    /// notification, or the header of a response), seen at `now_ms`.
    pub fn progress(&mut self, revision: i64, now_ms: i64) {
        if revision > self.covered {
            self.covered = revision;
            self.opened_ms.get_or_insert(now_ms);
        }
    }

    /// The last revision the archive will hold once the open chunk is written.
    pub fn covered(&self) -> i64 {
        self.covered
    }

    /// When the open chunk's first change (or progress) arrived, if it holds any: the oldest
    /// change received and not yet stored.
    pub fn opened_ms(&self) -> Option<i64> {
        self.opened_ms
    }

    /// Whether the open chunk should be written now.
    pub fn due(&self, now_ms: i64) -> bool {
        self.covered >= self.from
            && (self.bytes >= self.max_bytes
                || self
                    .opened_ms
                    .is_some_and(|t| now_ms - t >= self.interval_ms))
    }

    /// The open chunk, closed (None when it covers nothing yet); the next one starts after it.
    /// If writing it fails, [`Chunker::restore`] puts it back.
    pub fn take(&mut self) -> Option<Chunk> {
        if self.covered < self.from {
            return None;
        }
        let chunk = Chunk {
            from: self.from,
            to: self.covered,
            events: std::mem::take(&mut self.events),
        };
        self.from = self.covered + 1;
        self.bytes = 0;
        self.opened_ms = None;
        Some(chunk)
    }

    /// A chunk [`Chunker::take`] gave that could not be written, with what came since: they
    /// are written together next time, so nothing is lost or written out of order.
    pub fn restore(&mut self, chunk: Chunk, now_ms: i64) {
        let mut events = chunk.events;
        self.bytes += events
            .iter()
            .map(|e| 24 + change_len(&e.change))
            .sum::<usize>();
        events.append(&mut self.events);
        self.events = events;
        self.from = chunk.from;
        self.opened_ms = Some(self.opened_ms.map_or(now_ms, |t| t.min(now_ms)));
    }
}

fn change_len(c: &Change) -> usize {
    match c {
        Change::Put { key, value } => key.len() + value.len(),
        Change::Delete { key } => key.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key space after applying `steps` to `start`: what a replay leaves, as a model.
    fn apply(
        mut start: BTreeMap<Vec<u8>, Vec<u8>>,
        steps: &[(i64, Vec<Change>)],
    ) -> BTreeMap<Vec<u8>, Vec<u8>> {
        for (_, changes) in steps {
            for c in changes {
                match c {
                    Change::Put { key, value } => {
                        start.insert(key.clone(), value.clone());
                    }
                    Change::Delete { key } => {
                        start.remove(key);
                    }
                }
            }
        }
        start
    }

    fn put(revision: i64, key: &str, value: &str) -> Event {
        Event {
            revision,
            unix_ms: revision * 1000,
            change: Change::Put {
                key: key.into(),
                value: value.into(),
            },
        }
    }

    fn del(revision: i64, key: &str) -> Event {
        Event {
            revision,
            unix_ms: revision * 1000,
            change: Change::Delete { key: key.into() },
        }
    }

    fn chunk(from: i64, to: i64, events: Vec<Event>) -> Chunk {
        Chunk { from, to, events }
    }

    #[test]
    fn a_chunk_reads_back_as_written_and_its_name_sorts_by_revision() {
        let c = chunk(
            11,
            14,
            vec![
                put(11, "a", "1"),
                put(12, "b", ""),
                put(12, "c", "3"),
                del(14, "a"),
            ],
        );
        let n = name("bucket/etcd", 11, 14);
        assert_eq!(
            n,
            "bucket/etcd_chunks/0000000000000000011-0000000000000000014"
        );
        assert_eq!(Chunk::decode(&n, &c.encode()), Ok(c));
        assert_eq!(parse_name(&n), Some((11, 14)));
        assert!(name("p", 9, 9) < name("p", 10, 12));
        for other in [
            "p_chunks/11-14",
            "p_v11_2026-01-01-00:00:00",
            "p_chunks/x-y",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_truncated_altered_or_misnamed_chunk_is_refused() {
        let c = chunk(5, 6, vec![put(5, "k", "v"), del(6, "k")]);
        let bytes = c.encode();
        let n = name("p", 5, 6);
        for bad in [
            bytes[..bytes.len() - 1].to_vec(),
            bytes[..10].to_vec(),
            {
                let mut b = bytes.clone();
                b[30] ^= 1;
                b
            },
            b"not a chunk at all, but long enough to hash".to_vec(),
        ] {
            assert!(
                matches!(Chunk::decode(&n, &bad), Err(ChunkError::Corrupt { .. })),
                "{bad:?}"
            );
        }
        let misnamed = name("p", 5, 7);
        assert!(Chunk::decode(&misnamed, &bytes).is_err());
        // A change outside its range is refused even with a matching hash.
        let outside = chunk(5, 6, vec![put(7, "k", "v")]).encode();
        assert!(Chunk::decode(&n, &outside).is_err());
    }

    #[test]
    fn the_chunker_cuts_by_size_or_time_and_leaves_no_gap() {
        let mut c = Chunker::new(10, 100, 5_000);
        assert!(c.take().is_none(), "nothing covered yet");
        c.push([put(11, "a", "1"), put(11, "b", "1")], 0);
        assert!(!c.due(4_999));
        assert!(c.due(5_000), "open for the interval");
        // Progress without changes extends what the chunk covers.
        c.progress(13, 1_000);
        let first = c.take().unwrap();
        assert_eq!((first.from, first.to, first.events.len()), (11, 13, 2));
        // The next starts right after; a big value makes it due at once.
        c.push([put(14, "c", &"x".repeat(200))], 6_000);
        assert!(c.due(6_000));
        let second = c.take().unwrap();
        assert_eq!((second.from, second.to), (14, 14));
        // A watch restarted from an earlier revision: what is covered already is dropped.
        c.push(
            [put(13, "z", "1"), put(14, "c", "again"), put(15, "d", "1")],
            7_000,
        );
        let third = c.take().unwrap();
        assert_eq!(third.events, vec![put(15, "d", "1")]);
        assert_eq!((third.from, third.to), (15, 15));
        // A chunk that failed to be written goes out again with what came since.
        c.push([del(16, "d")], 8_000);
        let failed = c.take().unwrap();
        c.push([put(17, "e", "1")], 8_500);
        c.restore(failed, 9_000);
        assert!(c.due(9_000 + 5_000));
        let retried = c.take().unwrap();
        assert_eq!((retried.from, retried.to), (16, 17));
        assert_eq!(retried.events, vec![del(16, "d"), put(17, "e", "1")]);
        let names: Vec<_> = [&first, &second, &third, &retried]
            .iter()
            .map(|ch| (ch.from, ch.to))
            .collect();
        assert_eq!(replay_plan(&names, 10, 17).map(|p| p.len()), Ok(4));
    }

    #[test]
    fn the_plan_runs_from_the_snapshot_to_the_target_without_gaps() {
        let chunks = [(1, 10), (11, 20), (21, 30), (31, 40)];
        assert_eq!(replay_plan(&chunks, 15, 25), Ok(vec![(11, 20), (21, 30)]));
        assert_eq!(replay_plan(&chunks, 10, 10), Ok(vec![]));
        assert_eq!(replay_plan(&chunks, 0, 40).map(|p| p.len()), Ok(4));
        // The same range written twice (a resumed archiver), and one inside another: once.
        let twice = [(1, 10), (11, 20), (11, 20), (12, 15), (21, 30)];
        assert_eq!(
            replay_plan(&twice, 0, 30),
            Ok(vec![(1, 10), (11, 20), (21, 30)])
        );
        assert_eq!(
            replay_plan(&[(1, 10), (21, 30)], 5, 25),
            Err(ChunkError::Gap { from: 11, to: 20 })
        );
        assert_eq!(
            replay_plan(&[(11, 20)], 5, 15),
            Err(ChunkError::Gap { from: 6, to: 10 })
        );
        assert_eq!(
            replay_plan(&chunks, 0, 41),
            Err(ChunkError::Short {
                last: 40,
                target: 41
            })
        );
    }

    #[test]
    fn an_archiver_resumes_after_the_last_chunk_or_takes_a_snapshot_when_etcd_compacted() {
        let chunks = [(11, 20), (21, 30), (41, 50)];
        assert_eq!(resume(&chunks, None, 0), Resume::NoSnapshot);
        // After the snapshot at 10: the chunks up to 30 follow it; 41-50 lies past a gap.
        assert_eq!(resume(&chunks, Some(10), 25), Resume::After(30));
        assert_eq!(resume(&[], Some(10), 5), Resume::After(10));
        // etcd compacted past what the archive holds: a snapshot, and the gap reported.
        assert_eq!(
            resume(&chunks, Some(10), 35),
            Resume::Gap {
                after: 30,
                compacted: 35
            }
        );
        // A newer snapshot (taken at such a gap) starts the chain again.
        assert_eq!(resume(&chunks, Some(40), 35), Resume::After(50));
        assert_eq!(resume(&chunks, Some(45), 45), Resume::After(50));
    }

    #[test]
    fn retention_deletes_the_chunks_no_kept_snapshot_needs() {
        let chunks = [(11, 20), (21, 30), (31, 40)];
        assert_eq!(expired(&chunks, 30), vec![(11, 20), (21, 30)]);
        assert_eq!(expired(&chunks, 25), vec![(11, 20)]);
        assert_eq!(expired(&chunks, 5), vec![]);
    }

    #[test]
    fn replay_to_a_revision_gives_the_key_space_etcd_had_then() {
        // Revisions 3 to 9 after a snapshot at 2 holding {a: 0}; chunk 2 overlaps chunk 1.
        let one = chunk(
            3,
            6,
            vec![
                put(3, "a", "1"),
                put(4, "b", "1"),
                put(4, "c", "1"),
                del(5, "a"),
            ],
        );
        let two = chunk(5, 9, vec![del(5, "a"), put(7, "a", "2"), del(9, "b")]);
        let start = BTreeMap::from([(b"a".to_vec(), b"0".to_vec())]);
        let at = |target| {
            let s = steps(&[one.clone(), two.clone()], 2, target);
            apply(start.clone(), &s)
                .into_iter()
                .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
                .collect::<Vec<_>>()
        };
        let kv = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(2), kv(&[("a", "0")]));
        assert_eq!(at(4), kv(&[("a", "1"), ("b", "1"), ("c", "1")]));
        assert_eq!(at(6), kv(&[("b", "1"), ("c", "1")]));
        assert_eq!(at(9), kv(&[("a", "2"), ("c", "1")]));
        // Revision 4's two puts are one step; revision 5, in both chunks, is applied once.
        let s = steps(&[one.clone(), two.clone()], 2, 9);
        assert_eq!(
            s.iter().map(|(r, c)| (*r, c.len())).collect::<Vec<_>>(),
            vec![(3, 1), (4, 2), (5, 1), (7, 1), (9, 1)]
        );
        // Folded one chunk at a time, as a restore's server does, the same key space.
        for target in 2..=9 {
            let (mut last, mut applied) = (BTreeMap::new(), 2);
            for c in [&one, &two] {
                fold(&mut last, &mut applied, c, target);
            }
            assert_eq!(
                last,
                last_changes(&steps(&[one.clone(), two.clone()], 2, target))
            );
        }
        // A time between two changes goes to the earlier one.
        assert_eq!(revision_at(&[one.clone(), two.clone()], 7_500), Some(7));
        assert_eq!(revision_at(&[one, two], 2_999), None);
    }

    #[test]
    fn a_replay_sends_each_keys_last_change_in_bounded_transactions_and_counts_them() {
        let one = chunk(
            3,
            6,
            vec![
                put(3, "a", "1"),
                put(4, "b", "1"),
                del(5, "a"),
                put(6, "b", "2"),
            ],
        );
        let last = last_changes(&steps(&[one], 2, 6));
        assert_eq!(
            last,
            BTreeMap::from([(b"a".to_vec(), None), (b"b".to_vec(), Some(b"2".to_vec()))])
        );
        let lines = txn_lines(&last, 1, TXN_MAX_BYTES, 2, 6);
        assert_eq!(
            lines,
            vec![
                r#"{"success":[{"requestDeleteRange":{"key":"YQ=="}}]}"#.to_string(),
                r#"{"success":[{"requestPut":{"key":"Yg==","value":"Mg=="}}]}"#.to_string(),
                r#"{"end":{"after":2,"keys":2,"target":6,"txns":2}}"#.to_string(),
            ]
        );
        // Bounded by bytes as well: a value too big for one transaction goes alone.
        let big = BTreeMap::from([
            (b"x".to_vec(), Some(vec![b'v'; 10])),
            (b"y".to_vec(), Some(vec![b'v'; 10])),
        ]);
        assert_eq!(txn_lines(&big, 1000, 15, 0, 1).len(), 3);
        assert_eq!(txn_lines(&big, 1000, 100, 0, 1).len(), 2);
        // Nothing to apply is still an answer with its end.
        assert_eq!(
            txn_lines(&BTreeMap::new(), 10, 10, 5, 5),
            vec![r#"{"end":{"after":5,"keys":0,"target":5,"txns":0}}"#.to_string()]
        );
    }
}
