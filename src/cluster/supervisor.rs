//! Keeps one task per EtcdCluster, as the source documents describe: a watcher over
//! EtcdClusters starts a task on add, hands it the newest object on update and ends it on
//! delete; a watcher over member pods wakes the owning task. Nothing here waits on a task.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::task::{self, Context};
use crate::api::EtcdCluster;

type Key = (String, String);

struct Handle {
    spec: watch::Sender<EtcdCluster>,
    wake: Arc<Notify>,
    join: JoinHandle<()>,
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
/// has its caches and takes over without listing again.
pub async fn run(ctx: Arc<Context>, namespaces: Vec<String>, mut leading: watch::Receiver<bool>) {
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    };
    let api = |ns: Option<&str>| match ns {
        Some(ns) => (
            Api::<EtcdCluster>::namespaced(ctx.client.clone(), ns),
            Api::<Pod>::namespaced(ctx.client.clone(), ns),
        ),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    // Each event carries its scope, so a relist of one namespace only speaks for that namespace.
    let mut cluster_events = futures::stream::select_all(scopes.iter().map(|ns| {
        let (clusters, _) = api(*ns);
        let scope = ns.map(String::from);
        watcher(clusters, watcher::Config::default())
            .default_backoff()
            .map(move |ev| (scope.clone(), ev))
            .boxed()
    }));
    let mut pod_events = futures::stream::select_all(scopes.iter().map(|ns| {
        let (_, pods) = api(*ns);
        watcher(
            pods,
            watcher::Config::default().labels("app=etcd,etcd_cluster"),
        )
        .default_backoff()
        .boxed()
    }));
    let mut known: BTreeMap<Key, EtcdCluster> = BTreeMap::new();
    let mut tasks: BTreeMap<Key, Handle> = BTreeMap::new();
    // Per scope: the keys listed so far while a (re)list is under way.
    let mut listed: BTreeMap<Option<String>, BTreeSet<Key>> = BTreeMap::new();
    // Initial lists still to finish before the caches count as synced.
    let mut unsynced = scopes.len() * 2;
    let mut lead = *leading.borrow_and_update();
    ctx.metrics.set_leader(lead);

    loop {
        tokio::select! {
            ev = cluster_events.next() => match ev {
                Some((scope, Ok(Event::Init))) => { listed.insert(scope, BTreeSet::new()); }
                Some((scope, Ok(Event::InitApply(c)))) => {
                    if let Some(l) = listed.get_mut(&scope) { l.insert(key(&c)); }
                    upsert(&ctx, &mut known, &mut tasks, lead, c);
                }
                Some((scope, Ok(Event::InitDone))) => {
                    // Clusters deleted while the watch was down.
                    if let Some(l) = listed.remove(&scope) {
                        let gone: Vec<Key> = known
                            .keys()
                            .filter(|k| !l.contains(k) && scope.as_ref().is_none_or(|ns| *ns == k.0))
                            .cloned()
                            .collect();
                        for k in gone { known.remove(&k); stop(&ctx, &mut tasks, &k); }
                    }
                    unsynced = unsynced.saturating_sub(1);
                    if unsynced == 0 { ctx.metrics.set_synced(); }
                }
                Some((_, Ok(Event::Apply(c)))) => upsert(&ctx, &mut known, &mut tasks, lead, c),
                Some((_, Ok(Event::Delete(c)))) => {
                    let k = key(&c);
                    known.remove(&k);
                    stop(&ctx, &mut tasks, &k);
                }
                Some((_, Err(e))) => warn!("watching EtcdClusters: {e}"),
                None => return,
            },
            ev = pod_events.next() => match ev {
                Some(Ok(Event::Apply(p) | Event::Delete(p) | Event::InitApply(p))) => {
                    if let Some(cluster) = p.labels().get("etcd_cluster") {
                        let k = (p.namespace().unwrap_or_default(), cluster.clone());
                        if let Some(h) = tasks.get(&k) { h.wake.notify_one(); }
                    }
                }
                Some(Ok(Event::InitDone)) => {
                    unsynced = unsynced.saturating_sub(1);
                    if unsynced == 0 { ctx.metrics.set_synced(); }
                }
                Some(Ok(Event::Init)) => {}
                Some(Err(e)) => warn!("watching member pods: {e}"),
                None => return,
            },
            changed = leading.changed() => {
                let now = changed.is_ok() && *leading.borrow_and_update();
                if now != lead {
                    lead = now;
                    ctx.metrics.set_leader(lead);
                    if lead {
                        info!(clusters = known.len(), "leading: starting the cluster tasks");
                        for c in known.values() { start(&ctx, &mut tasks, c.clone()); }
                    } else {
                        info!(clusters = tasks.len(), "standing by: ending the cluster tasks");
                        let keys: Vec<Key> = tasks.keys().cloned().collect();
                        for k in keys { stop(&ctx, &mut tasks, &k); }
                    }
                }
                if changed.is_err() { return; }
            }
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

fn key(c: &EtcdCluster) -> Key {
    (c.namespace().unwrap_or_default(), c.name_any())
}

fn upsert(
    ctx: &Arc<Context>,
    known: &mut BTreeMap<Key, EtcdCluster>,
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
    known.insert(k, cluster.clone());
    if lead {
        start(ctx, tasks, cluster);
    }
}

/// Hands the newest object to the cluster's task, starting the task if it does not run.
fn start(ctx: &Arc<Context>, tasks: &mut BTreeMap<Key, Handle>, cluster: EtcdCluster) {
    let k = key(&cluster);
    if let Some(h) = tasks.get(&k).filter(|h| !h.join.is_finished()) {
        h.spec.send_replace(cluster);
        return;
    }
    info!(namespace = %k.0, name = %k.1, "starting the cluster's task");
    let (spec, rx) = watch::channel(cluster);
    let wake = Arc::new(Notify::new());
    let join = tokio::spawn(task::run(ctx.clone(), rx, wake.clone()));
    tasks.insert(k, Handle { spec, wake, join });
}

fn stop(ctx: &Context, tasks: &mut BTreeMap<Key, Handle>, k: &Key) {
    if let Some(h) = tasks.remove(k) {
        info!(namespace = %k.0, name = %k.1, "ending the cluster's task");
        drop(h);
        ctx.metrics.forget_cluster(&k.0, &k.1);
    }
}
