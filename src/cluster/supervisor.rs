//! Keeps one task per EtcdCluster, as the source documents describe: a watcher over
//! EtcdClusters starts a task on add, hands it the newest object on update and ends it on
//! delete; a watcher over member pods wakes the owning task. Nothing here waits on a task.
//!
//! A task is woken only by what can change its plan ([`needs_pass`]): a new generation (a spec
//! change), deletion, labels or annotations. Status updates, the operator's own included,
//! reach the task's copy of the object without waking it; otherwise each status write would
//! cause the next pass, and a busy cluster, whose raft index moves with every write, would be
//! reconciled in a loop.
//!
//! EtcdClusters are watched as untyped objects and read one by one, so that one object the
//! operator cannot read (stored under an older, looser schema) is reported on that object
//! (phase Failed, a Degraded condition and an Event naming the field) instead of failing the
//! watch for every cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::task::{self, Context};
use crate::api::{ConditionType, EtcdCluster};
use crate::kube::{cache, names};

/// Namespace and name of an EtcdCluster.
type Key = (String, String);

struct Handle {
    spec: watch::Sender<Arc<EtcdCluster>>,
    wake: Arc<Notify>,
    join: JoinHandle<()>,
    /// Whether the task has finished a pass (`etcd_operator_clusters_passed`).
    passed: Arc<AtomicBool>,
}

/// A task never outlives its handle: when the supervisor ends (shutdown, or leadership handed
/// over) no reconcile may still be acting.
impl Drop for Handle {
    fn drop(&mut self) {
        self.join.abort();
    }
}

/// Runs until the watch streams end (never, in practice). `namespaces` empty means every
/// namespace. Tasks run only while `leading` is true; the watches run regardless, so a standby
/// has its caches and takes over without listing again. `watch_client` serves the watches: it
/// has no response timeout, which would cut a quiet watch, while the tasks' client has one.
pub async fn run(
    ctx: Arc<Context>,
    watch_client: kube::Client,
    namespaces: Vec<String>,
    mut leading: watch::Receiver<bool>,
) {
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    };
    let resource = ApiResource::erase::<EtcdCluster>(&());
    let api = |ns: Option<&str>| match ns {
        Some(ns) => Api::<DynamicObject>::namespaced_with(watch_client.clone(), ns, &resource),
        None => Api::all_with(watch_client.clone(), &resource),
    };
    // Each event carries its scope, so a relist of one namespace only speaks for that namespace.
    let mut cluster_events = futures::stream::select_all(scopes.iter().map(|ns| {
        let clusters = api(*ns);
        let scope = ns.map(String::from);
        // managedFields are most of an EtcdCluster whose status is written, and each object is
        // kept twice (here and in its task's channel); they are read only to know who wrote a
        // restore hand-off, so they are kept only while one is on the cluster.
        watcher(clusters, watcher::Config::default())
            .modify(slim_cluster)
            .backoff(crate::kube::watch_backoff())
            .map(move |ev| (scope.clone(), ev))
            .boxed()
    }));
    let mut cache_events = futures::stream::select_all(
        scopes
            .iter()
            .map(|ns| cache::watches(&watch_client, ns.map(String::from)).boxed()),
    );
    let mut node_events = node_events(&ctx, &watch_client);
    // Initial lists still to finish before the operator counts as ready: the EtcdClusters and
    // the member pods. The other caches answer once listed; until then (or when RBAC refuses
    // their watch) passes read from the API server.
    let mut books = Books {
        known: BTreeMap::new(),
        tasks: BTreeMap::new(),
        listed: BTreeMap::new(),
        unsynced: scopes.len() * 2,
        pods_listed: BTreeSet::new(),
        lead: *leading.borrow_and_update(),
    };
    ctx.metrics.set_leader(books.lead);
    loop {
        tokio::select! {
            ev = cluster_events.next() => match ev {
                Some((scope, Ok(ev))) => books.on_cluster(&ctx, scope, ev),
                Some((_, Err(e))) => warn!("watching EtcdClusters: {e}"),
                None => return,
            },
            ev = cache_events.next() => match ev {
                Some((scope, Ok(change))) => books.on_cache(&ctx, scope, change),
                Some((_, Err(e))) => warn!("watching the clusters' objects: {e}"),
                None => return,
            },
            Some(ev) = node_events.next() => match ev {
                Ok(ev) => books.on_node(&ctx, ev),
                Err(e) => warn!("watching Nodes: {e}"),
            },
            changed = leading.changed() => {
                books.on_leading(&ctx, changed.is_ok() && *leading.borrow_and_update());
                if changed.is_err() { return; }
            }
        }
    }
}

