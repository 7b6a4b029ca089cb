//! Observation of one cluster: its pods from the API server, etcd's member list and each
//! member's status. The operator talks to members by pod IP, so it needs no cluster DNS and
//! works from outside the cluster network as well as from a pod.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tracing::warn;

use super::external;
use super::handles::Handles;
use super::members::{MAX_LEARNERS_FLAG, QUOTA_FLAG};
use super::plan::{MemberView, Observation, PodState, PodView};
use super::resources::{
    JOIN_PEERS_ANNOTATION, RESTARTED_CONTAINER_ANNOTATION, RESTORE_FROM_ANNOTATION,
    RESTORE_UID_ANNOTATION, TEMPLATE_HASH_ANNOTATION, template_hash, template_hash_with_image,
};
use super::serving::{self, ReadMemory, Serving};
use crate::api::{
    Condition, ConditionType, DEFAULT_QUOTA_BACKEND_BYTES, EtcdCluster, find_condition,
};
use crate::etcd::{self, Access, Endpoint, Etcd, Member, Status};
use crate::kube::names::{Addressing, CLIENT_PORT, addressing, controlled_by, selector};
use crate::reference::{self, Dial, Refused, kube::KubeResolver};

/// How long one etcd request may take before the member counts as not answering.
pub const ETCD_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a pod that is being deleted may take to answer. While it stops it answers in
/// milliseconds; once its network is gone its address does not answer at all (the bridge gives
/// up after 3 s), and the whole pass would wait for it, the replacement of its member with it.
pub const LEAVING_TIMEOUT: Duration = Duration::from_millis(500);

/// How many raft entries a voter may be behind the leader, in one observation's answers
/// (asked concurrently, so a busy cluster moves between them), and still count as caught up.
pub const CAUGHT_UP_LAG: u64 = 500;

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
    /// How members are named and reached.
    pub addr: Option<Addressing>,
    /// What the operator presents to the cluster's etcd.
    pub access: Access,
    /// What clients of the client Service reach.
    pub serving: Serving,
    /// The members of the external cluster this one joins (`spec.bootstrap.existing`), by
    /// name: where the operator reaches them (their client URL) and where a joining member's
    /// gate reads the member list (their peer URL).
    pub external: BTreeMap<String, (Endpoint, String)>,
    /// The operator reads no Nodes, so acts on no node loss (reported, see
    /// [`crate::api::ConditionType::NodeLossHandled`]).
    pub nodes_unwatched: bool,
}

impl Observed {
    fn pod_ip(&self, name: &str) -> Option<String> {
        self.pods.get(name)?.status.as_ref()?.pod_ip.clone()
    }

    /// Client endpoint of a member's pod by IP, when the pod has one; with TLS, its
    /// certificate is checked against the member's DNS name.
    pub fn pod_endpoint(&self, name: &str) -> Option<Endpoint> {
        if let Some((endpoint, _)) = self.external.get(name) {
            return Some(endpoint.clone());
        }
        let ip = self.pod_ip(name)?;
        let Some(addr) = &self.addr else {
            return Some(Endpoint::plain(format!("http://{ip}:{CLIENT_PORT}")));
        };
        Some(Endpoint::new(
            addr.client_url_at(&ip),
            self.access.clone(),
            Some(addr.host(name)),
        ))
    }

    /// The name the planner knows member `m` by (see [`external::member_name`]).
    pub fn name_of(&self, m: &Member) -> String {
        match &self.addr {
            Some(addr) => external::member_name(addr, self.plan.existing, m),
            None => m.host_label().unwrap_or_default().to_string(),
        }
    }

    /// Where a new member's `etcd-gate` asks member `name` whether it was added.
    pub fn gate_endpoint(&self, name: &str) -> Option<String> {
        if let Some((_, peer)) = self.external.get(name) {
            return Some(peer.clone());
        }
        let ip = self.pod_ip(name)?;
        Some(self.addr.as_ref()?.gate_endpoint(name, &ip))
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
    /// Listing the cluster's volume claims failed.
    #[error("listing the volume claims of {cluster}: {source}")]
    ListClaims {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    /// Reading the client Service or its endpoints failed.
    #[error(transparent)]
    Serving(#[from] serving::Error),
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::ListPods { .. } => "list_pods",
            Error::ListClaims { .. } => "list_claims",
            Error::Serving(e) => e.metric_label(),
        }
    }
}

fn pod_state(pod: &Pod) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() || restarting(pod) {
        return PodState::Terminating;
    }
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodState::Running,
        Some("Failed") | Some("Succeeded") => PodState::Gone,
        _ => PodState::Pending,
    }
}

/// Whether the etcd container whose image the operator changed still runs (see
/// [`RESTARTED_CONTAINER_ANNOTATION`]): the kubelet is about to stop it, so its etcd must not
/// count towards quorum even while it answers. Once it has stopped, the pod is judged as any
/// other (a new image that does not start leaves a container waiting, reported as failing).
fn restarting(pod: &Pod) -> bool {
    let Some(old) = pod.annotations().get(RESTARTED_CONTAINER_ANNOTATION) else {
        return false;
    };
    etcd_container_id(pod).is_some_and(|id| id == *old)
}

