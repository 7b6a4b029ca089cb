//! Following a continuous archive (issue 53): which chunks come after what a standby has
//! replayed, the transactions that apply them in revision order, and the record a demoted
//! primary leaves in its store (`<path>_handover`) for the standby that promotes next.
//!
//! A standby applies whole revisions only, several at a time: each transaction holds each key's
//! last change over consecutive revisions (what a reader sees after them) and moves the
//! standby's marker to the last of them. A chunk that ends with revisions holding no change
//! (watch progress) still moves the marker to its end.

use std::collections::BTreeMap;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use super::chunk::{self, Change, Chunk};
use super::pitr::Error;
use crate::api::Handover;

/// One transaction of a replay: each key's value after revision `to`, or `None` for a
/// deletion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The last revision it applies.
    pub to: i64,
    /// Each key's last change, in key order.
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// When the archive received the first change applied (Unix milliseconds).
    pub first_ms: Option<i64>,
}

/// The transactions that apply `chunk` after revision `applied`: whole revisions, at most
/// `max_ops` keys and about `max_bytes` each (one revision larger than that alone), `skip`
/// (the standby's own marker, when the source was itself a standby once) left out. The last
/// one ends at the chunk's end.
pub fn batches(
    chunk: &Chunk,
    applied: i64,
    max_ops: usize,
    max_bytes: usize,
    skip: &[u8],
) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut keys: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    let (mut bytes, mut first_ms) = (0usize, None);
    let mut to = applied;
    let events: Vec<_> = chunk
        .events
        .iter()
        .filter(|e| e.revision > applied)
        .collect();
    let mut i = 0;
    while i < events.len() {
        let revision = events[i].revision;
        let mut j = i;
        while j < events.len() && events[j].revision == revision {
            j += 1;
        }
        let step = &events[i..j];
        let new_keys = step
            .iter()
            .filter(|e| !keys.contains_key(key_of(&e.change)))
            .count();
        let size: usize = step.iter().map(|e| size_of(&e.change)).sum();
        if !keys.is_empty() && (keys.len() + new_keys > max_ops || bytes + size > max_bytes) {
            out.push(Batch {
                to,
                ops: std::mem::take(&mut keys).into_iter().collect(),
                first_ms: first_ms.take(),
            });
            bytes = 0;
        }
        for e in step {
            first_ms.get_or_insert(e.unix_ms);
            match &e.change {
                Change::Put { key, .. } | Change::Delete { key } if key.as_slice() == skip => {}
                Change::Put { key, value } => {
                    keys.insert(key.clone(), Some(value.clone()));
                }
                Change::Delete { key } => {
                    keys.insert(key.clone(), None);
                }
            }
        }
        bytes += size;
        to = revision;
        i = j;
    }
    if chunk.to > applied {
        out.push(Batch {
            to: chunk.to,
            ops: keys.into_iter().collect(),
            first_ms,
        });
    }
    out
}

fn key_of(c: &Change) -> &[u8] {
    match c {
        Change::Put { key, .. } | Change::Delete { key } => key,
    }
}

fn size_of(c: &Change) -> usize {
    match c {
        Change::Put { key, value } => key.len() + value.len(),
        Change::Delete { key } => key.len(),
    }
}

/// The chunks of `key`'s archive that hold revisions after `applied`, in order, and the last
/// revision they reach without a gap; only chunks that start at `from` or later are listed
/// (the one holding `applied + 1` must be among them). A gap right after `applied` is an
/// error naming it: the changes are gone, and the standby must start again from a newer full
/// snapshot.
pub async fn after(
    store: &dyn ObjectStore,
    key: &str,
    applied: i64,
    from: i64,
) -> Result<(Vec<(i64, i64)>, i64), Error> {
    let prefix = Path::from(format!("{key}_chunks"));
    // Names sort by revision: the listing starts after every chunk that begins before `from`.
    let offset = Path::from(chunk::name(key, from.saturating_sub(1).max(0), i64::MAX));
    let mut listing = store.list_with_offset(Some(&prefix), &offset);
    let mut ranges = Vec::new();
    while let Some(item) = listing.next().await {
        let meta = item.map_err(|source| Error::Store {
            what: format!("listing the archive {prefix}"),
            source,
        })?;
        if let Some(range) = chunk::parse_name(meta.location.as_ref())
            && range.1 > applied
        {
            ranges.push(range);
        }
    }
    ranges.sort_unstable();
    let mut covered = applied;
    let mut plan = Vec::new();
    for (from, to) in ranges {
        if to <= covered {
            continue;
        }
        if from > covered + 1 {
            if plan.is_empty() {
                return Err(chunk::ChunkError::Gap {
                    from: covered + 1,
                    to: from - 1,
                }
                .into());
            }
            break;
        }
        plan.push((from, to));
        covered = to;
    }
    Ok((plan, covered))
}

