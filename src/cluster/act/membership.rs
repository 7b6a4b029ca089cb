//! Membership changes through etcd's API: the seed, members added (learners first), promoted,
//! removed, replaced, and leadership moved.

use std::time::Duration;

use kube::ResourceExt;

use super::pods::{
    Claim, PUBLISH_WAIT, create_gated_pods, create_pod, delete_pod, pod_ip_within, published,
};
use super::{Acting, Error, Outcome, applied_despite, connect, initial_cluster, settling};
use crate::api::EtcdCluster;
use crate::cluster::handles::Handles;
use crate::cluster::members;
use crate::cluster::members::ClusterState;
use crate::cluster::observe::{ETCD_TIMEOUT, Observed};
use crate::cluster::plan::{MoveReason, RemoveReason};
use crate::etcd;
use crate::etcd::Etcd;
use crate::kube::names::addressing;

/// The pods of `count` new members beside the members `all`, then each added as a learner
/// (see [`join`]); a refusal leaves the rest of the batch to the next steps.
pub(super) async fn add_gated(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    image: &str,
    all: &[etcd::Member],
    count: usize,
) -> Result<Outcome, Error> {
    let peers = all.iter().map(|m| obs.name_of(m)).collect();
    let endpoints = all
        .iter()
        .filter_map(|m| obs.gate_endpoint(&obs.name_of(m)))
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
pub(super) async fn join_all(
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

/// The second half of an addition: once the pod's address is published (so that no lookup of
/// the new name can be answered, and cached, as NXDOMAIN), the member is added as a learner
/// and the pod's gate lets etcd start.
pub(super) async fn join(
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
        Ok((added, _)) => {
            crate::crash::point("after-member-add");
            Ok(Outcome::Done(Some(format!(
                "added member {member} ({:x}) as a learner",
                added.id
            ))))
        }
        Err(e) => settling(e),
    }
}

/// Removes member `id` from etcd, then deletes its pod `name` (only once etcd no longer counts
/// it; at once, `force`, when its node is lost). Returns etcd's refusal, if it refused for now.
pub(super) async fn remove(
    pass: &Acting<'_>,
    obs: &Observed,
    name: &str,
    id: u64,
    force: bool,
) -> Result<Option<Outcome>, Error> {
    let mut etcd = connect(obs).await?;
    if let Err(e) = etcd.remove(id).await
        && !applied_despite(obs, &e, |all| all.iter().all(|m| m.id != id)).await
    {
        return settling(e).map(Some);
    }
    crate::crash::point("after-member-remove");
    // An external member has no pod here; a pod of its name is not its.
    if !obs.plan.external.contains(name) {
        delete_pod(pass, name, force).await?;
    }
    Ok(None)
}

/// The seed member's pod, and beside it the pods of as many members as may join at once.
pub(super) async fn bootstrap(pass: &Acting<'_>, cluster: &EtcdCluster) -> Result<Outcome, Error> {
    let addr = addressing(cluster);
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
        && let Some(ip) = pod_ip_within(pass.handles, cluster, &name, PUBLISH_WAIT).await?
    {
        let endpoint = addr.gate_endpoint(&name, &ip);
        let count = (cluster.spec.members() - 1).min(members::max_learners(cluster.spec.version()));
        let next =
            create_gated_pods(pass, cluster, image, vec![name], ic, vec![endpoint], count).await?;
        note.push_str(&format!(
            ", and the pods of members {}, which wait to be added",
            next.join(", ")
        ));
    }
    Ok(Outcome::Done(Some(note)))
}

/// `count` new members: with a gate image their pods first, each added once it runs;
/// without, the member first and its pod after.
pub(super) async fn add_members(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    count: usize,
) -> Result<Outcome, Error> {
    if let Some(image) = &pass.handles.gate_image {
        let all = obs.members.as_deref().unwrap_or_default();
        return add_gated(pass, cluster, obs, image, all, count).await;
    }
    let addr = addressing(cluster);
    let name = members::new_member_name(&cluster.name_any());
    let mut etcd = connect(obs).await?;
    let (added, all) = match etcd.add_learner(&addr.peer_url(&name)).await {
        Ok(r) => r,
        Err(e) => return settling(e),
    };
    crate::crash::point("after-member-add");
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

pub(super) async fn promote(obs: &Observed, name: &str, id: u64) -> Result<Outcome, Error> {
    let mut etcd = connect(obs).await?;
    if let Err(e) = etcd.promote(id).await
        && !applied_despite(obs, &e, |all| {
            all.iter().any(|m| m.id == id && !m.is_learner)
        })
        .await
    {
        return settling(e);
    }
    Ok(Outcome::Done(Some(format!(
        "promoted member {name} to a voter"
    ))))
}

pub(super) async fn remove_member(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    name: &str,
    id: u64,
    reason: RemoveReason,
) -> Result<Outcome, Error> {
    if let Some(refused) = remove(pass, obs, name, id, reason == RemoveReason::NodeLost).await? {
        return Ok(refused);
    }
    if reason == RemoveReason::Outdated {
        crate::crash::point("mid-roll");
    }
    Ok(Outcome::Done(Some(match reason {
        RemoveReason::Outdated => format!(
            "removed member {name}, made from an older pod template; a member made \
             from the new one ({}) takes its place",
            cluster.spec.image()
        ),
        RemoveReason::NodeLost => format!(
            "removed member {name}: it does not answer and its node has not been Ready for \
             the node-loss grace; a new member takes its place on another node"
        ),
        RemoveReason::Spread => format!(
            "removed member {name}: its node held more voters than the cluster can lose, and \
             a member added on another node takes its place"
        ),
        RemoveReason::External => format!(
            "removed external member {name}, as spec.bootstrap.existing.removeExternal asks; \
             this operator's members hold the data"
        ),
        _ => format!("removed member {name} ({reason:?})"),
    })))
}

/// Removes a member whose data is gone and, with a gate image, adds its replacement in the
/// same step.
pub(super) async fn replace_member(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    name: &str,
    id: u64,
) -> Result<Outcome, Error> {
    if let Some(refused) = remove(pass, obs, name, id, false).await? {
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
        .filter(|m| m.id != id)
        .cloned()
        .collect();
    Ok(
        match add_gated(pass, cluster, obs, image, &rest, 1).await? {
            Outcome::Done(Some(added)) => Outcome::Done(Some(format!("{removed}; {added}"))),
            _ => Outcome::Done(Some(format!(
                "{removed}; its replacement waits to be added"
            ))),
        },
    )
}

pub(super) async fn move_leader(
    obs: &Observed,
    from: &str,
    to: &str,
    id: u64,
    reason: MoveReason,
) -> Result<Outcome, Error> {
    // etcd accepts a leadership transfer only from the leader itself. One whose pod is being
    // deleted may stop answering any moment: that is for the next look, not an error.
    let endpoint = obs.pod_endpoint(from).ok_or(Error::NoEndpoint)?;
    let mut etcd = match Etcd::connect(&endpoint, ETCD_TIMEOUT).await {
        Ok(etcd) => etcd,
        Err(e) if reason == MoveReason::Leaving => return Ok(Outcome::Retry(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    let why = match reason {
        MoveReason::Roll => format!("so that {from} is rolled last"),
        MoveReason::Leaving => {
            format!("so that {from}, on its way out, is replaced without an election")
        }
    };
    match etcd.move_leader(id).await {
        Ok(()) => Ok(Outcome::Done(Some(format!(
            "moved leadership from {from} to {to}, {why}"
        )))),
        Err(e) if reason == MoveReason::Leaving => Ok(Outcome::Retry(e.to_string())),
        Err(e) => settling(e),
    }
}
