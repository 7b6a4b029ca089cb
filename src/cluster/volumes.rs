//! The task's side of volume growth ([`plan::Volumes`]): how the members' claims compare with
//! the spec's storage request, and what the API server answered when asked to expand one.
//!
//! At rest this costs nothing: every claim carries [`STORAGE_ANNOTATION`], the size it was
//! made with or last found grown to, which the watch cache (claims' metadata only) shows. Only
//! when the spec asks for more than some claim's annotation are the claims themselves read,
//! each pass, until every one has grown (and been annotated) or the growth was refused.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::handles::Handles;
use super::observe::Observed;
use super::plan::Volumes;
use crate::api::{EtcdCluster, OnResize};
use crate::kube::names::{controlled_by, selector_text};
use crate::kube::quantity;

/// Annotation of every member claim: the storage, in bytes, it was made with or was last found
/// to hold after growing.
pub const STORAGE_ANNOTATION: &str = "etcd.database.coreos.com/storage";

/// How long a refused expansion is taken as the answer before it is asked again (unless
/// members move to new claims instead): a StorageClass's `allowVolumeExpansion` may be turned
/// on at any time, and nothing announces it to the claims.
pub const REFUSAL_RECHECK: Duration = Duration::from_secs(300);

/// The spec's storage request, as written and in bytes, when members keep their data on
/// claims and ask for a size.
pub fn wanted(cluster: &EtcdCluster) -> Option<(String, u64)> {
    let spec = cluster
        .spec
        .pod
        .as_ref()?
        .persistent_volume_claim_spec
        .as_ref()?;
    let written = spec.resources.as_ref()?.requests.as_ref()?.get("storage")?;
    Some((written.0.clone(), quantity::bytes(&written.0)?))
}

/// The last refusal to expand: the size asked for, the API server's answer, and when.
#[derive(Debug, Default)]
pub struct Refusal(Option<(u64, String, Instant)>);

impl Refusal {
    /// Records the API server's refusal to expand a claim to `bytes`.
    pub fn record(&mut self, bytes: u64, why: String) {
        self.0 = Some((bytes, why, Instant::now()));
    }

    /// The refusal, while it answers for `bytes`: for [`REFUSAL_RECHECK`], or for good once
    /// members move to new claims instead (`moving`: asking again midway would stop the move
    /// for a pass, and the roll's surplus member could then be the one removed).
    fn holds(&self, bytes: u64, moving: bool) -> Option<&str> {
        match &self.0 {
            Some((b, why, at)) if *b == bytes && (moving || at.elapsed() < REFUSAL_RECHECK) => {
                Some(why)
            }
            _ => None,
        }
    }
}

/// One claim as the growth needs it.
struct Seen {
    requested: u64,
    capacity: u64,
    /// `status.allocatedResourceStatuses.storage`: where a resize stands, while one does.
    resize: Option<String>,
}

fn seen(claim: &PersistentVolumeClaim) -> Option<Seen> {
    let status = claim.status.as_ref()?;
    if status.phase.as_deref() != Some("Bound") {
        return None;
    }
    let storage =
        |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.and_then(|m| m.get("storage"))
                .and_then(|q| quantity::bytes(&q.0))
        };
    let spec = claim.spec.as_ref()?;
    Some(Seen {
        requested: storage(spec.resources.as_ref()?.requests.as_ref())?,
        capacity: storage(status.capacity.as_ref()).unwrap_or(0),
        resize: (status.allocated_resource_statuses.as_ref())
            .and_then(|s| s.get("storage"))
            .cloned(),
    })
}

