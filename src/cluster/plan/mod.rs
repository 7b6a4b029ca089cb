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

mod recovery;
mod restore;
mod steps;
#[cfg(test)]
mod tests;
pub mod version;

pub use recovery::{Approval, Recover, RecoveryPolicy, recover};
pub use restore::{RestoreTarget, restore};
use steps::{rescue_persistent, without_member_list};

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

    fn pod(&self, name: &str) -> Option<&PodView> {
        self.pods.iter().find(|p| p.name == name)
    }

    /// Whether member `name`'s pod is on a node that has not been Ready for `grace`.
    fn node_lost(&self, name: &str, grace: Duration) -> bool {
        self.pod(name)
            .and_then(|p| p.node_lost)
            .is_some_and(|d| d >= grace)
    }

    /// Whether member `name` has a pod made from an older pod template.
    fn stale(&self, name: &str) -> bool {
        self.pod(name).is_some_and(|p| !p.current)
    }
}

/// What the planner is asked to reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// A learner was added but its pod never came (the operator stopped in between) or died.
    StrandedLearner,
    /// Its pod is gone, and its data with it.
    PodGone,
    /// Scale-down.
    ScaleDown,
    /// It stayed unhealthy past [`Target::replace_after`] while its pod ran; the scale-up path
    /// replaces it.
    Unhealthy,
    /// Its pod is made from an older pod template (an upgrade, a pod-policy change) and it has
    /// no volume to be restarted on: a member with the new template has joined in its place.
    Outdated,
    /// Its volume claim is gone or being deleted, and its data with it: it is never restarted
    /// empty under its old ID, but replaced by a new member.
    DataGone,
    /// It does not answer and its node has not been Ready (or not heard from) for
    /// [`Target::node_grace`] ([`Target::volume_loss_after`] with a volume): it is replaced on
    /// another node. Its old pod is force-deleted once it is removed (its claim deleted after);
    /// should the node come back, its etcd finds itself removed and stops.
    NodeLost,
    /// Its node holds more voters than the cluster can lose, and a member added on another
    /// node (see [`Action::SpreadMember`]) takes its place.
    Spread,
}

/// Why leadership is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveReason {
    /// A roll: the leader is rolled last.
    Roll,
    /// The leader's pod is being deleted, or its data is going: its member is replaced once
    /// another leads, without an election.
    Leaving,
}

