//! Carrying out the planner's one action, and keeping the Services in place. All writes are
//! server-side applies or creates with the operator's field manager; children are owned by the
//! EtcdCluster, so deleting it removes them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};

use super::handles::{Handles, Pass};
use super::members::{self, ClusterState};
use super::observe::{ETCD_TIMEOUT, Observed};
use super::plan::{Action, DeleteReason, RemoveReason};
use super::resources::{self, Gate, SeedRestore};
use super::version::Version;
use crate::api::EtcdCluster;
use crate::etcd::{self, Etcd};
use crate::kube::names::{MANAGER, addressing, labels};

/// What failed, named after the action.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Applying a Service failed.
    #[error("applying Service {name}: {source}")]
    ApplyService {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Applying or deleting the PodDisruptionBudget failed.
    #[error("applying PodDisruptionBudget {name}: {source}")]
    ApplyBudget {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Creating a member's pod (or its volume claim) failed.
    #[error("creating the pod of member {member}: {source}")]
    CreatePod {
        member: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting a pod failed.
    #[error("deleting pod {name}: {source}")]
    DeletePod {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting a volume claim failed.
    #[error("deleting volume claim {name}: {source}")]
    DeleteClaim {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Reading the pod or the EndpointSlices that show whether a new member's address is
    /// published failed.
    #[error("looking up the address of member {member}: {source}")]
    Lookup {
        member: String,
        #[source]
        source: kube::Error,
    },
    /// An etcd call failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// No member could be reached for a membership change.
    #[error("no member of the cluster answers")]
    NoEndpoint,
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::ApplyService { .. } => "apply_service",
            Error::ApplyBudget { .. } => "apply_budget",
            Error::CreatePod { .. } => "create_pod",
            Error::DeletePod { .. } => "delete_pod",
            Error::DeleteClaim { .. } => "delete_claim",
            Error::Lookup { .. } => "lookup_address",
            Error::Etcd(e) => e.metric_label(),
            Error::NoEndpoint => "no_endpoint",
        }
    }
}

/// What came of an action.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the text says what changed (for an Event), if anything did.
    Done(Option<String>),
    /// etcd refused for now (it is settling); try again shortly.
    Retry(String),
}

/// Whether the etcdutl of `version` has `--bump-revision` and `--mark-compacted` (3.5.10 and
/// later).
pub fn bumps_revision(version: &str) -> bool {
    Version::parse(version) >= Version::new(3, 5, 10)
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

/// Whether the cached object named like `want` holds `want` (see [`holds`]); `None` when the
/// cache cannot say (not listed yet).
fn in_place<K: Resource + serde::Serialize>(
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
        if in_place(&services, &svc) == Some(true) {
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
    match resources::disruption_budget(cluster) {
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
    Ok(())
}

/// Whether a new pod's volume claim may be created with it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// A new member: its claim is made (or found, after an interrupted attempt).
    New,
    /// A member restarted on its data: never a new, empty claim under its old ID. Should the
    /// claim have gone since it was observed, the pod waits for it, and the planner replaces
    /// the member.
    Existing,
}

async fn create_pod(
    pass: &Pass<'_>,
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
        pass.wrote(true, member, true);
    }
    let pod = resources::member_pod(cluster, member, args, gate, &pass.tls_revision);
    pass.handles
        .pods
        .create(&PostParams::default(), &pod)
        .await
        .map_err(err)?;
    pass.wrote(false, member, true);
    Ok(())
}

async fn delete_pod(pass: &Pass<'_>, name: &str) -> Result<(), Error> {
    pass.wrote(false, name, false);
    match pass
        .handles
        .pods
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::DeletePod {
            name: name.into(),
            source,
        }),
    }
}

/// A connection for a membership change: to the leader when it is known (it would forward the
/// request anyway), else to a member that answered its status.
async fn connect(obs: &Observed) -> Result<Etcd, Error> {
    let members = obs.plan.members.as_deref().unwrap_or_default();
    let healthy = members.iter().filter(|m| m.healthy && !m.is_learner);
    let leader = healthy.clone().find(|m| Some(m.id) == obs.plan.leader);
    let endpoint = leader
        .into_iter()
        .chain(healthy)
        .find_map(|m| obs.pod_endpoint(&m.name))
        .ok_or(Error::NoEndpoint)?;
    Ok(Etcd::connect(&endpoint, ETCD_TIMEOUT).await?)
}

