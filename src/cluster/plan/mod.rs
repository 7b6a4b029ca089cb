//! The planner: from what was observed about one cluster (etcd's member list, each member's
//! status, the pods) and the spec, the single next step. Pure: no client, no clock.
//!
//! It keeps the membership rules: at most one membership change at a time; nothing that leaves
//! the cluster without quorum; members join as learners and are promoted once etcd accepts it;
//! scale-down removes a pending learner first (it is never promoted only to be removed), then an
//! unhealthy member, then a follower, never the leader; a member whose pod is gone is removed
//! (and replaced by the scale-up path) unless it keeps its data on a volume; a member that stays
//! unhealthy while its pod runs is replaced after [`Target::replace_after`]; every partial state
//! a crash leaves is finished or undone; lost quorum is reported only once the silent members
//! have been silent for [`Target::quorum_grace`] (a restarting member is not a lost cluster), and
//! nothing destructive is done.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod action;
mod hibernate;
mod recovery;
mod restore;
mod steps;
#[cfg(test)]
mod tests;
pub mod version;
mod volumes;

pub use action::{Action, Counted, DeleteReason, MoveReason, Progress, RemoveReason, Rest, Step};
pub use hibernate::{FinalSnapshot, Hibernate};
pub use recovery::{Approval, Recover, RecoveryPolicy, recover};
pub use restore::{RestoreTarget, restore};
use steps::{rescue_persistent, without_member_list};
pub use volumes::Volumes;

/// A pod's lifecycle as far as the planner cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Not running yet (scheduling, pulling, init containers).
    Pending,
    /// Its containers run.
    Running,
    /// It ended (Failed or Succeeded: etcd never exits on its own).
    Gone,
    /// It is being deleted: as good as gone, and not to be deleted again.
    Terminating,
}

impl PodState {
    /// Ended or being deleted.
    pub fn is_gone(self) -> bool {
        matches!(self, PodState::Gone | PodState::Terminating)
    }
}

/// One pod that belongs to the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Pod name, which is also the member name.
    pub name: String,
    /// Its state.
    pub state: PodState,
    /// How long ago it was created.
    pub age: Duration,
    /// For a pod created ahead of its member (its etcd waits behind `etcd-gate` until the
    /// member is added): the other members its `--initial-cluster` names.
    pub joining: Option<BTreeSet<String>>,
    /// For a seed restored from a snapshot: the restore's UID and the URL its gate fetches
    /// the snapshot from.
    pub restore: Option<(String, String)>,
    /// Whether it was made from the pod template the spec asks for now (image, pod policy).
    /// A member whose pod is not is rolled: replaced, or restarted on its volume.
    pub current: bool,
    /// Whether, not current, it differs from the template the spec asks for only in its etcd
    /// image (an upgrade, nothing else changed since it was made): its member is rolled by
    /// changing the image of the running pod, the container restarting on the same data,
    /// rather than by a new pod.
    pub image_only: bool,
    /// Whether another maker shaped it (the coreos operator, whose cluster was taken over): its
    /// member is replaced by one that joins first, never restarted on its claim, whose data
    /// (written by etcd running as root, mode 0700) a member of this operator (not root)
    /// could not open.
    pub foreign: bool,
    /// Why it cannot start, when the kubelet says so (an image that cannot be pulled, a
    /// container that crash-loops): a roll that reaches such a pod stops there.
    pub failing: Option<String>,
    /// How long its node has not been Ready (the node dead, or cut off from the API server),
    /// counted from the kubelet's last heartbeat when the node controller marked it Unknown;
    /// `None` while it is Ready, or when nodes are not watched.
    pub node_lost: Option<Duration>,
    /// The node it was put on, once scheduled.
    pub node: Option<String>,
}

/// One member from etcd's member list, with its status if it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// Member name (the first label of its peer URL).
    pub name: String,
    /// etcd member ID.
    pub id: u64,
    /// Whether it is a learner.
    pub is_learner: bool,
    /// Whether it is healthy: it answered a status request as itself (the member ID it reports
    /// is this one), it knows a leader, and it raises no alarm.
    pub healthy: bool,
    /// How long it has been unhealthy without a break, as far as this operator has watched it
    /// (zero when healthy; the clock starts again when the operator restarts, which only ever
    /// delays a replacement).
    pub unhealthy_for: Duration,
    /// Whether it has applied (nearly) everything the leader has committed, as far as the
    /// answers of one observation tell: a roll moves on only when every voter has.
    pub caught_up: bool,
}

