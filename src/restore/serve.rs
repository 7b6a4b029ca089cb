//! The snapshot of a restore, served to the seed member that restores it.
//!
//! etcd pods hold no cloud credentials: the seed's `etcd-gate` fetches the snapshot from the
//! operator (`GET /restores/<namespace>/<cluster>/snapshot`, `Authorization: Bearer <token>`),
//! and the operator streams it from object storage as it reads it, never holding it whole.
//! What is served, and to whom, is decided by the EtcdCluster's restore annotation (the token,
//! the EtcdRestore) once its source vouches for it ([`crate::api::handoff`]), read afresh on
//! every request, so any replica can serve it.
//!
//! A recovery from lost quorum hands over a restore whose snapshot comes from a surviving
//! member instead: the operator streams it straight from that member's etcd, which serves a
//! snapshot without quorum. Only the replica that leads knows the member's address and client
//! credentials (its cluster's task registers them in [`Sources`]); the seed fetches from the
//! leader's address, and a seed made by an earlier leader is made again.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use hyper::StatusCode;
use hyper::body::Bytes;
use kube::{Api, Client};
use object_store::ObjectStoreExt;
use object_store::path::Path;

use crate::api::{EtcdCluster, EtcdRestore};
use crate::etcd::{Endpoint, Etcd};
use crate::kube::handoff::{self, Verified};
use crate::kube::restore_token;
use crate::seed::Sources;
use crate::store::compress::{Unpack, ZSTD_MAGIC};
use crate::store::location::{Storage, target};
use crate::store::pitr;

/// How long connecting to a surviving member may take.
const MEMBER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves restore snapshots.
pub struct Snapshots {
    /// API client for requests.
    pub client: Client,
    /// The surviving members of recoveries this replica leads.
    pub sources: Arc<Sources>,
}

/// An open snapshot: its size and its bytes.
pub struct Opened {
    /// Bytes in all, when known before they are sent (not for a snapshot stored compressed).
    pub size: Option<u64>,
    /// The bytes, as storage sends them.
    pub body: BoxStream<'static, Result<Bytes, std::io::Error>>,
}

/// What a seed asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// `/restores/<namespace>/<cluster>/snapshot`: the snapshot.
    Snapshot,
    /// `/restores/<namespace>/<cluster>/changes?after=R`: a point-in-time restore's changes.
    Changes,
}

/// The request path's namespace, cluster and what is asked for.
pub fn parse_path(path: &str) -> Option<(&str, &str, Asked)> {
    let rest = path.strip_prefix("/restores/")?;
    let (rest, asked) = match rest.strip_suffix("/snapshot") {
        Some(r) => (r, Asked::Snapshot),
        None => (rest.strip_suffix("/changes")?, Asked::Changes),
    };
    let (ns, cluster) = rest.split_once('/')?;
    (!ns.is_empty() && !cluster.is_empty() && !cluster.contains('/'))
        .then_some((ns, cluster, asked))
}

/// `after=R` of a changes request's query.
pub fn after_of(query: Option<&str>) -> Option<i64> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("after="))?
        .parse()
        .ok()
}

impl Snapshots {
    /// The restore pending on `cluster` in `ns`, verified against its source
    /// ([`crate::api::handoff`]), if `bearer` is its token; otherwise the status code and
    /// message to answer with. A hand-off that is not verified serves nothing: whoever may
    /// annotate an EtcdCluster must not be able to point it at another restore's snapshot.
    async fn authorized(
        &self,
        ns: &str,
        cluster: &str,
        bearer: Option<&str>,
    ) -> Result<Verified, (StatusCode, String)> {
        let internal = |e: String| (StatusCode::BAD_GATEWAY, e);
        let clusters: Api<EtcdCluster> = Api::namespaced(self.client.clone(), ns);
        let restores: Api<EtcdRestore> = Api::namespaced(self.client.clone(), ns);
        let not_found = || {
            (
                StatusCode::NOT_FOUND,
                format!("no restore is pending on EtcdCluster {ns}/{cluster}"),
            )
        };
        let c = clusters
            .get_opt(cluster)
            .await
            .map_err(|e| internal(format!("reading EtcdCluster {ns}/{cluster}: {e}")))?
            .ok_or_else(not_found)?;
        let verified = match handoff::pending(&restores, &c).await {
            Ok(Some(Ok(v))) => v,
            Ok(_) => return Err(not_found()),
            Err(e) => {
                return Err(internal(format!(
                    "reading the restore of {ns}/{cluster}: {e}"
                )));
            }
        };
        if !restore_token::matches(bearer, &verified.handoff.token_sha256) {
            return Err((StatusCode::FORBIDDEN, "wrong or missing token".into()));
        }
        Ok(verified)
    }

