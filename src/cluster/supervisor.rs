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

/// Runs until the watch streams end (never, in practice).
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let (clusters, pods): (Api<EtcdCluster>, Api<Pod>) = match &namespace {
        Some(ns) => (
            Api::namespaced(ctx.client.clone(), ns),
            Api::namespaced(ctx.client.clone(), ns),
        ),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    let mut cluster_events = watcher(clusters, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut pod_events = watcher(
        pods,
        watcher::Config::default().labels("app=etcd,etcd_cluster"),
    )
    .default_backoff()
    .boxed();
    let mut tasks: BTreeMap<Key, Handle> = BTreeMap::new();
    let mut listed: Option<BTreeSet<Key>> = None;

    loop {
        tokio::select! {
            ev = cluster_events.next() => match ev {
                Some(Ok(Event::Init)) => listed = Some(BTreeSet::new()),
                Some(Ok(Event::InitApply(c))) => {
                    if let Some(l) = listed.as_mut() { l.insert(key(&c)); }
                    upsert(&ctx, &mut tasks, c);
                }
                Some(Ok(Event::InitDone)) => {
                    // Clusters deleted while the watch was down.
                    if let Some(l) = listed.take() {
                        let gone: Vec<Key> = tasks.keys().filter(|k| !l.contains(k)).cloned().collect();
                        for k in gone { stop(&mut tasks, &k); }
                    }
                }
                Some(Ok(Event::Apply(c))) => upsert(&ctx, &mut tasks, c),
                Some(Ok(Event::Delete(c))) => stop(&mut tasks, &key(&c)),
                Some(Err(e)) => warn!("watching EtcdClusters: {e}"),
                None => return,
            },
            ev = pod_events.next() => match ev {
                Some(Ok(Event::Apply(p) | Event::Delete(p) | Event::InitApply(p))) => {
                    if let Some(cluster) = p.labels().get("etcd_cluster") {
                        let k = (p.namespace().unwrap_or_default(), cluster.clone());
                        if let Some(h) = tasks.get(&k) { h.wake.notify_one(); }
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => warn!("watching member pods: {e}"),
                None => return,
            },
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

fn upsert(ctx: &Arc<Context>, tasks: &mut BTreeMap<Key, Handle>, cluster: EtcdCluster) {
    let k = key(&cluster);
    if cluster.metadata.deletion_timestamp.is_some() {
        stop(tasks, &k);
        return;
    }
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

fn stop(tasks: &mut BTreeMap<Key, Handle>, k: &Key) {
    if let Some(h) = tasks.remove(k) {
        info!(namespace = %k.0, name = %k.1, "ending the cluster's task");
        // Dropping the sender ends the task at its next wait; abort covers one stuck in I/O.
        drop(h.spec);
        h.join.abort();
    }
}