/// The ID of the etcd container running in `pod`, as the kubelet reports it.
pub fn etcd_container_id(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let etcd = statuses.iter().find(|c| c.name == "etcd")?;
    etcd.state.as_ref()?.running.as_ref()?;
    etcd.container_id.clone().filter(|id| !id.is_empty())
}

/// Why a pod cannot start, as its containers' waiting reasons tell: reasons the kubelet only
/// retries with a back-off, and that no wait of the operator's will end.
fn failing(pod: &Pod) -> Option<String> {
    const STUCK: [&str; 7] = [
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    ];
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            STUCK.contains(&reason).then(|| match &waiting.message {
                Some(m) if !m.is_empty() => format!("{}: {reason}: {m}", c.name),
                _ => format!("{}: {reason}", c.name),
            })
        })
}

/// Whether `pod` was made from the pod template whose hash is `hash` and image `image`: the
/// hash it carries, or, for a pod this operator made before pods carried one, its etcd image.
/// A pod another maker shaped (the coreos operator's, taken over with its cluster) is never
/// current: its members are rolled into this operator's shape at once, one at a time. Left as
/// they are, they would have no probes (a dead member stays in the client Service), restart
/// never (`restartPolicy: Never`), and hold their data where no roll of ours could keep it.
fn is_current(pod: &Pod, hash: &str, image: &str) -> bool {
    match pod.annotations().get(TEMPLATE_HASH_ANNOTATION) {
        Some(h) => h == hash,
        None => !foreign_pod(pod) && etcd_image(pod).is_some_and(|i| i == image),
    }
}

/// Whether another maker shaped `pod`: it carries neither this operator's template hash nor
/// its label (the cluster's ownerReference, which makes it a member at all, is checked apart).
fn foreign_pod(pod: &Pod) -> bool {
    let ours = pod
        .labels()
        .get("app.kubernetes.io/managed-by")
        .map(String::as_str)
        == Some(crate::kube::names::MANAGER);
    !ours && !pod.annotations().contains_key(TEMPLATE_HASH_ANNOTATION)
}

/// How many learners every member accepts at once: the smallest `--max-learners` among the
/// members' pods, 1 for a member whose pod does not carry it (made before it was set, or not
/// observed). etcd checks the limit on every member as it applies an addition, so one member
/// with a lower limit would refuse what the others accept.
pub fn max_learners(obs: &Observed) -> usize {
    let Some(members) = &obs.plan.members else {
        return 1;
    };
    members
        .iter()
        .map(|m| {
            flag(obs, &m.name, MAX_LEARNERS_FLAG)
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(1)
        })
        .min()
        .unwrap_or(1)
        .max(1)
}

/// The backend quota the members run with: the smallest `--quota-backend-bytes` among the
/// voters' pods (etcd's default for a pod without it). Each member holds its own database
/// against its own quota, so the smallest is the first reached; during a roll to a new quota
/// it is the old one until every member runs the new.
pub fn running_quota(obs: &Observed) -> i64 {
    obs.plan
        .members
        .iter()
        .flatten()
        .filter(|m| !m.is_learner)
        .map(|m| {
            flag(obs, &m.name, QUOTA_FLAG)
                .and_then(|n| n.parse::<i64>().ok())
                .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES)
        })
        .min()
        .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES)
}

/// The value of etcd flag `prefix` (`--name=`) in member `name`'s pod.
fn flag<'a>(obs: &'a Observed, name: &str, prefix: &str) -> Option<&'a str> {
    let c = etcd_container(obs.pods.get(name)?)?;
    c.command
        .iter()
        .chain(c.args.iter())
        .flatten()
        .find_map(|a| a.strip_prefix(prefix))
}

/// The image of a pod's etcd container.
pub fn etcd_image(pod: &Pod) -> Option<String> {
    etcd_container(pod)?.image.clone()
}

fn etcd_container(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "etcd")
}

/// What the planner must know beside the cluster's objects and members, found by the task
/// (from its memory, the TLS material, the defragmentation schedule) and given as plain values.
#[derive(Debug)]
pub struct Known<'a> {
    /// The spec as the actions build it (the version may be held back): pods made from
    /// another template are not current.
    pub effective: &'a EtcdCluster,
    /// The fingerprint of the member TLS Secrets, part of the pod template.
    pub tls_revision: &'a str,
    /// A step of the automatic CA's rotation is due.
    pub rotation_due: bool,
    /// The revision and quota at which the last reclaim found that the data does not fit.
    pub exhausted_at: Option<(i64, i64)>,
    /// Voters whose defragmentation is due.
    pub defrag_due: std::collections::BTreeSet<String>,
}

/// The revision and the quota space is judged at now: the newest revision a member reported,
/// and the quota the members run with.
pub fn space_now(obs: &Observed) -> (i64, i64) {
    (
        obs.statuses.values().map(|s| s.revision).max().unwrap_or(0),
        running_quota(obs),
    )
}

