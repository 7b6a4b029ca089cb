//! Member names, URLs and the etcd command line. Pure.
//!
//! A member's name is `<cluster>-<random suffix>`; its pod has the same name as hostname and
//! the headless Service as subdomain, so its peer URL
//! `http://<member>.<cluster>.<namespace>.svc[.<ClusterDomain>]:2380` is known before the pod
//! has an IP, and a replacement member always gets a new name (etcd never sees a URL twice).

use crate::kube::names::{Addressing, CLIENT_PORT, METRICS_PORT, PEER_PORT};

/// Where the member keeps its data inside the pod.
pub const DATA_DIR: &str = "/var/etcd/data";
/// Length of the random member-name suffix (the API's name bound,
/// [`crate::api::validation::MAX_NAME_LENGTH`], leaves room for it).
const SUFFIX_LEN: usize = 5;

/// The learners each member of a cluster on etcd `version` accepts at once: etcd 3.6's
/// `--max-learners`, which the operator sets to this; earlier versions take one.
pub fn max_learners(version: &str) -> usize {
    if super::version::Version::parse(version) >= super::version::Version::new(3, 6, 0) {
        MAX_LEARNERS
    } else {
        1
    }
}

/// The `--max-learners` of the members the operator makes on etcd 3.6 and later: enough for a
/// 7-member cluster to start all of its members beside the seed at once. Learners do not vote,
/// so the limit guards only the leader's bandwidth.
pub const MAX_LEARNERS: usize = 6;

/// The flag that carries [`MAX_LEARNERS`].
pub const MAX_LEARNERS_FLAG: &str = "--max-learners=";
/// etcd's flag for the backend quota, as member pods carry it.
pub const QUOTA_FLAG: &str = "--quota-backend-bytes=";

/// A new member name for `cluster`: `<cluster>-<5 random lowercase letters or digits>`.
pub fn new_member_name(cluster: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes[..SUFFIX_LEN]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("{cluster}-{suffix}")
}

/// Whether the member joins a new cluster (the seed) or an existing one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// The seed: `--initial-cluster-state=new` with this `--initial-cluster-token`.
    New { token: String },
    /// A member added through the membership API.
    Existing,
}

/// The etcd command line of `member`, in the form of the source documents, plus the metrics
/// listener the probes use and the TLS flags when TLS is on.
pub fn etcd_args(
    addr: &Addressing,
    member: &str,
    initial_cluster: &str,
    state: &ClusterState,
) -> Vec<String> {
    let scheme = Addressing::scheme;
    let mut args = vec![
        format!("--data-dir={DATA_DIR}"),
        format!("--name={member}"),
        format!("--initial-advertise-peer-urls={}", addr.peer_url(member)),
        format!(
            "--listen-peer-urls={}://0.0.0.0:{PEER_PORT}",
            scheme(addr.peer_tls)
        ),
        format!(
            "--listen-client-urls={}://0.0.0.0:{CLIENT_PORT}",
            scheme(addr.client_tls)
        ),
        format!("--advertise-client-urls={}", addr.client_url(member)),
        format!("--initial-cluster={initial_cluster}"),
    ];
    match state {
        ClusterState::New { token } => {
            args.push("--initial-cluster-state=new".into());
            args.push(format!("--initial-cluster-token={token}"));
        }
        ClusterState::Existing => args.push("--initial-cluster-state=existing".into()),
    }
    args.push(format!(
        "--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"
    ));
    if addr.peer_tls {
        args.extend([
            "--peer-client-cert-auth=true".into(),
            format!("--peer-trusted-ca-file={}/peer-ca.crt", PEER_TLS_DIR),
            format!("--peer-cert-file={}/peer.crt", PEER_TLS_DIR),
            format!("--peer-key-file={}/peer.key", PEER_TLS_DIR),
        ]);
    }
    if addr.client_tls {
        args.extend([
            "--client-cert-auth=true".into(),
            format!("--trusted-ca-file={}/server-ca.crt", SERVER_TLS_DIR),
            format!("--cert-file={}/server.crt", SERVER_TLS_DIR),
            format!("--key-file={}/server.key", SERVER_TLS_DIR),
        ]);
    }
    args
}

/// Where the peer Secret is mounted (coreos file names).
pub const PEER_TLS_DIR: &str = "/etc/etcdtls/member/peer-tls";
/// Where the server Secret is mounted (coreos file names).
pub const SERVER_TLS_DIR: &str = "/etc/etcdtls/member/server-tls";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_has_the_form_of_the_source_documents() {
        let addr = Addressing::new("example", "default", None);
        let ic = addr.initial_cluster(["example-abcde"]);
        let args = etcd_args(
            &addr,
            "example-abcde",
            &ic,
            &ClusterState::New {
                token: "t-1".into(),
            },
        );
        assert_eq!(
            args.join(" "),
            "--data-dir=/var/etcd/data --name=example-abcde \
             --initial-advertise-peer-urls=http://example-abcde.example.default.svc:2380 \
             --listen-peer-urls=http://0.0.0.0:2380 --listen-client-urls=http://0.0.0.0:2379 \
             --advertise-client-urls=http://example-abcde.example.default.svc:2379 \
             --initial-cluster=example-abcde=http://example-abcde.example.default.svc:2380 \
             --initial-cluster-state=new --initial-cluster-token=t-1 \
             --listen-metrics-urls=http://0.0.0.0:2381"
        );
    }

    #[test]
    fn a_joining_member_lists_the_others_and_itself_and_says_existing() {
        let addr = Addressing::new("c", "ns", Some(".cluster.local"));
        let ic = addr.initial_cluster(["c-1", "c-2"]);
        assert_eq!(
            ic,
            "c-1=http://c-1.c.ns.svc.cluster.local:2380,c-2=http://c-2.c.ns.svc.cluster.local:2380"
        );
        let args = etcd_args(&addr, "c-2", &ic, &ClusterState::Existing);
        assert!(args.contains(&"--initial-cluster-state=existing".to_string()));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--initial-cluster-token"))
        );
        assert_eq!(
            addr.service_url(),
            "http://c-client.ns.svc.cluster.local:2379"
        );
    }

    #[test]
    fn tls_switches_schemes_and_adds_the_coreos_files() {
        let mut addr = Addressing::new("c", "ns", None);
        addr.peer_tls = true;
        addr.client_tls = true;
        let args = etcd_args(
            &addr,
            "c-1",
            "c-1=https://c-1.c.ns.svc:2380",
            &ClusterState::Existing,
        );
        assert!(args.contains(&"--listen-peer-urls=https://0.0.0.0:2380".to_string()));
        assert!(args.contains(&"--advertise-client-urls=https://c-1.c.ns.svc:2379".to_string()));
        assert!(args.contains(&format!("--peer-cert-file={PEER_TLS_DIR}/peer.crt")));
        assert!(args.contains(&format!("--trusted-ca-file={SERVER_TLS_DIR}/server-ca.crt")));
    }

    #[test]
    fn member_names_are_new_dns_labels() {
        let a = new_member_name("example");
        let b = new_member_name("example");
        assert_ne!(a, b);
        assert!(
            a.starts_with("example-") && a.len() == "example-".len() + SUFFIX_LEN,
            "{a}"
        );
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        // The longest name the API accepts still makes member names that are DNS labels.
        let longest = "x".repeat(crate::api::validation::MAX_NAME_LENGTH);
        assert!(new_member_name(&longest).len() <= 63);
    }
}