/// What the supervisor knows: the clusters, their tasks, and how far the initial lists are.
struct Books {
    /// Shared with each task's channel: one copy of each object, however many hold it (at
    /// 1,000 clusters, two copies were 13 MiB of the operator's heap at rest).
    known: BTreeMap<Key, Arc<EtcdCluster>>,
    tasks: BTreeMap<Key, Handle>,
    /// Per scope: the keys listed so far while a (re)list is under way.
    listed: BTreeMap<Option<String>, BTreeSet<Key>>,
    /// Initial lists not finished yet.
    unsynced: usize,
    /// Scopes whose member pods were listed once.
    pods_listed: BTreeSet<Option<String>>,
    /// Whether this replica leads (and so runs the tasks).
    lead: bool,
}

impl Books {
    fn on_cluster(&mut self, ctx: &Arc<Context>, scope: Option<String>, ev: Event<DynamicObject>) {
        match ev {
            Event::Init => {
                self.listed.insert(scope, BTreeSet::new());
            }
            Event::InitApply(o) => {
                if let Some(l) = self.listed.get_mut(&scope) {
                    l.insert(dyn_key(&o));
                }
                accept(ctx, &mut self.known, &mut self.tasks, self.lead, o);
            }
            Event::InitDone => {
                // Clusters deleted while the watch was down.
                if let Some(l) = self.listed.remove(&scope) {
                    let gone: Vec<Key> = self
                        .known
                        .keys()
                        .filter(|k| !l.contains(k) && scope.as_ref().is_none_or(|ns| *ns == k.0))
                        .cloned()
                        .collect();
                    for k in gone {
                        self.known.remove(&k);
                        stop(ctx, &mut self.tasks, &k);
                    }
                }
                self.one_synced(ctx);
            }
            Event::Apply(o) => accept(ctx, &mut self.known, &mut self.tasks, self.lead, o),
            Event::Delete(o) => {
                let k = dyn_key(&o);
                self.known.remove(&k);
                stop(ctx, &mut self.tasks, &k);
            }
        }
    }

    fn on_cache(&mut self, ctx: &Arc<Context>, scope: Option<String>, change: cache::Change) {
        let first_pods = matches!(&change, cache::Change::Pod(e) if matches!(**e, Event::InitDone))
            && self.pods_listed.insert(scope.clone());
        let secrets = matches!(&change, cache::Change::Secret(_));
        let woken = ctx.caches.apply(&scope, change);
        if secrets {
            ctx.metrics.set_cached_secrets(ctx.caches.secrets.count());
        }
        for k in woken.clusters {
            if let Some(h) = self.tasks.get(&k) {
                h.wake.notify_one();
            }
        }
        // One look at each cluster, however many Secrets a relist touched.
        let secrets: BTreeSet<Key> = woken.secrets.into_iter().collect();
        if !secrets.is_empty() {
            for (k, c) in &self.known {
                let reads = read_secrets(c)
                    .into_iter()
                    .any(|s| secrets.contains(&(k.0.clone(), s)));
                if reads && let Some(h) = self.tasks.get(k) {
                    h.wake.notify_one();
                }
            }
        }
        if first_pods {
            self.one_synced(ctx);
        }
    }