/// Why a pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// Its member is not (or no longer) in etcd's member list.
    NoMember,
    /// It ended (evicted, or its node rebooted) and its member keeps its data on a volume: the
    /// pod is recreated on the same claim once this one is gone.
    Ended,
    /// A restore replaces the cluster's members: a member of the cluster being replaced, or a
    /// seed that cannot finish (it ended, or fetches from an operator that no longer leads).
    Restore,
    /// Its pod is made from an older pod template and its member keeps its data on a volume:
    /// the pod is recreated with the new template on the same claim, same name, same member.
    Outdated,
    /// It has no member and its node is not Ready: its kubelet cannot confirm the deletion, so
    /// it is deleted at once (force), which is safe because its member is already removed.
    NodeLost,
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the seed member's pod (`--initial-cluster-state=new`, a fresh token).
    Bootstrap,
    /// Start `count` new members at once: their pods first (each names all of them in its
    /// `--initial-cluster`, and its etcd waits until every one is added), then each is added
    /// as a learner. More than one only where every member accepts that many learners. The
    /// pods are kept off the nodes in `avoid`: those that would then hold more voters than the
    /// grown cluster can lose, while another node is open (empty otherwise; only for clusters
    /// the operator spreads).
    AddMembers { count: usize, avoid: Vec<String> },
    /// Add the member of a pod that was created ahead of it (the addition's second half).
    JoinMembers { names: Vec<String> },
    /// Promote a learner that has started.
    Promote { name: String, id: u64 },
    /// A voter whose pod is gone, its data with it: removed, and in the same step its
    /// replacement's pod is created and the replacement added as a learner.
    ReplaceMember { name: String, id: u64 },
    /// A node holds more voters than the cluster can lose (the scheduler put them there while
    /// the other nodes were cordoned or down, and nothing moves a running pod): a member is
    /// added, its pod kept off the nodes in `avoid` (those holding as many voters as the
    /// cluster can lose, or more), and the shrink step that follows removes one of the
    /// crowded node's. One node's loss then never costs quorum.
    SpreadMember { crowded: String, avoid: Vec<String> },
    /// Remove a member from etcd (its pod is deleted on a later step).
    RemoveMember {
        name: String,
        id: u64,
        reason: RemoveReason,
    },
    /// Recreate the pod of a member that keeps its data on a volume.
    RecreatePod { name: String },
    /// Delete a pod that has no member.
    DeletePod { name: String, reason: DeleteReason },
    /// Hand leadership from the leader, whose pod is outdated, to a voter that runs the new
    /// template, so that the leader is rolled last and without an election by timeout.
    MoveLeader {
        from: String,
        to: String,
        id: u64,
        reason: MoveReason,
    },
    /// Delete the volume claim of a member that is no longer in the cluster.
    DeleteClaim { name: String },
    /// A roll (upgrade or pod-policy change) reached a member that does not come up with the
    /// new template: nothing else is touched until it does, or the spec changes.
    RollStalled { reason: String },
    /// Something is in flight; look again later.
    Wait { reason: String },
    /// Fewer than a majority of voters are healthy: report, change nothing.
    QuorumLost { reason: String },
    /// `spec.paused`: change nothing.
    Paused,
    /// Restore: create the seed, which fetches the snapshot and restores it before etcd starts.
    RestoreSeed,
    /// Restore: the seed serves the snapshot's data; the restore's part is over, and the
    /// cluster grows back to its size by the usual path.
    RestoreDone { seed: String },
    /// Restore: something is in flight (or missing); look again later.
    Restoring { reason: String },
    /// A recovery's source member went before the seed had its data: the hand-off is
    /// withdrawn (and the seed, which has nothing, deleted), so that the loss is decided again
    /// (from another member, or a backup) rather than waited on forever.
    WithdrawRestore {
        seed: Option<String>,
        reason: String,
    },
    /// Take the next step of the automatic CA's rotation: the cluster is otherwise as asked
    /// (every pod current, every member a healthy voter), so the roll of the last step is
    /// over.
    RotateCa,
    /// etcd raised NOSPACE: compact the history, defragment the voters one at a time (the
    /// leader last, once another leads) and disarm the alarm, unless the data itself,
    /// compacted, uses [`RECLAIM_MAX_IN_USE`] percent of the quota or more.
    ReclaimSpace,
    /// Quorum is lost and a recovery was approved (or the policy allows it): the cluster is
    /// rebuilt from member `name`'s data, as a restore whose seed fetches that member's
    /// snapshot (`uid` names it); the member's pod is kept until the seed serves.
    RecoverFromMember {
        name: String,
        applied: u64,
        approved: bool,
        uid: String,
        /// The newest revision seen of the cluster before: the restored revision is raised
        /// past it.
        revision_before: Option<i64>,
    },
    /// Quorum is lost and no member's data survives (or the user asked for the backup): an
    /// EtcdRestore of EtcdBackup `backup`'s newest snapshot is made, `uid` naming it; with
    /// `stored`, `backup` is instead the path of an object found by its name in the store
    /// `spec.recovery.backups` names.
    RecoverFromBackup {
        backup: String,
        stored: bool,
        revision: Option<i64>,
        approved: bool,
        uid: String,
    },
    /// Defragment voter `name` (scheduled): leadership is moved away first if it leads.
    Defragment { name: String, id: u64 },
    /// The cluster is as asked.
    Steady,
}

impl Action {
    /// Whether the action changes etcd's membership.
    pub fn is_membership_change(&self) -> bool {
        matches!(
            self,
            Action::AddMembers { .. }
                | Action::SpreadMember { .. }
                | Action::JoinMembers { .. }
                | Action::Promote { .. }
                | Action::RemoveMember { .. }
                | Action::ReplaceMember { .. }
        )
    }
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
    // Getting a persistent member's pod back never costs anything (its data waits on its
    // claim), and after a node reboot it is the only way quorum comes back: before the
    // quorum check.
    if let Some(a) = rescue_persistent(obs, target) {
        return a;
    }
    let Some(members) = &obs.members else {
        return without_member_list(obs, target);
    };
    steps::next(obs, target, members)
}