/// Completes the planner's input with what the task knows. With [`observe`] (and
/// [`recheck_pods`] before a removal) the only writer of [`Observation`].
pub fn complete(obs: &mut Observed, known: Known<'_>) {
    mark_current(obs, known.effective, known.tls_revision);
    obs.plan.ca_rotation_due = known.rotation_due;
    // Nothing changed since the reclaim found the data does not fit (the same revision, the
    // same quota): the planner does not reclaim again.
    obs.plan.space_exhausted = known.exhausted_at == Some(space_now(obs));
    obs.plan.defrag_due = known.defrag_due;
}

/// Marks which pods are made from the template of `cluster` (the spec the actions build, which
/// may keep the running image while an upgrade step is not allowed).
fn mark_current(obs: &mut Observed, cluster: &EtcdCluster, tls_revision: &str) {
    let (hash, image) = (template_hash(cluster, tls_revision), cluster.spec.image());
    for view in &mut obs.plan.pods {
        let pod = obs.pods.get(&view.name);
        view.current = pod.is_some_and(|p| is_current(p, &hash, &image));
        view.image_only =
            !view.current && pod.is_some_and(|p| differs_only_in_image(p, cluster, tls_revision));
    }
}

/// Whether `pod` carries the hash of the template the spec asks for with the pod's own etcd
/// image in place of the spec's: nothing but the image has changed since it was made (what
/// the template hashes, [`template_hash`]; the etcd flags a version implies are hashed too).
fn differs_only_in_image(pod: &Pod, cluster: &EtcdCluster, tls_revision: &str) -> bool {
    let (Some(hash), Some(image)) = (
        pod.annotations().get(TEMPLATE_HASH_ANNOTATION),
        etcd_image(pod),
    ) else {
        return false;
    };
    *hash == template_hash_with_image(cluster, tls_revision, &image)
}

fn label_selector(name: &str) -> String {
    selector(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Names of the cluster's volume claims that exist and are not being deleted.
async fn list_claims(
    pvcs: &Api<PersistentVolumeClaim>,
    cluster: &EtcdCluster,
) -> Result<std::collections::BTreeSet<String>, Error> {
    let name = cluster.name_any();
    let name = name.as_str();
    let list = pvcs
        .list_metadata(&ListParams::default().labels(&label_selector(name)))
        .await
        .map_err(|source| Error::ListClaims {
            cluster: name.to_string(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| controlled_by(&c.metadata, cluster))
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name)
        .collect())
}

/// The cluster's pods from the watch cache, when this pass may read it.
fn cached_pods(handles: &Handles, cached: bool, cluster: &EtcdCluster) -> Option<Vec<Pod>> {
    let ns = cluster.namespace().unwrap_or_default();
    let pods = cached.then(|| handles.caches.pods.group(&ns, &cluster.name_any()))??;
    Some(pods.iter().map(|p| (**p).clone()).collect())
}

/// The cluster's claims that are not being deleted, from the watch cache, when this pass may
/// read it.
fn cached_claims(
    handles: &Handles,
    cached: bool,
    cluster: &EtcdCluster,
) -> Option<std::collections::BTreeSet<String>> {
    let ns = cluster.namespace().unwrap_or_default();
    let claims = cached.then(|| handles.caches.claims.group(&ns, &cluster.name_any()))??;
    Some(
        claims
            .iter()
            .filter(|c| controlled_by(&c.metadata, cluster))
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.metadata.name.clone())
            .collect(),
    )
}

async fn list_pods(pods_api: &Api<Pod>, name: &str) -> Result<Vec<Pod>, Error> {
    let selector = label_selector(name);
    pods_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .map_err(|source| Error::ListPods {
            cluster: name.to_string(),
            source,
        })
}

/// What one pass cannot see by itself: since when each member has been unhealthy, and since
/// when no member has answered. Kept by the cluster's task between passes; after an operator
/// restart the clocks start again, which only ever delays a replacement or a Failed phase.
#[derive(Debug, Default)]
pub struct HealthMemory {
    unhealthy_since: BTreeMap<String, Instant>,
    silent_since: Option<Instant>,
    reads: ReadMemory,
}

impl HealthMemory {
    /// Fills in `unhealthy_for` of each member and `silent_for` of the cluster as of `now`.
    pub fn stamp(&mut self, obs: &mut Observation, now: Instant) {
        let Some(members) = &mut obs.members else {
            // Keep the members' clocks: silence of the whole cluster is their silence too.
            let since = *self.silent_since.get_or_insert(now);
            obs.silent_for = now.saturating_duration_since(since);
            return;
        };
        self.silent_since = None;
        obs.silent_for = Duration::ZERO;
        self.unhealthy_since
            .retain(|name, _| members.iter().any(|m| &m.name == name && !m.healthy));
        for m in members.iter_mut() {
            m.unhealthy_for = if m.healthy {
                Duration::ZERO
            } else {
                let since = *self.unhealthy_since.entry(m.name.clone()).or_insert(now);
                now.saturating_duration_since(since)
            };
        }
    }
}

/// Whether `status`, as answered from the pod of member `m`, shows that member healthy: it
/// answered as itself (a pod whose IP was reused, or a member that restarted with another's
/// data, answers with another ID), it knows a leader, and it raises no alarm but NOSPACE (etcd
/// lists CORRUPT and "no leader" in the status errors; NOSPACE refuses the whole cluster's
/// writes, and is reported and reclaimed as such, see [`Observation::nospace`]).
pub fn is_healthy(m: &Member, status: &Status) -> bool {
    status.member_id == m.id && status.leader != 0 && !status.reports_problem_with(m.id)
}

/// The leader as the healthy voters see it: the one named in the answer with the newest raft
/// term, so a voter that has not heard of the last election yet is outvoted by one that has.
pub fn leader_of<'a>(healthy_voters: impl IntoIterator<Item = &'a Status>) -> Option<u64> {
    healthy_voters
        .into_iter()
        .filter(|s| s.leader != 0)
        .max_by_key(|s| s.raft_term)
        .map(|s| s.leader)
}

