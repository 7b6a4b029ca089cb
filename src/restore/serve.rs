//! The snapshot of a restore, served to the seed member that restores it.
//!
//! etcd pods hold no cloud credentials: the seed's `etcd-gate` fetches the snapshot from the
//! operator (`GET /restores/<namespace>/<cluster>/snapshot`, `Authorization: Bearer <token>`),
//! and the operator streams it from object storage as it reads it, never holding it whole.
//! What is served, and to whom, is decided by the EtcdCluster's restore annotation alone (the
//! token, the EtcdRestore), read afresh on every request, so any replica can serve it.
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

use crate::api::{EtcdCluster, EtcdRestore};
use crate::backup::location::{Storage, target};
use crate::cluster::handles::Sources;
use crate::etcd::{Endpoint, Etcd};

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
    /// Bytes in all.
    pub size: u64,
    /// The bytes, as storage sends them.
    pub body: BoxStream<'static, Result<Bytes, std::io::Error>>,
}

/// The request path's namespace and cluster, for `/restores/<namespace>/<cluster>/snapshot`.
pub fn parse_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/restores/")?.strip_suffix("/snapshot")?;
    let (ns, cluster) = rest.split_once('/')?;
    (!ns.is_empty() && !cluster.is_empty() && !cluster.contains('/')).then_some((ns, cluster))
}

impl Snapshots {
    /// Opens the snapshot of the restore pending on `cluster` in `ns`, if `bearer` is its
    /// token; otherwise the status code and message to answer with.
    pub async fn open(
        &self,
        ns: &str,
        cluster: &str,
        bearer: Option<&str>,
    ) -> Result<Opened, (StatusCode, String)> {
        let internal = |e: String| (StatusCode::BAD_GATEWAY, e);
        let clusters: Api<EtcdCluster> = Api::namespaced(self.client.clone(), ns);
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
        let handoff = match c.pending_restore() {
            Some(Ok(h)) => h,
            _ => return Err(not_found()),
        };
        if bearer != Some(handoff.token.as_str()) {
            return Err((StatusCode::FORBIDDEN, "wrong or missing token".into()));
        }
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
        let restores: Api<EtcdRestore> = Api::namespaced(self.client.clone(), ns);
        let restore = restores
            .get_opt(&handoff.name)
            .await
            .map_err(|e| internal(format!("reading EtcdRestore {}: {e}", handoff.name)))?
            .filter(|r| r.metadata.uid.as_deref() == Some(handoff.uid.as_str()))
            .ok_or_else(|| {
                (
                    StatusCode::NOT_FOUND,
                    format!("EtcdRestore {ns}/{} no longer exists", handoff.name),
                )
            })?;
        let (store, _) = target(&self.client, ns, Storage::from(&restore.spec))
            .await
            .map_err(|e| internal(e.to_string()))?;
        let got = store
            .store
            .get(&store.location)
            .await
            .map_err(|e| internal(format!("reading {}: {e}", store.url)))?;
        Ok(Opened {
            size: got.meta.size,
            body: got
                .into_stream()
                .map(|r| r.map_err(std::io::Error::other))
                .boxed(),
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
        size,
        body: body
            .map(|r| r.map(Bytes::from).map_err(std::io::Error::other))
            .boxed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_restore_path_is_served() {
        assert_eq!(
            parse_path("/restores/ns/example/snapshot"),
            Some(("ns", "example"))
        );
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
