//! Member pods and their claims: made (behind the gate, or not), deleted, made again on their
//! volume.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Resource;
use kube::ResourceExt;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

use super::{Acting, Error, Outcome, initial_cluster};
use crate::api::EtcdCluster;
use crate::cluster::handles::Handles;
use crate::cluster::members::ClusterState;
use crate::cluster::observe::Observed;
use crate::cluster::plan::DeleteReason;
use crate::cluster::resources::Gate;
use crate::cluster::{members, resources, volumes};
use crate::kube::cache::{Object, Write};
use crate::kube::names::{addressing, labels};

/// Whether a new pod's volume claim may be created with it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// A new member: its claim is made (or found, after an interrupted attempt).
    New,
    /// A member restarted on its data: never a new, empty claim under its old ID. Should the
    /// claim have gone since it was observed, the pod waits for it, and the planner replaces
    /// the member.
    Existing,
}

pub(super) async fn create_pod(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    member: &str,
    args: Vec<String>,
    gate: Option<&Gate>,
    claim: Claim,
) -> Result<(), Error> {
    let err = |source| Error::CreatePod {
        member: member.to_string(),
        source,
    };
    if let Some(spec) = cluster
        .spec
        .pod
        .as_ref()
        .and_then(|p| p.persistent_volume_claim_spec.clone())
        .filter(|_| claim == Claim::New)
    {
        let claim = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(member.into()),
                namespace: cluster.namespace(),
                labels: Some(labels(&cluster.name_any(), "member")),
                // Made at the size the spec asks for: no later pass reads it for its growth.
                annotations: volumes::wanted(cluster).map(|(_, bytes)| {
                    [(volumes::STORAGE_ANNOTATION.to_string(), bytes.to_string())].into()
                }),
                owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            ..PersistentVolumeClaim::default()
        };
        match pass
            .handles
            .pvcs
            .create(&PostParams::default(), &claim)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(err(e)),
        }
        pass.wrote(Object::Claim, member, Write::Created);
    }
    let mut pod = resources::member_pod(cluster, member, args, gate, pass.tls);
    resources::keep_off(&mut pod, pass.kept_off());
    pass.handles
        .pods
        .create(&PostParams::default(), &pod)
        .await
        .map_err(err)?;
    pass.wrote(Object::Pod, member, Write::Created);
    crate::crash::point("after-pod-create");
    Ok(())
}

/// Deletes pod `name`; `force`: without waiting for its kubelet (grace period 0), for a pod on
/// a node that is not Ready, whose kubelet would never confirm the deletion.
pub(super) async fn delete_pod(pass: &Acting<'_>, name: &str, force: bool) -> Result<(), Error> {
    pass.wrote(Object::Pod, name, Write::Deleted);
    let params = if force {
        DeleteParams::default().grace_period(0)
    } else {
        DeleteParams::default()
    };
    match pass.handles.pods.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::DeletePod {
            name: name.into(),
            source,
        }),
    }
}

/// Creates the pods of `count` new members ahead of their members, each etcd held back by
/// the gate until every one of them is added (see [`Gate`]): each pod's `--initial-cluster`
/// names the current members (`current`, whose names are `peers`) and all the new ones, which
/// is the membership etcd checks it against when it starts. `endpoints` are the current
/// members' peer URLs by pod IP (see [`crate::kube::names::Addressing::gate_endpoint`]). Returns the new
/// members' names.
pub(super) async fn create_gated_pods(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    image: &str,
    peers: Vec<String>,
    current: String,
    endpoints: Vec<String>,
    count: usize,
) -> Result<Vec<String>, Error> {
    let addr = addressing(cluster);
    let names: Vec<String> = (0..count.max(1))
        .map(|_| members::new_member_name(&cluster.name_any()))
        .collect();
    let ic = std::iter::once(current)
        .chain(names.iter().map(|n| format!("{n}={}", addr.peer_url(n))))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    for name in &names {
        let gate = Gate {
            image: image.into(),
            endpoints: endpoints.clone(),
            peer_tls: addr.peer_tls,
            peer_url: addr.peer_url(name),
            peers: peers
                .iter()
                .chain(names.iter().filter(|n| *n != name))
                .cloned()
                .collect(),
            restore: None,
        };
        let args = members::etcd_args(&addr, name, &ic, &ClusterState::Existing);
        create_pod(pass, cluster, name, args, Some(&gate), Claim::New).await?;
    }
    Ok(names)
}