/// Observes `cluster`: its volume claims (when it has volumes), the pods; every pod's own
/// status (concurrently, each over its own connection); the member list from a healthy voter
/// whose pod is not being deleted, read linearizably; then health, the leader and how far
/// each member is behind it from those answers. Every pod counts as current until
/// [`mark_current`] says otherwise.
pub async fn observe(
    handles: &Handles,
    cached: bool,
    cluster: &EtcdCluster,
    (access, dials): (Access, &[Dial]),
    memory: &mut HealthMemory,
) -> Result<Observed, Error> {
    let mut obs = Observed {
        addr: Some(addressing(cluster)),
        access,
        nodes_unwatched: handles.caches.nodes.unwatched(),
        ..Observed::default()
    };
    observe_objects(handles, cached, cluster, &mut obs).await?;
    let existing = external::joining(cluster);
    obs.plan.existing = existing.is_some();
    let seeds = match existing {
        Some(e) => external_seeds(handles, e, dials, &obs.access).await,
        None => Vec::new(),
    };
    let mut answers = ask_every_pod(&obs).await;
    let Some((members, authoritative)) = member_list(&obs, &answers, &seeds).await else {
        memory.stamp(&mut obs.plan, Instant::now());
        return Ok(obs);
    };
    if let Some(access) = seeds.first().map(Endpoint::access) {
        answers.extend(ask_external(handles, cluster, &mut obs, &members, access).await);
    }
    view_members(&mut obs, &answers, &members, authoritative);
    obs.members = Some(members);
    // Without a quorum's answer no client is served, whatever the Service says.
    if authoritative {
        observe_serving(handles, cluster, &mut obs, memory).await?;
    }
    memory.stamp(&mut obs.plan, Instant::now());
    Ok(obs)
}

/// The cluster's claims (when it has volumes) and pods, and the members its status named.
async fn observe_objects(
    handles: &Handles,
    cached: bool,
    cluster: &EtcdCluster,
    obs: &mut Observed,
) -> Result<(), Error> {
    let name = cluster.name_any();
    // Claims before pods: a claim deleted after its pod was listed then shows as gone, which
    // only ever replaces a member, never restarts one without its data.
    if cluster
        .spec
        .pod
        .as_ref()
        .is_some_and(|p| p.persistent_volume_claim_spec.is_some())
    {
        obs.plan.claims = match cached_claims(handles, cached, cluster) {
            Some(claims) => claims,
            None => list_claims(&handles.pvcs, cluster).await?,
        };
    }
    obs.plan.known_members = cluster
        .status
        .iter()
        .flat_map(|s| &s.member_statuses)
        .map(|m| m.name.clone())
        .collect();
    let list = match cached_pods(handles, cached, cluster) {
        Some(pods) => pods,
        None => list_pods(&handles.pods, &name).await?,
    };
    let now = Timestamp::now();
    // A pod that only wears the cluster's labels is not a member: it is never counted,
    // replaced or deleted. One an operator of this kind made for a cluster of this name that
    // let it go (a released cluster) is noted: nothing is bootstrapped beside it.
    let (list, strangers): (Vec<Pod>, Vec<Pod>) = list
        .into_iter()
        .partition(|p| controlled_by(&p.metadata, cluster));
    obs.plan.released = strangers
        .iter()
        .filter(|p| p.annotations().contains_key(TEMPLATE_HASH_ANNOTATION))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect();
    for pod in list {
        let mut view = pod_view(&pod, now);
        view.node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        view.node_lost =
            (view.node.as_deref()).and_then(|n| handles.caches.nodes.not_ready_for(n, now));
        obs.plan.pods.push(view);
        obs.pods.insert(pod.name_any(), pod);
    }
    obs.plan.open_nodes = handles.caches.nodes.open();
    obs.plan.bootstrapped = !obs.pods.is_empty()
        || cluster
            .status
            .as_ref()
            .is_some_and(|s| !s.cluster_id.is_empty());
    Ok(())
}

/// What the planner needs of one pod.
fn pod_view(pod: &Pod, now: Timestamp) -> PodView {
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
    let restore = pod.annotations().get(RESTORE_UID_ANNOTATION).map(|uid| {
        let from = pod.annotations().get(RESTORE_FROM_ANNOTATION);
        (uid.clone(), from.cloned().unwrap_or_default())
    });
    PodView {
        name: pod.name_any(),
        state: pod_state(pod),
        age,
        joining,
        restore,
        current: true,
        image_only: false,
        foreign: foreign_pod(pod),
        failing: failing(pod),
        node_lost: None,
        node: None,
    }
}