    /// The storage of the verified restore.
    async fn storage_of(
        &self,
        ns: &str,
        verified: &Verified,
    ) -> Result<crate::store::storage::Target, (StatusCode, String)> {
        let restore = verified.restore.as_ref().ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!(
                    "EtcdRestore {ns}/{} no longer exists",
                    verified.handoff.name
                ),
            )
        })?;
        let (store, _) = target(&self.client, ns, Storage::from(&restore.spec))
            .await
            .map_err(|e| (StatusCode::BAD_GATEWAY, e.to_string()))?;
        Ok(store)
    }

    /// Opens the snapshot of the restore pending on `cluster` in `ns`, if `bearer` is its
    /// token; otherwise the status code and message to answer with.
    pub async fn open(
        &self,
        ns: &str,
        cluster: &str,
        bearer: Option<&str>,
    ) -> Result<Opened, (StatusCode, String)> {
        let internal = |e: String| (StatusCode::BAD_GATEWAY, e);
        let verified = self.authorized(ns, cluster, bearer).await?;
        let handoff = &verified.handoff;
        if !handoff.member.is_empty() {
            let ep = self
                .sources
                .get(ns, cluster, &handoff.member)
                .ok_or_else(|| {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("member {} is not known to this replica", handoff.member),
                    )
                })?;
            return from_member(&ep)
                .await
                .map_err(|e| internal(format!("snapshot of member {}: {e}", handoff.member)));
        }
        let mut store = self.storage_of(ns, &verified).await?;
        if !handoff.object.is_empty() {
            // A point-in-time restore: the spec names the backup, the hand-off its snapshot.
            store = store.with_location(Path::from(handoff.object.as_str()));
        }
        let got = store
            .store
            .get(&store.location)
            .await
            .map_err(|e| internal(format!("reading {}: {e}", store.url)))?;
        unpacked(got.meta.size, got.into_stream(), handoff.snapshot_size)
            .await
            .map_err(|e| internal(format!("reading {}: {e}", store.url)))
    }

    /// The archived changes a point-in-time restore's seed replays after revision `after`
    /// (what its restored snapshot holds), as transactions one per line
    /// ([`crate::store::pitr::changes`]): every chunk read and checked before the first line.
    pub async fn changes(
        &self,
        ns: &str,
        cluster: &str,
        bearer: Option<&str>,
        after: i64,
    ) -> Result<Vec<String>, (StatusCode, String)> {
        let verified = self.authorized(ns, cluster, bearer).await?;
        let handoff = &verified.handoff;
        let (Some(target), false) = (handoff.to_revision, handoff.object.is_empty()) else {
            return Err((
                StatusCode::NOT_FOUND,
                format!(
                    "the restore pending on EtcdCluster {ns}/{cluster} is not to a point in time"
                ),
            ));
        };
        let store = self.storage_of(ns, &verified).await?;
        let key = store.location.to_string();
        let snapshot = pitr::snapshot_revision(&key, &handoff.object).unwrap_or(after);
        pitr::changes(store.store.as_ref(), &key, snapshot, after, target)
            .await
            .map_err(|e| {
                let status = match e {
                    pitr::Error::Beyond { .. } => StatusCode::CONFLICT,
                    pitr::Error::Store { .. } => StatusCode::BAD_GATEWAY,
                    _ => StatusCode::UNPROCESSABLE_ENTITY,
                };
                (status, e.to_string())
            })
    }
}

/// A snapshot streamed from a member's etcd: its size is known from the first message (the
/// bytes in it and those remaining), and it ends with etcd's own sha256, which the restore
/// tool checks.
async fn from_member(ep: &Endpoint) -> Result<Opened, crate::etcd::Error> {
    let mut etcd = Etcd::connect_streaming(ep, MEMBER_TIMEOUT).await?;
    let (size, body) = etcd.snapshot_sized().await?;
    Ok(Opened {
        size: Some(size),
        body: body
            .map(|r| r.map(Bytes::from).map_err(std::io::Error::other))
            .boxed(),
    })
}

