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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};

use super::names::{CLUSTER_LABEL, MANAGER};

/// How long an expectation (or a Secret write) is waited for in the cache before the task
/// stops waiting and the cache is trusted again; watch events arrive within milliseconds.
pub const SETTLE: Duration = Duration::from_secs(30);

/// How long a Secret the operator does not own is trusted as last read: a user's Secret that
/// changes (a static certificate renewed by cert-manager) is seen within this long.
pub const USER_SECRET_TTL: Duration = Duration::from_secs(300);

/// The label the watch of Secrets selects: only those the operator made.
pub const OWN_SECRETS: &str = "app.kubernetes.io/managed-by=etcd-operator";

/// Objects of one kind by namespace and group (the cluster they belong to, or for Secrets
/// their own name), as the watches last told.
pub struct Index<K> {
    inner: RwLock<Inner<K>>,
    group: fn(&K) -> Option<String>,
}

struct Inner<K> {
    objects: HashMap<(String, String), BTreeMap<String, Arc<K>>>,
    /// Scopes (`None`: every namespace) whose first list has finished.
    synced: HashSet<Option<String>>,
    /// Objects of a list under way, per scope.
    relisting: HashMap<Option<String>, Vec<K>>,
}

/// The (namespace, group) keys a watch event touched, for waking their tasks.
pub type Touched = Vec<(String, String)>;

impl<K: Resource + Clone> Index<K> {
    fn new(group: fn(&K) -> Option<String>) -> Self {
        Index {
            inner: RwLock::new(Inner {
                objects: HashMap::new(),
                synced: HashSet::new(),
                relisting: HashMap::new(),
            }),
            group,
        }
    }

    /// Grouped by the `etcd_cluster` label; objects without it are not kept.
    pub fn by_cluster() -> Self {
        Self::new(|o| o.labels().get(CLUSTER_LABEL).cloned())
    }

    /// Grouped by their own name.
    pub fn by_name() -> Self {
        Self::new(|o| o.meta().name.clone())
    }

    fn key(&self, o: &K) -> Option<((String, String), String)> {
        Some((
            (o.namespace().unwrap_or_default(), (self.group)(o)?),
            o.meta().name.clone()?,
        ))
    }

    /// Keeps `o`; returns its group, if it has one.
    fn put(&self, inner: &mut Inner<K>, o: K) -> Option<(String, String)> {
        let (k, name) = self.key(&o)?;
        inner
            .objects
            .entry(k.clone())
            .or_default()
            .insert(name, Arc::new(o));
        Some(k)
    }

    /// How many objects are kept.
    pub fn count(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.objects.values().map(BTreeMap::len).sum()
    }

    /// Applies one event of the watch over `scope`.
    pub fn apply(&self, scope: &Option<String>, event: Event<K>) -> Touched {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let mut touched = Vec::new();
        match event {
            Event::Init => {
                inner.relisting.insert(scope.clone(), Vec::new());
            }
            Event::InitApply(o) => {
                if let Some(buffer) = inner.relisting.get_mut(scope) {
                    buffer.push(o);
                }
            }
            Event::InitDone => {
                let listed = inner.relisting.remove(scope).unwrap_or_default();
                let in_scope = |ns: &str| scope.as_deref().is_none_or(|s| s == ns);
                let old: Vec<(String, String)> = inner
                    .objects
                    .keys()
                    .filter(|(ns, _)| in_scope(ns))
                    .cloned()
                    .collect();
                for k in old {
                    inner.objects.remove(&k);
                    touched.push(k);
                }
                for o in listed {
                    touched.extend(self.put(&mut inner, o));
                }
                inner.synced.insert(scope.clone());
            }
            Event::Apply(o) => touched.extend(self.put(&mut inner, o)),
            Event::Delete(o) => {
                if let Some((k, name)) = self.key(&o) {
                    if let Some(group) = inner.objects.get_mut(&k) {
                        group.remove(&name);
                        if group.is_empty() {
                            inner.objects.remove(&k);
                        }
                    }
                    touched.push(k);
                }
            }
        }
        touched
    }

