//! What an action is, and what it means: its Event reason, the member it concerns, what it
//! means for the Progressing condition, how the next pass is paced, and which metric counts
//! it. Every method matches every action (no `_` arm), so the compiler lists each place a new
//! action must be handled.

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// A learner was added but its pod never came (the operator stopped in between) or died.
    StrandedLearner,
    /// Its pod is gone, and its data with it.
    PodGone,
    /// Scale-down.
    ScaleDown,
    /// It stayed unhealthy past [`super::Target::replace_after`] while its pod ran; the scale-up path
    /// replaces it.
    Unhealthy,
    /// Its pod is made from an older pod template (an upgrade, a pod-policy change) and it has
    /// no volume to be restarted on: a member with the new template has joined in its place.
    Outdated,
    /// Its volume claim is gone or being deleted, and its data with it: it is never restarted
    /// empty under its old ID, but replaced by a new member.
    DataGone,
    /// It does not answer and its node has not been Ready (or not heard from) for
    /// [`super::Target::node_grace`] ([`super::Target::volume_loss_after`] with a volume): it is replaced on
    /// another node. Its old pod is force-deleted once it is removed (its claim deleted after);
    /// should the node come back, its etcd finds itself removed and stops.
    NodeLost,
    /// Its node holds more voters than the cluster can lose, and a member added on another
    /// node (see [`Action::SpreadMember`]) takes its place.
    Spread,
    /// A member of the cluster running elsewhere that this one joined
    /// (`spec.bootstrap.existing`), leaving as `removeExternal` asks.
    External,
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
    /// Roll member `name`, whose pod differs from the template only in its etcd image and
    /// keeps its data on a volume, by changing that image: the kubelet restarts the container
    /// in the same pod (same node, address and volume mount), which skips the pod's deletion,
    /// creation, scheduling and sandbox of a restart through [`Action::DeletePod`].
    ChangeImage { name: String },
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
    /// Ask for the spec's storage on member `name`'s claim: the StorageClass's driver grows
    /// the volume, then the kubelet its file system, while the member runs.
    ExpandClaim { name: String },
    /// A roll (upgrade or pod-policy change) reached a member that does not come up with the
    /// new template: nothing else is touched until it does, or the spec changes.
    RollStalled { reason: String },
    /// Something is in flight; look again later.
    Wait { reason: String },
    /// A voluntary disruption (`what`: a roll, a move, a defragmentation) waits for the
    /// maintenance window, which opens at `opens`.
    WaitForWindow {
        what: String,
        opens: k8s_openapi::jiff::Timestamp,
    },
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
    /// compacted, uses [`super::RECLAIM_MAX_IN_USE`] percent of the quota or more.
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
    /// Hibernation: take the final snapshot (an EtcdBackup to `spec.hibernation.store` at the
    /// members' newest revision) before any pod goes.
    TakeFinalSnapshot,
    /// Hibernation: delete every member pod at once (the members stay in the member list).
    Hibernate { pods: Vec<String> },
    /// Hibernation: no member pod runs; nothing to do until the cluster is woken.
    Hibernated,
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

    /// The reason of the Event published when the action changed something.
    pub fn event_reason(&self) -> &'static str {
        match self {
            Action::Bootstrap => "SeedCreated",
            Action::AddMembers { .. } | Action::JoinMembers { .. } => "MemberAdded",
            Action::SpreadMember { .. } => "MembersSpread",
            Action::ReplaceMember { .. } => "MemberReplaced",
            Action::Promote { .. } => "MemberPromoted",
            Action::RemoveMember { reason, .. } => match reason {
                RemoveReason::Spread => "MembersSpread",
                RemoveReason::External => "ExternalMemberRemoved",
                RemoveReason::Unhealthy | RemoveReason::DataGone | RemoveReason::NodeLost => {
                    "MemberReplaced"
                }
                RemoveReason::Outdated => "MemberRolled",
                RemoveReason::StrandedLearner | RemoveReason::PodGone | RemoveReason::ScaleDown => {
                    "MemberRemoved"
                }
            },
            Action::DeletePod { reason, .. } => match reason {
                DeleteReason::Outdated => "MemberRolled",
                DeleteReason::Restore => "RestoreReplacingMembers",
                DeleteReason::NoMember | DeleteReason::Ended | DeleteReason::NodeLost => {
                    "PodDeleted"
                }
            },
            Action::ChangeImage { .. } => "MemberRolled",
            Action::MoveLeader { .. } => "LeaderMoved",
            Action::DeleteClaim { .. } => "ClaimDeleted",
            Action::ExpandClaim { .. } => "VolumeExpanding",
            Action::RecreatePod { .. } => "PodRecreated",
            Action::RestoreSeed => "RestoreSeedCreated",
            Action::ReclaimSpace => "SpaceReclaimed",
            Action::Defragment { .. } => "Defragmented",
            Action::RestoreDone { .. } => "RestoreSeedServing",
            Action::WithdrawRestore { .. } => "RecoveryWithdrawn",
            Action::RecoverFromMember { .. } => "ForceNewCluster",
            Action::RecoverFromBackup { .. } => "RestoringFromBackup",
            Action::RotateCa => "CertificatesRotating",
            Action::TakeFinalSnapshot => "FinalSnapshotStarted",
            Action::Hibernate { .. } => "Hibernating",
            Action::RollStalled { .. }
            | Action::Hibernated
            | Action::Wait { .. }
            | Action::WaitForWindow { .. }
            | Action::QuorumLost { .. }
            | Action::Paused
            | Action::Restoring { .. }
            | Action::Steady => "Reconciled",
        }
    }

    /// The member whose pod the action's Event is about, if it is about one.
    pub fn member(&self) -> Option<&str> {
        match self {
            Action::JoinMembers { names } => names.first().map(String::as_str),
            Action::Promote { name, .. }
            | Action::RemoveMember { name, .. }
            | Action::ReplaceMember { name, .. }
            | Action::RecreatePod { name }
            | Action::ExpandClaim { name }
            | Action::DeletePod { name, .. }
            | Action::ChangeImage { name }
            | Action::MoveLeader { from: name, .. } => Some(name),
            Action::Bootstrap
            | Action::AddMembers { .. }
            | Action::SpreadMember { .. }
            | Action::DeleteClaim { .. }
            | Action::RollStalled { .. }
            | Action::Wait { .. }
            | Action::WaitForWindow { .. }
            | Action::QuorumLost { .. }
            | Action::Paused
            | Action::RestoreSeed
            | Action::RestoreDone { .. }
            | Action::Restoring { .. }
            | Action::WithdrawRestore { .. }
            | Action::RotateCa
            | Action::ReclaimSpace
            | Action::RecoverFromMember { .. }
            | Action::RecoverFromBackup { .. }
            | Action::Defragment { .. }
            | Action::TakeFinalSnapshot
            | Action::Hibernate { .. }
            | Action::Hibernated
            | Action::Steady => None,
        }
    }

    /// What the action means for the Progressing condition.
    pub fn progress(&self) -> Progress {
        match self {
            Action::RestoreSeed
            | Action::RestoreDone { .. }
            | Action::Restoring { .. }
            | Action::WithdrawRestore { .. }
            | Action::DeletePod {
                reason: DeleteReason::Restore,
                ..
            } => Progress::Restoring,
            Action::RollStalled { .. }
            | Action::ChangeImage { .. }
            | Action::MoveLeader {
                reason: MoveReason::Roll,
                ..
            } => Progress::Roll,
            Action::MoveLeader {
                reason: MoveReason::Leaving,
                ..
            } => Progress::LeaderLeaving,
            Action::QuorumLost { .. }
            | Action::Paused
            | Action::WaitForWindow { .. }
            | Action::Hibernated => Progress::Halted,
            Action::TakeFinalSnapshot | Action::Hibernate { .. } => {
                Progress::Own(Some(Step::Hibernating))
            }
            Action::DeleteClaim { .. } => Progress::Own(Some(Step::Recovering)),
            Action::ExpandClaim { .. } => Progress::Own(Some(Step::ExpandingVolumes)),
            Action::RotateCa => Progress::Own(Some(Step::RotatingCertificates)),
            Action::Bootstrap
            | Action::AddMembers { .. }
            | Action::JoinMembers { .. }
            | Action::Promote { .. } => Progress::Own(Some(Step::Scaling)),
            Action::RemoveMember { reason, .. } => Progress::Own(Some(match reason {
                RemoveReason::ScaleDown | RemoveReason::External => Step::Scaling,
                RemoveReason::Spread => Step::Spreading,
                RemoveReason::StrandedLearner
                | RemoveReason::PodGone
                | RemoveReason::Unhealthy
                | RemoveReason::Outdated
                | RemoveReason::DataGone
                | RemoveReason::NodeLost => Step::Recovering,
            })),
            Action::SpreadMember { .. } => Progress::Own(Some(Step::Spreading)),
            Action::ReplaceMember { .. }
            | Action::DeletePod { .. }
            | Action::RecreatePod { .. }
            | Action::ReclaimSpace => Progress::Own(Some(Step::Recovering)),
            Action::Wait { .. } => Progress::Wait,
            Action::RecoverFromMember { .. }
            | Action::RecoverFromBackup { .. }
            | Action::Defragment { .. }
            | Action::Steady => Progress::Own(None),
        }
    }

    /// How a pass is paced after the action changed nothing.
    pub fn rest(&self) -> Rest {
        match self {
            Action::Steady => Rest::Steady,
            Action::Paused | Action::Hibernated => Rest::Paused,
            Action::RollStalled { .. } => Rest::WaitsForUser,
            Action::Bootstrap
            | Action::AddMembers { .. }
            | Action::JoinMembers { .. }
            | Action::Promote { .. }
            | Action::ReplaceMember { .. }
            | Action::SpreadMember { .. }
            | Action::RemoveMember { .. }
            | Action::RecreatePod { .. }
            | Action::DeletePod { .. }
            | Action::ChangeImage { .. }
            | Action::MoveLeader { .. }
            | Action::DeleteClaim { .. }
            | Action::ExpandClaim { .. }
            | Action::Wait { .. }
            | Action::QuorumLost { .. }
            | Action::RestoreSeed
            | Action::RestoreDone { .. }
            | Action::Restoring { .. }
            | Action::WithdrawRestore { .. }
            | Action::RotateCa
            | Action::ReclaimSpace
            | Action::RecoverFromMember { .. }
            | Action::RecoverFromBackup { .. }
            | Action::TakeFinalSnapshot
            | Action::Hibernate { .. }
            | Action::Defragment { .. } => Rest::InFlight,
            Action::WaitForWindow { opens, .. } => Rest::Until(*opens),
        }
    }

    /// Which metric counts a change the action made.
    pub fn counted_as(&self) -> Counted {
        match self {
            Action::RotateCa => Counted::Not,
            Action::ReclaimSpace | Action::Defragment { .. } | Action::ExpandClaim { .. } => {
                Counted::Maintenance
            }
            Action::Bootstrap
            | Action::AddMembers { .. }
            | Action::JoinMembers { .. }
            | Action::Promote { .. }
            | Action::ReplaceMember { .. }
            | Action::SpreadMember { .. }
            | Action::RemoveMember { .. }
            | Action::RecreatePod { .. }
            | Action::DeletePod { .. }
            | Action::ChangeImage { .. }
            | Action::MoveLeader { .. }
            | Action::DeleteClaim { .. }
            | Action::RollStalled { .. }
            | Action::Wait { .. }
            | Action::WaitForWindow { .. }
            | Action::QuorumLost { .. }
            | Action::Paused
            | Action::RestoreSeed
            | Action::RestoreDone { .. }
            | Action::Restoring { .. }
            | Action::WithdrawRestore { .. }
            | Action::RecoverFromMember { .. }
            | Action::RecoverFromBackup { .. }
            | Action::TakeFinalSnapshot
            | Action::Hibernate { .. }
            | Action::Hibernated
            | Action::Steady => Counted::Membership,
        }
    }
}