/// A stored snapshot as the seed must receive it: decompressed on the way if it was stored
/// with zstd (its size then unknown until the end), passed through as it comes otherwise.
/// With `limit` (the size verified), no more than that is served: a stored object larger than
/// it is refused before a byte is sent, and a frame that expands past it ends the body with
/// an error (the seed's disk holds at most what was verified).
async fn unpacked(
    size: u64,
    mut stream: BoxStream<'static, object_store::Result<Bytes>>,
    limit: Option<u64>,
) -> Result<Opened, String> {
    let limit = limit.unwrap_or(u64::MAX);
    let mut head = Vec::new();
    while head.len() < ZSTD_MAGIC.len() {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => return Err(e.to_string()),
            None => break,
        }
    }
    let mut unpack = Unpack::default();
    unpack.feed(&head).map_err(|e| e.to_string())?;
    if !unpack.compressed() && size > limit {
        return Err(format!(
            "the object holds {size} bytes, more than the {limit} verified: it changed since"
        ));
    }
    if !unpack.compressed() {
        let first = match unpack.take().map_err(|e| e.to_string())? {
            Some(first) => first,
            None => unpack.finish(),
        };
        let first = futures::stream::once(async move { Ok(Bytes::from(first)) });
        let rest = stream.map(|r| r.map_err(std::io::Error::other));
        return Ok(Opened {
            size: Some(size),
            body: first.chain(rest).boxed(),
        });
    }
    // Each piece the decoder gives is sent before more is read: memory stays flat whatever a
    // frame expands to.
    let body = futures::stream::unfold(Some((stream, unpack, 0u64)), move |state| async move {
        let (mut stream, mut unpack, mut sent) = state?;
        loop {
            match unpack.take() {
                Err(e) => return Some((Err(e), None)),
                Ok(Some(piece)) => {
                    sent += piece.len() as u64;
                    if sent > limit {
                        let e = std::io::Error::other(format!(
                            "the snapshot expands past the {limit} bytes verified"
                        ));
                        return Some((Err(e), None));
                    }
                    return Some((Ok(Bytes::from(piece)), Some((stream, unpack, sent))));
                }
                Ok(None) => {}
            }
            match stream.next().await {
                Some(Ok(chunk)) => {
                    if let Err(e) = unpack.feed(&chunk) {
                        return Some((Err(e), None));
                    }
                }
                Some(Err(e)) => return Some((Err(std::io::Error::other(e)), None)),
                None => return None,
            }
        }
    });
    Ok(Opened {
        size: None,
        body: body.boxed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::compress::Compressor;

    fn stream_of(stored: &[u8], chunk: usize) -> BoxStream<'static, object_store::Result<Bytes>> {
        let chunks: Vec<object_store::Result<Bytes>> = stored
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::stream::iter(chunks).boxed()
    }

    async fn served(stored: Vec<u8>, chunk: usize) -> (Option<u64>, Vec<u8>) {
        let size = stored.len() as u64;
        let opened = unpacked(size, stream_of(&stored, chunk), None)
            .await
            .unwrap();
        let body: Vec<Bytes> = opened.body.map(|c| c.unwrap()).collect().await;
        (opened.size, body.concat())
    }

    #[tokio::test]
    async fn no_more_than_the_verified_size_is_served() {
        // 256 MiB of zeros: a few KiB stored, a bomb where 1 MiB was verified.
        let mut c = Compressor::new(3).unwrap();
        let mut bomb = Vec::new();
        for _ in 0..256 {
            bomb.extend(c.push(&vec![0u8; 1 << 20]).unwrap());
        }
        bomb.extend(c.finish().unwrap());
        let size = bomb.len() as u64;
        let opened = unpacked(size, stream_of(&bomb, 4096), Some(1 << 20))
            .await
            .unwrap();
        let pieces: Vec<std::io::Result<Bytes>> = opened.body.collect().await;
        let sent: usize = pieces.iter().flatten().map(Bytes::len).sum();
        assert!(sent <= 1 << 20, "{sent} bytes served");
        let refused = pieces.last().unwrap().as_ref().unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("expands past the 1048576 bytes verified")
        );
        // A plain object larger than what was verified is refused before a byte is sent.
        let plain = vec![7u8; 4096];
        let refused = unpacked(4096, stream_of(&plain, 512), Some(4000))
            .await
            .err()
            .unwrap();
        assert!(refused.contains("more than the 4000 verified"), "{refused}");
        // Exactly the verified size is served whole.
        let (size, body) = served(plain.clone(), 512).await;
        assert_eq!((size, body), (Some(4096), plain));
    }

    #[tokio::test]
    async fn a_snapshot_stored_compressed_is_served_decompressed_and_a_plain_one_as_it_is() {
        let raw: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        assert_eq!(
            served(raw.clone(), 3).await,
            (Some(raw.len() as u64), raw.clone())
        );
        let mut c = Compressor::new(3).unwrap();
        let mut stored = c.push(&raw).unwrap();
        stored.extend(c.finish().unwrap());
        for chunk in [2, 4096, 1 << 20] {
            let (size, body) = served(stored.clone(), chunk).await;
            assert_eq!(size, None, "the length is not known up front");
            assert!(body == raw, "chunks of {chunk}");
        }
    }

    #[test]
    fn only_a_restore_path_is_served() {
        assert_eq!(
            parse_path("/restores/ns/example/snapshot"),
            Some(("ns", "example", Asked::Snapshot))
        );
        assert_eq!(
            parse_path("/restores/ns/example/changes"),
            Some(("ns", "example", Asked::Changes))
        );
        assert_eq!(after_of(Some("after=1234")), Some(1234));
        assert_eq!(after_of(Some("x=1&after=7")), Some(7));
        assert_eq!(after_of(Some("after=x")), None);
        assert_eq!(after_of(None), None);
        for bad in [
            "/restores//example/snapshot",
            "/restores/ns/snapshot",
            "/restores/ns/a/b/snapshot",
            "/metrics",
        ] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
    }
}