/// The object a demoted primary of the archive at `key` writes.
pub fn handover_name(key: &str) -> Path {
    Path::from(format!("{key}_handover"))
}

/// The handover recorded next to `key`'s archive, if one is (and reads as one).
pub async fn read_handover(store: &dyn ObjectStore, key: &str) -> Result<Option<Handover>, Error> {
    let bytes = read_small(store, &handover_name(key)).await?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}

/// The most a record kept beside an archive (a handover, a head) may hold: a few hundred
/// bytes are written; what is larger was not written by an archiver and is not read whole.
pub const MAX_RECORD_BYTES: usize = 16 << 10;

/// The object `name`, if it exists, read only up to [`MAX_RECORD_BYTES`]: a larger one is
/// refused, whoever put it there.
async fn read_small(store: &dyn ObjectStore, name: &Path) -> Result<Option<Vec<u8>>, Error> {
    super::pitr::read_bounded(store, name, MAX_RECORD_BYTES as u64).await
}

/// The object an archiver keeps next to `key`'s archive to say how far its source has gone
/// ([`Head`]).
pub fn head_name(key: &str) -> Path {
    Path::from(format!("{key}_head"))
}

/// What an archiver last said of its source, next to the archive (`<path>_head`), at least
/// every [`Head::every_ms`]: how far the source had gone and how much of it was stored. A
/// standby measures its lag against it, not against the chunks alone: changes the source has
/// acknowledged but the archive does not hold yet are lag too, and a head that stops coming
/// means nothing vouches for the source any more (issue 64).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    /// The source's newest revision the archiver knew of (its watch's headers, and a
    /// linearizable read each time it writes the head).
    pub revision: i64,
    /// Every change up to this revision is stored in chunks.
    pub archived: i64,
    /// Since when (Unix milliseconds) the archiver has known of changes it had not stored
    /// yet; none when it had stored every change it knew of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_since_ms: Option<i64>,
    /// When it was written (Unix milliseconds, the archiver's clock).
    pub at_ms: i64,
    /// How often the archiver writes it (milliseconds).
    pub every_ms: i64,
}

impl Head {
    /// Whether the head is too old to vouch for the source at `now_ms`: several writes
    /// missed, with room for a slow store and clocks a little apart.
    pub fn stale(&self, now_ms: i64) -> bool {
        now_ms - self.at_ms > 3 * self.every_ms.max(1000) + HEAD_SLACK_MS
    }
}

/// What a head's age may exceed three of its intervals by before it is stale.
const HEAD_SLACK_MS: i64 = 5_000;

/// The head kept next to `key`'s archive, if there is one (and it reads as one).
pub async fn read_head(store: &dyn ObjectStore, key: &str) -> Result<Option<Head>, Error> {
    let bytes = read_small(store, &head_name(key)).await?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}