    /// The objects of `group` in `ns`, or `None` while no finished list covers `ns`.
    pub fn group(&self, ns: &str, group: &str) -> Option<Vec<Arc<K>>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let synced = inner.synced.contains(&None) || inner.synced.contains(&Some(ns.to_string()));
        if !synced {
            return None;
        }
        Some(
            inner
                .objects
                .get(&(ns.to_string(), group.to_string()))
                .map(|g| g.values().cloned().collect())
                .unwrap_or_default(),
        )
    }
}

/// A Secret's contents as last read, at the resourceVersion the read returned.
struct Content {
    version: String,
    secret: Option<Arc<Secret>>,
    /// When this operator last wrote the Secret: until the watch shows the write, reads go to
    /// the API server.
    written: Option<Instant>,
    /// When it was last read or written.
    at: Instant,
}

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
            .modify(clear_managed_fields::<EndpointSlice>)
            .map(|e| e.map(|e| Change::Slice(Box::new(e))))
            .boxed(),
        watcher::watcher(api::<PodDisruptionBudget>(client, &scope), members())
            .modify(clear_managed_fields::<PodDisruptionBudget>)
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
        s.backoff(super::watch_backoff())
            .map(move |e| (scope.clone(), e))
            .boxed()
    }))
}

/// The watch of every Node, for [`Nodes`].
pub fn node_watch(
    client: &kube::Client,
) -> impl futures::Stream<Item = Result<Event<Node>, watcher::Error>> + Send + use<> {
    use kube::runtime::WatchStreamExt;
    watcher::watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .backoff(super::watch_backoff())
}

/// A node's readiness as its kubelet last reported it (or the node controller, once the
/// kubelet went silent, set it Unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Since when it has not been: for `Unknown` (the kubelet went silent) the kubelet's last
    /// heartbeat in the condition, which is when the node stopped answering, well before the
    /// node controller noticed; for `False` (the kubelet reports itself not ready) when it
    /// became so.
    pub since: Option<k8s_openapi::jiff::Timestamp>,
    /// New pods may be put on it: not cordoned, and no `NoSchedule` or `NoExecute` taint
    /// (whether a cluster's tolerations would allow one is not judged: such a node is not
    /// counted on for spreading members).
    pub open: bool,
}

impl NodeHealth {
    fn of(node: &Node) -> Self {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let transition = ready.and_then(|c| c.last_transition_time.as_ref());
        let heartbeat = ready
            .filter(|c| c.status == "Unknown")
            .and_then(|c| c.last_heartbeat_time.as_ref());
        let spec = node.spec.as_ref();
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let tainted = spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.effect != "PreferNoSchedule"));
        NodeHealth {
            ready: ready.is_some_and(|c| c.status == "True"),
            since: heartbeat.or(transition).map(|t| t.0),
            open: !cordoned && !tainted,
        }
    }
}

/// Every node's readiness, by name. Only whether each is Ready and since when is kept: a Node
/// object is mostly its image list.
#[derive(Default)]
pub struct Nodes {
    inner: RwLock<NodesInner>,
}

#[derive(Default)]
struct NodesInner {
    synced: bool,
    relisting: Option<HashMap<String, NodeHealth>>,
    nodes: HashMap<String, NodeHealth>,
}

