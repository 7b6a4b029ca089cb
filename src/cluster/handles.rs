//! What the stages of a pass work through, in two parts by lifetime: [`Handles`], the API
//! handles of the cluster's namespace and the operator's settings beside them, made once per
//! task; and [`Pass`], what one pass knows of itself (the TLS revision, whether it may read the
//! caches) and the writes it leaves for the next, made once the spec has been validated.
//! observe and act both read them from here, so neither stage imports the other for them.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Api, Client, ResourceExt};

use crate::api::{EtcdBackup, EtcdCluster, EtcdRestore};
use crate::kube::cache::{Caches, SecretApi};
use crate::tls::Material;

/// The API handles of one cluster's namespace, and what every pass of its task reads unchanged.
pub struct Handles {
    /// Pods of the cluster's namespace.
    pub pods: Api<Pod>,
    /// Services of the cluster's namespace.
    pub services: Api<Service>,
    /// Volume claims of the cluster's namespace.
    pub pvcs: Api<PersistentVolumeClaim>,
    /// PodDisruptionBudgets of the cluster's namespace.
    pub budgets: Api<PodDisruptionBudget>,
    /// EndpointSlices of the cluster's namespace (what cluster DNS answers from).
    pub slices: Api<EndpointSlice>,
    /// NetworkPolicies of the cluster's namespace.
    pub policies: Api<NetworkPolicy>,
    /// What the clusters' NetworkPolicies are made from.
    pub network: super::network_policy::PolicySettings,
    /// The namespace's EtcdClusters (a recovery's handoff is an annotation on the cluster).
    pub clusters: Api<EtcdCluster>,
    /// Its EtcdBackups, the newest of which a recovery may restore.
    pub backups: Api<EtcdBackup>,
    /// Its EtcdRestores, which a recovery from a backup makes.
    pub restores: Api<EtcdRestore>,
    /// The surviving members recoveries restore from, shared with the snapshot server.
    pub sources: Arc<crate::seed::Sources>,
    /// The operator's image, whose `etcd-gate` holds a new member back until it is added;
    /// without it, the member is added first and its pod created after.
    pub gate_image: Option<String>,
    /// Where etcd pods reach this operator's snapshot server (`--snapshot-url`), from which a
    /// restore's seed fetches its snapshot, and the CA the seed trusts it by.
    pub snapshot: Option<crate::seed::SnapshotServer>,
    /// The shared watch caches.
    pub caches: Arc<Caches>,
    /// Secrets of the cluster's namespace, read through the caches.
    pub secrets: SecretApi,
}

impl Handles {
    /// The handles of namespace `ns`.
    pub fn new(
        client: &Client,
        ns: &str,
        gate_image: Option<String>,
        snapshot: Option<crate::seed::SnapshotServer>,
        caches: Arc<Caches>,
        sources: Arc<crate::seed::Sources>,
    ) -> Self {
        Handles {
            pods: Api::namespaced(client.clone(), ns),
            services: Api::namespaced(client.clone(), ns),
            pvcs: Api::namespaced(client.clone(), ns),
            budgets: Api::namespaced(client.clone(), ns),
            slices: Api::namespaced(client.clone(), ns),
            policies: Api::namespaced(client.clone(), ns),
            network: super::network_policy::PolicySettings::default(),
            clusters: Api::namespaced(client.clone(), ns),
            backups: Api::namespaced(client.clone(), ns),
            restores: Api::namespaced(client.clone(), ns),
            sources,
            gate_image,
            snapshot,
            secrets: SecretApi::cached(client, ns, caches.clone()),
            caches,
        }
    }

    /// The same, making NetworkPolicies from `network`.
    pub fn with_network(self, network: super::network_policy::PolicySettings) -> Self {
        Handles { network, ..self }
    }

    /// The URL a restore's seed of `cluster` fetches the snapshot from.
    pub fn snapshot_url_of(&self, cluster: &EtcdCluster) -> Option<String> {
        let base = self.snapshot.as_ref()?.url.trim_end_matches('/');
        Some(format!(
            "{base}/restores/{}/{}/snapshot",
            cluster.namespace().unwrap_or_default(),
            cluster.name_any()
        ))
    }
}

/// What one pass knows of itself, over the task's handles.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    /// The task's handles.
    pub handles: &'a Handles,
    /// The cluster's TLS material as read this pass (its `revision` fingerprints the member
    /// Secrets).
    pub tls: &'a Material,
    /// Whether this pass may read pods and claims from the caches (they show every pod and
    /// claim this task created or deleted; see [`crate::kube::cache::Expectations`]).
    pub cached: bool,
}

impl<'a> Pass<'a> {
    /// A pass through `handles` with the TLS material `tls`, reading the caches when
    /// `cached`.
    pub fn new(handles: &'a Handles, tls: &'a Material, cached: bool) -> Self {
        Pass {
            handles,
            tls,
            cached,
        }
    }
}