/// The IP of pod `name` of `cluster` once it has one, or `None` after `wait`: read from the
/// watch cache while it covers the namespace, else from the API server. A GET every 100 ms
/// was a storm at scale: 527,015 reads of pods while 10,000 clusters were applied (58 per new
/// seed, whose IP the pod watch brings anyway).
pub(super) async fn pod_ip_within(
    handles: &Handles,
    cluster: &EtcdCluster,
    name: &str,
    wait: Duration,
) -> Result<Option<String>, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    let (ns, group) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    loop {
        let ip = match handles.caches.pods.group(&ns, &group) {
            Some(pods) => pods
                .iter()
                .find(|p| p.name_any() == name)
                .and_then(|p| p.status.as_ref()?.pod_ip.clone()),
            None => handles
                .pods
                .get_opt(name)
                .await
                .map_err(|source| Error::Lookup {
                    member: name.into(),
                    source,
                })?
                .and_then(|p| p.status?.pod_ip),
        };
        if ip.is_some() {
            return Ok(ip);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long an action waits for a new pod's address to be published before it looks again
/// on a later round.
pub(super) const PUBLISH_WAIT: Duration = Duration::from_secs(10);

/// Whether the pod of `member` has an address in the headless Service's EndpointSlices, so
/// cluster DNS answers for its name.
pub(super) async fn published(
    handles: &Handles,
    cluster: &EtcdCluster,
    member: &str,
) -> Result<bool, Error> {
    let Some(ip) = pod_ip_within(handles, cluster, member, Duration::ZERO).await? else {
        return Ok(false);
    };
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    // The headless Service is named after the cluster; a join asks every 100 ms, so the
    // watch cache answers while it covers the namespace.
    let slices = (handles.caches)
        .service_slices(&handles.slices, &ns, &name, &name)
        .await
        .map_err(|source| Error::Lookup {
            member: member.into(),
            source,
        })?;
    Ok(slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .any(|e| e.addresses.contains(&ip)))
}

pub(super) async fn recreate_pod(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    name: &str,
) -> Result<Outcome, Error> {
    let addr = addressing(cluster);
    // etcd restarting on its data reads the membership from its own log and ignores
    // --initial-cluster; it names the members as last seen all the same.
    let ic = match obs.members.as_deref() {
        Some(all) => initial_cluster(all),
        None => addr.initial_cluster(obs.plan.known_members.iter().map(String::as_str)),
    };
    let args = members::etcd_args(&addr, name, &ic, &ClusterState::Existing);
    create_pod(pass, cluster, name, args, None, Claim::Existing).await?;
    Ok(Outcome::Done(Some(format!(
        "recreated the pod of member {name} on its volume ({})",
        cluster.spec.image()
    ))))
}

/// Changes the etcd image of member `name`'s pod to the spec's, with the spec's template hash
/// and the ID of the etcd container that runs now ([`resources::RESTARTED_CONTAINER_ANNOTATION`]):
/// the kubelet restarts that container on the new image, in the same pod. The patch is made
/// on the pod as observed (its resourceVersion): had the container been replaced since, the
/// annotation would name one that no longer runs and the pod would count as restarted before
/// it was, so the API server's conflict sends the step back to the next pass instead.
pub(super) async fn change_image(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    name: &str,
) -> Result<Outcome, Error> {
    let Some(pod) = obs.pods.get(name) else {
        return Ok(Outcome::Retry(format!("the pod of {name} is not observed")));
    };
    let Some(running) = crate::cluster::observe::etcd_container_id(pod) else {
        return Ok(Outcome::Retry(format!("etcd does not run in pod {name}")));
    };
    let (image, version) = (cluster.spec.image(), pod.resource_version());
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": version,
            "annotations": {
                resources::TEMPLATE_HASH_ANNOTATION: resources::template_hash(cluster, &pass.tls.revision),
                resources::RESTARTED_CONTAINER_ANNOTATION: running,
            },
        },
        "spec": {"containers": [{"name": "etcd", "image": image}]},
    });
    let params = kube::api::PatchParams::default();
    pass.wrote(
        Object::Pod,
        name,
        Write::Changed(version.unwrap_or_default()),
    );
    match (pass.handles.pods)
        .patch(name, &params, &kube::api::Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(Outcome::Done(Some(format!(
            "restarting member {name} in its pod on the new image ({image}); the rest of its \
             pod template is unchanged"
        )))),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Outcome::Retry(format!(
            "the pod of {name} changed since it was observed"
        ))),
        Err(source) => Err(Error::ChangeImage {
            name: name.into(),
            source,
        }),
    }
}

/// Asks for the spec's storage on member `name`'s claim. The API server refuses when the
/// StorageClass does not allow expansion (403) or the claim cannot take it (422): that answer
/// goes to the status, not to the error path, so that it is reported once and not retried.
pub(super) async fn expand_claim(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    name: &str,
) -> Result<Outcome, Error> {
    let Some((written, bytes)) = volumes::wanted(cluster) else {
        return Ok(Outcome::Done(None));
    };
    let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": written}}}});
    let params = kube::api::PatchParams::default();
    match (pass.handles.pvcs)
        .patch(name, &params, &kube::api::Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(Outcome::Done(Some(format!(
            "asked for {written} on the volume claim of member {name}: it grows in place, \
             the next member's once its file system has"
        )))),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => {
            pass.expansion_refused(bytes, format!("the volume claim of {name}: {}", e.message));
            Ok(Outcome::Done(None))
        }
        Err(source) => Err(Error::ExpandClaim {
            name: name.to_string(),
            source,
        }),
    }
}

pub(super) async fn delete_claim(pass: &Acting<'_>, name: &str) -> Result<Outcome, Error> {
    pass.wrote(Object::Claim, name, Write::Deleted);
    match pass
        .handles
        .pvcs
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(source) => {
            return Err(Error::DeleteClaim {
                name: name.to_string(),
                source,
            });
        }
    }
    Ok(Outcome::Done(Some(format!(
        "deleted volume claim {name}, whose member is no longer in the cluster"
    ))))
}

pub(super) async fn delete_member_pod(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    name: &str,
    reason: DeleteReason,
) -> Result<Outcome, Error> {
    delete_pod(pass, name, reason == DeleteReason::NodeLost).await?;
    Ok(Outcome::Done(Some(match reason {
        DeleteReason::NoMember => format!("deleted pod {name}, which has no member"),
        DeleteReason::NodeLost => format!(
            "deleted pod {name} at once: it has no member, and its node is not Ready to \
             confirm the deletion"
        ),
        DeleteReason::Ended => {
            format!("deleted the ended pod of member {name}; it is recreated on its volume")
        }
        DeleteReason::Restore => {
            format!("deleted pod {name}: a restore replaces the cluster's members")
        }
        DeleteReason::Outdated => format!(
            "restarting member {name} on its volume with the new pod template ({})",
            cluster.spec.image()
        ),
    })))
}
