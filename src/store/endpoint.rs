//! Where a snapshot is taken from: a member of an EtcdCluster, or one of a list of endpoints.
//! Shared by the backup and the restore controllers.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use super::error::Error;
use crate::api::{EtcdBackup, EtcdCluster, MemberRole};
use crate::etcd::{self, Access, ClientTls, Endpoint};
use crate::reference::{Dial, kube::authorize};

/// Bounds each connection to etcd (the snapshot as a whole has its own limit).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The client endpoint of a member to take the snapshot from: a healthy follower of the named
/// EtcdCluster (so the leader is not loaded), else its leader; reached with `tls`, else the
/// cluster's own client certificate when it runs TLS.
pub async fn cluster_endpoint(
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
    let secrets = crate::kube::cache::SecretApi::live(client, ns);
    let access = match tls {
        None => crate::access::cluster_access(&secrets, &cluster).await?,
        // Another identity than the cluster's own: root's password goes with it, since a
        // snapshot is root's to take once etcd checks credentials.
        Some(tls) => Access {
            tls: Some(tls),
            cert_is_root: false,
            ..crate::access::cluster_access(&secrets, &cluster).await?
        },
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
                access.clone(),
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

/// Of `endpoints` (authorized by the gate), one that answers as a member that knows a leader,
/// a follower first; `https` ones reached with `tls`.
pub async fn any_endpoint(
    endpoints: &[Dial],
    tls: Option<Arc<ClientTls>>,
) -> Result<Endpoint, Error> {
    let mut leader = None;
    for dial in endpoints {
        let ep = dial.endpoint(Access::tls(tls.clone()));
        match etcd::status(&ep, CONNECT_TIMEOUT).await {
            Ok(s) if s.leader != 0 && s.leader != s.member_id && !s.is_learner => {
                return Ok(ep);
            }
            Ok(s) if s.leader != 0 && !s.is_learner => leader = leader.or(Some(ep.clone())),
            _ => {}
        }
    }
    let tried: Vec<&str> = endpoints.iter().map(|d| d.url.as_str()).collect();
    leader.ok_or_else(|| Error::Unreachable(tried.join(", ")))
}

/// The endpoint the backup reads from. `clientTLSSecret` is the coreos way to reach endpoints
/// that need a certificate; with `clusterName` the cluster's own is used unless the spec names
/// one. `etcdEndpoints` reach only what the gate lets the backup's namespace reach
/// (src/reference), with or without a certificate: holding one is no licence to leave the
/// namespace.
pub async fn backup_endpoint(
    client: &Client,
    backup: &EtcdBackup,
    ns: &str,
) -> Result<Endpoint, Error> {
    let spec = &backup.spec;
    let cluster = spec.cluster_name.as_deref().filter(|c| !c.is_empty());
    let dials = match cluster {
        Some(_) => Vec::new(),
        None => authorize(client, ns, "spec.etcdEndpoints", &spec.etcd_endpoints)
            .await
            .map_err(|refused| Error::Refused(refused.to_string()))?,
    };
    let tls = match spec.client_tls_secret.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => {
            let secrets = crate::kube::cache::SecretApi::live(client, ns);
            Some(
                crate::tls::read_client(
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
    match cluster {
        Some(cluster) => cluster_endpoint(client, ns, cluster, tls).await,
        None => any_endpoint(&dials, tls).await,
    }
}
