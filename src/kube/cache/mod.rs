//! Shared watch caches of what every pass reads: the member pods, the Services and their
//! EndpointSlices, the PodDisruptionBudgets, the volume claims (metadata) and the operator's own
//! Secrets (metadata without annotations; a Secret's contents are fetched once per
//! resourceVersion). Secrets a user names (static TLS, a pod's environment) are never watched:
//! the operator holds nothing of the Secrets it does not use, so it reads those by name, again
//! at most every [`USER_SECRET_TTL`]. The supervisor feeds them from one watch per
//! kind and scope; the tasks read them instead of listing, so a cluster at rest costs the API
//! server nothing.
//!
//! A cache only answers for a scope whose first list has finished; before that (or when a watch
//! is refused, e.g. by RBAC) the tasks read from the API server as they did before. A task that
//! has just created or deleted a pod or claim reads live until the cache shows the change (see
//! [`Expectations`]): a cache that lags its own writes would have it bootstrap twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};

use super::names::CLUSTER_LABEL;

mod expectations;
mod index;
mod nodes;
mod secrets;

pub use expectations::{Expect, Expectations, Object, Write};
pub use index::{Index, Touched};
pub use nodes::{NodeHealth, Nodes, node_watch};
use secrets::{Content, slim_secret};
pub use secrets::{OWN_SECRETS, SecretApi, USER_SECRET_TTL};

/// The label the EndpointSlice controller gives each slice: the name of its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// How long an expectation (or a Secret write) is waited for in the cache before the task
/// stops waiting and the cache is trusted again; watch events arrive within milliseconds.
pub const SETTLE: Duration = Duration::from_secs(30);

/// Every cache the tasks read.
pub struct Caches {
    /// Member pods (labels `app=etcd,etcd_cluster`), by cluster.
    pub pods: Index<Pod>,
    /// Services, by cluster.
    pub services: Index<Service>,
    /// The Services' EndpointSlices, by cluster (the EndpointSlice controller copies a
    /// Service's labels onto its slices).
    pub slices: Index<EndpointSlice>,
    /// PodDisruptionBudgets, by cluster.
    pub budgets: Index<PodDisruptionBudget>,
    /// NetworkPolicies, by cluster.
    pub policies: Index<NetworkPolicy>,
    /// Volume claims' metadata, by cluster.
    pub claims: Index<PartialObjectMeta<PersistentVolumeClaim>>,
    /// The operator's own Secrets' metadata ([`OWN_SECRETS`]), without annotations, by name.
    pub secrets: Index<PartialObjectMeta<Secret>>,
    /// Whether each node is Ready (watched only when node loss is acted on).
    pub nodes: Nodes,
    contents: Mutex<HashMap<(String, String), Content>>,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            pods: Index::by_cluster(),
            services: Index::by_cluster(),
            slices: Index::by_cluster(),
            budgets: Index::by_cluster(),
            policies: Index::by_cluster(),
            claims: Index::by_cluster(),
            secrets: Index::by_name(),
            nodes: Nodes::default(),
            contents: Mutex::default(),
        }
    }
}

/// One event of one of the caches' watches (the large objects boxed, so that every event
/// moves as a pointer).
pub enum Change {
    /// Member pods.
    Pod(Box<Event<Pod>>),
    /// Services.
    Service(Box<Event<Service>>),
    /// EndpointSlices.
    Slice(Box<Event<EndpointSlice>>),
    /// PodDisruptionBudgets.
    Budget(Box<Event<PodDisruptionBudget>>),
    /// NetworkPolicies.
    Policy(Box<Event<NetworkPolicy>>),
    /// Volume claims.
    Claim(Event<PartialObjectMeta<PersistentVolumeClaim>>),
    /// Secrets.
    Secret(Event<PartialObjectMeta<Secret>>),
}

/// What a change touched: the clusters whose objects changed, and the Secrets that did, by
/// (namespace, name).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Woken {
    /// Clusters whose pods, Services, EndpointSlices, budgets or claims changed.
    pub clusters: Touched,
    /// Secrets that changed.
    pub secrets: Touched,
}