    /// A node became Ready or stopped being so: every task looks (rare; heartbeats change
    /// nothing and wake no one), as the members on it may have to be replaced.
    fn on_node(&mut self, ctx: &Arc<Context>, ev: Event<k8s_openapi::api::core::v1::Node>) {
        if ctx.caches.nodes.apply(ev) {
            for h in self.tasks.values() {
                h.wake.notify_one();
            }
        }
    }

    fn on_leading(&mut self, ctx: &Arc<Context>, now: bool) {
        if now == self.lead {
            return;
        }
        self.lead = now;
        ctx.metrics.set_leader(now);
        if now {
            info!(
                clusters = self.known.len(),
                "leading: starting the cluster tasks"
            );
            for c in self.known.values() {
                start(ctx, &mut self.tasks, c.clone());
            }
        } else {
            info!(
                clusters = self.tasks.len(),
                "standing by: ending the cluster tasks"
            );
            let keys: Vec<Key> = self.tasks.keys().cloned().collect();
            for k in keys {
                stop(ctx, &mut self.tasks, &k);
            }
        }
    }

    fn one_synced(&mut self, ctx: &Context) {
        self.unsynced = self.unsynced.saturating_sub(1);
        if self.unsynced == 0 {
            ctx.metrics.set_synced();
        }
    }
}

fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<Event<K>>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config)
}

/// An EtcdCluster as its task needs it: managedFields only while a restore hand-off is on it.
fn slim_cluster(o: &mut DynamicObject) {
    let handoff = o
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::api::RESTORE_ANNOTATION));
    if !handoff {
        o.metadata.managed_fields = None;
    }
}

/// The Secrets `cluster` reads: its TLS Secrets (the CA of `TLS.auto` included) and those its
/// pods' environment names.
fn read_secrets(cluster: &EtcdCluster) -> Vec<String> {
    let tls = names::secrets(cluster);
    let ca = tls.auto.then(|| names::ca_name(cluster));
    [tls.peer, tls.server, tls.client, ca]
        .into_iter()
        .flatten()
        .chain(
            super::resources::referenced_secrets(&cluster.spec)
                .into_iter()
                .map(|(_, s)| s),
        )
        .collect()
}

fn key(c: &EtcdCluster) -> Key {
    (c.namespace().unwrap_or_default(), c.name_any())
}

