//! Observation of one cluster: its pods from the API server, etcd's member list and each
//! member's status. The operator talks to members by pod IP, so it needs no cluster DNS and
//! works from outside the cluster network as well as from a pod.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::members::CLIENT_PORT;
use super::plan::{MemberView, Observation, PodState, PodView};
use super::resources::{JOIN_PEERS_ANNOTATION, selector};
use crate::api::EtcdCluster;
use crate::etcd::{self, Etcd, Member, Status};

/// How long one etcd request may take before the member counts as not answering.
pub const ETCD_TIMEOUT: Duration = Duration::from_secs(3);

/// Everything observed in one round: the planner's view plus what act and status need.
#[derive(Debug, Default)]
pub struct Observed {
    /// The planner's input.
    pub plan: Observation,
    /// Pods by name.
    pub pods: BTreeMap<String, Pod>,
    /// etcd's member list, when some member answered.
    pub members: Option<Vec<Member>>,
    /// Status of each member that answered, by member ID.
    pub statuses: BTreeMap<u64, Status>,
}

impl Observed {
    /// Client URL of a member's pod by IP, when the pod has one.
    pub fn pod_endpoint(&self, name: &str) -> Option<String> {
        let ip = self.pods.get(name)?.status.as_ref()?.pod_ip.clone()?;
        Some(format!("http://{ip}:{CLIENT_PORT}"))
    }

    /// Client URLs of every pod that has an IP.
    pub fn endpoints(&self) -> Vec<String> {
        self.pods
            .keys()
            .filter_map(|n| self.pod_endpoint(n))
            .collect()
    }
}

/// Errors of observation: only the API server's; etcd not answering is an observation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the cluster's pods failed.
    #[error("listing the pods of {cluster}: {source}")]
    ListPods {
        cluster: String,
        #[source]
        source: kube::Error,
    },
}

fn pod_state(pod: &Pod) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodState::Running,
        Some("Failed") | Some("Succeeded") => PodState::Gone,
        _ => PodState::Pending,
    }
}

async fn list_pods(pods_api: &Api<Pod>, name: &str) -> Result<Vec<Pod>, Error> {
    let selector = selector(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    pods_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .map_err(|source| Error::ListPods {
            cluster: name.to_string(),
            source,
        })
}

/// Observes `cluster`.
pub async fn observe(pods_api: &Api<Pod>, cluster: &EtcdCluster) -> Result<Observed, Error> {
    let name = cluster.name_any();
    let list = list_pods(pods_api, &name).await?;
    let now = Timestamp::now();
    let mut obs = Observed::default();
    for pod in list {
        let age = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|t| Duration::try_from(now.duration_since(t.0)).ok())
            .unwrap_or_default();
        let joining = pod.annotations().get(JOIN_PEERS_ANNOTATION).map(|peers| {
            peers
                .split(',')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect()
        });
        obs.plan.pods.push(PodView {
            name: pod.name_any(),
            state: pod_state(&pod),
            age,
            joining,
        });
        obs.pods.insert(pod.name_any(), pod);
    }
    obs.plan.bootstrapped = !obs.pods.is_empty()
        || cluster
            .status
            .as_ref()
            .is_some_and(|s| !s.cluster_id.is_empty());

    // One member at a time, so a dead endpoint is skipped instead of failing the list.
    let mut members = None;
    for ep in obs.endpoints() {
        if let Ok(mut etcd) = Etcd::connect(std::slice::from_ref(&ep), ETCD_TIMEOUT).await
            && let Ok(list) = etcd.members().await
        {
            members = Some(list);
            break;
        }
    }
    let Some(members) = members else {
        return Ok(obs);
    };

    // Every member's status, concurrently, each over its own connection.
    let mut asks = tokio::task::JoinSet::new();
    for m in &members {
        let name = m.host_label().unwrap_or_default().to_string();
        if let Some(ep) = obs.pod_endpoint(&name) {
            let id = m.id;
            asks.spawn(async move { (id, etcd::status(&ep, ETCD_TIMEOUT).await) });
        }
    }
    while let Some(done) = asks.join_next().await {
        if let Ok((id, Ok(status))) = done {
            obs.statuses.insert(id, status);
        }
    }
    obs.plan.leader = obs.statuses.values().map(|s| s.leader).find(|l| *l != 0);
    obs.plan.members = Some(
        members
            .iter()
            .map(|m| MemberView {
                name: m.host_label().unwrap_or_default().to_string(),
                id: m.id,
                is_learner: m.is_learner,
                healthy: obs.statuses.contains_key(&m.id),
            })
            .collect(),
    );

    // The pods again, now that member health is known: a pod deleted while etcd was being
    // asked would otherwise count as a healthy voter's, beside a member already dead from a
    // deletion issued a moment earlier (two pods deleted at once), and the planner could
    // remove that member on a quorum that is itself leaving. Only a silent member can lead
    // to a removal, so with every member answering the first list stands. Only states move
    // towards gone; anything newer waits for the next pass.
    let all_answered = obs.statuses.len() == members.len();
    obs.members = Some(members);
    if all_answered {
        return Ok(obs);
    }
    let again = list_pods(pods_api, &name).await?;
    for view in &mut obs.plan.pods {
        let now = again.iter().find(|p| p.name_any() == view.name);
        let state = now.map_or(PodState::Terminating, pod_state);
        if state.is_gone() && !view.state.is_gone() {
            view.state = state;
        }
    }
    Ok(obs)
}
