//! Where a snapshot is taken from: a member of an EtcdCluster, or one of a list of endpoints.
//! Shared by the backup and the restore controllers.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use super::error::Error;
use crate::api::{EtcdBackup, EtcdCluster, MemberRole};
use crate::etcd::{self, Access, ClientTls, Endpoint};

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

/// Of `endpoints`, one that answers as a member that knows a leader, a follower first; `https`
/// ones reached with `tls`.
pub async fn any_endpoint(
    endpoints: &[String],
    tls: Option<Arc<ClientTls>>,
) -> Result<Endpoint, Error> {
    let mut leader = None;
    for url in endpoints {
        let ep = Endpoint::new(url.clone(), Access::tls(tls.clone()), None);
        match etcd::status(&ep, CONNECT_TIMEOUT).await {
            Ok(s) if s.leader != 0 && s.leader != s.member_id && !s.is_learner => {
                return Ok(ep);
            }
            Ok(s) if s.leader != 0 && !s.is_learner => leader = leader.or(Some(ep.clone())),
            _ => {}
        }
    }
    leader.ok_or_else(|| Error::Unreachable(endpoints.join(", ")))
}

/// The endpoint the backup reads from. `clientTLSSecret` is the coreos way to reach endpoints
/// that need a certificate; with `clusterName` the cluster's own is used unless the spec names
/// one.
pub async fn backup_endpoint(
    client: &Client,
    backup: &EtcdBackup,
    ns: &str,
) -> Result<Endpoint, Error> {
    let spec = &backup.spec;
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
    match spec.cluster_name.as_deref().filter(|c| !c.is_empty()) {
        Some(cluster) => cluster_endpoint(client, ns, cluster, tls).await,
        None => {
            if tls.is_none()
                && let Some(why) = spec.etcd_endpoints.iter().find_map(|u| foreign(u, ns))
            {
                return Err(Error::Refused(why));
            }
            any_endpoint(&spec.etcd_endpoints, tls).await
        }
    }
}

/// Why `url` may not be snapshotted for a backup in namespace `ns` without a client
/// certificate, if it may not: only a Service of the backup's own namespace (`name`,
/// `name.ns`, `name.ns.svc[.domain]`) may be, so that nobody can have the operator copy another
/// namespace's etcd into their own bucket. With `clientTLSSecret`, holding the certificate is
/// the proof of the right to the data.
pub fn foreign(url: &str, ns: &str) -> Option<String> {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let mut labels = host.split('.');
    let name = labels.next().unwrap_or_default();
    let rest: Vec<&str> = labels.collect();
    let service_like = !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let own = match rest.as_slice() {
        [] => true,
        [n] => *n == ns,
        [n, "svc", ..] => *n == ns,
        _ => false,
    };
    (!(service_like && own)).then(|| {
        format!(
            "spec.etcdEndpoints: {url} is not a Service of namespace {ns}; without \
             spec.clientTLSSecret a backup may only read an etcd of its own namespace"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::foreign;

    #[test]
    fn only_services_of_the_backups_own_namespace_are_read_without_a_certificate() {
        for ours in [
            "http://example-client:2379",
            "http://example-client.team-a:2379",
            "http://example-client.team-a.svc:2379",
            "https://example-client.team-a.svc.cluster.local:2379",
            "example-client.team-a.svc",
        ] {
            assert_eq!(foreign(ours, "team-a"), None, "{ours}");
        }
        for theirs in [
            "http://example-client.team-b:2379",
            "http://example-client.team-b.svc.cluster.local:2379",
            "http://10.0.0.7:2379",
            "http://[fd00::7]:2379",
            "http://etcd.example.com:2379",
            "http://user@example-client.team-b:2379",
        ] {
            let why = foreign(theirs, "team-a").expect(theirs);
            assert!(why.starts_with("spec.etcdEndpoints: "), "{why}");
        }
    }
}