/// Watch streams of every cache over `scope` (a namespace, or every namespace), each event
/// tagged with the scope. Objects are kept without their managedFields, which no pass reads.
pub fn watches(
    client: &kube::Client,
    scope: Option<String>,
) -> impl futures::Stream<Item = (Option<String>, Result<Change, watcher::Error>)> + Send + use<> {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    fn api<K>(client: &kube::Client, scope: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match scope {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let members = || watcher::Config::default().labels(&format!("app=etcd,{CLUSTER_LABEL}"));
    let streams: Vec<futures::stream::BoxStream<'static, Result<Change, watcher::Error>>> = vec![
        watcher::watcher(api::<Pod>(client, &scope), members())
            .modify(slim_pod)
            .map(|e| e.map(|e| Change::Pod(Box::new(e))))
            .boxed(),
        watcher::watcher(api::<Service>(client, &scope), members())
            .modify(clear_managed_fields::<Service>)
            .map(|e| e.map(|e| Change::Service(Box::new(e))))
            .boxed(),
        watcher::watcher(api::<EndpointSlice>(client, &scope), members())
            .modify(slim_slice)
            .map(|e| e.map(|e| Change::Slice(Box::new(e))))
            .boxed(),
        watcher::watcher(api::<PodDisruptionBudget>(client, &scope), members())
            .modify(slim_budget)
            .map(|e| e.map(|e| Change::Budget(Box::new(e))))
            .boxed(),
        watcher::watcher(api::<NetworkPolicy>(client, &scope), members())
            .modify(clear_managed_fields::<NetworkPolicy>)
            .map(|e| e.map(|e| Change::Policy(Box::new(e))))
            .boxed(),
        watcher::watcher(
            api::<PartialObjectMeta<PersistentVolumeClaim>>(client, &scope),
            members(),
        )
        .modify(clear_managed_fields::<PartialObjectMeta<PersistentVolumeClaim>>)
        .map(|e| e.map(Change::Claim))
        .boxed(),
        watcher::watcher(
            api::<PartialObjectMeta<Secret>>(client, &scope),
            watcher::Config::default().labels(OWN_SECRETS),
        )
        .modify(slim_secret)
        .map(|e| e.map(Change::Secret))
        .boxed(),
    ];
    futures::stream::select_all(streams.into_iter().map(|s| {
        let scope = scope.clone();
        s.backoff(crate::kube::watch_backoff())
            .map(move |e| (scope.clone(), e))
            .boxed()
    }))
}

fn clear_managed_fields<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// A pod as the passes read it: its metadata, its status, and of its spec only its node and
/// what each container runs (image, command, arguments). The rest (volumes, probes, resources, security
/// contexts) is most of a member pod's size, and a thousand clusters keep their pods here.
fn slim_pod(pod: &mut Pod) {
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    clear_managed_fields(pod);
    if let Some(spec) = &mut pod.spec {
        *spec = PodSpec {
            node_name: spec.node_name.clone(),
            containers: spec
                .containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    image: c.image.clone(),
                    command: c.command.clone(),
                    args: c.args.clone(),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        };
    }
}

/// An EndpointSlice as the passes read it: whose it is (its name, and the labels of the
/// cluster and of the Service), and of each endpoint its addresses, readiness and pod. The
/// rest of its metadata (the Service's other labels, owner, trigger time) was most of what
/// each cluster's slices kept here.
fn slim_slice(slice: &mut EndpointSlice) {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::api::ObjectMeta;
    const KEEP: [&str; 2] = [CLUSTER_LABEL, SERVICE_NAME_LABEL];
    let meta = std::mem::take(&mut slice.metadata);
    slice.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        resource_version: meta.resource_version,
        deletion_timestamp: meta.deletion_timestamp,
        labels: meta.labels.map(|labels| {
            labels
                .into_iter()
                .filter(|(k, _)| KEEP.contains(&k.as_str()))
                .collect()
        }),
        ..ObjectMeta::default()
    };
    slice.ports = None;
    for e in &mut slice.endpoints {
        e.deprecated_topology = None;
        e.hints = None;
        e.hostname = None;
        e.node_name = None;
        e.zone = None;
        e.target_ref = e.target_ref.take().map(|r| ObjectReference {
            kind: r.kind,
            name: r.name,
            ..ObjectReference::default()
        });
    }
}

/// A budget without its status, which no pass reads (what is applied is compared with its
/// metadata and spec).
fn slim_budget(budget: &mut PodDisruptionBudget) {
    clear_managed_fields(budget);
    budget.status = None;
}

/// Names of `objects`, each with whether it is being deleted and its resourceVersion.
fn alive<K: Resource>(objects: Vec<Arc<K>>) -> Vec<expectations::Shown> {
    objects
        .iter()
        .map(|o| {
            let meta = o.meta();
            let version = meta.resource_version.clone().unwrap_or_default();
            (o.name_any(), meta.deletion_timestamp.is_some(), version)
        })
        .collect()
}

impl Caches {
    /// The EndpointSlices of Service `service` of cluster `cluster` in `ns` (the namespace of
    /// `api`): from here while a list covers `ns`, else listed from the API server.
    pub async fn service_slices(
        &self,
        api: &Api<EndpointSlice>,
        ns: &str,
        cluster: &str,
        service: &str,
    ) -> Result<Vec<Arc<EndpointSlice>>, kube::Error> {
        let of_service = |s: &EndpointSlice| {
            s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(service)
        };
        if let Some(slices) = self.slices.group(ns, cluster) {
            return Ok(slices.into_iter().filter(|s| of_service(s)).collect());
        }
        let by_service = format!("{SERVICE_NAME_LABEL}={service}");
        let list = api
            .list(&kube::api::ListParams::default().labels(&by_service))
            .await?;
        Ok(list.items.into_iter().map(Arc::new).collect())
    }