/// Everything the planner needs about one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// etcd's member list, or `None` when no member answered.
    pub members: Option<Vec<MemberView>>,
    /// ID of the leader, when known.
    pub leader: Option<u64>,
    /// The cluster's pods.
    pub pods: Vec<PodView>,
    /// Whether the seed was ever created (recorded in status, or a pod exists), so the
    /// operator never bootstraps twice.
    pub bootstrapped: bool,
    /// How long no member has answered (zero when one did).
    pub silent_for: Duration,
    /// Volume claims of the cluster that exist and are not being deleted, by name (a member's
    /// claim has the member's name). Only observed for clusters with persistent volumes.
    pub claims: BTreeSet<String>,
    /// The members the last written status listed: when no member answers, these are the
    /// members whose pods may be recreated on their claims.
    pub known_members: BTreeSet<String>,
    /// Healthy voters that clients of the client Service do not reach yet (the pod not Ready,
    /// or not published as a ready endpoint): a roll waits for them, so that its next step
    /// never leaves clients fewer members than the step itself takes.
    pub unpublished: BTreeSet<String>,
    /// Members with a NOSPACE alarm raised: the database reached its quota, and the cluster
    /// refuses every write that would grow it until the alarm is disarmed.
    pub nospace: BTreeSet<u64>,
    /// The last reclaim found that the data, compacted, does not fit the quota the members
    /// run with, and nothing has changed since (no new revision: nothing deleted; the same
    /// quota): reclaiming again would find the same, so the other steps go on (a dead member
    /// replaced, a roll to a larger quota) while the status says so.
    pub space_exhausted: bool,
    /// Members that answered a status request as themselves (quorum or not), by name, with
    /// the raft index each has applied: what a recovery from lost quorum chooses from.
    pub applied: BTreeMap<String, u64>,
    /// Voters due for scheduled defragmentation (`spec.maintenance.defrag`: a tick of its
    /// schedule passed since they were last defragmented, and their free space is over its
    /// threshold).
    pub defrag_due: BTreeSet<String>,
    /// The cluster's automatic CA has a rotation step to take (asked for, or two thirds of
    /// its validity passed, or a rotation under way).
    pub ca_rotation_due: bool,
    /// The nodes a new member could be put on (Ready, not cordoned, not tainted); `None` when
    /// nodes are not watched or not yet listed: members are then never moved for spread.
    pub open_nodes: Option<BTreeSet<String>>,
    /// Members of the cluster running elsewhere that this one joined
    /// (`spec.bootstrap.existing`), by etcd name: voters with no pod, counted towards quorum,
    /// never replaced, rolled or moved; they leave only by [`Target::remove_external`].
    pub external: BTreeSet<String>,
    /// Pods this kind of operator made with the cluster's labels that the cluster does not
    /// own (a released cluster's members, still running): no new cluster is bootstrapped
    /// beside them, whose pods the client Service would mix with theirs.
    pub released: BTreeSet<String>,
    /// The cluster joins one running elsewhere: it is never bootstrapped, even when no member
    /// answers (the external cluster is down, or not reached yet).
    pub existing: bool,
    /// While hibernating with a store: the final snapshot, judged against the members' newest
    /// revision.
    pub final_snapshot: FinalSnapshot,
    /// The members' claims against the spec's storage request ([`Volumes`]).
    pub volumes: Volumes,
}

impl Observation {
    /// Whether member `name`'s pod exists and is neither ended nor being deleted. A member
    /// whose pod is being deleted still answers for a moment, but it is on its way out: it
    /// counts towards neither quorum nor readiness.
    pub fn pod_alive(&self, name: &str) -> bool {
        self.pods
            .iter()
            .any(|p| p.name == name && !p.state.is_gone())
    }

    /// Whether member `name` can count towards quorum: its pod is alive, or it is external
    /// (whose process this operator does not see).
    pub fn alive(&self, name: &str) -> bool {
        self.external.contains(name) || self.pod_alive(name)
    }

    fn pod(&self, name: &str) -> Option<&PodView> {
        self.pods.iter().find(|p| p.name == name)
    }

    /// Whether member `name`'s pod is on a node that has not been Ready for `grace`.
    fn node_lost(&self, name: &str, grace: Duration) -> bool {
        self.pod(name)
            .and_then(|p| p.node_lost)
            .is_some_and(|d| d >= grace)
    }

    /// Whether member `name` has a pod made from an older pod template, or must move to a
    /// larger claim ([`Volumes::must_move`]).
    fn stale(&self, name: &str) -> bool {
        self.pod(name)
            .is_some_and(|p| !p.current || self.volumes.must_move(name))
    }
}