/// The members' claims against the spec's storage request. Claims found grown are annotated
/// so that the next pass need not read them.
pub async fn observe(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    cached: bool,
    refusal: &mut Refusal,
) -> Result<Volumes, kube::Error> {
    let Some((_, want)) = wanted(cluster) else {
        *refusal = Refusal::default();
        return Ok(Volumes::default());
    };
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let annotated: BTreeMap<String, u64> = (cached
        .then(|| handles.caches.claims.group(&ns, &name))
        .flatten())
    .into_iter()
    .flatten()
    .filter_map(|c| {
        let bytes = c.annotations().get(STORAGE_ANNOTATION)?.parse().ok()?;
        Some((c.name_any(), bytes))
    })
    .collect();
    let settled = |c: &String| annotated.get(c).is_some_and(|b| *b >= want);
    if obs.plan.claims.iter().all(settled) {
        *refusal = Refusal::default();
        return Ok(Volumes::default());
    }
    let claims = handles
        .pvcs
        .list(&ListParams::default().labels(&selector_text(&name)))
        .await?;
    let mut volumes = Volumes::default();
    for claim in &claims.items {
        let member = claim.name_any();
        if !controlled_by(&claim.metadata, cluster) || !obs.plan.claims.contains(&member) {
            continue;
        }
        let Some(c) = seen(claim) else { continue };
        let infeasible = c.resize.as_deref().filter(|s| s.ends_with("Infeasible"));
        if let Some(state) = infeasible {
            volumes.refused = Some(format!("the volume claim of {member}: {state}"));
        }
        // A resize the driver calls infeasible leaves the claim as small as it was.
        if c.requested < want || infeasible.is_some() {
            volumes.small.insert(member);
        } else if c.capacity < c.requested || c.resize.is_some() {
            if c.resize.as_deref() == Some(NODE_RESIZE_PENDING) {
                nudge(handles, obs, &member, c.requested).await?;
            }
            let state = c.resize.unwrap_or_else(|| "waiting for the volume".into());
            volumes.expanding.insert(member, state);
        } else if !settled(&member) {
            annotate(&handles.pvcs, &member, c.requested).await?;
        }
    }
    let replace = cluster.spec.pod.as_ref().and_then(|p| p.on_resize) == Some(OnResize::Replace);
    if let Some(why) = refusal.holds(want, replace) {
        volumes.refused.get_or_insert_with(|| why.to_string());
    }
    if replace && volumes.refused.is_some() {
        volumes.moving = volumes.small.clone();
    }
    Ok(volumes)
}

/// The resize state of a claim whose volume has grown and whose file system the kubelet is
/// to grow next.
const NODE_RESIZE_PENDING: &str = "NodeResizePending";

/// Annotation of a member pod whose claim's file system is to grow: the size, in bytes.
pub const RESIZE_ANNOTATION: &str = "etcd.database.coreos.com/storage-resize";

/// Has the kubelet look at member `name`'s volumes now. A kubelet grows a mounted volume's
/// file system when it next syncs the pod, which without a change to the pod is its periodic
/// sync (every minute by default: 70 s on the local cluster); any update of the pod syncs it at
/// once (0.2 s). One annotation write per member and size.
async fn nudge(
    handles: &Handles,
    obs: &Observed,
    name: &str,
    bytes: u64,
) -> Result<(), kube::Error> {
    let Some(pod) = obs.pods.get(name) else {
        return Ok(());
    };
    let size = bytes.to_string();
    if pod.annotations().get(RESIZE_ANNOTATION) == Some(&size)
        || pod.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"annotations": {RESIZE_ANNOTATION: size}}});
    match handles
        .pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Gone since it was observed: its next pod mounts the grown volume.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn annotate(
    pvcs: &Api<PersistentVolumeClaim>,
    name: &str,
    bytes: u64,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({
        "metadata": {"annotations": {STORAGE_ANNOTATION: bytes.to_string()}}
    });
    pvcs.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_answers_for_its_size_for_a_while_or_for_good_while_members_move() {
        let mut refusal = Refusal::default();
        assert_eq!(refusal.holds(2 << 30, false), None);
        refusal.record(2 << 30, "the class does not allow it".into());
        assert!(refusal.holds(2 << 30, false).is_some());
        assert_eq!(
            refusal.holds(3 << 30, false),
            None,
            "another size is asked again"
        );
        let long_ago = Instant::now().checked_sub(REFUSAL_RECHECK + Duration::from_secs(1));
        if let (Some(at), Some((_, _, when))) = (long_ago, refusal.0.as_mut()) {
            *when = at;
            assert_eq!(
                refusal.holds(2 << 30, false),
                None,
                "asked again after a while"
            );
            assert!(
                refusal.holds(2 << 30, true).is_some(),
                "not while members move"
            );
        }
    }
}
