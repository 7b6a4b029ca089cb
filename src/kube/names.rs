//! The names every stage reads: how a cluster's members are named and reached (ports, hosts,
//! URLs), the labels and owner metadata of the objects made for a cluster, the field manager,
//! and the names of its TLS Secrets. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::api::EtcdCluster;

/// etcd's client port.
pub const CLIENT_PORT: i32 = 2379;
/// etcd's peer port.
pub const PEER_PORT: i32 = 2380;
/// Plain-HTTP listener for `/health`, `/livez`, `/readyz` and `/metrics`, so probes work the
/// same with and without client TLS.
pub const METRICS_PORT: i32 = 2381;

/// Addressing of one cluster's members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addressing {
    /// EtcdCluster name (also the headless Service's name).
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// `spec.pod.ClusterDomain` without a leading dot; empty for the short `...svc` form.
    pub cluster_domain: String,
    /// Peer traffic uses TLS.
    pub peer_tls: bool,
    /// Client traffic uses TLS.
    pub client_tls: bool,
}

impl Addressing {
    /// Builds the addressing, normalizing a coreos-style `.cluster.local` domain.
    pub fn new(cluster: &str, namespace: &str, cluster_domain: Option<&str>) -> Self {
        Addressing {
            cluster: cluster.into(),
            namespace: namespace.into(),
            cluster_domain: cluster_domain.unwrap_or("").trim_start_matches('.').into(),
            peer_tls: false,
            client_tls: false,
        }
    }

    /// `<member>.<cluster>.<namespace>.svc[.<domain>]`.
    pub fn host(&self, member: &str) -> String {
        let mut h = format!("{member}.{}.{}.svc", self.cluster, self.namespace);
        if !self.cluster_domain.is_empty() {
            h.push('.');
            h.push_str(&self.cluster_domain);
        }
        h
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(tls: bool) -> &'static str {
        if tls { "https" } else { "http" }
    }

    /// The member's peer URL.
    pub fn peer_url(&self, member: &str) -> String {
        format!(
            "{}://{}:{PEER_PORT}",
            Self::scheme(self.peer_tls),
            self.host(member)
        )
    }

    /// The member's client URL.
    pub fn client_url(&self, member: &str) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            Self::scheme(self.client_tls),
            self.host(member)
        )
    }

    /// The client Service's name in DNS, `<cluster>-client.<namespace>.svc[.<domain>]`: what
    /// its clients reach it by, and what a server certificate must name for them.
    pub fn service_host(&self) -> String {
        let mut h = format!("{}-client.{}.svc", self.cluster, self.namespace);
        if !self.cluster_domain.is_empty() {
            h.push('.');
            h.push_str(&self.cluster_domain);
        }
        h
    }

    /// The client Service's URL, `<cluster>-client.<namespace>.svc[.<domain>]:2379`.
    pub fn service_url(&self) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            Self::scheme(self.client_tls),
            self.service_host()
        )
    }

    /// A member's client URL by pod IP (how the operator reaches it: no DNS needed).
    pub fn client_url_at(&self, ip: &str) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            Self::scheme(self.client_tls),
            url_host(ip)
        )
    }

    /// Where `etcd-gate` asks member `member` (at pod IP `ip`) for the member list: its peer
    /// port, which serves the list (`/members`) with no client certificate beyond the peer
    /// certificate every member has. With peer TLS the entry is `<host>=https://<ip>:2380`:
    /// the certificate is checked against the member's DNS name, which the gate must not look
    /// up.
    pub fn gate_endpoint(&self, member: &str, ip: &str) -> String {
        let url = format!(
            "{}://{}:{PEER_PORT}",
            Self::scheme(self.peer_tls),
            url_host(ip)
        );
        if self.peer_tls {
            format!("{}={url}", self.host(member))
        } else {
            url
        }
    }

    /// `--initial-cluster` from member names: `<m>=<peer URL>,...`.
    pub fn initial_cluster<'a>(&self, members: impl IntoIterator<Item = &'a str>) -> String {
        members
            .into_iter()
            .map(|m| format!("{m}={}", self.peer_url(m)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// An IP address as the host part of a URL (IPv6 in brackets).
fn url_host(ip: &str) -> String {
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => ip.to_string(),
    }
}

/// The cluster's addressing (names, URLs, TLS).
pub fn addressing(cluster: &EtcdCluster) -> Addressing {
    let pod = cluster.spec.pod.as_ref();
    let mut addr = Addressing::new(
        &cluster.name_any(),
        &cluster.namespace().unwrap_or_default(),
        pod.and_then(|p| p.cluster_domain.as_deref()),
    );
    let secrets = secrets(cluster);
    addr.peer_tls = secrets.peer.is_some();
    addr.client_tls = secrets.server.is_some();
    addr
}

/// The operator's name in labels and as server-side-apply field manager.
pub const MANAGER: &str = "etcd-operator";

/// The label every object of a cluster carries, naming the cluster.
pub const CLUSTER_LABEL: &str = "etcd_cluster";

/// Labels that select a cluster's member pods (the coreos pair).
pub fn selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".into(), "etcd".into()),
        (CLUSTER_LABEL.into(), cluster.into()),
    ])
}