fn dyn_key(o: &DynamicObject) -> Key {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// Reads an EtcdCluster from the untyped object the watch delivered. The error names the field
/// that could not be read. A status that cannot be read (written by another version of the
/// operator) is dropped rather than refused: the operator writes it anew.
pub fn parse(object: &DynamicObject) -> Result<EtcdCluster, String> {
    let read = |value: serde_json::Value| {
        serde_path_to_error::deserialize::<_, EtcdCluster>(value)
            .map_err(|e| (e.path().to_string(), e.inner().to_string()))
    };
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    match read(value.clone()) {
        Ok(c) => Ok(c),
        Err((path, _)) if path.starts_with("status") => {
            let mut value = value;
            if let Some(map) = value.as_object_mut() {
                map.remove("status");
            }
            read(value).map_err(|(path, e)| format!("{path}: {e}"))
        }
        Err((path, e)) => Err(format!("{path}: {e}")),
    }
}

/// Whether the task must look again now that `new` replaced `old`: only when something that
/// can change its plan changed. Status, resourceVersion and managedFields move with every
/// status write and must not.
pub fn needs_pass(old: &EtcdCluster, new: &EtcdCluster) -> bool {
    let (o, n) = (&old.metadata, &new.metadata);
    o.uid != n.uid
        || o.generation != n.generation
        || o.deletion_timestamp != n.deletion_timestamp
        || o.labels != n.labels
        || o.annotations != n.annotations
        // Without a generation (an API server that does not set one), any spec change counts.
        || (n.generation.is_none() && old.spec != new.spec)
}

/// A watched object: a task for it when it can be read, a report on it when not.
fn accept(
    ctx: &Arc<Context>,
    known: &mut BTreeMap<Key, Arc<EtcdCluster>>,
    tasks: &mut BTreeMap<Key, Handle>,
    lead: bool,
    object: DynamicObject,
) {
    match parse(&object) {
        Ok(cluster) => upsert(ctx, known, tasks, lead, cluster),
        Err(problem) => {
            let k = dyn_key(&object);
            warn!(namespace = %k.0, name = %k.1, "cannot read the EtcdCluster: {problem}");
            // Its task, if any, would act on a spec that is no longer the user's.
            known.remove(&k);
            stop(ctx, tasks, &k);
            if lead {
                tokio::spawn(report_unreadable(ctx.clone(), object, problem));
            }
        }
    }
}

/// Reports an EtcdCluster that cannot be read on the object itself. Its members keep running;
/// the operator changes nothing until the object is fixed. Reported once per problem.
async fn report_unreadable(ctx: Arc<Context>, object: DynamicObject, problem: String) {
    let message = format!(
        "the operator cannot read this EtcdCluster ({problem}); its members keep running, and nothing is changed until the field is fixed"
    );
    let conditions = object.data["status"]["conditions"].as_array().cloned();
    let reported = conditions.iter().flatten().any(|c| {
        c["type"] == ConditionType::Degraded.as_str()
            && c["reason"] == "InvalidSpec"
            && c["message"] == message.as_str()
    });
    if reported {
        return;
    }
    let ns = object.namespace().unwrap_or_default();
    let resource = ApiResource::erase::<EtcdCluster>(&());
    let api = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &resource);
    let patch = serde_json::json!({"status": {
        "phase": "Failed",
        "reason": message,
        "observedGeneration": object.metadata.generation,
        "conditions": [{
            "type": ConditionType::Degraded.as_str(), "status": "True", "reason": "InvalidSpec", "message": message,
            "observedGeneration": object.metadata.generation,
            "lastTransitionTime": Timestamp::now().to_string(),
        }],
    }});
    if let Err(e) = api
        .patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        warn!("reporting an unreadable EtcdCluster: {e}");
    }
    let ev = KubeEvent {
        type_: EventType::Warning,
        reason: "InvalidSpec".into(),
        note: Some(message),
        action: "Read".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .events
        .recorder()
        .publish(&ev, &object.object_ref(&resource))
        .await
    {
        warn!("publishing an event: {e}");
    }
}

fn upsert(
    ctx: &Arc<Context>,
    known: &mut BTreeMap<Key, Arc<EtcdCluster>>,
    tasks: &mut BTreeMap<Key, Handle>,
    lead: bool,
    cluster: EtcdCluster,
) {
    let k = key(&cluster);
    if cluster.metadata.deletion_timestamp.is_some() {
        known.remove(&k);
        stop(ctx, tasks, &k);
        return;
    }
    let cluster = Arc::new(cluster);
    known.insert(k, cluster.clone());
    if lead {
        start(ctx, tasks, cluster);
    }
}

/// Hands the newest object to the cluster's task, starting the task if it does not run.
fn start(ctx: &Arc<Context>, tasks: &mut BTreeMap<Key, Handle>, cluster: Arc<EtcdCluster>) {
    let k = key(&cluster);
    if let Some(h) = tasks.get(&k).filter(|h| !h.join.is_finished()) {
        // The task always gets the newest object, and is woken only when it matters.
        h.spec.send_if_modified(|current| {
            let wake = needs_pass(current, &cluster);
            *current = cluster;
            wake
        });
        return;
    }
    info!(namespace = %k.0, name = %k.1, "starting the cluster's task");
    let (spec, rx) = watch::channel(cluster);
    let wake = Arc::new(Notify::new());
    let passed = Arc::new(AtomicBool::new(false));
    let join = tokio::spawn(supervise(ctx.clone(), rx, wake.clone(), passed.clone()));
    tasks.insert(
        k,
        Handle {
            spec,
            wake,
            join,
            passed,
        },
    );
    ctx.tasks.store(tasks.len(), Ordering::Relaxed);
}

