//! What a restore's seed member is fed from, shared by the cluster tasks (which make seeds)
//! and the snapshot server (which serves them) without either importing the other: where this
//! process serves snapshots, and the surviving members that recoveries restore from.

use crate::etcd::Endpoint;

/// Where restore seeds fetch their snapshot from: this operator process's snapshot server
/// (made by the snapshot server, `crate::restore::identity`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotServer {
    /// `https://IP:port/ca-<hex>`, under which `/restores/<ns>/<cluster>/...` are served.
    pub url: String,
    /// The certificate of the CA that signed the server's, as the base64 of its DER (public:
    /// it goes into the seed's arguments).
    pub ca: String,
}

/// The surviving members that recoveries restore from, by namespace and cluster: each with
/// the pod name the handoff names and how to reach its etcd.
#[derive(Default)]
pub struct Sources(
    std::sync::Mutex<std::collections::BTreeMap<(String, String), (String, Endpoint)>>,
);

impl Sources {
    /// Records (or, with `None`, forgets) the member a recovery of `ns`/`cluster` restores from.
    pub fn set(&self, ns: &str, cluster: &str, member: Option<(String, Endpoint)>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ns.to_string(), cluster.to_string());
        match member {
            Some(m) => map.insert(key, m),
            None => map.remove(&key),
        };
    }

    pub fn get(&self, ns: &str, cluster: &str, member: &str) -> Option<Endpoint> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(ns.to_string(), cluster.to_string()))
            .filter(|(name, _)| name == member)
            .map(|(_, ep)| ep.clone())
    }
}