/// Records `head` next to `key`'s archive.
pub async fn write_head(store: &dyn ObjectStore, key: &str, head: &Head) -> Result<(), Error> {
    let body = serde_json::to_vec(head).unwrap_or_default();
    let name = head_name(key);
    store
        .put(&name, PutPayload::from(body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Store {
            what: format!("writing {name}"),
            source,
        })
}

/// Records `handover` next to `key`'s archive.
pub async fn write_handover(
    store: &dyn ObjectStore,
    key: &str,
    handover: &Handover,
) -> Result<(), Error> {
    let body = serde_json::to_vec(handover).unwrap_or_default();
    let name = handover_name(key);
    store
        .put(&name, PutPayload::from(body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Store {
            what: format!("writing {name}"),
            source,
        })
}

/// Removes the handover of `key`'s archive (the primary takes writes again).
pub async fn delete_handover(store: &dyn ObjectStore, key: &str) -> Result<(), Error> {
    let name = handover_name(key);
    match store.delete(&name).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(source) => Err(Error::Store {
            what: format!("deleting {name}"),
            source,
        }),
    }
}

/// `chunk` without what comes after revision `upto` (where a promotion stops).
pub fn truncated(mut chunk: Chunk, upto: i64) -> Chunk {
    if chunk.to > upto {
        chunk.to = upto;
        chunk.events.retain(|e| e.revision <= upto);
    }
    chunk
}

/// Reads one chunk of `key`'s archive (checked: its hash, its name).
pub async fn read(store: &dyn ObjectStore, key: &str, range: (i64, i64)) -> Result<Chunk, Error> {
    super::pitr::read_chunk(store, key, range).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::chunk::Event;

    fn put(revision: i64, key: &str, value: &str) -> Event {
        Event {
            revision,
            unix_ms: revision * 10,
            change: Change::Put {
                key: key.into(),
                value: value.into(),
            },
        }
    }

    fn del(revision: i64, key: &str) -> Event {
        Event {
            revision,
            unix_ms: revision * 10,
            change: Change::Delete { key: key.into() },
        }
    }

    #[test]
    fn batches_apply_whole_revisions_in_order_each_key_once() {
        let chunk = Chunk {
            from: 5,
            to: 12,
            events: vec![
                put(5, "a", "1"),
                put(6, "b", "1"),
                put(6, "c", "1"),
                put(7, "a", "2"),
                del(8, "b"),
                put(9, "d", "1"),
                put(10, "m", "x"),
            ],
        };
        // Already at 5: a's first value is not applied again.
        let b = batches(&chunk, 5, 3, 1 << 20, b"m");
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[0].to, 8, "b and c of 6, a of 7, b of 8: three keys");
        assert_eq!(
            b[0].ops,
            vec![
                (b"a".to_vec(), Some(b"2".to_vec())),
                (b"b".to_vec(), None),
                (b"c".to_vec(), Some(b"1".to_vec())),
            ]
        );
        assert_eq!(b[0].first_ms, Some(60));
        // d would be a fourth key: the next batch, which ends at the chunk's end (12), the
        // marker key left out.
        assert_eq!(b[1].to, 12);
        assert_eq!(b[1].ops, vec![(b"d".to_vec(), Some(b"1".to_vec()))]);
        // A revision is never split, even when it alone exceeds the bounds.
        let big = batches(&chunk, 5, 1, 1 << 20, b"m");
        assert!(big.iter().any(|b| b.to == 6 && b.ops.len() == 2), "{big:?}");
        // Nothing after what is applied but the chunk's tail: one empty batch moves the marker.
        let tail = batches(&chunk, 10, 3, 1 << 20, b"m");
        assert_eq!(
            tail,
            vec![Batch {
                to: 12,
                ops: vec![],
                first_ms: None
            }]
        );
        assert!(batches(&chunk, 12, 3, 1 << 20, b"m").is_empty());
    }

    #[tokio::test]
    async fn the_chunks_after_a_revision_are_listed_in_order_up_to_a_gap() {
        let store = object_store::memory::InMemory::new();
        for (from, to) in [(2, 5), (6, 10), (11, 20), (25, 30)] {
            let c = Chunk {
                from,
                to,
                events: vec![],
            };
            store
                .put(
                    &Path::from(chunk::name("b/k", from, to)),
                    PutPayload::from(c.encode()),
                )
                .await
                .unwrap();
        }
        let (plan, covered) = after(&store, "b/k", 7, 0).await.unwrap();
        assert_eq!(plan, vec![(6, 10), (11, 20)]);
        let (plan, _) = after(&store, "b/k", 7, 6).await.unwrap();
        assert_eq!(
            plan,
            vec![(6, 10), (11, 20)],
            "listed from the chunk last applied"
        );
        // Listed from past the chunk that holds 8: a gap, never a change skipped.
        assert!(matches!(
            after(&store, "b/k", 7, 7).await,
            Err(Error::Chunk(chunk::ChunkError::Gap { from: 8, to: 10 }))
        ));
        assert_eq!(covered, 20, "the gap 21-24 stops it");
        assert!(matches!(
            after(&store, "b/k", 20, 11).await,
            Err(Error::Chunk(chunk::ChunkError::Gap { from: 21, to: 24 }))
        ));
        let (none, same) = after(&store, "b/k", 30, 25).await.unwrap();
        assert!(none.is_empty());
        assert_eq!(same, 30);
        let h = Handover {
            revision: 30,
            cluster_id: "ab".into(),
            at: "t".into(),
        };
        assert_eq!(read_handover(&store, "b/k").await.unwrap(), None);
        write_handover(&store, "b/k", &h).await.unwrap();
        assert_eq!(read_handover(&store, "b/k").await.unwrap(), Some(h));
        delete_handover(&store, "b/k").await.unwrap();
        delete_handover(&store, "b/k").await.unwrap();
        assert_eq!(read_handover(&store, "b/k").await.unwrap(), None);
    }
}