/// What an action means for the Progressing condition (the status stage words it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A restore replaces the members, whatever else is under way.
    Restoring,
    /// A step of a roll (an upgrade or a pod-template change).
    Roll,
    /// The leader leaves, its member replaced once another leads, whatever else is under way.
    LeaderLeaving,
    /// Not progressing, even in the middle of a roll (nothing is done).
    Halted,
    /// Its own step (`None`: not progressing), unless a roll is under way.
    Own(Option<Step>),
    /// Waiting for something in flight: scaling while the voters differ from the size,
    /// recovering otherwise; unless a roll is under way.
    Wait,
}

/// What an action that is not a roll or a restore is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Adding or removing members towards the size.
    Scaling,
    /// Moving a member off a crowded node.
    Spreading,
    /// Replacing, restarting or reclaiming.
    Recovering,
    /// Rotating the automatic CA.
    RotatingCertificates,
    /// Putting the cluster to sleep (`spec.hibernation`).
    Hibernating,
    /// Growing the members' claims to the spec's storage request.
    ExpandingVolumes,
}

/// How soon a pass that changed nothing is followed by the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// As asked: looked at again at the resting interval (or sooner, by what the status says).
    Steady,
    /// `spec.paused`.
    Paused,
    /// Stuck until the user changes the spec, or the stuck pod's own events wake the task.
    WaitsForUser,
    /// Something is in flight.
    InFlight,
    /// Nothing is done before this time (the maintenance window opens).
    Until(k8s_openapi::jiff::Timestamp),
}