/// [`selector`] as a label selector's text (`app=etcd,etcd_cluster=<name>`).
pub fn selector_text(cluster: &str) -> String {
    selector(cluster)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels of every object made for a cluster: the selector plus `app.kubernetes.io/*`.
pub fn labels(cluster: &str, component: &str) -> BTreeMap<String, String> {
    let mut l = selector(cluster);
    l.extend([
        ("app.kubernetes.io/name".into(), "etcd".into()),
        ("app.kubernetes.io/instance".into(), cluster.into()),
        ("app.kubernetes.io/component".into(), component.into()),
        ("app.kubernetes.io/managed-by".into(), MANAGER.into()),
    ]);
    l
}

/// Metadata of an object the cluster owns: its labels and the controller reference.
pub fn meta(cluster: &EtcdCluster, name: &str, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: cluster.namespace(),
        labels: Some(labels(&cluster.name_any(), component)),
        owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The Secrets a cluster's members mount and its clients use.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Secrets {
    /// Peer certificate Secret (coreos `peer.*` layout, or `kubernetes.io/tls`).
    pub peer: Option<String>,
    /// Server certificate Secret (coreos `server.*` layout, or `kubernetes.io/tls`).
    pub server: Option<String>,
    /// Client certificate Secret (coreos `etcd-client.*` layout, or `kubernetes.io/tls`).
    pub client: Option<String>,
    /// Whether the operator makes them (`TLS.auto`).
    pub auto: bool,
    /// Whether cert-manager issues them for the operator's Certificates (`TLS.certManager`):
    /// all three in the `kubernetes.io/tls` layout.
    pub cert_manager: bool,
}

/// Whether `meta` names `owner` (by UID) as its controller: the only proof that an object is
/// the cluster's. Labels are not: anyone who may create a pod can make it wear them.
pub fn controlled_by(meta: &ObjectMeta, owner: &EtcdCluster) -> bool {
    let Some(uid) = owner.meta().uid.as_deref() else {
        return false;
    };
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The Secret that holds the password of etcd's `root` user, the operator's, in a cluster with
/// access control declared.
pub fn root_secret(cluster: &str) -> String {
    format!("{cluster}-etcd-root")
}

/// The key of [`root_secret`] that holds the password.
pub const ROOT_PASSWORD_KEY: &str = "password";

/// The Secret of the CA that `TLS.auto` makes for `cluster`.
pub fn ca_name(cluster: &EtcdCluster) -> String {
    format!("{}-ca", cluster.name_any())
}

/// The Secrets of `cluster`.
pub fn secrets(cluster: &EtcdCluster) -> Secrets {
    let name = cluster.name_any();
    let Some(tls) = cluster.spec.tls.as_ref() else {
        return Secrets::default();
    };
    if tls.auto.is_some() || tls.cert_manager.is_some() {
        return Secrets {
            peer: Some(format!("{name}-peer-tls")),
            server: Some(format!("{name}-server-tls")),
            client: Some(format!("{name}-client-tls")),
            auto: tls.auto.is_some(),
            cert_manager: tls.cert_manager.is_some(),
        };
    }
    let set = |s: Option<&String>| s.filter(|s| !s.is_empty()).cloned();
    let st = tls.static_.as_ref();
    let member = st.and_then(|s| s.member.as_ref());
    Secrets {
        peer: set(member.and_then(|m| m.peer_secret.as_ref())),
        server: set(member.and_then(|m| m.server_secret.as_ref())),
        client: set(st.and_then(|s| s.operator_secret.as_ref())),
        auto: false,
        cert_manager: false,
    }
}

/// The name of a recovery's restore: the cluster's, and the start of the recovery's UID.
pub fn recovery_name(cluster: &str, uid: &str) -> String {
    format!("{cluster}-recovery-{}", &uid[..uid.len().min(8)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_asks_peer_ports_by_ip_and_checks_names_with_tls() {
        let mut addr = Addressing::new("c", "ns", None);
        assert_eq!(
            addr.gate_endpoint("c-1", "10.0.0.1"),
            "http://10.0.0.1:2380"
        );
        assert_eq!(
            addr.gate_endpoint("c-1", "fd00::1"),
            "http://[fd00::1]:2380"
        );
        addr.peer_tls = true;
        assert_eq!(
            addr.gate_endpoint("c-1", "10.0.0.1"),
            "c-1.c.ns.svc=https://10.0.0.1:2380"
        );
        addr.client_tls = true;
        assert_eq!(addr.client_url_at("10.0.0.1"), "https://10.0.0.1:2379");
    }

    #[test]
    fn the_coreos_example_names_its_three_secrets() {
        let example = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/cluster-tls.yaml"
        ))
        .unwrap();
        let cluster: EtcdCluster = serde_saphyr::from_str(&example).unwrap();
        let s = secrets(&cluster);
        assert!(!s.auto);
        assert!(
            s.peer.is_some() && s.server.is_some() && s.client.is_some(),
            "{s:?}"
        );
        let addr = addressing(&cluster);
        assert!(addr.peer_tls && addr.client_tls);
    }
}
