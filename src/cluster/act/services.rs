//! The prepare stage: the Services and the PodDisruptionBudget every member's address
//! depends on, and the NetworkPolicy that closes the members to whom they do not serve,
//! applied before anything is observed (only what the caches show differs).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};

use super::Error;
use crate::api::EtcdCluster;
use crate::cluster::handles::Handles;
use crate::cluster::resources;
use crate::kube::names::MANAGER;

/// Server-side applies the headless and the client Service, and the PodDisruptionBudget (or
/// deletes it when the cluster is too small to need one); only what the caches show differs
/// from what is wanted, so a cluster at rest makes no request.
pub async fn ensure_services(handles: &Handles, cluster: &EtcdCluster) -> Result<(), Error> {
    let params = PatchParams::apply(MANAGER).force();
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    let services = handles.caches.services.group(&ns, &name);
    for svc in [
        resources::headless_service(cluster),
        resources::client_service(cluster),
    ] {
        // A template's hash that differs, or one left on a Service whose template is gone.
        let same_template = || {
            services.iter().flatten().any(|have| {
                have.metadata.name == svc.metadata.name
                    && resources::client_service_hash(have) == resources::client_service_hash(&svc)
            })
        };
        if in_place(&services, &svc) == Some(true) && same_template() {
            continue;
        }
        let name = svc.name_any();
        handles
            .services
            .patch(&name, &params, &Patch::Apply(&svc))
            .await
            .map_err(|source| Error::ApplyService { name, source })?;
    }
    let budgets = handles.caches.budgets.group(&ns, &name);
    // Member pods that run or start (not ended, not being deleted), as the cache shows them:
    // before a surplus voter is promoted, a pass has passed here with its pod counted.
    let pods = (handles.caches.pods.group(&ns, &name))
        .map(|ps| ps.iter().filter(|p| counts_for_budget(p)).count())
        .unwrap_or(0);
    match resources::disruption_budget(cluster, pods) {
        Some(budget) if in_place(&budgets, &budget) == Some(true) => {}
        // Known to be absent.
        None if budgets.as_ref().is_some_and(|b| b.is_empty()) => {}
        Some(budget) => {
            handles
                .budgets
                .patch(&name, &params, &Patch::Apply(&budget))
                .await
                .map_err(|source| Error::ApplyBudget { name, source })?;
        }
        None => match handles
            .budgets
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => return Err(Error::ApplyBudget { name, source }),
        },
    }
    ensure_network_policy(handles, cluster, &params).await
}

/// Applies the cluster's NetworkPolicy, or deletes it when it should have none. An operator
/// not allowed to (an older chart's RBAC) says so and goes on: members without a policy serve
/// as they did, and a policy is no reason to stop healing a cluster.
async fn ensure_network_policy(
    handles: &Handles,
    cluster: &EtcdCluster,
    params: &PatchParams,
) -> Result<(), Error> {
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    let cached = handles.caches.policies.group(&ns, &name);
    // The spec must be the same both ways: a rule that loses its `from` (clients no longer
    // listed) is a field taken away, which `in_place` alone does not see.
    let same_spec = |policy: &k8s_openapi::api::networking::v1::NetworkPolicy| {
        cached.iter().flatten().any(|have| {
            have.metadata.name == policy.metadata.name
                && serde_json::to_value(&have.spec).ok() == serde_json::to_value(&policy.spec).ok()
        })
    };
    let result = match crate::cluster::network_policy::network_policy(cluster, &handles.network) {
        Some(policy) if in_place(&cached, &policy) == Some(true) && same_spec(&policy) => {
            return Ok(());
        }
        None if cached.as_ref().is_some_and(|p| p.is_empty()) => return Ok(()),
        Some(policy) => handles
            .policies
            .patch(&name, params, &Patch::Apply(&policy))
            .await
            .map(|_| ()),
        None => match handles
            .policies
            .delete(&name, &DeleteParams::default())
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other.map(|_| ()),
        },
    };
    match result {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(
                "NetworkPolicy {ns}/{name}: not allowed ({}); the members run without one",
                e.message
            );
            Ok(())
        }
        other => other.map_err(|source| Error::ApplyPolicy { name, source }),
    }
}

/// Whether `pod` is one the budget's quorum counts: not ended, not being deleted.
fn counts_for_budget(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether the cached object named like `want` holds `want` (see [`holds`]); `None` when the
/// cache cannot say (not listed yet).
pub(super) fn in_place<K: Resource + serde::Serialize>(
    cached: &Option<Vec<Arc<K>>>,
    want: &K,
) -> Option<bool> {
    let cached = cached.as_ref()?;
    let Some(have) = cached.iter().find(|o| o.meta().name == want.meta().name) else {
        return Some(false);
    };
    let (Ok(have), Ok(want)) = (serde_json::to_value(&**have), serde_json::to_value(want)) else {
        return Some(false);
    };
    Some(holds(&have, &want))
}

/// Whether `have` holds everything `want` says: every field of `want` is in `have` with the
/// same value (lists element by element), whatever else the API server added (defaults, other
/// managers' fields, status).
pub fn holds(have: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| holds(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| holds(hv, wv))
        }
        (h, w) => h == w,
    }
}