/// Every pod's answer about itself, by pod name, asked concurrently.
async fn ask_every_pod(obs: &Observed) -> BTreeMap<String, Status> {
    let mut asks = tokio::task::JoinSet::new();
    for pod in obs.pods.keys() {
        if let Some(ep) = obs.pod_endpoint(pod) {
            let timeout = if obs.plan.pod_alive(pod) {
                ETCD_TIMEOUT
            } else {
                LEAVING_TIMEOUT
            };
            let pod = pod.clone();
            asks.spawn(async move { (pod, etcd::status(&ep, timeout).await) });
        }
    }
    let mut answers: BTreeMap<String, Status> = BTreeMap::new();
    while let Some(done) = asks.join_next().await {
        if let Ok((pod, Ok(status))) = done {
            answers.insert(pod, status);
        }
    }
    answers
}

/// The member list, and whether it is authoritative: from a voter that knows a leader,
/// raises no alarm and is not leaving, the leader itself first; read after a linearizable
/// read, so that it is at least as new as the leader's commit index, never a partitioned
/// member's stale view. When no such voter gives it (quorum is gone, say), any member that
/// answers still knows the membership it last saw, which tells how many voters are missing;
/// that list is not authoritative, so no member counts as healthy on it, and nothing is
/// changed on it.
async fn member_list(
    obs: &Observed,
    answers: &BTreeMap<String, Status>,
    seeds: &[Endpoint],
) -> Option<(Vec<Member>, bool)> {
    let mut sources: Vec<(&String, &Status)> = answers
        .iter()
        .filter(|(pod, s)| {
            !s.is_learner
                && s.leader != 0
                && !s.reports_problem_with(s.member_id)
                && obs.plan.pod_alive(pod)
        })
        .collect();
    sources.sort_by_key(|(_, s)| (s.member_id != s.leader, std::cmp::Reverse(s.raft_term)));
    let endpoints: Vec<_> = sources
        .iter()
        .filter_map(|(pod, _)| obs.pod_endpoint(pod))
        .collect();
    if let Some(list) = crate::etcd::members_from(&endpoints, ETCD_TIMEOUT).await {
        return Some((list, true));
    }
    // The external cluster this one joins, read linearizably as well.
    if let Some(list) = crate::etcd::members_from(seeds, ETCD_TIMEOUT).await {
        return Some((list, true));
    }
    for pod in answers.keys() {
        let Some(ep) = obs.pod_endpoint(pod) else {
            continue;
        };
        if let Ok(mut etcd) = Etcd::connect(&ep, ETCD_TIMEOUT).await
            && let Ok(list) = etcd.members().await
        {
            return Some((list, false));
        }
    }
    None
}

/// The planner's view of each member: health, the leader, and how far each is behind it.
fn view_members(
    obs: &mut Observed,
    answers: &BTreeMap<String, Status>,
    members: &[Member],
    authoritative: bool,
) {
    let mut views = Vec::with_capacity(members.len());
    for m in members {
        let name = obs.name_of(m);
        let answer = answers.get(&name).filter(|s| s.member_id == m.id);
        if let Some(s) = answer {
            obs.statuses.insert(m.id, s.clone());
            obs.plan.applied.insert(name.clone(), s.raft_applied_index);
        }
        views.push(MemberView {
            healthy: authoritative && answer.is_some_and(|s| is_healthy(m, s)),
            name,
            id: m.id,
            is_learner: m.is_learner,
            unhealthy_for: Duration::ZERO,
            caught_up: false,
        });
    }
    obs.plan.leader = leader_of(
        views
            .iter()
            .filter(|v| v.healthy && !v.is_learner && obs.plan.alive(&v.name))
            .filter_map(|v| obs.statuses.get(&v.id)),
    );
    let leader_index = obs
        .plan
        .leader
        .and_then(|l| obs.statuses.get(&l))
        .map(|s| s.raft_index);
    for v in &mut views {
        v.caught_up = match (leader_index, obs.statuses.get(&v.id)) {
            (Some(leader), Some(s)) => caught_up(leader, s),
            _ => false,
        };
    }
    obs.plan.nospace = obs.statuses.values().flat_map(Status::nospace).collect();
    obs.plan.members = Some(views);
}

/// The endpoints of the etcd this cluster joins (`spec.bootstrap.existing.endpoints`) as
/// the gate authorized them (src/reference), while it joins one; none otherwise. The pass's
/// validation reports a refusal; observe dials only what this returned.
pub async fn external_dials(
    handles: &Handles,
    cluster: &EtcdCluster,
) -> Result<Vec<Dial>, Refused> {
    let Some(existing) = external::joining(cluster) else {
        return Ok(Vec::new());
    };
    let client = handles.services.clone().into_client();
    let ns = cluster.namespace().unwrap_or_default();
    let field = "spec.bootstrap.existing.endpoints";
    reference::kube::authorize(&client, &ns, field, &existing.endpoints).await
}