/// Which metric counts a change an action made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// `etcd_operator_membership_changes_total`.
    Membership,
    /// The maintenance counter (space reclaims, defragmentations).
    Maintenance,
    /// Neither (a CA rotation's step).
    Not,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remove(reason: RemoveReason) -> Action {
        Action::RemoveMember {
            name: "m1".into(),
            id: 1,
            reason,
        }
    }

    fn delete(reason: DeleteReason) -> Action {
        Action::DeletePod {
            name: "m1".into(),
            reason,
        }
    }

    #[test]
    fn each_removal_and_deletion_is_reported_by_why_it_happens() {
        let removals = [
            (
                RemoveReason::StrandedLearner,
                "MemberRemoved",
                Step::Recovering,
            ),
            (RemoveReason::PodGone, "MemberRemoved", Step::Recovering),
            (RemoveReason::ScaleDown, "MemberRemoved", Step::Scaling),
            (RemoveReason::Unhealthy, "MemberReplaced", Step::Recovering),
            (RemoveReason::Outdated, "MemberRolled", Step::Recovering),
            (RemoveReason::DataGone, "MemberReplaced", Step::Recovering),
            (RemoveReason::NodeLost, "MemberReplaced", Step::Recovering),
            (RemoveReason::Spread, "MembersSpread", Step::Spreading),
            (
                RemoveReason::External,
                "ExternalMemberRemoved",
                Step::Scaling,
            ),
        ];
        for (reason, event, progress) in removals {
            let a = remove(reason);
            assert_eq!(a.event_reason(), event, "{reason:?}");
            assert_eq!(a.progress(), Progress::Own(Some(progress)), "{reason:?}");
            assert_eq!(a.member(), Some("m1"));
            assert_eq!(a.counted_as(), Counted::Membership);
        }
        let deletions = [
            (DeleteReason::NoMember, "PodDeleted"),
            (DeleteReason::Ended, "PodDeleted"),
            (DeleteReason::Restore, "RestoreReplacingMembers"),
            (DeleteReason::Outdated, "MemberRolled"),
            (DeleteReason::NodeLost, "PodDeleted"),
        ];
        for (reason, event) in deletions {
            assert_eq!(delete(reason).event_reason(), event, "{reason:?}");
        }
        assert_eq!(
            delete(DeleteReason::Restore).progress(),
            Progress::Restoring
        );
    }

    #[test]
    fn waiting_actions_report_no_change_and_rest_by_what_they_wait_for() {
        let wait = Action::Wait {
            reason: "learner".into(),
        };
        assert_eq!(wait.event_reason(), "Reconciled");
        assert_eq!(wait.progress(), Progress::Wait);
        assert_eq!(wait.rest(), Rest::InFlight);
        assert_eq!(Action::Steady.rest(), Rest::Steady);
        assert_eq!(Action::Paused.rest(), Rest::Paused);
        assert_eq!(Action::Paused.progress(), Progress::Halted);
        let stalled = Action::RollStalled {
            reason: "m2".into(),
        };
        assert_eq!(stalled.rest(), Rest::WaitsForUser);
        assert_eq!(stalled.progress(), Progress::Roll);
        assert_eq!(Action::RotateCa.counted_as(), Counted::Not);
        assert_eq!(Action::ReclaimSpace.counted_as(), Counted::Maintenance);
        let join = Action::JoinMembers {
            names: vec!["m4".into(), "m5".into()],
        };
        assert_eq!(join.member(), Some("m4"));
        assert_eq!(join.event_reason(), "MemberAdded");
    }
}