/// Runs a cluster's task, and runs it again after a panic. Nothing else would: the task is
/// restarted by a watch event about its cluster, and a cluster whose task is gone gets none
/// (its status is the task's to write), so it would be left as it stood, a roll half done,
/// until someone edits it. The panic is logged and published as a Warning Event
/// (`TaskPanicked`) on the cluster; the new task starts from what it observes, as after an
/// operator restart, 5 s later (doubling up to 5 minutes while it keeps panicking).
async fn supervise(
    ctx: Arc<Context>,
    spec: watch::Receiver<Arc<EtcdCluster>>,
    wake: Arc<Notify>,
    passed: Arc<AtomicBool>,
) {
    let run = || task::run(ctx.clone(), spec.clone(), wake.clone(), passed.clone());
    // Boxed: the future this makes is awaited by rerun_after_panics, whose own state (held by
    // every cluster's supervising task for good) would otherwise keep room for it.
    let panicked = |panic: String, delay: Duration| {
        let cluster = spec.borrow().clone();
        let ctx = ctx.clone();
        Box::pin(async move {
            let message = format!(
                "the operator's task for this cluster panicked ({panic}); it starts again in {} s",
                delay.as_secs()
            );
            error!(namespace = %cluster.namespace().unwrap_or_default(), name = %cluster.name_any(), "{message}");
            ctx.events
                .publish(&*cluster, EventType::Warning, "TaskPanicked", message)
                .await;
        })
    };
    rerun_after_panics(run, panicked, Duration::from_secs(5)).await;
}

/// Runs what `run` makes, in a task of its own, until it ends without a panic; after each
/// panic tells `panicked` (the message, and how long until the next run), then waits `first`,
/// doubling up to 60 times `first`. Dropping or aborting this future aborts the running task.
async fn rerun_after_panics<R, RF, P, PF>(mut run: R, mut panicked: P, first: Duration)
where
    R: FnMut() -> RF,
    RF: Future<Output = ()> + Send + 'static,
    P: FnMut(String, Duration) -> PF,
    PF: Future<Output = ()>,
{
    struct Abort(JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut delay = first;
    loop {
        let mut running = Abort(tokio::spawn(run()));
        let panic = match (&mut running.0).await {
            Err(e) if e.is_panic() => panic_message(e.into_panic()),
            _ => return,
        };
        panicked(panic, delay).await;
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(first * 60);
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "no message".to_string(), |s| (*s).to_string()),
    }
}

fn stop(ctx: &Context, tasks: &mut BTreeMap<Key, Handle>, k: &Key) {
    if let Some(h) = tasks.remove(k) {
        info!(namespace = %k.0, name = %k.1, "ending the cluster's task");
        // Set, so that a task finishing its pass while it is aborted is not counted after this.
        let passed = h.passed.swap(true, Ordering::Relaxed);
        drop(h);
        if passed {
            ctx.metrics.cluster_passed(false);
        }
        ctx.tasks.store(tasks.len(), Ordering::Relaxed);
        ctx.metrics.forget_cluster(&k.0, &k.1);
        // A recovery's source is served only while its cluster's task runs.
        ctx.sources.set(&k.0, &k.1, None);
    }
}

/// The Node watch, only when node loss is acted on: a namespaced install may have no right
/// to read Nodes. Without it the operator says so, once here and in every cluster's status.
fn node_events(
    ctx: &Context,
    watch_client: &kube::Client,
) -> futures::stream::BoxStream<
    'static,
    Result<
        kube::runtime::watcher::Event<k8s_openapi::api::core::v1::Node>,
        kube::runtime::watcher::Error,
    >,
