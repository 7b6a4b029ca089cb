//! The one runner of the kube-runtime controllers (EtcdBackup, EtcdRestore): a `Controller`
//! per watched namespace (or one over all), run only while this replica leads.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{FutureExt, StreamExt, TryFuture};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// Runs `reconcile` over every `K` in `namespaces` (empty: every namespace) while `leading`
/// is true; `what` names the controller in the log.
pub async fn run<K, Ctx, Fut>(
    what: &str,
    ctx: Arc<Ctx>,
    watch_client: Client,
    namespaces: Vec<String>,
    leading: watch::Receiver<bool>,
    reconcile: fn(Arc<K>, Arc<Ctx>) -> Fut,
    error_policy: fn(Arc<K>, &Fut::Error, Arc<Ctx>) -> Action,
) where
    K: Clone
        + Resource<Scope = kube::core::NamespaceResourceScope>
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin,
    Ctx: Send + Sync + 'static,
    Fut: TryFuture<Ok = Action> + Send + 'static,
    Fut::Error: std::error::Error + Send + 'static,
{
    crate::leader::while_leading(leading, what, || {
        let controllers = namespaced_apis::<K>(&watch_client, &namespaces)
            .into_iter()
            .map(|api| {
                Controller::new(api, watcher::Config::default())
                    .run(reconcile, error_policy, ctx.clone())
                    .for_each(|_| futures::future::ready(()))
            });
        futures::future::join_all(controllers).map(|_| ())
    })
    .await
}

/// One Api per namespace in `namespaces`, or one over all namespaces when it is empty.
pub fn namespaced_apis<K>(client: &Client, namespaces: &[String]) -> Vec<Api<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    }
}