/// What the planner is asked to reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// `spec.size`.
    pub size: usize,
    /// `spec.paused`.
    pub paused: bool,
    /// Members keep their data on volumes: a member whose pod is gone gets its pod back.
    pub persistent: bool,
    /// How long a learner may take to start before its addition is undone.
    pub learner_timeout: Duration,
    /// How long a new pod may take to answer before silence counts as lost quorum.
    pub startup_grace: Duration,
    /// How long a member may stay unhealthy while its pod runs (crash-looping, stuck Pending,
    /// raising an alarm) before it is removed and replaced.
    pub replace_after: Duration,
    /// How long members may be silent before their silence counts as lost quorum: a member
    /// whose container restarts is back within seconds.
    pub quorum_grace: Duration,
    /// How long a member's node may have been silent (its kubelet's last heartbeat), or not
    /// Ready, while the member does not answer, before the member is replaced on another node
    /// (members without volumes only); zero: never.
    pub node_grace: Duration,
    /// For members with volumes: how long their node may have been lost (as for
    /// [`Target::node_grace`], and never less than it) before their data is given up on and
    /// they are replaced on another node with a new claim; zero: they wait for their node.
    pub volume_loss_after: Duration,
    /// How many learners every member accepts at once (etcd 3.6's `--max-learners`, carried by
    /// every member's pod; 1 otherwise). Each member checks the limit as it applies an
    /// addition, so it is the smallest of the members'.
    pub max_learners: usize,
    /// Members may be moved between nodes so that no node holds more voters than the cluster
    /// can lose (see [`Action::SpreadMember`]): the operator places the members (no volumes,
    /// which tie a member to its node's storage; no node selector or affinity of the user's,
    /// which the planner cannot judge).
    pub spread: bool,
    /// The external members leave (`spec.bootstrap.existing.removeExternal`), one at a time,
    /// once this operator's members are `size` healthy voters.
    pub remove_external: bool,
    /// While `spec.maintenance.window` is closed: when it next opens. Voluntary disruptions
    /// (rolls, spreading back, defragmentation) wait for it; see
    /// [`crate::api::Maintenance::window`].
    pub window_opens: Option<k8s_openapi::jiff::Timestamp>,
    /// `spec.hibernation.enabled`: the cluster is put to sleep.
    pub hibernate: Option<Hibernate>,
    /// A standby not bootstrapped yet: its first member is the seed of its EtcdRestore (the
    /// source's data), never an empty one of its own.
    pub standby_bootstrap: bool,
}

/// The share of the quota (percent) that the data, compacted, may use for NOSPACE to be
/// disarmed: above it the next writes would raise it again at once, and disarming again and
/// again would only make a loop of refusals and defragmentations.
pub const RECLAIM_MAX_IN_USE: u8 = 90;

/// Majority of `voters`.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// The next step for one cluster. The steps are tried in order of priority; the first that
/// has something to do decides.
pub fn plan(obs: &Observation, target: &Target) -> Action {
    if target.paused {
        return Action::Paused;
    }
    if let Some(h) = &target.hibernate {
        return hibernate::plan(obs, h);
    }
    // Getting a persistent member's pod back never costs anything (its data waits on its
    // claim), and after a node reboot it is the only way quorum comes back: before the
    // quorum check.
    if let Some(a) = rescue_persistent(obs, target) {
        return a;
    }
    let Some(members) = &obs.members else {
        if !obs.bootstrapped && obs.pods.is_empty() && target.standby_bootstrap {
            return Action::Wait {
                reason: "a standby starts from its source's archive: waiting for its \
                         EtcdRestore to hand over"
                    .into(),
            };
        }
        if !obs.bootstrapped && obs.pods.is_empty() && !obs.released.is_empty() {
            let names: Vec<&str> = obs.released.iter().map(String::as_str).collect();
            return Action::Wait {
                reason: format!(
                    "pods {} carry this cluster's labels but are not its (a released \
                     cluster's members?): no new cluster is bootstrapped beside them; delete \
                     them, or give this cluster another name",
                    names.join(", ")
                ),
            };
        }
        if obs.existing && obs.pods.is_empty() {
            return Action::Wait {
                reason: "no member of the existing cluster (spec.bootstrap.existing.endpoints) \
                         answers; this cluster joins it and is never bootstrapped empty"
                    .into(),
            };
        }
        return without_member_list(obs, target);
    };
    steps::next(obs, target, members)
}