impl Nodes {
    /// Applies one event of the Node watch; says whether some node's readiness or openness
    /// changed (the heartbeats that make most Node updates change nothing here).
    pub fn apply(&self, event: Event<Node>) -> bool {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let ready = |m: &HashMap<String, NodeHealth>, n: &str| m.get(n).map(|h| (h.ready, h.open));
        match event {
            Event::Init => {
                inner.relisting = Some(HashMap::new());
                false
            }
            Event::InitApply(n) => {
                if let Some(r) = inner.relisting.as_mut() {
                    r.insert(n.name_any(), NodeHealth::of(&n));
                }
                false
            }
            Event::InitDone => {
                let listed = inner.relisting.take().unwrap_or_default();
                let changed = listed.len() != inner.nodes.len()
                    || listed
                        .iter()
                        .any(|(n, h)| ready(&inner.nodes, n) != Some((h.ready, h.open)));
                inner.nodes = listed;
                inner.synced = true;
                changed
            }
            Event::Apply(n) => {
                let (name, health) = (n.name_any(), NodeHealth::of(&n));
                let changed = ready(&inner.nodes, &name) != Some((health.ready, health.open));
                inner.nodes.insert(name, health);
                changed
            }
            Event::Delete(n) => inner.nodes.remove(&n.name_any()).is_some(),
        }
    }

    /// The nodes a new member could be put on: Ready and open (see [`NodeHealth::open`]);
    /// `None` until a list has finished.
    pub fn open(&self) -> Option<BTreeSet<String>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.synced.then(|| {
            (inner.nodes.iter())
                .filter(|(_, h)| h.ready && h.open)
                .map(|(n, _)| n.clone())
                .collect()
        })
    }

    /// How long node `name` has not been Ready at `now`: `None` when it is Ready or when no
    /// list has finished (nothing is known); `Duration::MAX` for a node that no longer exists.
    pub fn not_ready_for(&self, name: &str, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        if !inner.synced {
            return None;
        }
        let Some(h) = inner.nodes.get(name) else {
            return Some(Duration::MAX);
        };
        if h.ready {
            return None;
        }
        Some(
            h.since
                .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
                .unwrap_or_default(),
        )
    }
}