/// Where the external cluster this one joins is first reached: `dials` (see
/// [`external_dials`]), with the client identity `clientTLSSecret` names (else the
/// cluster's own). A Secret that cannot be read leaves the cluster's own identity: the pass's
/// validation reports it.
async fn external_seeds(
    handles: &Handles,
    existing: &crate::api::ExistingCluster,
    dials: &[Dial],
    access: &Access,
) -> Vec<Endpoint> {
    let mut access = access.clone();
    if let Some(name) = existing.client_tls_secret.as_deref() {
        let field = "spec.bootstrap.existing.clientTLSSecret";
        let now = time::OffsetDateTime::now_utc();
        if let Ok(tls) = crate::tls::read_client(&handles.secrets, field, name, now).await {
            access.tls = Some(tls);
            access.cert_is_root = false;
        }
    }
    dials.iter().map(|d| d.endpoint(access.clone())).collect()
}

/// Notes which members of `members` are external, and asks each for its status by its own
/// client URL (with `access`), keyed by its name. An answer from another cluster than the one
/// the status recorded is no answer.
async fn ask_external(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &mut Observed,
    members: &[Member],
    access: &Access,
) -> BTreeMap<String, Status> {
    let addr = obs.addr.clone().unwrap_or_else(|| addressing(cluster));
    let recorded =
        (cluster.status.as_ref()).and_then(|s| u64::from_str_radix(&s.cluster_id, 16).ok());
    let resolver = KubeResolver::new(&handles.services.clone().into_client());
    let policy = reference::policy();
    let ns = cluster.namespace().unwrap_or_default();
    let mut asks = tokio::task::JoinSet::new();
    for m in members.iter().filter(|m| !external::is_own(&addr, m)) {
        let name = external::member_name(&addr, true, m);
        obs.plan.external.insert(name.clone());
        let (Some(client), Some(peer)) = (m.client_urls.first(), m.peer_urls.first()) else {
            continue;
        };
        // The member list is the external cluster's word, not the spec's: its URLs pass the
        // same gate as the endpoints (a cluster could list another tenant's members).
        let (client, peer) = match (
            reference::etcd_url(&resolver, &policy, &ns, LISTED, client).await,
            reference::etcd_url(&resolver, &policy, &ns, LISTED, peer).await,
        ) {
            (Ok(client), Ok(peer)) => (client, peer),
            (Err(refused), _) | (_, Err(refused)) => {
                warn!(cluster = %cluster.name_any(), %refused, "external member not reached");
                continue;
            }
        };
        let endpoint = client.endpoint(access.clone());
        let Some(gate) = gate_entry(&peer.url).await else {
            continue;
        };
        obs.external.insert(name.clone(), (endpoint.clone(), gate));
        asks.spawn(async move { (name, etcd::status(&endpoint, ETCD_TIMEOUT).await) });
    }
    let mut answers = BTreeMap::new();
    while let Some(done) = asks.join_next().await {
        if let Ok((name, Ok(status))) = done
            && recorded.is_none_or(|id| id == status.cluster_id)
        {
            answers.insert(name, status);
        }
    }
    answers
}

/// The field a refused URL of an external member's is reported under.
const LISTED: &str = "spec.bootstrap.existing.endpoints (a member its cluster lists)";

/// Where a joining member's gate reads the member list from an external member with peer URL
/// `peer`: the gate takes addresses only (`http://IP:port`, or `HOST=https://IP:port` whose
/// certificate names HOST), so a name is looked up here.
async fn gate_entry(peer: &str) -> Option<String> {
    let (scheme, rest) = peer.split_once("://")?;
    let authority = rest.split('/').next()?;
    let host = external::url_host(peer);
    let port: u16 = authority.rsplit_once(':')?.1.parse().ok()?;
    let ip = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip,
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .ok()?
            .next()?
            .ip(),
    };
    let at = std::net::SocketAddr::new(ip, port);
    Some(if scheme == "https" {
        format!("{host}=https://{at}")
    } else {
        format!("http://{at}")
    })
}

/// What the client Service serves (see [`serving`]), and which healthy voters it does not
/// publish yet.
async fn observe_serving(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &mut Observed,
    memory: &mut HealthMemory,
) -> Result<(), Error> {
    let sources = serving::Sources {
        caches: &handles.caches,
        services: &handles.services,
        slices: &handles.slices,
    };
    let available = cluster
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, ConditionType::Available))
        .is_some_and(Condition::is_true);
    let how = serving::Read {
        access: obs.access.clone(),
        cluster_id: obs.statuses.values().next().map(|s| s.cluster_id),
        standing: memory.reads.standing(available, Instant::now()),
    };
    let made = how.standing.is_none();
    let addr = obs.addr.clone().unwrap_or_else(|| addressing(cluster));
    obs.serving = serving::observe(&sources, cluster, &addr, &obs.pods, how).await?;
    memory.reads.stamp(&mut obs.serving, made, Instant::now());
    obs.plan.unpublished = obs
        .plan
        .members
        .iter()
        .flatten()
        .filter(|m| m.healthy && !m.is_learner && obs.plan.pod_alive(&m.name))
        .filter(|m| !obs.serving.published.contains(&m.name))
        .map(|m| m.name.clone())
        .collect();
    Ok(())
}