    /// Whether the pods and claims of cluster `name` in `ns` may be read from here: both are
    /// listed, and they show every write `expect` waits for.
    pub fn show(&self, ns: &str, name: &str, expect: &mut Expectations) -> bool {
        let (Some(pods), Some(claims)) = (self.pods.group(ns, name), self.claims.group(ns, name))
        else {
            return false;
        };
        expect.met(&alive(pods), &alive(claims))
    }

    /// Applies one watch event; says which clusters and Secrets it touched.
    pub fn apply(&self, scope: &Option<String>, change: Change) -> Woken {
        let mut woken = Woken::default();
        match change {
            Change::Pod(e) => woken.clusters = self.pods.apply(scope, *e),
            Change::Service(e) => woken.clusters = self.services.apply(scope, *e),
            Change::Slice(e) => woken.clusters = self.slices.apply(scope, *e),
            Change::Budget(e) => woken.clusters = self.budgets.apply(scope, *e),
            Change::Policy(e) => woken.clusters = self.policies.apply(scope, *e),
            Change::Claim(e) => woken.clusters = self.claims.apply(scope, e),
            Change::Secret(e) => {
                if let Event::Delete(s) = &e {
                    let mut contents = self.contents.lock().unwrap_or_else(|e| e.into_inner());
                    contents.remove(&(s.namespace().unwrap_or_default(), s.name_any()));
                }
                woken.secrets = self.secrets.apply(scope, e);
            }
        }
        woken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_slim_pod_keeps_what_the_passes_read() {
        use crate::api::{EtcdCluster, EtcdClusterSpec};
        let mut cluster = EtcdCluster::new(
            "c",
            EtcdClusterSpec {
                size: 3,
                ..Default::default()
            },
        );
        cluster.metadata.namespace = Some("ns".into());
        let full = crate::cluster::resources::member_pod(
            &cluster,
            "c-1",
            vec!["--a".into()],
            None,
            &crate::tls::Material::default(),
        );
        let mut pod = full.clone();
        slim_pod(&mut pod);
        assert_eq!(pod.metadata, full.metadata);
        assert_eq!(pod.status, full.status);
        let (f, s) = (&full.spec.as_ref().unwrap(), pod.spec.as_ref().unwrap());
        assert!(f.volumes.is_some() && s.volumes.is_none());
        assert_eq!(
            crate::cluster::observe::etcd_image(&pod),
            crate::cluster::observe::etcd_image(&full)
        );
        assert_eq!(s.containers[0].args, f.containers[0].args);
        assert_eq!(s.containers[0].command, f.containers[0].command);
        assert!(s.containers[0].liveness_probe.is_none());
    }

    #[test]
    fn a_slim_slice_keeps_whose_it_is_and_its_ready_endpoints() {
        use k8s_openapi::api::core::v1::ObjectReference;
        use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
        use kube::api::ObjectMeta;
        let endpoint = |pod: &str, ip: &str, ready: bool| Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(ready),
                terminating: Some(false),
            }),
            node_name: Some("node-1".into()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some(pod.into()),
                namespace: Some("ns".into()),
                uid: Some("0f6c2d1e-uid".into()),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        };
        // As the EndpointSlice controller writes one: the Service's labels and its own.
        let full = EndpointSlice {
            metadata: ObjectMeta {
                name: Some("c-client-x7k2p".into()),
                namespace: Some("ns".into()),
                labels: Some(
                    [
                        (CLUSTER_LABEL, "c"),
                        ("app", "etcd"),
                        ("kubernetes.io/service-name", "c-client"),
                        (
                            "endpointslice.kubernetes.io/managed-by",
                            "endpointslice-controller.k8s.io",
                        ),
                    ]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                ),
                annotations: Some(
                    [(
                        "endpoints.kubernetes.io/last-change-trigger-time",
                        "2026-12-03T12:00:00Z",
                    )]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![
                endpoint("c-1", "10.0.0.1", true),
                endpoint("c-2", "10.0.0.2", false),
            ],
            ports: Some(vec![Default::default()]),
        };
        let mut slim = full.clone();
        slim_slice(&mut slim);
        let index = Index::<EndpointSlice>::by_cluster();
        index.apply(&None, Event::Init);
        index.apply(&None, Event::InitApply(slim.clone()));
        index.apply(&None, Event::InitDone);
        assert_eq!(index.group("ns", "c").map(|g| g.len()), Some(1));
        assert_eq!(
            slim.labels().get(SERVICE_NAME_LABEL),
            full.labels().get(SERVICE_NAME_LABEL)
        );
        let pods = Default::default();
        let ready = |s: &EndpointSlice| {
            crate::cluster::serving::ready_endpoints(&[Arc::new(s.clone())], &pods)
        };
        assert_eq!(ready(&slim), ready(&full));
        assert_eq!(ready(&slim), ["c-1".to_string()].into());
        assert_eq!(slim.labels().len(), 2);
        assert!(slim.metadata.annotations.is_none() && slim.ports.is_none());
        assert!(slim.endpoints.iter().all(|e| e.node_name.is_none()));
    }
}