> {
    if ctx.timings.node_loss_grace.is_zero() {
        ctx.caches.nodes.set_unwatched();
        tracing::warn!(
            "node loss is not acted on (--node-loss-grace=0; chart: readNodes=false in a \
             namespaced install): a member on a lost node is replaced as any unhealthy member \
             is, after --replace-unhealthy-after; each cluster's status says so \
             (condition NodeLossHandled)"
        );
        return futures::stream::pending().boxed();
    }
    cache::node_watch(watch_client).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_runs_again_and_each_panic_is_reported() {
        use std::sync::Mutex;
        use std::sync::atomic::AtomicUsize;
        let runs = Arc::new(AtomicUsize::new(0));
        let reports = Arc::new(Mutex::new(Vec::new()));
        let (r, seen) = (runs.clone(), reports.clone());
        rerun_after_panics(
            move || {
                let runs = r.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    assert!(n >= 2, "run {n} fails");
                }
            },
            move |message, delay| {
                seen.lock().unwrap().push((message, delay));
                async {}
            },
            Duration::from_millis(1),
        )
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let reports = reports.lock().unwrap();
        assert_eq!(reports.len(), 2, "{reports:?}");
        assert!(reports[0].0.contains("run 0 fails"), "{reports:?}");
        assert!(reports[1].0.contains("run 1 fails"), "{reports:?}");
        assert_eq!(
            reports.iter().map(|r| r.1).collect::<Vec<_>>(),
            [Duration::from_millis(1), Duration::from_millis(2)]
        );
    }

    #[tokio::test]
    async fn aborting_the_supervision_aborts_the_running_task() {
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = dropped.clone();
        let supervision = tokio::spawn(rerun_after_panics(
            move || {
                let flag = Flag(d.clone());
                async move {
                    let _flag = flag;
                    std::future::pending::<()>().await;
                }
            },
            |_, _| async {},
            Duration::from_millis(1),
        ));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!dropped.load(Ordering::SeqCst));
        supervision.abort();
        let _ = supervision.await;
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the running task outlived its supervision");
    }
    use crate::api::{ClusterPhase, EtcdClusterSpec, EtcdClusterStatus};

    fn cluster(generation: i64) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 3,
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("default".into());
        c.metadata.generation = Some(generation);
        c.metadata.resource_version = Some("1".into());
        c
    }

    #[test]
    fn a_status_update_wakes_no_pass_and_a_spec_change_does() {
        let old = cluster(1);
        let mut status_only = old.clone();
        status_only.metadata.resource_version = Some("2".into());
        status_only.status = Some(EtcdClusterStatus {
            phase: Some(ClusterPhase::Running),
            ..Default::default()
        });
        assert!(!needs_pass(&old, &status_only));

        let mut spec_change = status_only.clone();
        spec_change.spec.size = 5;
        spec_change.metadata.generation = Some(2);
        assert!(needs_pass(&status_only, &spec_change));

        let mut deleted = old.clone();
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        assert!(needs_pass(&old, &deleted));

        let mut annotated = old.clone();
        annotated.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert!(needs_pass(&old, &annotated));
    }

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_unreadable_cluster_is_named_by_its_field() {
        let bad = object(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "old", "namespace": "default"},
            "spec": {"size": "three"},
        }));
        let problem = parse(&bad).unwrap_err();
        assert!(problem.starts_with("spec.size: invalid type"), "{problem}");

        // A status it cannot read is dropped, not refused.
        let odd_status = object(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "ok", "namespace": "default"},
            "spec": {"size": 3},
            "status": {"phase": "Exploded"},
        }));
        let c = parse(&odd_status).unwrap();
        assert_eq!(c.spec.size, 3);
        assert!(c.status.is_none());
    }
}