/// Whether a member that answered `status` has applied what the leader, at `leader_index`,
/// has committed, give or take [`CAUGHT_UP_LAG`] entries.
fn caught_up(leader_index: u64, status: &Status) -> bool {
    // etcd before 3.4 reports no applied index.
    let applied = match status.raft_applied_index {
        0 => status.raft_index,
        i => i,
    };
    leader_index.saturating_sub(applied) <= CAUGHT_UP_LAG
}

/// Lists the pods again and moves each pod's state towards gone where it has gone since the
/// observation: called immediately before a removal, so that a pod deleted while etcd was
/// being asked never counts as a healthy voter's (two pods deleted at once), and the removal
/// is planned again on what is true now. Only states move towards gone; anything newer waits
/// for the next pass.
pub async fn recheck_pods(
    pods_api: &Api<Pod>,
    cluster: &EtcdCluster,
    obs: &mut Observation,
) -> Result<(), Error> {
    let again = list_pods(pods_api, &cluster.name_any()).await?;
    towards_gone(obs, &again);
    Ok(())
}

/// Moves each pod's state in `obs` towards gone where `fresh` (a newer list) shows it gone or
/// being deleted; a pod missing from `fresh` is taken as being deleted.
fn towards_gone(obs: &mut Observation, fresh: &[Pod]) {
    for view in &mut obs.pods {
        let now = fresh.iter().find(|p| p.name_any() == view.name);
        let state = now.map_or(PodState::Terminating, pod_state);
        if state.is_gone() && !view.state.is_gone() {
            view.state = state;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(member_id: u64, leader: u64, term: u64) -> Status {
        Status {
            member_id,
            cluster_id: 7,
            leader,
            version: "3.6.16".into(),
            db_size: 0,
            db_size_in_use: 0,
            raft_index: 0,
            raft_term: term,
            revision: 1,
            raft_applied_index: 0,
            is_learner: false,
            errors: vec![],
        }
    }

    fn member(id: u64) -> Member {
        Member {
            id,
            name: format!("m{id}"),
            peer_urls: vec![format!("http://m{id}.c.ns.svc:2380")],
            client_urls: vec![],
            is_learner: false,
        }
    }

    #[test]
    fn healthy_means_itself_with_a_leader_and_no_alarm() {
        assert!(is_healthy(&member(1), &status(1, 2, 3)));
        // Another member answered from this pod's address.
        assert!(!is_healthy(&member(1), &status(9, 2, 3)));
        // It knows no leader.
        assert!(!is_healthy(&member(1), &status(1, 0, 3)));
        // An alarm is raised for it; another member's alarm is that member's problem.
        let corrupt = Status {
            errors: vec!["memberID:1 alarm:CORRUPT ".into()],
            ..status(1, 2, 3)
        };
        assert!(!is_healthy(&member(1), &corrupt));
        let others = Status {
            errors: vec!["memberID:12 alarm:CORRUPT ".into()],
            ..status(1, 2, 3)
        };
        assert!(is_healthy(&member(1), &others));
        // NOSPACE is the cluster's, not the member's: it still serves everything but writes
        // that grow the database, and replacing it would not help.
        let nospace = Status {
            errors: vec!["memberID:1 alarm:NOSPACE ".into()],
            ..status(1, 2, 3)
        };
        assert!(is_healthy(&member(1), &nospace));
        assert_eq!(nospace.nospace(), [1]);
        assert!(corrupt.nospace().is_empty());
        // The status names each member's alarms, and only its own.
        let both = Status {
            errors: vec![
                "memberID:1 alarm:NOSPACE ".into(),
                "memberID:12 alarm:CORRUPT ".into(),
            ],
            ..status(1, 2, 3)
        };
        assert_eq!(both.alarms_of(1), ["NOSPACE"]);
        assert_eq!(both.alarms_of(12), ["CORRUPT"]);
        assert!(both.alarms_of(2).is_empty());
    }

    #[test]
    fn a_pod_is_current_by_its_hash_or_else_its_image_and_failing_by_its_waiting_reason() {
        use crate::api::EtcdClusterSpec;
        use crate::cluster::resources::member_pod;
        let spec = |version: &str| EtcdClusterSpec {
            size: 3,
            version: Some(version.into()),
            ..Default::default()
        };
        let cluster = EtcdCluster::new("example", spec("3.5.35"));
        let upgraded = EtcdCluster::new("example", spec("3.6.16"));
        let mut pod = member_pod(
            &cluster,
            "example-a",
            vec![],
            None,
            &crate::tls::Material::default(),
        );
        let now = |c: &EtcdCluster| template_hash(c, "");
        assert!(is_current(&pod, &now(&cluster), &cluster.spec.image()));
        assert!(!is_current(&pod, &now(&upgraded), &upgraded.spec.image()));
        // Made by an operator that set no hash: the image decides.
        pod.metadata.annotations = None;
        assert!(is_current(&pod, &now(&upgraded), &cluster.spec.image()));
        assert!(!is_current(&pod, &now(&cluster), &upgraded.spec.image()));
        // Shaped by another maker (coreos's operator): rolled, whatever its image.
        pod.metadata.labels = Some([("app".to_string(), "etcd".to_string())].into());
        assert!(!is_current(&pod, &now(&cluster), &cluster.spec.image()));

        assert_eq!(failing(&pod), None);
        let waiting = |reason: &str| k8s_openapi::api::core::v1::ContainerStatus {
            name: "etcd".into(),
            state: Some(k8s_openapi::api::core::v1::ContainerState {
                waiting: Some(k8s_openapi::api::core::v1::ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: Some("pull access denied".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            container_statuses: Some(vec![waiting("ContainerCreating")]),
            ..Default::default()
        });
        assert_eq!(failing(&pod), None, "starting is not failing");
        pod.status.as_mut().unwrap().container_statuses = Some(vec![waiting("ImagePullBackOff")]);
        assert_eq!(
            failing(&pod).as_deref(),
            Some("etcd: ImagePullBackOff: pull access denied")
        );
    }

    #[test]
    fn the_leader_is_the_one_of_the_newest_term() {
        // A voter still in term 3 names 1; two in term 4 name 2.
        let answers = [status(1, 1, 3), status(2, 2, 4), status(3, 2, 4)];
        assert_eq!(leader_of(&answers), Some(2));
        assert_eq!(leader_of(&[status(1, 0, 5)]), None);
    }

    #[test]
    fn a_removal_is_planned_again_on_the_pods_as_they_are_now() {
        use crate::cluster::plan::{Action, Target, plan};
        // Two of three pods deleted at once: when etcd was asked, m1 was already silent and
        // m2's deletion had not reached the first list; m2 still answered.
        let view = |name: &str, id, healthy| MemberView {
            name: name.into(),
            id,
            is_learner: false,
            healthy,
            unhealthy_for: Duration::from_secs(if healthy { 0 } else { 3600 }),
            caught_up: true,
        };
        let running = |name: &str| PodView {
            name: name.into(),
            state: PodState::Running,
            age: Duration::from_secs(600),
            joining: None,
            restore: None,
            current: true,
            image_only: false,
            foreign: false,
            failing: None,
            node_lost: None,
            node: None,
        };
        let mut obs = Observation {
            members: Some(vec![
                view("m1", 1, false),
                view("m2", 2, true),
                view("m3", 3, true),
            ]),
            leader: Some(3),
            pods: vec![
                PodView {
                    state: PodState::Terminating,
                    ..running("m1")
                },
                running("m2"),
                running("m3"),
            ],
            bootstrapped: true,
            ..Observation::default()
        };
        let target = Target {
            size: 3,
            learner_timeout: Duration::from_secs(300),
            startup_grace: Duration::from_secs(60),
            replace_after: Duration::from_secs(300),
            quorum_grace: Duration::from_secs(30),
            node_grace: Duration::from_secs(30),
            max_learners: 1,
            ..Target::default()
        };
        assert!(matches!(
            plan(&obs, &target),
            Action::ReplaceMember { id: 1, .. }
        ));
        // The list taken immediately before the removal: m1 is gone, m2 is being deleted.
        let pod = |name: &str, deleting: bool| Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: deleting.then(|| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now())
                }),
                ..Default::default()
            },
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        towards_gone(&mut obs, &[pod("m2", true), pod("m3", false)]);
        assert!(matches!(plan(&obs, &target), Action::QuorumLost { .. }));
    }

    #[test]
    fn silence_is_timed_from_its_first_sight_and_forgotten_on_an_answer() {
        let mut memory = HealthMemory::default();
        let t0 = Instant::now();
        let view = |healthy| MemberView {
            name: "m1".into(),
            id: 1,
            is_learner: false,
            healthy,
            unhealthy_for: Duration::ZERO,
            caught_up: true,
        };
        let mut obs = Observation {
            members: Some(vec![view(false)]),
            ..Observation::default()
        };
        memory.stamp(&mut obs, t0);
        memory.stamp(&mut obs, t0 + Duration::from_secs(5));
        assert_eq!(
            obs.members.as_ref().unwrap()[0].unhealthy_for,
            Duration::from_secs(5)
        );
        // Nobody answers for a while: the cluster's silence is timed, the member's clock runs on.
        let mut silent = Observation::default();
        memory.stamp(&mut silent, t0 + Duration::from_secs(6));
        memory.stamp(&mut silent, t0 + Duration::from_secs(9));
        assert_eq!(silent.silent_for, Duration::from_secs(3));
        memory.stamp(&mut obs, t0 + Duration::from_secs(10));
        assert_eq!(
            obs.members.as_ref().unwrap()[0].unhealthy_for,
            Duration::from_secs(10)
        );
        // One healthy answer resets it.
        let mut well = Observation {
            members: Some(vec![view(true)]),
            ..Observation::default()
        };
        memory.stamp(&mut well, t0 + Duration::from_secs(11));
        memory.stamp(&mut obs, t0 + Duration::from_secs(12));
        assert_eq!(
            obs.members.as_ref().unwrap()[0].unhealthy_for,
            Duration::ZERO
        );
    }
}