/// `--initial-cluster` from etcd's member list (members that have not started yet have no
/// name; their peer URL's host label is their name).
fn initial_cluster(members: &[etcd::Member]) -> String {
    members
        .iter()
        .filter_map(|m| {
            let name = if m.name.is_empty() {
                m.host_label()?
            } else {
                m.name.as_str()
            };
            Some(format!("{name}={}", m.peer_urls.first()?))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Creates the pods of `count` new members ahead of their members, each etcd held back by
/// the gate until every one of them is added (see [`Gate`]): each pod's `--initial-cluster`
/// names the current members (`current`, whose names are `peers`) and all the new ones, which
/// is the membership etcd checks it against when it starts. `endpoints` are the current
/// members' peer URLs by pod IP (see [`crate::kube::names::Addressing::gate_endpoint`]). Returns the new
/// members' names.
async fn create_gated_pods(
    pass: &Pass<'_>,
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

/// The pods of `count` new members beside the members `all`, then each added as a learner
/// (see [`join`]); a refusal leaves the rest of the batch to the next steps.
async fn add_gated(
    pass: &Pass<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    image: &str,
    all: &[etcd::Member],
    count: usize,
) -> Result<Outcome, Error> {
    let peers = all
        .iter()
        .filter_map(|m| m.host_label().map(String::from))
        .collect();
    let endpoints = all
        .iter()
        .filter_map(|m| obs.gate_endpoint(m.host_label()?))
        .collect();
    let names = create_gated_pods(
        pass,
        cluster,
        image,
        peers,
        initial_cluster(all),
        endpoints,
        count,
    )
    .await?;
    join_all(pass.handles, cluster, obs, &names).await
}

/// Adds the members of pods created ahead of them, one after the other; a refusal leaves the
/// rest to the next steps.
async fn join_all(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    names: &[String],
) -> Result<Outcome, Error> {
    let mut added = Vec::new();
    for name in names {
        match join(handles, cluster, obs, name).await? {
            Outcome::Done(Some(note)) => added.push(note),
            Outcome::Done(None) => {}
            Outcome::Retry(why) if added.is_empty() => return Ok(Outcome::Retry(why)),
            Outcome::Retry(_) => break,
        }
    }
    Ok(Outcome::Done(Some(added.join("; "))))
}

/// The IP of pod `name` once it has one, or `None` after `wait`.
async fn pod_ip_within(
    handles: &Handles,
    name: &str,
    wait: Duration,
) -> Result<Option<String>, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let pod = handles
            .pods
            .get_opt(name)
            .await
            .map_err(|source| Error::Lookup {
                member: name.into(),
                source,
            })?;
        if let Some(ip) = pod.and_then(|p| p.status?.pod_ip) {
            return Ok(Some(ip));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long an action waits for a new pod's address to be published before it looks again
/// on a later round.
const PUBLISH_WAIT: Duration = Duration::from_secs(10);

/// Whether the pod of `member` has an address in the headless Service's EndpointSlices, so
/// cluster DNS answers for its name.
async fn published(handles: &Handles, cluster: &EtcdCluster, member: &str) -> Result<bool, Error> {
    let Some(ip) = pod_ip_within(handles, member, Duration::ZERO).await? else {
        return Ok(false);
    };
    let by_service = format!("kubernetes.io/service-name={}", cluster.name_any());
    let slices = handles
        .slices
        .list(&ListParams::default().labels(&by_service))
        .await
        .map_err(|source| Error::Lookup {
            member: member.into(),
            source,
        })?;
    Ok(slices
        .items
        .iter()
        .flat_map(|s| &s.endpoints)
        .any(|e| e.addresses.contains(&ip)))
}

/// The second half of an addition: once the pod's address is published (so that no lookup of
/// the new name can be answered, and cached, as NXDOMAIN), the member is added as a learner
/// and the pod's gate lets etcd start.
async fn join(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    member: &str,
) -> Result<Outcome, Error> {
    let deadline = tokio::time::Instant::now() + PUBLISH_WAIT;
    while !published(handles, cluster, member).await? {
        if tokio::time::Instant::now() >= deadline {
            return Ok(Outcome::Retry(format!(
                "the address of {member} is not published yet"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut etcd = connect(obs).await?;
    match etcd
        .add_learner(&addressing(cluster).peer_url(member))
        .await
    {
        Ok((added, _)) => Ok(Outcome::Done(Some(format!(
            "added member {member} ({:x}) as a learner",
            added.id
        )))),
        Err(e) => settling(e),
    }
}

/// Removes member `id` from etcd, then deletes its pod `name` (only once etcd no longer counts
/// it). Returns etcd's refusal, if it refused for now.
async fn remove(
    pass: &Pass<'_>,
    obs: &Observed,
    name: &str,
    id: u64,
) -> Result<Option<Outcome>, Error> {
    let mut etcd = connect(obs).await?;
    if let Err(e) = etcd.remove(id).await {
        return settling(e).map(Some);
    }
    delete_pod(pass, name).await?;
    Ok(None)
}

fn settling(e: etcd::Error) -> Result<Outcome, Error> {
    if e.is_settling() {
        Ok(Outcome::Retry(e.to_string()))
    } else {
        Err(e.into())
    }
}

/// Carries out `action`.
pub async fn act(
    pass: &Pass<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
) -> Result<Outcome, Error> {
    let addr = addressing(cluster);
    match action {
        Action::Bootstrap => {
            let name = members::new_member_name(&cluster.name_any());
            let token = uuid::Uuid::new_v4().to_string();
            let ic = addr.initial_cluster([name.as_str()]);
            let args = members::etcd_args(&addr, &name, &ic, &ClusterState::New { token });
            create_pod(pass, cluster, &name, args, None, Claim::New).await?;
            let mut note = format!("created seed member {name}");
            // The second member's pod starts beside the seed rather than after it: its
            // membership is already known (the seed alone), and it joins as soon as the seed
            // answers.
            if let Some(image) = &pass.handles.gate_image
                && cluster.spec.size > 1
                && let Some(ip) = pod_ip_within(pass.handles, &name, PUBLISH_WAIT).await?
            {
                let endpoint = addr.gate_endpoint(&name, &ip);
                let count =
                    (cluster.spec.members() - 1).min(members::max_learners(cluster.spec.version()));
                let next =
                    create_gated_pods(pass, cluster, image, vec![name], ic, vec![endpoint], count)
                        .await?;
                note.push_str(&format!(
                    ", and the pods of members {}, which wait to be added",
                    next.join(", ")
                ));
            }
            Ok(Outcome::Done(Some(note)))
        }
        Action::AddMembers { count } => match &pass.handles.gate_image {
            Some(image) => {
                let all = obs.members.as_deref().unwrap_or_default();
                add_gated(pass, cluster, obs, image, all, *count).await
            }
            // Without a gate image: the member first, its pod after.
            None => {
                let name = members::new_member_name(&cluster.name_any());
                let mut etcd = connect(obs).await?;
                let (added, all) = match etcd.add_learner(&addr.peer_url(&name)).await {
                    Ok(r) => r,
                    Err(e) => return settling(e),
                };
                let args = members::etcd_args(
                    &addr,
                    &name,
                    &initial_cluster(&all),
                    &ClusterState::Existing,
                );
                create_pod(pass, cluster, &name, args, None, Claim::New).await?;
                Ok(Outcome::Done(Some(format!(
                    "added member {name} ({:x}) as a learner",
                    added.id
                ))))
            }
        },
        Action::JoinMembers { names } => join_all(pass.handles, cluster, obs, names).await,
        Action::Promote { name, id } => {
            let mut etcd = connect(obs).await?;
            match etcd.promote(*id).await {
                Ok(_) => Ok(Outcome::Done(Some(format!(
                    "promoted member {name} to a voter"
                )))),
                Err(e) => settling(e),
            }
        }
        Action::RemoveMember { name, id, reason } => {
            if let Some(refused) = remove(pass, obs, name, *id).await? {
                return Ok(refused);
            }
            Ok(Outcome::Done(Some(match reason {
                RemoveReason::Outdated => format!(
                    "removed member {name}, made from an older pod template; a member made \
                     from the new one ({}) takes its place",
                    cluster.spec.image()
                ),
                _ => format!("removed member {name} ({reason:?})"),
            })))
        }
        Action::ReplaceMember { name, id } => {
            if let Some(refused) = remove(pass, obs, name, *id).await? {
                return Ok(refused);
            }
            let removed = format!("removed member {name}, whose pod and data are gone");
            let Some(image) = &pass.handles.gate_image else {
                return Ok(Outcome::Done(Some(removed)));
            };
            // etcd accepts the addition at once: the voter it waits for (5 s connected to
            // each) is the one just removed.
            let rest: Vec<etcd::Member> = obs
                .members
                .iter()
                .flatten()
                .filter(|m| m.id != *id)
                .cloned()
                .collect();
            Ok(
                match add_gated(pass, cluster, obs, image, &rest, 1).await? {
                    Outcome::Done(Some(added)) => {
                        Outcome::Done(Some(format!("{removed}; {added}")))
                    }
                    _ => Outcome::Done(Some(format!(
                        "{removed}; its replacement waits to be added"
                    ))),
                },
            )
        }
        Action::RecreatePod { name } => {
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
        Action::MoveLeader { from, to, id } => {
            // etcd accepts a leadership transfer only from the leader itself.
            let endpoint = obs.pod_endpoint(from).ok_or(Error::NoEndpoint)?;
            let mut etcd = Etcd::connect(&endpoint, ETCD_TIMEOUT).await?;
            match etcd.move_leader(*id).await {
                Ok(()) => Ok(Outcome::Done(Some(format!(
                    "moved leadership from {from} to {to}, so that {from} is rolled last"
                )))),
                Err(e) => settling(e),
            }
        }
        Action::DeleteClaim { name } => {
            pass.wrote(true, name, false);
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
                        name: name.clone(),
                        source,
                    });
                }
            }
            Ok(Outcome::Done(Some(format!(
                "deleted volume claim {name}, whose member is no longer in the cluster"
            ))))
        }
        Action::DeletePod { name, reason } => {
            delete_pod(pass, name).await?;
            Ok(Outcome::Done(Some(match reason {
                DeleteReason::NoMember => format!("deleted pod {name}, which has no member"),
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
        Action::RestoreSeed => {
            let handoff = match cluster.pending_restore() {
                Some(Ok(h)) => h,
                _ => return Ok(Outcome::Retry("the restore is no longer asked for".into())),
            };
            let (Some(image), Some(url)) = (
                &pass.handles.gate_image,
                pass.handles.snapshot_url_of(cluster),
            ) else {
                return Ok(Outcome::Retry(
                    "no gate image or snapshot URL to make the seed with".into(),
                ));
            };
            let name = members::new_member_name(&cluster.name_any());
            let ic = addr.initial_cluster([name.as_str()]);
            // A new cluster token: nothing of the replaced cluster may ever talk to this one.
            let cluster_token = handoff.uid.clone();
            let args = members::etcd_args(
                &addr,
                &name,
                &ic,
                &ClusterState::New {
                    token: cluster_token.clone(),
                },
            );
            let gate = Gate {
                image: image.clone(),
                endpoints: vec![],
                peer_tls: addr.peer_tls,
                peer_url: addr.peer_url(&name),
                peers: vec![],
                restore: Some(SeedRestore {
                    uid: handoff.uid.clone(),
                    url,
                    token: handoff.token.clone(),
                    sha256: handoff.sha256.clone(),
                    name: name.clone(),
                    initial_cluster: ic,
                    cluster_token,
                    bump_revision: if bumps_revision(cluster.spec.version()) {
                        handoff.bump_revision
                    } else {
                        0
                    },
                }),
            };
            create_pod(pass, cluster, &name, args, Some(&gate), Claim::New).await?;
            Ok(Outcome::Done(Some(format!(
                "created seed member {name}, which restores EtcdRestore {}'s snapshot",
                handoff.name
            ))))
        }
        Action::RestoreDone { seed } => Ok(Outcome::Done(Some(format!(
            "seed member {seed} serves the restored data; the cluster grows back to its size"
        )))),
        Action::Wait { .. }
        | Action::RollStalled { .. }
        | Action::Restoring { .. }
        | Action::QuorumLost { .. }
        | Action::Paused
        | Action::Steady => Ok(Outcome::Done(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_service_as_the_api_server_returns_it_holds_what_was_applied() {
        let want = json!({
            "metadata": {"name": "c", "labels": {"app": "etcd"}},
            "spec": {"clusterIP": "None", "ports": [{"name": "client", "port": 2379}]},
        });
        let have = json!({
            "metadata": {"name": "c", "labels": {"app": "etcd", "other": "x"},
                         "resourceVersion": "7"},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP",
                     "ports": [{"name": "client", "port": 2379, "protocol": "TCP",
                                "targetPort": 2379}]},
            "status": {"loadBalancer": {}},
        });
        assert!(holds(&have, &want));
        // A port changed or added by someone else, or a label gone: applied again.
        let mut moved = have.clone();
        moved["spec"]["ports"][0]["port"] = json!(2380);
        assert!(!holds(&moved, &want));
        let mut more = have.clone();
        more["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "x", "port": 1}));
        assert!(!holds(&more, &want));
        let mut unlabeled = have;
        unlabeled["metadata"]["labels"] = json!({});
        assert!(!holds(&unlabeled, &want));
    }
}