/// Only what the index reads of a Secret: its name and resourceVersion. Annotations go first
/// (`kubectl.kubernetes.io/last-applied-configuration` holds a Secret's data when it was
/// applied with kubectl).
fn slim_secret(s: &mut PartialObjectMeta<Secret>) {
    clear_managed_fields(s);
    s.metadata.annotations = None;
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

/// Names of `objects`, each with whether it is being deleted.
fn alive<K: Resource>(objects: Vec<Arc<K>>) -> Vec<(String, bool)> {
    objects
        .iter()
        .map(|o| (o.name_any(), o.meta().deletion_timestamp.is_some()))
        .collect()
}

impl Caches {
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

/// Secrets of one namespace, read through the caches when there are any.
#[derive(Clone)]
pub struct SecretApi {
    api: Api<Secret>,
    ns: String,
    caches: Option<Arc<Caches>>,
}

impl SecretApi {
    /// Every read goes to the API server.
    pub fn live(client: &kube::Client, ns: &str) -> Self {
        SecretApi {
            api: Api::namespaced(client.clone(), ns),
            ns: ns.into(),
            caches: None,
        }
    }

    /// Reads are answered from `caches` when they can be.
    pub fn cached(client: &kube::Client, ns: &str, caches: Arc<Caches>) -> Self {
        SecretApi {
            caches: Some(caches),
            ..Self::live(client, ns)
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    fn key(&self, name: &str) -> (String, String) {
        (self.ns.clone(), name.to_string())
    }

    /// What the caches say of `name`: `None` when they cannot say (not synced, this operator
    /// wrote the Secret moments ago, or a Secret it does not own was read too long ago), else
    /// its resourceVersion if it exists.
    fn cached_version(&self, name: &str) -> Option<Option<String>> {
        let caches = self.caches.as_ref()?;
        let listed = caches.secrets.group(&self.ns, name)?;
        let contents = caches.contents.lock().unwrap_or_else(|e| e.into_inner());
        let content = contents.get(&self.key(name));
        let recent = content
            .and_then(|c| c.written)
            .is_some_and(|at| at.elapsed() < SETTLE);
        if let Some(version) = listed.first().and_then(|m| m.resource_version()) {
            return Some(Some(version));
        }
        if recent {
            // Written by us and not yet shown by the watch: only a read of the object knows.
            return None;
        }
        // Not one of ours: as last read, while that is fresh enough. One found missing is read
        // again (a spec that names it is looked at again soon, and the user may have made it).
        let content = content.filter(|c| c.secret.is_some() && c.at.elapsed() < USER_SECRET_TTL)?;
        Some(content.secret.as_ref().and_then(|s| s.resource_version()))
    }

    /// Secret `name`, or `None` if it does not exist.
    pub async fn get_opt(&self, name: &str) -> kube::Result<Option<Secret>> {
        if let (Some(caches), Some(version)) = (&self.caches, self.cached_version(name)) {
            let Some(version) = version else {
                return Ok(None);
            };
            let contents = caches.contents.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = contents
                .get(&self.key(name))
                .filter(|c| c.version == version)
            {
                return Ok(c.secret.as_deref().cloned());
            }
        }
        let secret = self.api.get_opt(name).await?;
        self.remember(name, secret.as_ref(), false);
        Ok(secret)
    }

    /// Secret `name`, read from the API server.
    pub async fn get(&self, name: &str) -> kube::Result<Secret> {
        let secret = self.api.get(name).await?;
        self.remember(name, Some(&secret), false);
        Ok(secret)
    }

    /// Whether Secret `name` exists.
    pub async fn exists(&self, name: &str) -> kube::Result<bool> {
        if let Some(version) = self.cached_version(name) {
            return Ok(version.is_some());
        }
        Ok(self.api.get_metadata_opt(name).await?.is_some())
    }

    /// Creates `secret`.
    pub async fn create(&self, secret: &Secret) -> kube::Result<Secret> {
        let made = self.api.create(&PostParams::default(), secret).await?;
        self.remember(&made.name_any(), Some(&made), true);
        Ok(made)
    }

    /// Server-side applies `secret` as the operator.
    pub async fn apply(&self, secret: &Secret) -> kube::Result<Secret> {
        let name = secret.name_any();
        let params = PatchParams::apply(MANAGER).force();
        let applied = self
            .api
            .patch(&name, &params, &Patch::Apply(secret))
            .await?;
        self.remember(&name, Some(&applied), true);
        Ok(applied)
    }

    /// Replaces `secret` whole (at its resourceVersion).
    pub async fn replace(&self, secret: &Secret) -> kube::Result<Secret> {
        let name = secret.name_any();
        let replaced = self
            .api
            .replace(&name, &PostParams::default(), secret)
            .await?;
        self.remember(&name, Some(&replaced), true);
        Ok(replaced)
    }

    fn remember(&self, name: &str, secret: Option<&Secret>, wrote: bool) {
        let Some(caches) = &self.caches else { return };
        let mut contents = caches.contents.lock().unwrap_or_else(|e| e.into_inner());
        let key = self.key(name);
        let written = if wrote {
            Some(Instant::now())
        } else {
            contents.get(&key).and_then(|c| c.written)
        };
        contents.insert(
            key,
            Content {
                version: secret
                    .and_then(|s| s.resource_version())
                    .unwrap_or_default(),
                secret: secret.cloned().map(Arc::new),
                written,
                at: Instant::now(),
            },
        );
    }
}

/// A pod or claim this task created or deleted, which the cache must show before it is read
/// from again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// What was written.
    pub kind: Object,
    /// Its name.
    pub name: String,
    /// What the caches must show.
    pub change: Write,
}

/// The kind of object a task wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// A member pod.
    Pod,
    /// A member's volume claim.
    Claim,
}

/// What a task did to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Created: it must be listed.
    Created,
    /// Deleted: it must be gone or being deleted.
    Deleted,
}

/// The writes a task waits to see in the caches, with when it made them.
#[derive(Debug, Default)]
pub struct Expectations {
    pending: Vec<(Expect, Instant)>,
}

impl Expectations {
    /// Records writes made now.
    pub fn add(&mut self, writes: impl IntoIterator<Item = Expect>) {
        let now = Instant::now();
        for e in writes {
            // The last write of a name is the one that counts.
            self.pending
                .retain(|(p, _)| !(p.kind == e.kind && p.name == e.name));
            self.pending.push((e, now));
        }
    }

    /// Whether the caches show every write, dropping those they show (and those older than
    /// [`SETTLE`]). `pods` and `claims` are the cluster's cached objects: (name, being
    /// deleted).
    pub fn met(&mut self, pods: &[(String, bool)], claims: &[(String, bool)]) -> bool {
        self.pending.retain(|(e, at)| {
            if at.elapsed() >= SETTLE {
                return false;
            }
            let seen = match e.kind {
                Object::Claim => claims,
                Object::Pod => pods,
            };
            let alive = seen.iter().any(|(n, deleting)| *n == e.name && !deleting);
            alive != (e.change == Write::Created)
        });
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn node(name: &str, status: &str, heartbeat: &str, transition: &str) -> Node {
        use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |t: &str| Some(Time(t.parse().unwrap()));
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    last_heartbeat_time: at(heartbeat),
                    last_transition_time: at(transition),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_node_is_lost_from_its_last_heartbeat_and_only_readiness_changes_wake() {
        let nodes = Nodes::default();
        let now: k8s_openapi::jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let t = |s: u32| format!("2026-01-01T00:00:{s:02}Z");
        // Nothing is known before the first list.
        assert_eq!(nodes.not_ready_for("a", now), None);
        assert!(!nodes.apply(Event::Init));
        assert!(!nodes.apply(Event::InitApply(node("a", "True", &t(0), &t(0)))));
        assert!(nodes.apply(Event::InitDone));
        assert_eq!(nodes.not_ready_for("a", now), None);
        // A heartbeat changes nothing that matters.
        assert!(!nodes.apply(Event::Apply(node("a", "True", &t(30), &t(0)))));
        // Silent since its last heartbeat (00:00:30), though marked Unknown at 00:00:50.
        assert!(nodes.apply(Event::Apply(node("a", "Unknown", &t(30), &t(50)))));
        assert_eq!(nodes.not_ready_for("a", now), Some(Duration::from_secs(30)));
        // Reporting itself not ready: since it said so.
        nodes.apply(Event::Apply(node("a", "False", &t(55), &t(50))));
        assert_eq!(nodes.not_ready_for("a", now), Some(Duration::from_secs(10)));
        // A node that is gone is lost for good.
        assert_eq!(nodes.not_ready_for("b", now), Some(Duration::MAX));
    }

    #[test]
    fn open_nodes_are_ready_uncordoned_and_untainted_and_a_cordon_wakes() {
        use k8s_openapi::api::core::v1::{NodeSpec, Taint};
        let nodes = Nodes::default();
        let t = "2026-01-01T00:00:00Z";
        assert_eq!(nodes.open(), None, "nothing known before the first list");
        nodes.apply(Event::Init);
        nodes.apply(Event::InitApply(node("a", "True", t, t)));
        nodes.apply(Event::InitApply(node("b", "False", t, t)));
        let tainted = |name: &str, key: &str, effect: &str| Node {
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: key.into(),
                    effect: effect.into(),
                    ..Taint::default()
                }]),
                ..NodeSpec::default()
            }),
            ..node(name, "True", t, t)
        };
        let control_plane = tainted("c", "node-role.kubernetes.io/control-plane", "NoSchedule");
        nodes.apply(Event::InitApply(control_plane));
        nodes.apply(Event::InitApply(tainted("d", "spot", "PreferNoSchedule")));
        nodes.apply(Event::InitDone);
        let open = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(nodes.open(), open(&["a", "d"]));
        // Cordoned: no longer open, and the change wakes the clusters.
        let mut cordoned = node("a", "True", t, t);
        cordoned.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..NodeSpec::default()
        });
        assert!(nodes.apply(Event::Apply(cordoned)));
        assert_eq!(nodes.open(), open(&["d"]));
        assert!(nodes.apply(Event::Apply(node("a", "True", t, t))));
        assert_eq!(nodes.open(), open(&["a", "d"]));
    }

    fn pod(ns: &str, name: &str, cluster: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some([(CLUSTER_LABEL.to_string(), cluster.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn names(index: &Index<Pod>, ns: &str, group: &str) -> Option<Vec<String>> {
        index
            .group(ns, group)
            .map(|v| v.iter().map(|p| p.name_any()).collect())
    }

    #[test]
    fn an_index_answers_only_after_its_first_list_and_follows_the_watch() {
        let index = Index::<Pod>::by_cluster();
        let all = None;
        assert_eq!(names(&index, "ns", "a"), None, "not listed yet");
        index.apply(&all, Event::Init);
        index.apply(&all, Event::InitApply(pod("ns", "a-1", "a")));
        assert_eq!(names(&index, "ns", "a"), None, "list under way");
        let touched = index.apply(&all, Event::InitDone);
        assert_eq!(touched, vec![("ns".to_string(), "a".to_string())]);
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-1".into()]));
        assert_eq!(
            names(&index, "ns", "b"),
            Some(vec![]),
            "listed: known empty"
        );
        index.apply(&all, Event::Apply(pod("ns", "a-2", "a")));
        index.apply(&all, Event::Apply(pod("other", "a-1", "a")));
        index.apply(&all, Event::Delete(pod("ns", "a-1", "a")));
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-2".into()]));
        assert_eq!(names(&index, "other", "a"), Some(vec!["a-1".into()]));
        // A relist replaces what the scope held: a deletion missed while the watch was down
        // is gone afterwards.
        index.apply(&all, Event::Init);
        index.apply(&all, Event::InitApply(pod("ns", "a-3", "a")));
        index.apply(&all, Event::InitDone);
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-3".into()]));
        assert_eq!(names(&index, "other", "a"), Some(vec![]));
        // Objects without the cluster label are not kept.
        let mut stray = pod("ns", "x", "a");
        stray.metadata.labels = None;
        assert!(index.apply(&all, Event::Apply(stray)).is_empty());
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-3".into()]));
    }

    #[test]
    fn a_namespace_scope_answers_for_its_namespace_only() {
        let index = Index::<Pod>::by_cluster();
        let scope = Some("ns".to_string());
        index.apply(&scope, Event::Init);
        index.apply(&scope, Event::InitApply(pod("ns", "a-1", "a")));
        index.apply(&scope, Event::InitDone);
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-1".into()]));
        assert_eq!(names(&index, "elsewhere", "a"), None);
    }

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
        let full =
            crate::cluster::resources::member_pod(&cluster, "c-1", vec!["--a".into()], None, "");
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
    fn expectations_hold_until_the_cache_shows_the_writes() {
        let mut e = Expectations::default();
        assert!(e.met(&[], &[]));
        e.add([
            Expect {
                kind: Object::Pod,
                name: "m1".into(),
                change: Write::Created,
            },
            Expect {
                kind: Object::Pod,
                name: "m0".into(),
                change: Write::Deleted,
            },
        ]);
        let m0 = ("m0".to_string(), false);
        let m1 = ("m1".to_string(), false);
        assert!(!e.met(std::slice::from_ref(&m0), &[]), "m1 not listed yet");
        assert!(!e.met(&[m0.clone(), m1.clone()], &[]), "m0 still there");
        // Being deleted counts as deleted.
        assert!(e.met(&[("m0".into(), true), m1.clone()], &[]));
        // A claim is looked for among claims, not pods.
        e.add([Expect {
            kind: Object::Claim,
            name: "m1".into(),
            change: Write::Created,
        }]);
        assert!(!e.met(std::slice::from_ref(&m1), &[]));
        assert!(e.met(&[], &[m1]));
    }
}
