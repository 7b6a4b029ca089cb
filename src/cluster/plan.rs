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

use std::collections::BTreeSet;
use std::time::Duration;

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
    /// How many learners every member accepts at once (etcd 3.6's `--max-learners`, carried by
    /// every member's pod; 1 otherwise). Each member checks the limit as it applies an
    /// addition, so it is the smallest of the members'.
    pub max_learners: usize,
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
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the seed member's pod (`--initial-cluster-state=new`, a fresh token).
    Bootstrap,
    /// Start `count` new members at once: their pods first (each names all of them in its
    /// `--initial-cluster`, and its etcd waits until every one is added), then each is added
    /// as a learner. More than one only where every member accepts that many learners.
    AddMembers { count: usize },
    /// Add the member of a pod that was created ahead of it (the addition's second half).
    JoinMembers { names: Vec<String> },
    /// Promote a learner that has started.
    Promote { name: String, id: u64 },
    /// A voter whose pod is gone, its data with it: removed, and in the same step its
    /// replacement's pod is created and the replacement added as a learner.
    ReplaceMember { name: String, id: u64 },
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
    MoveLeader { from: String, to: String, id: u64 },
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
    /// The cluster is as asked.
    Steady,
}

impl Action {
    /// Whether the action changes etcd's membership.
    pub fn is_membership_change(&self) -> bool {
        matches!(
            self,
            Action::AddMembers { .. }
                | Action::JoinMembers { .. }
                | Action::Promote { .. }
                | Action::RemoveMember { .. }
                | Action::ReplaceMember { .. }
        )
    }
}

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
    let c = Cluster::of(obs, target, members);
    if let Some(a) = c.quorum_lost() {
        return a;
    }
    [
        Cluster::stalled_roll,
        Cluster::learner,
        Cluster::pods_without_member,
        Cluster::orphan_claims,
        Cluster::voters_without_pod,
        Cluster::voters_losing_data,
        Cluster::stopping,
        Cluster::shrink,
        Cluster::sick_voter,
        Cluster::grow,
        Cluster::roll,
    ]
    .iter()
    .find_map(|step| step(&c))
    .unwrap_or(Action::Steady)
}

/// What every step needs to know about a cluster whose member list is known.
struct Cluster<'a> {
    obs: &'a Observation,
    target: &'a Target,
    members: &'a [MemberView],
    voters: Vec<&'a MemberView>,
    /// Voters that answer and whose pod is not leaving.
    healthy: usize,
    /// Some member's pod is made from an older template: a roll is under way.
    rolling: bool,
    /// A surplus voter is allowed: some outdated voter cannot be restarted in place, so a
    /// member with the new template joins before it is removed.
    surge: bool,
}

impl<'a> Cluster<'a> {
    fn of(obs: &'a Observation, target: &'a Target, members: &'a [MemberView]) -> Self {
        let voters: Vec<&MemberView> = members.iter().filter(|m| !m.is_learner).collect();
        // Counting a voter whose pod is being deleted would let a removal go ahead on a quorum
        // that is already leaving (two pods deleted at once).
        let healthy = voters
            .iter()
            .filter(|m| m.healthy && obs.pod_alive(&m.name))
            .count();
        let mut c = Cluster {
            obs,
            target,
            members,
            voters,
            healthy,
            rolling: members.iter().any(|m| obs.stale(&m.name)),
            surge: false,
        };
        c.surge = c
            .voters
            .iter()
            .any(|v| (c.obs.stale(&v.name) && !c.restartable(v)) || c.losing_data(v));
        c
    }

    /// A persistent voter whose claim was deleted while its pod runs: its data goes when the
    /// pod does.
    fn losing_data(&self, v: &MemberView) -> bool {
        self.target.persistent && self.obs.pod_alive(&v.name) && !self.obs.claims.contains(&v.name)
    }

    /// Whether `m` counts towards quorum.
    fn counts(&self, m: &MemberView) -> bool {
        m.healthy && !m.is_learner && self.obs.pod_alive(&m.name)
    }

    /// Whether `v` can be restarted in place on its volume: its claim is there, and the
    /// healthy voters without it are still a quorum of the whole membership. (A 1- or
    /// 2-member cluster cannot restart a healthy member without losing quorum for a moment;
    /// it rolls by adding first, as clusters without volumes do.)
    fn restartable(&self, v: &MemberView) -> bool {
        self.target.persistent
            && self.obs.claims.contains(&v.name)
            && self.healthy - usize::from(self.counts(v)) >= quorum(self.voters.len())
    }

    /// How many voters may be there: the size, and one more while a roll adds first.
    fn capacity(&self) -> usize {
        self.target.size + usize::from(self.surge)
    }

    fn quorum_lost(&self) -> Option<Action> {
        let (obs, target, voters) = (self.obs, self.target, &self.voters);
        if self.healthy >= quorum(voters.len()) {
            return None;
        }
        // Members whose pods still run and that went silent only a moment ago are most likely
        // restarting; until the grace has passed, the cluster is short, not lost.
        let restarting = voters
            .iter()
            .filter(|m| {
                !m.healthy && obs.pod_alive(&m.name) && m.unhealthy_for < target.quorum_grace
            })
            .count();
        let reason = format!(
            "{} of {} voting members are healthy, {} are needed",
            self.healthy,
            voters.len(),
            quorum(voters.len())
        );
        if self.healthy + restarting >= quorum(voters.len()) {
            return Some(Action::Wait {
                reason: format!("{reason}; {restarting} went silent moments ago"),
            });
        }
        Some(Action::QuorumLost { reason })
    }

    /// A roll stops at a member made from the new template that does not come up: the
    /// kubelet reports that its pod cannot start, or it has not become healthy within the
    /// learner timeout. Nothing else is touched; a spec change (which makes that pod outdated
    /// in turn) or the member recovering lets the roll go on.
    fn stalled_roll(&self) -> Option<Action> {
        if !self.rolling {
            return None;
        }
        let names: BTreeSet<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        for p in self
            .obs
            .pods
            .iter()
            .filter(|p| p.current && !p.state.is_gone())
        {
            let member = self.members.iter().find(|m| m.name == p.name);
            if member.is_some_and(|m| m.healthy) {
                continue;
            }
            // A pod without a member only counts when it waits to join.
            if !names.contains(p.name.as_str()) && p.joining.is_none() {
                continue;
            }
            let slow = match member {
                Some(m) if !m.is_learner => m.unhealthy_for >= self.target.learner_timeout,
                _ => p.age >= self.target.learner_timeout,
            };
            let why = match (&p.failing, slow) {
                (Some(f), _) => f.clone(),
                (None, true) => format!(
                    "not healthy after {} s",
                    self.target.learner_timeout.as_secs()
                ),
                (None, false) => continue,
            };
            return Some(Action::RollStalled {
                reason: format!(
                    "member {} does not come up with the new pod template ({why}); the roll \
                     is paused and no other member is touched until it does or the spec changes",
                    p.name
                ),
            });
        }
        None
    }

    /// Learners first: additions in flight are finished (promoted, one voter at a time) or
    /// undone (removed). Learners beyond what the size still needs go first, the unhealthy
    /// ones first: promoting one only to remove it would be two voting changes for nothing.
    /// While learners start, the rest of their batch is added.
    fn learner(&self) -> Option<Action> {
        let learners: Vec<&MemberView> = self.members.iter().filter(|m| m.is_learner).collect();
        if learners.is_empty() {
            return None;
        }
        let remove = |l: &MemberView, reason| {
            Some(Action::RemoveMember {
                name: l.name.clone(),
                id: l.id,
                reason,
            })
        };
        let needed = self.capacity().saturating_sub(self.voters.len());
        if learners.len() > needed {
            let l = learners
                .iter()
                .find(|l| !l.healthy)
                .unwrap_or(&learners[learners.len() - 1]);
            return remove(l, RemoveReason::ScaleDown);
        }
        for l in &learners {
            let why = match self.obs.pod(&l.name) {
                None => RemoveReason::StrandedLearner,
                Some(p) if p.state.is_gone() => RemoveReason::StrandedLearner,
                // Made from a template the spec no longer asks for: its replacement gets the
                // new one.
                Some(p) if !p.current => RemoveReason::Outdated,
                // Added so long ago that it will not catch up (etcd refused every promotion).
                Some(p) if p.age > self.target.learner_timeout => RemoveReason::StrandedLearner,
                Some(_) => continue,
            };
            return remove(l, why);
        }
        if let Some(l) = learners.iter().find(|l| l.healthy) {
            return Some(Action::Promote {
                name: l.name.clone(),
                id: l.id,
            });
        }
        // etcd adds a member only while its leader has heard from every voter lately.
        let room = self.target.max_learners.saturating_sub(learners.len());
        let batch: Vec<String> = self.joining().into_iter().take(room).collect();
        if !batch.is_empty() && self.healthy == self.voters.len() {
            return Some(Action::JoinMembers { names: batch });
        }
        Some(Action::Wait {
            reason: format!("learner {} is starting", learners[0].name),
        })
    }

    /// The pods created ahead of their members that are still to be added, in one batch:
    /// pods made from the current template, alive and within the learner timeout, whose
    /// `--initial-cluster` (their `joining` peers and themselves) is the same for all of them,
    /// names every current member, and names no one else but pods of the batch; and the batch
    /// fits the size. etcd refuses a member whose `--initial-cluster` is not the membership it
    /// finds, so any other pod without a member is deleted.
    fn joining(&self) -> Vec<String> {
        let names = self.names();
        let candidates: Vec<(&PodView, BTreeSet<String>)> = self
            .obs
            .pods
            .iter()
            .filter(|p| {
                !names.contains(&p.name)
                    && p.current
                    && !p.state.is_gone()
                    && p.age <= self.target.learner_timeout
            })
            .filter_map(|p| {
                let mut all = p.joining.clone()?;
                all.insert(p.name.clone());
                Some((p, all))
            })
            .collect();
        for (_, all) in &candidates {
            let batch: Vec<String> = candidates
                .iter()
                .filter(|(_, a)| a == all)
                .map(|(p, _)| p.name.clone())
                .collect();
            let rest: BTreeSet<String> = all.difference(&names).cloned().collect();
            let fits = all.len() <= self.capacity()
                && names.is_subset(all)
                && rest == batch.iter().cloned().collect::<BTreeSet<_>>();
            if fits {
                return batch;
            }
        }
        Vec::new()
    }

    /// Pods without a member: a removal whose pod deletion was interrupted, a pod whose member
    /// was never added, or one created ahead of its member. Only the batch that can still
    /// join is kept (see [`Cluster::joining`]), and only while a member is still wanted.
    fn pods_without_member(&self) -> Option<Action> {
        let names = self.names();
        let kept = if self.voters.len() < self.capacity() {
            self.joining()
        } else {
            Vec::new()
        };
        self.obs
            .pods
            .iter()
            .find(|p| {
                !names.contains(&p.name)
                    && p.state != PodState::Terminating
                    && !kept.contains(&p.name)
            })
            .map(|p| Action::DeletePod {
                name: p.name.clone(),
                reason: DeleteReason::NoMember,
            })
    }

    fn names(&self) -> BTreeSet<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// The claim of a member that is gone (removed, or never added) holds nothing anyone
    /// will use again.
    fn orphan_claims(&self) -> Option<Action> {
        let names = self.names();
        self.obs
            .claims
            .iter()
            .find(|c| !names.contains(*c) && self.obs.pod(c).is_none())
            .map(|c| Action::DeleteClaim { name: c.clone() })
    }

    /// Voters whose pod is gone or being deleted. Such a voter never counts, so removing it
    /// never costs a healthy one: it is safe whenever the healthy voters are a quorum of the
    /// smaller membership. With a volume the pod comes back on it ([`rescue_persistent`]);
    /// without one, or when the claim is gone too, the member is replaced, without waiting
    /// for a deleted pod's etcd to stop (which took 1.5 s of a 4 s heal): its data goes with
    /// its pod, and once removed it stops on its own.
    fn voters_without_pod(&self) -> Option<Action> {
        for v in &self.voters {
            let deleted = self
                .obs
                .pod(&v.name)
                .is_some_and(|p| p.state == PodState::Terminating);
            if self.obs.pod_alive(&v.name) || (v.healthy && !deleted) {
                continue;
            }
            if self.target.persistent && self.obs.claims.contains(&v.name) {
                return Some(Action::Wait {
                    reason: format!(
                        "the pod of {} is stopping; it comes back on its volume",
                        v.name
                    ),
                });
            }
            // A leader being stopped hands leadership to a follower first; removing it under
            // its feet would leave the cluster without a leader for an election timeout.
            if v.healthy && self.obs.leader == Some(v.id) {
                return Some(Action::Wait {
                    reason: format!("the pod of {} is stopping", v.name),
                });
            }
            if self.healthy >= quorum(self.voters.len() - 1) {
                // Its replacement in the same step when the size still wants it and nothing
                // else is joining.
                let replace = self.voters.len() <= self.target.size
                    && self.members.iter().all(|m| !m.is_learner)
                    && self.joining().is_empty();
                if replace {
                    return Some(Action::ReplaceMember {
                        name: v.name.clone(),
                        id: v.id,
                    });
                }
                return Some(Action::RemoveMember {
                    name: v.name.clone(),
                    id: v.id,
                    reason: if self.target.persistent {
                        RemoveReason::DataGone
                    } else {
                        RemoveReason::PodGone
                    },
                });
            }
        }
        None
    }

    /// A persistent voter whose claim was deleted while its pod runs is replaced now, while its
    /// data is still there to replicate from: removed when the healthy voters without it are
    /// a quorum of the smaller membership (leadership moved first if it leads), else after a
    /// new member has joined.
    fn voters_losing_data(&self) -> Option<Action> {
        let v = self.voters.iter().find(|v| self.losing_data(v))?;
        if self.healthy - usize::from(self.counts(v)) < quorum(self.voters.len() - 1) {
            if self.voters.len() < self.capacity() && self.voters.iter().all(|v| v.healthy) {
                return Some(self.add());
            }
            return Some(Action::Wait {
                reason: format!(
                    "the claim of {} is gone; it is replaced once that keeps quorum",
                    v.name
                ),
            });
        }
        if Some(v.id) == self.obs.leader && self.counts(v) {
            return Some(self.move_leader_from(v));
        }
        Some(Action::RemoveMember {
            name: v.name.clone(),
            id: v.id,
            reason: RemoveReason::DataGone,
        })
    }

    /// Hands leadership from `from` to a healthy, caught-up voter made from the current
    /// template (any healthy voter when none is).
    fn move_leader_from(&self, from: &MemberView) -> Action {
        let candidates = || {
            self.voters
                .iter()
                .filter(|v| v.id != from.id && self.counts(v) && v.caught_up)
        };
        let to = candidates()
            .find(|v| !self.obs.stale(&v.name))
            .or_else(|| candidates().next());
        match to {
            Some(to) => Action::MoveLeader {
                from: from.name.clone(),
                to: to.name.clone(),
                id: to.id,
            },
            None => Action::Wait {
                reason: format!("no voter can take over leadership from {}", from.name),
            },
        }
    }

    /// More voters than asked for (a scale-down, or the surplus of a roll that adds first).
    /// Removes one: an unhealthy one if any, then an outdated one once every voter has caught
    /// up, else a follower; never the leader (leadership is moved first when only the leader
    /// is outdated).
    fn shrink(&self) -> Option<Action> {
        let (obs, voters, healthy) = (self.obs, &self.voters, self.healthy);
        if voters.len() <= self.target.size {
            return None;
        }
        let remaining = quorum(voters.len() - 1);
        let remove = |v: &MemberView, reason| {
            Some(Action::RemoveMember {
                name: v.name.clone(),
                id: v.id,
                reason,
            })
        };
        let follower = |v: &&&MemberView| Some(v.id) != obs.leader;
        if let Some(v) = voters
            .iter()
            .filter(follower)
            .find(|v| !v.healthy && healthy >= remaining)
        {
            return remove(v, RemoveReason::ScaleDown);
        }
        if obs.leader.is_none() || healthy <= remaining {
            return Some(Action::Wait {
                reason: "no member can be removed without risking quorum".into(),
            });
        }
        let stale: Vec<&&MemberView> = voters.iter().filter(|v| obs.stale(&v.name)).collect();
        if !stale.is_empty() {
            if let Some(w) = self.catching_up() {
                return Some(w);
            }
            if let Some(v) = stale.iter().copied().find(follower) {
                return remove(v, RemoveReason::Outdated);
            }
            return Some(self.move_leader_from(stale[0]));
        }
        voters
            .iter()
            .filter(follower)
            .find(|v| v.healthy)
            .and_then(|v| remove(v, RemoveReason::ScaleDown))
    }

    /// A voter whose pod is being deleted but still answers, and that [`voters_without_pod`]
    /// cannot remove yet (quorum), is on its way out: nothing else moves until it has stopped.
    /// Without this a cluster whose only difference from the spec is such a pod would
    /// be called steady (found by `repeated_steps_converge_to_size`).
    fn stopping(&self) -> Option<Action> {
        self.voters
            .iter()
            .find(|v| {
                self.obs
                    .pod(&v.name)
                    .is_some_and(|p| p.state == PodState::Terminating)
            })
            .map(|v| Action::Wait {
                reason: format!("the pod of {} is stopping", v.name),
            })
    }

    /// A wait while some voter has not caught up with the leader, or serves but is not yet
    /// reached through the client Service.
    fn catching_up(&self) -> Option<Action> {
        if let Some(v) = self.voters.iter().find(|v| !v.caught_up) {
            return Some(Action::Wait {
                reason: format!("member {} is catching up with the leader", v.name),
            });
        }
        self.voters
            .iter()
            .find(|v| self.counts(v) && self.obs.unpublished.contains(&v.name))
            .map(|v| Action::Wait {
                reason: format!(
                    "member {} serves, but the client Service does not send clients to it yet",
                    v.name
                ),
            })
    }

    /// An unhealthy voter whose pod runs. In a roll, an outdated one goes first (it counts
    /// for nothing as it is). Otherwise one stuck (crash-looping, Pending, an alarm raised)
    /// past the bound blocks every other change, so it is replaced, when the healthy voters
    /// are a quorum without it.
    fn sick_voter(&self) -> Option<Action> {
        let sick = self.voters.iter().find(|v| !v.healthy)?;
        let n = self.voters.len();
        let removable = self.healthy >= quorum(n - 1) && Some(sick.id) != self.obs.leader;
        if self.obs.stale(&sick.name) {
            if self.restartable(sick) {
                return Some(Action::DeletePod {
                    name: sick.name.clone(),
                    reason: DeleteReason::Outdated,
                });
            }
            if removable {
                return Some(Action::RemoveMember {
                    name: sick.name.clone(),
                    id: sick.id,
                    reason: RemoveReason::Outdated,
                });
            }
        }
        if sick.unhealthy_for >= self.target.replace_after && removable {
            return Some(Action::RemoveMember {
                name: sick.name.clone(),
                id: sick.id,
                reason: RemoveReason::Unhealthy,
            });
        }
        // The reason goes into status, so it names no running clock: a message that changed
        // every pass would make every pass a status write.
        Some(Action::Wait {
            reason: format!(
                "member {} is not healthy; it is replaced if it stays so for {} s",
                sick.name,
                self.target.replace_after.as_secs()
            ),
        })
    }

    /// Fewer voters than asked for: the member whose pod waits to join is added, else a new
    /// one is started.
    fn grow(&self) -> Option<Action> {
        if self.voters.len() >= self.target.size {
            return None;
        }
        Some(self.add())
    }

    /// The batch waiting to join, else as many new members as are missing and every member
    /// accepts as learners at once.
    fn add(&self) -> Action {
        let batch: Vec<String> = self
            .joining()
            .into_iter()
            .take(self.target.max_learners)
            .collect();
        if !batch.is_empty() {
            return Action::JoinMembers { names: batch };
        }
        let missing = self.capacity().saturating_sub(self.voters.len());
        Action::AddMembers {
            count: missing.min(self.target.max_learners).max(1),
        }
    }

    /// Every voter healthy, none missing: the next outdated member is rolled, followers
    /// first, the leader last. A member with a volume is restarted on it (no membership
    /// change); one without is replaced, a member with the new template joining first so the
    /// cluster never has fewer healthy voters than it had. Each step waits until every voter
    /// has caught up with the leader.
    fn roll(&self) -> Option<Action> {
        let stale: Vec<&&MemberView> = self
            .voters
            .iter()
            .filter(|v| self.obs.stale(&v.name))
            .collect();
        if stale.is_empty() {
            return None;
        }
        // A pod still stopping (the last step's restart) answers for a moment: it is not
        // rolled again, and nothing else moves until it is gone.
        if let Some(v) = self.voters.iter().find(|v| !self.obs.pod_alive(&v.name)) {
            return Some(Action::Wait {
                reason: format!("the pod of {} is stopping", v.name),
            });
        }
        if let Some(w) = self.catching_up() {
            return Some(w);
        }
        let leader = |v: &&&MemberView| Some(v.id) == self.obs.leader;
        let next = stale
            .iter()
            .find(|v| !leader(v))
            .or_else(|| stale.first())?;
        if !self.restartable(next) {
            // Added first; the outdated member goes in the shrink step that follows.
            return Some(self.add());
        }
        if leader(next) {
            return Some(self.move_leader_from(next));
        }
        Some(Action::DeletePod {
            name: next.name.clone(),
            reason: DeleteReason::Outdated,
        })
    }
}

/// For clusters with volumes: a member's pod that ended (evicted, its node rebooted) is
/// deleted, and a member with its claim but no pod gets its pod back, same name, same member
/// ID. Voters from etcd's member list; when no member answers, the members the last status
/// listed. Neither step changes the membership, so neither needs quorum.
fn rescue_persistent(obs: &Observation, target: &Target) -> Option<Action> {
    if !target.persistent {
        return None;
    }
    let names: Vec<&String> = match &obs.members {
        Some(ms) => ms
            .iter()
            .filter(|m| !m.is_learner)
            .map(|m| &m.name)
            .collect(),
        None => obs.known_members.iter().collect(),
    };
    for name in names.into_iter().filter(|n| obs.claims.contains(*n)) {
        match obs.pod(name) {
            None => {
                return Some(Action::RecreatePod { name: name.clone() });
            }
            Some(p) if p.state == PodState::Gone => {
                return Some(Action::DeletePod {
                    name: name.clone(),
                    reason: DeleteReason::Ended,
                });
            }
            Some(_) => {}
        }
    }
    None
}

/// What a restore needs besides the observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreTarget {
    /// The EtcdRestore's UID: pods that carry it belong to the restored cluster.
    pub uid: String,
    /// Where this operator serves the snapshot to the seed, if it can.
    pub url: Option<String>,
    /// Whether new member pods can run `etcd-gate` (the operator knows its own image).
    pub gate: bool,
}

/// The next step of a restore: the members being replaced go first (all of them: a restored
/// cluster starts from one seed with a new cluster token, and no old member may ever talk to
/// it), then the seed is created; once it serves, the restore is done. Nothing is deleted
/// while the seed could not be made.
pub fn restore(obs: &Observation, target: &Target, restore: &RestoreTarget) -> Action {
    if target.paused {
        return Action::Paused;
    }
    let Some(url) = restore.url.as_deref() else {
        return Action::Restoring {
            reason: "the operator has no --snapshot-url, so the seed cannot fetch the snapshot"
                .into(),
        };
    };
    if !restore.gate {
        return Action::Restoring {
            reason: "the operator does not know its own image (--member-gate-image), whose \
                     etcd-gate fetches the snapshot"
                .into(),
        };
    }
    let ours = |p: &PodView| {
        p.restore
            .as_ref()
            .is_some_and(|(uid, _)| *uid == restore.uid)
    };
    if let Some(old) = obs
        .pods
        .iter()
        .find(|p| !ours(p) && p.state != PodState::Terminating)
    {
        return Action::DeletePod {
            name: old.name.clone(),
            reason: DeleteReason::Restore,
        };
    }
    if obs.pods.iter().any(|p| !ours(p)) {
        return Action::Restoring {
            reason: "the replaced members' pods are stopping".into(),
        };
    }
    let Some(seed) = obs.pods.iter().find(|p| ours(p)) else {
        return Action::RestoreSeed;
    };
    let serving = obs
        .members
        .as_ref()
        .is_some_and(|ms| ms.iter().any(|m| m.name == seed.name && m.healthy));
    if serving {
        return Action::RestoreDone {
            seed: seed.name.clone(),
        };
    }
    let fetches_from_us = seed.restore.as_ref().is_some_and(|(_, u)| u == url);
    match seed.state {
        PodState::Terminating => Action::Restoring {
            reason: format!("seed {} is stopping", seed.name),
        },
        PodState::Gone => Action::DeletePod {
            name: seed.name.clone(),
            reason: DeleteReason::Restore,
        },
        // Made by an operator that no longer leads: it fetches from an address that no longer
        // serves the snapshot.
        _ if !fetches_from_us => Action::DeletePod {
            name: seed.name.clone(),
            reason: DeleteReason::Restore,
        },
        _ => Action::Restoring {
            reason: format!("seed {} is fetching and restoring the snapshot", seed.name),
        },
    }
}

fn without_member_list(obs: &Observation, target: &Target) -> Action {
    if !obs.bootstrapped && obs.pods.is_empty() {
        return Action::Bootstrap;
    }
    if obs
        .pods
        .iter()
        .any(|p| p.state == PodState::Pending || p.age < target.startup_grace)
    {
        return Action::Wait {
            reason: "members are starting".into(),
        };
    }
    if !obs.pods.is_empty() && obs.silent_for < target.quorum_grace {
        return Action::Wait {
            reason: format!(
                "no member answers; members that restart are given {} s before quorum counts as lost",
                target.quorum_grace.as_secs()
            ),
        };
    }
    if obs.pods.is_empty() && target.persistent {
        // Members with claims were brought back before this step; none is left to bring back.
        return Action::QuorumLost {
            reason: "every member pod is gone and no claim of a member the status lists \
                     remains, so the operator will not bootstrap a new, empty cluster: restore \
                     from a backup, or delete and recreate the EtcdCluster"
                .into(),
        };
    }
    if obs.pods.is_empty() {
        return Action::QuorumLost {
            reason: "every member pod is gone; the data went with them, so the operator will \
                     not bootstrap a new, empty cluster: restore from a backup, or delete and \
                     recreate the EtcdCluster"
                .into(),
        };
    }
    Action::QuorumLost {
        reason: "no member answers".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn target(size: usize) -> Target {
        Target {
            size,
            paused: false,
            persistent: false,
            learner_timeout: 5 * MINUTE,
            startup_grace: MINUTE / 2,
            replace_after: 5 * MINUTE,
            quorum_grace: MINUTE / 2,
            max_learners: 1,
        }
    }

    /// An unhealthy member has been so for an hour: well past every grace.
    fn member(name: &str, id: u64, is_learner: bool, healthy: bool) -> MemberView {
        MemberView {
            name: name.into(),
            id,
            is_learner,
            healthy,
            unhealthy_for: if healthy { Duration::ZERO } else { 60 * MINUTE },
            caught_up: healthy,
        }
    }

    fn running(name: &str) -> PodView {
        PodView {
            name: name.into(),
            state: PodState::Running,
            age: MINUTE,
            joining: None,
            restore: None,
            current: true,
            failing: None,
        }
    }

    fn steady(n: u64) -> Observation {
        Observation {
            members: Some(
                (1..=n)
                    .map(|i| member(&format!("m{i}"), i, false, true))
                    .collect(),
            ),
            leader: Some(1),
            pods: (1..=n).map(|i| running(&format!("m{i}"))).collect(),
            bootstrapped: true,
            silent_for: Duration::ZERO,
            claims: (1..=n).map(|i| format!("m{i}")).collect(),
            known_members: (1..=n).map(|i| format!("m{i}")).collect(),
            unpublished: BTreeSet::new(),
        }
    }

    fn restore_target(url: Option<&str>) -> RestoreTarget {
        RestoreTarget {
            uid: "r1".into(),
            url: url.map(String::from),
            gate: true,
        }
    }

    fn seed(state: PodState, url: &str) -> PodView {
        PodView {
            state,
            restore: Some(("r1".into(), url.into())),
            ..running("seed")
        }
    }

    #[test]
    fn a_restore_replaces_every_member_by_one_seed_and_ends_when_it_serves() {
        let t = target(3);
        let r = restore_target(Some("http://op/s"));
        // Nothing is touched while the seed could not be made.
        let mut obs = steady(3);
        for blocked in [
            restore_target(None),
            RestoreTarget {
                gate: false,
                ..r.clone()
            },
        ] {
            assert!(matches!(
                restore(&obs, &t, &blocked),
                Action::Restoring { .. }
            ));
        }
        // The old members' pods go first, one per step, then are waited out.
        assert_eq!(
            restore(&obs, &t, &r),
            Action::DeletePod {
                name: "m1".into(),
                reason: DeleteReason::Restore
            }
        );
        for p in &mut obs.pods {
            p.state = PodState::Terminating;
        }
        assert!(matches!(restore(&obs, &t, &r), Action::Restoring { .. }));
        obs.pods.clear();
        obs.members = None;
        assert_eq!(restore(&obs, &t, &r), Action::RestoreSeed);
        // The seed restores, then serves.
        obs.pods.push(seed(PodState::Running, "http://op/s"));
        assert!(matches!(restore(&obs, &t, &r), Action::Restoring { .. }));
        obs.members = Some(vec![member("seed", 9, false, true)]);
        assert_eq!(
            restore(&obs, &t, &r),
            Action::RestoreDone {
                seed: "seed".into()
            }
        );
        assert_eq!(
            restore(&obs, &Target { paused: true, ..t }, &r),
            Action::Paused
        );
    }

    #[test]
    fn a_seed_that_ended_or_fetches_from_a_former_leader_is_made_again() {
        let t = target(3);
        let r = restore_target(Some("http://new-leader/s"));
        let mut obs = Observation {
            pods: vec![seed(PodState::Running, "http://old-leader/s")],
            ..Observation::default()
        };
        let delete = Action::DeletePod {
            name: "seed".into(),
            reason: DeleteReason::Restore,
        };
        assert_eq!(restore(&obs, &t, &r), delete);
        obs.pods = vec![seed(PodState::Gone, "http://new-leader/s")];
        assert_eq!(restore(&obs, &t, &r), delete);
        // Serving, it stays whoever made it.
        obs.pods = vec![seed(PodState::Running, "http://old-leader/s")];
        obs.members = Some(vec![member("seed", 9, false, true)]);
        assert!(matches!(restore(&obs, &t, &r), Action::RestoreDone { .. }));
    }

    #[test]
    fn an_empty_cluster_is_bootstrapped_once() {
        assert_eq!(plan(&Observation::default(), &target(3)), Action::Bootstrap);
        let after_seed = Observation {
            bootstrapped: true,
            ..Observation::default()
        };
        assert!(matches!(
            plan(&after_seed, &target(3)),
            Action::QuorumLost { .. }
        ));
    }

    #[test]
    fn grows_and_shrinks_one_member_at_a_time() {
        assert_eq!(
            plan(&steady(1), &target(3)),
            Action::AddMembers { count: 1 }
        );
        assert_eq!(plan(&steady(3), &target(3)), Action::Steady);
        let down = plan(&steady(3), &target(1));
        assert!(
            matches!(down, Action::RemoveMember { id, reason: RemoveReason::ScaleDown, .. } if id != 1)
        );
    }

    #[test]
    fn a_started_learner_is_promoted_and_a_stranded_one_removed() {
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m4", 4, true, true));
        obs.pods.push(running("m4"));
        assert_eq!(
            plan(&obs, &target(5)),
            Action::Promote {
                name: "m4".into(),
                id: 4
            }
        );
        obs.pods.pop();
        assert!(matches!(
            plan(&obs, &target(5)),
            Action::RemoveMember {
                id: 4,
                reason: RemoveReason::StrandedLearner,
                ..
            }
        ));
    }

    fn learners(n: usize) -> Target {
        Target {
            max_learners: n,
            ..target(5)
        }
    }

    #[test]
    fn where_members_accept_several_learners_the_missing_members_start_at_once() {
        // Seed alone, 4 missing: as many as the members accept.
        assert_eq!(
            plan(&steady(1), &learners(6)),
            Action::AddMembers { count: 4 }
        );
        assert_eq!(
            plan(&steady(1), &learners(2)),
            Action::AddMembers { count: 2 }
        );
        assert_eq!(
            plan(&steady(1), &learners(1)),
            Action::AddMembers { count: 1 }
        );
        // The batch's pods name the seed and each other; they are added one after the other,
        // while the first added waits for the rest (its etcd cannot start before).
        let batch: BTreeSet<String> = ["m1", "m2", "m3"].map(String::from).into();
        let gated = |name: &str| PodView {
            joining: Some(batch.iter().filter(|n| *n != name).cloned().collect()),
            state: PodState::Running,
            ..running(name)
        };
        let mut obs = steady(1);
        obs.pods.extend([gated("m2"), gated("m3")]);
        let t = Target {
            size: 3,
            ..learners(6)
        };
        let join = |names: &[&str]| Action::JoinMembers {
            names: names.iter().map(|n| n.to_string()).collect(),
        };
        assert_eq!(plan(&obs, &t), join(&["m2", "m3"]));
        // As many as the members accept.
        assert_eq!(
            plan(
                &obs,
                &Target {
                    max_learners: 1,
                    ..t
                }
            ),
            join(&["m2"])
        );
        // Interrupted after the first: the rest.
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m2", 2, true, false));
        assert_eq!(plan(&obs, &t), join(&["m3"]));
        // Members that accept one learner only: the second waits; it is never added.
        assert!(matches!(
            plan(
                &obs,
                &Target {
                    max_learners: 1,
                    ..t
                }
            ),
            Action::Wait { .. }
        ));
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m3", 3, true, false));
        assert!(matches!(plan(&obs, &t), Action::Wait { .. }));
        // Both started: promoted one at a time (one voting change per step).
        for m in obs.members.as_mut().unwrap() {
            m.healthy = true;
        }
        assert_eq!(
            plan(&obs, &t),
            Action::Promote {
                name: "m2".into(),
                id: 2
            }
        );
        obs.members.as_mut().unwrap()[1].is_learner = false;
        assert_eq!(
            plan(&obs, &t),
            Action::Promote {
                name: "m3".into(),
                id: 3
            }
        );
        // A pod naming a member of another batch is not one of this batch: deleted.
        let mut obs = steady(1);
        obs.pods.extend([gated("m2"), gated("m3")]);
        obs.pods.push(PodView {
            joining: Some(["m1".to_string()].into()),
            ..running("m9")
        });
        assert_eq!(
            plan(&obs, &t),
            Action::DeletePod {
                name: "m9".into(),
                reason: DeleteReason::NoMember
            }
        );
        // On scale-down, learners beyond what the size needs go, not started ones first.
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .extend([member("m4", 4, true, true), member("m5", 5, true, false)]);
        obs.pods.extend([running("m4"), running("m5")]);
        assert!(matches!(
            plan(&obs, &Target { size: 4, ..t }),
            Action::RemoveMember {
                id: 5,
                reason: RemoveReason::ScaleDown,
                ..
            }
        ));
    }

    #[test]
    fn a_pod_created_ahead_of_its_member_is_joined_or_else_deleted() {
        let mut obs = steady(3);
        let peers: BTreeSet<String> = ["m1", "m2", "m3"].map(String::from).into();
        obs.pods.push(PodView {
            joining: Some(peers),
            state: PodState::Pending,
            ..running("m4")
        });
        assert_eq!(
            plan(&obs, &target(5)),
            Action::JoinMembers {
                names: vec!["m4".into()]
            }
        );
        // Not wanted any more, or too late.
        let delete = Action::DeletePod {
            name: "m4".into(),
            reason: DeleteReason::NoMember,
        };
        assert_eq!(plan(&obs, &target(3)), delete);
        let impatient = Target {
            learner_timeout: MINUTE / 2,
            ..target(5)
        };
        assert_eq!(plan(&obs, &impatient), delete);
        // The membership changed since the pod was made: etcd would refuse its
        // --initial-cluster.
        obs.members.as_mut().unwrap().pop();
        obs.pods.remove(2);
        assert_eq!(plan(&obs, &target(5)), delete);
    }

    #[test]
    fn the_second_members_pod_made_beside_the_seed_joins_once_the_seed_answers() {
        let gated = PodView {
            joining: Some(["m1".to_string()].into()),
            state: PodState::Pending,
            age: Duration::from_secs(1),
            ..running("m2")
        };
        let starting = Observation {
            members: None,
            leader: None,
            pods: vec![
                PodView {
                    age: Duration::from_secs(1),
                    ..running("m1")
                },
                gated.clone(),
            ],
            bootstrapped: true,
            silent_for: Duration::ZERO,
            ..Observation::default()
        };
        assert!(matches!(plan(&starting, &target(3)), Action::Wait { .. }));
        let mut seeded = steady(1);
        seeded.pods.push(gated);
        assert_eq!(
            plan(&seeded, &target(3)),
            Action::JoinMembers {
                names: vec!["m2".into()]
            }
        );
    }

    #[test]
    fn a_deleted_pod_s_member_is_replaced_while_its_etcd_still_stops() {
        // Without volumes its data goes with the pod: there is nothing to wait for.
        let mut obs = steady(3);
        obs.pods[2].state = PodState::Terminating;
        assert_eq!(
            plan(&obs, &target(3)),
            Action::ReplaceMember {
                name: "m3".into(),
                id: 3
            }
        );
        // The leader hands leadership over as it stops: removing it first would leave the
        // cluster without one for an election timeout.
        let mut leading = steady(3);
        leading.pods[0].state = PodState::Terminating;
        assert!(matches!(
            plan(&leading, &target(3)),
            Action::Wait { reason } if reason.contains("stopping")
        ));
        // Removing it would cost quorum while another voter is down: it is waited for.
        let mut short = steady(3);
        short.pods[2].state = PodState::Terminating;
        short.members.as_mut().unwrap()[1].healthy = false;
        assert!(matches!(
            plan(&short, &target(3)),
            Action::Wait { .. } | Action::QuorumLost { .. }
        ));
    }

    #[test]
    fn a_dead_member_is_replaced_in_one_step() {
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.pods.pop();
        assert_eq!(
            plan(&obs, &target(3)),
            Action::ReplaceMember {
                name: "m3".into(),
                id: 3
            }
        );
        // Beyond the size it is only removed.
        assert!(matches!(
            plan(&obs, &target(2)),
            Action::RemoveMember {
                id: 3,
                reason: RemoveReason::PodGone,
                ..
            }
        ));
        let persistent = Target {
            persistent: true,
            ..target(3)
        };
        assert_eq!(
            plan(&obs, &persistent),
            Action::RecreatePod { name: "m3".into() }
        );
    }

    #[test]
    fn lost_quorum_is_reported_and_nothing_is_done() {
        let mut obs = steady(3);
        for m in &mut obs.members.as_mut().unwrap()[1..] {
            m.healthy = false;
        }
        obs.pods.truncate(1);
        assert!(matches!(plan(&obs, &target(3)), Action::QuorumLost { .. }));
    }

    #[test]
    fn a_terminating_pod_does_not_count_towards_quorum() {
        // Two of three pods deleted at once: one member already down, the other still
        // answering while its pod terminates. Removing the first would leave a two-member
        // cluster whose second half is on its way out.
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[0].healthy = false;
        obs.pods[0].state = PodState::Terminating;
        obs.pods[1].state = PodState::Terminating;
        assert!(matches!(plan(&obs, &target(3)), Action::QuorumLost { .. }));
    }

    #[test]
    fn paused_changes_nothing() {
        let mut obs = steady(3);
        obs.pods.pop();
        assert_eq!(
            plan(
                &obs,
                &Target {
                    paused: true,
                    ..target(3)
                }
            ),
            Action::Paused
        );
    }

    #[test]
    fn on_scale_down_a_pending_learner_is_removed_not_promoted() {
        // 3 voters and a learner that has caught up, and the user asks for 3 again.
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m4", 4, true, true));
        obs.pods.push(running("m4"));
        assert_eq!(
            plan(&obs, &target(3)),
            Action::RemoveMember {
                name: "m4".into(),
                id: 4,
                reason: RemoveReason::ScaleDown
            }
        );
        // Below the learner's own slot too: still removed first, then a follower.
        assert!(matches!(
            plan(&obs, &target(1)),
            Action::RemoveMember { id: 4, .. }
        ));
    }

    #[test]
    fn a_learner_that_never_catches_up_is_removed() {
        let mut obs = steady(3);
        obs.members
            .as_mut()
            .unwrap()
            .push(member("m4", 4, true, true));
        obs.pods.push(PodView {
            age: 10 * MINUTE,
            ..running("m4")
        });
        assert!(matches!(
            plan(&obs, &target(5)),
            Action::RemoveMember {
                id: 4,
                reason: RemoveReason::StrandedLearner,
                ..
            }
        ));
    }

    #[test]
    fn a_restarting_single_member_is_not_lost_quorum_until_the_grace_has_passed() {
        // The member's container restarts: its pod still runs, etcd is silent for a moment.
        let mut obs = steady(1);
        obs.members.as_mut().unwrap()[0].healthy = false;
        obs.members.as_mut().unwrap()[0].unhealthy_for = Duration::from_secs(3);
        obs.leader = None;
        assert!(matches!(plan(&obs, &target(1)), Action::Wait { .. }));
        obs.members.as_mut().unwrap()[0].unhealthy_for = MINUTE;
        assert!(matches!(plan(&obs, &target(1)), Action::QuorumLost { .. }));

        // Nobody answers at all: the same grace, counted from the last answer.
        let silent = Observation {
            members: None,
            leader: None,
            silent_for: Duration::from_secs(3),
            ..steady(1)
        };
        assert!(matches!(plan(&silent, &target(1)), Action::Wait { .. }));
        let lost = Observation {
            silent_for: MINUTE,
            ..silent
        };
        assert!(matches!(plan(&lost, &target(1)), Action::QuorumLost { .. }));
    }

    #[test]
    fn a_member_stuck_unhealthy_while_its_pod_runs_is_replaced_after_the_bound() {
        // Crash-looping: the pod is Running (or Pending), etcd never answers as this member.
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.members.as_mut().unwrap()[2].unhealthy_for = MINUTE;
        // Before the bound it blocks scale-up, as a member that is merely slow should.
        assert!(matches!(plan(&obs, &target(5)), Action::Wait { .. }));
        assert!(matches!(plan(&obs, &target(3)), Action::Wait { .. }));
        obs.members.as_mut().unwrap()[2].unhealthy_for = 6 * MINUTE;
        let replace = Action::RemoveMember {
            name: "m3".into(),
            id: 3,
            reason: RemoveReason::Unhealthy,
        };
        assert_eq!(plan(&obs, &target(3)), replace);
        assert_eq!(plan(&obs, &target(5)), replace);
        obs.pods[2].state = PodState::Pending;
        assert_eq!(plan(&obs, &target(3)), replace);

        // Not when the others are not a quorum without it (2 of 3 stuck in a 3-member cluster
        // is lost quorum; in a 5-member cluster with 2 stuck, one at a time).
        let mut five = steady(5);
        for m in &mut five.members.as_mut().unwrap()[3..] {
            m.healthy = false;
            m.unhealthy_for = 6 * MINUTE;
        }
        assert!(matches!(
            plan(&five, &target(5)),
            Action::RemoveMember {
                reason: RemoveReason::Unhealthy,
                ..
            }
        ));
    }

    #[test]
    fn a_persistent_members_ended_pod_is_deleted_then_recreated_on_its_claim() {
        let persistent = Target {
            persistent: true,
            ..target(3)
        };
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.pods[2].state = PodState::Gone;
        assert_eq!(
            plan(&obs, &persistent),
            Action::DeletePod {
                name: "m3".into(),
                reason: DeleteReason::Ended
            }
        );
        obs.pods.pop();
        assert_eq!(
            plan(&obs, &persistent),
            Action::RecreatePod { name: "m3".into() }
        );
    }

    #[test]
    fn a_stale_leader_is_never_chosen_for_scale_down_and_a_healthy_one_is_never_removed() {
        // The leader as some member last reported it is m1, which is now silent.
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[0].healthy = false;
        obs.pods[0].state = PodState::Running;
        obs.leader = Some(1);
        match plan(&obs, &target(2)) {
            Action::RemoveMember { id, .. } => assert_ne!(id, 1),
            other => assert!(matches!(other, Action::Wait { .. }), "{other:?}"),
        }
    }

    // --- properties ------------------------------------------------------------------------

    /// One member of the simulated world.
    #[derive(Clone, Debug)]
    struct SimMember {
        name: String,
        id: u64,
        learner: bool,
        /// It answers as itself, knows a leader and raises no alarm.
        answers: bool,
    }

    /// One pod of the simulated world.
    #[derive(Clone, Debug)]
    struct SimPod {
        name: String,
        state: PodState,
        joining: Option<BTreeSet<String>>,
        /// Made from the template the spec asks for now.
        current: bool,
    }

    /// A world the planner's actions are applied to: each member is in etcd and/or has a pod
    /// and/or a volume claim.
    #[derive(Clone, Debug)]
    struct Sim {
        members: Vec<SimMember>,
        pods: Vec<SimPod>,
        /// Volume claims that exist (seen only when the target is persistent).
        claims: BTreeSet<String>,
        persistent: bool,
        /// The leader as the planner is told it; may be stale (a member that no longer answers).
        leader: Option<u64>,
        /// How long the silent members have been silent.
        silent_for: Duration,
        next: u64,
    }

    /// The test's own majority rule, written apart from [`quorum`] so that a mistake there is
    /// not repeated here.
    fn majority(healthy: usize, of: usize) -> bool {
        2 * healthy > of
    }

    impl Sim {
        fn observe(&self) -> Observation {
            let answered = self.members.iter().any(|m| m.answers);
            Observation {
                members: answered.then(|| {
                    self.members
                        .iter()
                        .map(|m| MemberView {
                            unhealthy_for: if m.answers {
                                Duration::ZERO
                            } else {
                                self.silent_for
                            },
                            ..member(&m.name, m.id, m.learner, m.answers)
                        })
                        .collect()
                }),
                leader: self.leader,
                pods: self
                    .pods
                    .iter()
                    .map(|p| PodView {
                        name: p.name.clone(),
                        state: p.state,
                        age: MINUTE,
                        joining: p.joining.clone(),
                        restore: None,
                        current: p.current,
                        failing: None,
                    })
                    .collect(),
                bootstrapped: true,
                silent_for: if answered {
                    Duration::ZERO
                } else {
                    self.silent_for
                },
                claims: if self.persistent {
                    self.claims.clone()
                } else {
                    BTreeSet::new()
                },
                known_members: self.members.iter().map(|m| m.name.clone()).collect(),
                unpublished: BTreeSet::new(),
            }
        }

        fn pod(&self, name: &str) -> Option<&SimPod> {
            self.pods.iter().find(|p| p.name == name)
        }

        fn pod_state(&self, name: &str) -> Option<PodState> {
            self.pod(name).map(|p| p.state)
        }

        fn stale(&self, name: &str) -> bool {
            self.pod(name).is_some_and(|p| !p.current)
        }

        fn voters(&self) -> Vec<&SimMember> {
            self.members.iter().filter(|m| !m.learner).collect()
        }

        /// A voter that counts: it answers and its pod is not on its way out.
        fn counts(&self, m: &SimMember) -> bool {
            m.answers && !m.learner && self.pod_state(&m.name).is_some_and(|s| !s.is_gone())
        }

        fn delete_pod(&mut self, name: &str) {
            for p in self.pods.iter_mut().filter(|p| p.name == name) {
                p.state = PodState::Terminating;
            }
        }

        /// The pods of `count` new members, each naming the members and the others.
        fn start_batch(&mut self, count: usize) {
            let names: Vec<String> = (0..count)
                .map(|_| {
                    self.next += 1;
                    format!("n{}", self.next)
                })
                .collect();
            for name in &names {
                let peers = self
                    .members
                    .iter()
                    .map(|m| m.name.clone())
                    .chain(names.iter().filter(|n| *n != name).cloned())
                    .collect();
                if self.persistent {
                    self.claims.insert(name.clone());
                }
                self.pods.push(SimPod {
                    name: name.clone(),
                    state: PodState::Pending,
                    joining: Some(peers),
                    current: true,
                });
            }
        }

        /// Applies `action`; afterwards every member whose pod runs answers (it has started),
        /// except a learner whose batch is not all added yet (its etcd waits, as the gate
        /// makes it).
        fn apply(&mut self, action: &Action) {
            match action {
                // As act does with a gate image: the pod (and its claim) first, its member on
                // a later step (the worst case: the operator stopped in between).
                Action::AddMembers { count } => self.start_batch(*count),
                // As act does: out of etcd, its pod deleted, then the replacement's pod made
                // (and, in the worst case, the operator stopped before it was added).
                Action::ReplaceMember { id, name } => {
                    self.members.retain(|m| m.id != *id);
                    self.delete_pod(name);
                    self.start_batch(1);
                }
                Action::JoinMembers { names } => {
                    for name in names {
                        self.next += 1;
                        self.members.push(SimMember {
                            name: name.clone(),
                            id: 1000 + self.next,
                            learner: true,
                            answers: false,
                        });
                    }
                }
                Action::Promote { id, .. } => self
                    .members
                    .iter_mut()
                    .filter(|m| m.id == *id)
                    .for_each(|m| m.learner = false),
                Action::RemoveMember { id, name, .. } => {
                    // As act does: out of etcd first, then the pod is deleted.
                    self.members.retain(|m| m.id != *id);
                    self.delete_pod(name);
                }
                Action::DeletePod { name, .. } => self.delete_pod(name),
                // Never on a claim that is gone (the property test checks it first).
                Action::RecreatePod { name } => self.pods.push(SimPod {
                    name: name.clone(),
                    state: PodState::Running,
                    joining: None,
                    current: true,
                }),
                Action::MoveLeader { id, .. } => self.leader = Some(*id),
                Action::DeleteClaim { name } => {
                    self.claims.remove(name);
                }
                _ => {}
            }
            // Deleted pods finish terminating, and pods that were scheduling have started, by
            // the next look.
            self.pods.retain(|p| p.state != PodState::Terminating);
            for p in &mut self.pods {
                if p.state == PodState::Pending {
                    p.state = PodState::Running;
                }
            }
            let running: BTreeSet<String> = self
                .pods
                .iter()
                .filter(|p| p.state == PodState::Running)
                .map(|p| p.name.clone())
                .collect();
            let names: BTreeSet<String> = self.members.iter().map(|m| m.name.clone()).collect();
            for m in &mut self.members {
                let pod = self.pods.iter_mut().find(|p| p.name == m.name);
                m.answers = running.contains(&m.name);
                if let Some(p) = pod
                    && let Some(peers) = &p.joining
                {
                    let mut all = peers.clone();
                    all.insert(m.name.clone());
                    if all == names {
                        // Its gate lets etcd start; from now on it runs as any member.
                        p.joining = None;
                    } else {
                        m.answers = false;
                    }
                }
            }
            if !self
                .members
                .iter()
                .any(|m| Some(m.id) == self.leader && m.answers && !m.learner)
            {
                self.leader = self
                    .members
                    .iter()
                    .find(|m| m.answers && !m.learner)
                    .map(|m| m.id);
            }
        }
    }

    /// Arbitrary states: up to 7 members in etcd, each a voter or learner, answering or not,
    /// with a running, pending, ended, terminating or missing pod (members whose pod is
    /// terminating may still answer, as real ones do for a moment) made from the current
    /// template or an older one, with or without a volume claim, up to 2 stray pods, a leader
    /// that may be stale, and silent members that went silent a moment or an hour ago. With
    /// `quorate`, the first voters (a majority) are forced healthy, so every state keeps quorum.
    fn arb_sim(quorate: bool) -> impl Strategy<Value = Sim> {
        // Weighted towards running, answering, current voters with claims, so that enough
        // states keep quorum and rolls have something to do.
        let member = (
            prop::bool::weighted(0.3),
            0..9u8,
            prop::bool::weighted(0.85),
            prop::bool::weighted(0.6),
            prop::bool::weighted(0.9),
        );
        (
            prop::collection::vec(member, 1..=7),
            0..=2usize,
            any::<prop::sample::Index>(),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.5),
            prop::bool::weighted(0.2),
        )
            .prop_map(move |(ms, strays, leader, stale, recent, orphan)| {
                let mut sim = Sim {
                    members: vec![],
                    pods: vec![],
                    claims: BTreeSet::new(),
                    persistent: false,
                    leader: None,
                    silent_for: if recent {
                        Duration::from_secs(2)
                    } else {
                        60 * MINUTE
                    },
                    next: 0,
                };
                for (i, (learner, pod, answers, current, claim)) in ms.iter().enumerate() {
                    let name = format!("m{i}");
                    let state = match pod {
                        0..=4 => Some(PodState::Running),
                        5 => Some(PodState::Pending),
                        6 => Some(PodState::Gone),
                        7 => Some(PodState::Terminating),
                        _ => None,
                    };
                    // A member answers from a running pod, or from one that is terminating
                    // (etcd serves until the signal lands).
                    let answers = *answers
                        && matches!(state, Some(PodState::Running | PodState::Terminating));
                    // The first member is the seed, always a voter.
                    sim.members.push(SimMember {
                        name: name.clone(),
                        id: i as u64 + 1,
                        learner: *learner && i > 0,
                        answers,
                    });
                    if *claim {
                        sim.claims.insert(name.clone());
                    }
                    if let Some(state) = state {
                        sim.pods.push(SimPod {
                            name,
                            state,
                            joining: None,
                            current: *current,
                        });
                    }
                }
                if quorate {
                    let voters: Vec<usize> = (0..sim.members.len())
                        .filter(|&i| !sim.members[i].learner)
                        .collect();
                    for &i in voters.iter().take(voters.len() / 2 + 1) {
                        sim.members[i].answers = true;
                        let name = sim.members[i].name.clone();
                        let current = sim.pod(&name).is_none_or(|p| p.current);
                        sim.pods.retain(|p| p.name != name);
                        sim.pods.push(SimPod {
                            name,
                            state: PodState::Running,
                            joining: None,
                            current,
                        });
                    }
                }
                // Strays: plain pods without a member, or pods created ahead of their member
                // whose `--initial-cluster` may or may not still match.
                let names: BTreeSet<String> = sim.members.iter().map(|m| m.name.clone()).collect();
                for s in 0..strays {
                    let joining = match (s + ms.len()) % 4 {
                        0 => None,
                        1 => Some(names.clone()),
                        // One of a batch: it names the other strays too.
                        2 => Some(
                            names
                                .iter()
                                .cloned()
                                .chain((0..strays).filter(|t| *t != s).map(|t| format!("stray{t}")))
                                .collect(),
                        ),
                        _ => Some(names.iter().skip(1).cloned().collect()),
                    };
                    sim.pods.push(SimPod {
                        name: format!("stray{s}"),
                        state: PodState::Running,
                        joining,
                        current: s % 2 == 0,
                    });
                }
                // A claim left behind by a member removed earlier.
                if orphan {
                    sim.claims.insert("gone".into());
                }
                // The leader as a healthy voter reports it; sometimes stale: any voter.
                let candidates: Vec<u64> = sim
                    .members
                    .iter()
                    .filter(|m| !m.learner && (stale || m.answers))
                    .map(|m| m.id)
                    .collect();
                if !candidates.is_empty() {
                    sim.leader = Some(candidates[leader.index(candidates.len())]);
                }
                sim
            })
    }

    fn target_of(size: usize, persistent: bool) -> Target {
        Target {
            persistent,
            ..target(size)
        }
    }

    fn target_with(size: usize, persistent: bool, max_learners: usize) -> Target {
        Target {
            max_learners,
            ..target_of(size, persistent)
        }
    }

    /// All `n` members made from an older template, `m1` leading.
    fn outdated(n: usize, persistent: bool) -> Sim {
        Sim {
            members: (1..=n)
                .map(|i| SimMember {
                    name: format!("m{i}"),
                    id: i as u64,
                    learner: false,
                    answers: true,
                })
                .collect(),
            pods: (1..=n)
                .map(|i| SimPod {
                    name: format!("m{i}"),
                    state: PodState::Running,
                    joining: None,
                    current: false,
                })
                .collect(),
            claims: (1..=n).map(|i| format!("m{i}")).collect(),
            persistent,
            leader: Some(1),
            silent_for: Duration::ZERO,
            next: 0,
        }
    }

    /// The actions from `sim` to Steady, in short form.
    fn roll_trace(mut sim: Sim) -> Vec<String> {
        let target = target_of(sim.members.len(), sim.persistent);
        let mut trace = Vec::new();
        for _ in 0..64 {
            let action = plan(&sim.observe(), &target);
            trace.push(match &action {
                Action::Steady => break,
                Action::AddMembers { .. } => "add".to_string(),
                Action::JoinMembers { .. } => "join".into(),
                Action::Promote { .. } => "promote".into(),
                Action::RemoveMember { name, reason, .. } => format!("remove {name} {reason:?}"),
                Action::DeletePod { name, reason } => format!("delete {name} {reason:?}"),
                Action::RecreatePod { name } => format!("recreate {name}"),
                Action::MoveLeader { from, to, .. } => format!("lead {from}->{to}"),
                other => format!("{other:?}"),
            });
            sim.apply(&action);
        }
        trace
    }

    #[test]
    fn without_volumes_a_roll_adds_first_and_replaces_the_leader_last() {
        let one = ["add", "join", "promote"];
        let mut expected: Vec<String> = Vec::new();
        for follower in ["m2", "m3"] {
            expected.extend(one.map(String::from));
            expected.push(format!("remove {follower} Outdated"));
        }
        expected.extend(one.map(String::from));
        expected.push("lead m1->n1".into());
        expected.push("remove m1 Outdated".into());
        assert_eq!(roll_trace(outdated(3, false)), expected);
        // A single member is never removed before its successor votes.
        assert_eq!(
            roll_trace(outdated(1, false)),
            [
                "add",
                "join",
                "promote",
                "lead m1->n1",
                "remove m1 Outdated"
            ]
        );
    }

    #[test]
    fn with_volumes_a_roll_restarts_members_in_place_and_the_leader_last() {
        assert_eq!(
            roll_trace(outdated(3, true)),
            [
                "delete m2 Outdated",
                "recreate m2",
                "delete m3 Outdated",
                "recreate m3",
                "lead m1->m2",
                "delete m1 Outdated",
                "recreate m1",
            ]
        );
        // Two members cannot restart one without losing quorum: they add first.
        let two = roll_trace(outdated(2, true));
        assert_eq!(&two[..4], ["add", "join", "promote", "remove m2 Outdated"]);
    }

    #[test]
    fn a_member_restarting_in_place_is_not_rolled_twice() {
        // m2's old pod was deleted and still answers while it stops.
        let mut obs = outdated(3, true).observe();
        obs.pods[1].state = PodState::Terminating;
        assert!(matches!(
            plan(&obs, &target_of(3, true)),
            Action::Wait { reason } if reason.contains("stopping")
        ));
    }

    #[test]
    fn a_roll_waits_for_every_voter_to_catch_up() {
        let mut obs = outdated(3, true).observe();
        obs.members.as_mut().unwrap()[2].caught_up = false;
        assert!(matches!(
            plan(&obs, &target_of(3, true)),
            Action::Wait { reason } if reason.contains("catching up")
        ));
    }

    #[test]
    fn a_roll_waits_for_every_voter_to_be_reached_through_the_client_service() {
        // m2 was restarted and serves, but its pod is not Ready or published yet: rolling the
        // next member now would leave clients one member.
        let mut obs = outdated(3, true).observe();
        obs.unpublished.insert("m2".into());
        assert!(matches!(
            plan(&obs, &target_of(3, true)),
            Action::Wait { reason } if reason.contains("client Service")
        ));
        // Without volumes the outdated member goes only once the new one is reached too.
        let mut obs = outdated(3, false).observe();
        obs.unpublished.insert("m3".into());
        assert!(!matches!(
            plan(&obs, &target_of(3, false)),
            Action::DeletePod { .. } | Action::RemoveMember { .. } | Action::MoveLeader { .. }
        ));
    }

    #[test]
    fn a_roll_stops_at_a_new_member_that_cannot_start_and_goes_on_after_a_fix() {
        // m1..m3 outdated; a learner made from the new template cannot pull its image.
        let mut obs = outdated(3, false).observe();
        obs.members
            .as_mut()
            .unwrap()
            .push(member("n1", 9, true, false));
        obs.pods.push(PodView {
            failing: Some("etcd: ImagePullBackOff".into()),
            ..running("n1")
        });
        let stalled = plan(&obs, &target(3));
        assert!(
            matches!(&stalled, Action::RollStalled { reason } if reason.contains("ImagePullBackOff")),
            "{stalled:?}"
        );
        // Too slow counts too, after the learner timeout.
        obs.pods[3].failing = None;
        obs.pods[3].age = 10 * MINUTE;
        assert!(matches!(plan(&obs, &target(3)), Action::RollStalled { .. }));
        // The spec changed again: the learner is outdated in turn and goes first.
        obs.pods[3].current = false;
        assert_eq!(
            plan(&obs, &target(3)),
            Action::RemoveMember {
                name: "n1".into(),
                id: 9,
                reason: RemoveReason::Outdated
            }
        );
        // With volumes: a member restarted on the new template that crash-loops stops the
        // roll; the other outdated members keep running.
        let mut obs = outdated(3, true).observe();
        obs.pods[1].current = true;
        obs.pods[1].failing = Some("etcd: CrashLoopBackOff".into());
        obs.members.as_mut().unwrap()[1].healthy = false;
        assert!(matches!(
            plan(&obs, &target_of(3, true)),
            Action::RollStalled { .. }
        ));
    }

    #[test]
    fn an_outdated_unhealthy_member_is_rolled_first() {
        let mut obs = outdated(3, false).observe();
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.members.as_mut().unwrap()[2].unhealthy_for = Duration::from_secs(1);
        assert_eq!(
            plan(&obs, &target(3)),
            Action::RemoveMember {
                name: "m3".into(),
                id: 3,
                reason: RemoveReason::Outdated
            }
        );
        let mut obs = outdated(3, true).observe();
        obs.members.as_mut().unwrap()[2].healthy = false;
        assert_eq!(
            plan(&obs, &target_of(3, true)),
            Action::DeletePod {
                name: "m3".into(),
                reason: DeleteReason::Outdated
            }
        );
    }

    #[test]
    fn persistent_pods_come_back_even_without_quorum_but_never_without_their_claim() {
        let persistent = target_of(3, true);
        // A node rebooted: two of three pods ended (Failed), the third answers alone.
        let mut obs = steady(3);
        for i in 1..3 {
            obs.members.as_mut().unwrap()[i].healthy = false;
            obs.pods[i].state = PodState::Gone;
        }
        assert_eq!(
            plan(&obs, &persistent),
            Action::DeletePod {
                name: "m2".into(),
                reason: DeleteReason::Ended
            }
        );
        obs.pods.truncate(1);
        assert_eq!(
            plan(&obs, &persistent),
            Action::RecreatePod { name: "m2".into() }
        );
        // Every pod deleted at once: nobody answers; the members the status listed come back.
        let none = Observation {
            members: None,
            leader: None,
            pods: vec![],
            ..steady(3)
        };
        assert_eq!(
            plan(&none, &persistent),
            Action::RecreatePod { name: "m1".into() }
        );
        // Without volumes that is lost quorum.
        assert!(matches!(plan(&none, &target(3)), Action::QuorumLost { .. }));
        // With volumes but no claim left: lost, and the message says why.
        let bare = Observation {
            claims: BTreeSet::new(),
            ..none.clone()
        };
        assert!(matches!(
            plan(&bare, &persistent),
            Action::QuorumLost { reason } if reason.contains("no claim")
        ));
        // A claim that is gone: the member is replaced, never restarted empty (beyond the
        // size, only removed).
        let mut obs = steady(3);
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.pods.pop();
        obs.claims.remove("m3");
        assert_eq!(
            plan(&obs, &persistent),
            Action::ReplaceMember {
                name: "m3".into(),
                id: 3
            }
        );
        assert_eq!(
            plan(
                &obs,
                &Target {
                    size: 2,
                    ..persistent
                }
            ),
            Action::RemoveMember {
                name: "m3".into(),
                id: 3,
                reason: RemoveReason::DataGone
            }
        );
        // A claim deleted while its pod runs: replaced now, while its data can still be
        // replicated from it; leadership first if it leads.
        let mut obs = steady(3);
        obs.claims.remove("m3");
        assert!(matches!(
            plan(&obs, &persistent),
            Action::RemoveMember {
                id: 3,
                reason: RemoveReason::DataGone,
                ..
            }
        ));
        obs.claims.insert("m3".into());
        obs.claims.remove("m1");
        assert!(matches!(
            plan(&obs, &persistent),
            Action::MoveLeader { ref from, .. } if from == "m1"
        ));
        // The claim of a removed member goes.
        let mut obs = steady(3);
        obs.claims.insert("old".into());
        assert_eq!(
            plan(&obs, &persistent),
            Action::DeleteClaim { name: "old".into() }
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// One step never removes a leader that counts, never removes or restarts a voter
        /// unless the voters that count (answering, pod not leaving) stay a majority, never
        /// adds while a member is unhealthy or a learner is pending, adds beyond the size only
        /// to replace an outdated voter that cannot be restarted in place, never promotes a
        /// learner the user no longer needs, never recreates a pod without its claim, and
        /// without a majority does nothing but bring a persistent member's pod back.
        #[test]
        fn no_step_breaks_quorum(
            mut sim in arb_sim(false),
            size in 1..=7usize,
            persistent in any::<bool>(),
            max_learners in 1..=4usize,
        ) {
            sim.persistent = persistent;
            let obs = sim.observe();
            let action = plan(&obs, &target_with(size, persistent, max_learners));
            let voters = sim.voters();
            let counting = voters.iter().filter(|m| sim.counts(m)).count();
            let quorate = obs.members.is_some() && majority(counting, voters.len());
            // A surplus voter is allowed while some voter must be replaced rather than
            // restarted: outdated, or (with volumes) its claim gone while its pod runs.
            let may_surge = voters.iter().any(|v| {
                sim.stale(&v.name)
                    || (persistent
                        && sim.pod_state(&v.name).is_some_and(|s| !s.is_gone())
                        && !sim.claims.contains(&v.name))
            });
            let room = voters.len() < size || (voters.len() == size && may_surge);
            let capacity = size + usize::from(may_surge);
            let learners: Vec<&SimMember> = sim.members.iter().filter(|m| m.learner).collect();
            match &action {
                Action::RemoveMember { id, .. } | Action::ReplaceMember { id, .. } => {
                    prop_assert!(quorate);
                    let m = sim.members.iter().find(|m| m.id == *id).unwrap();
                    if Some(*id) == obs.leader {
                        prop_assert!(!sim.counts(m), "removed the leader {:?}", action);
                    }
                    if !m.learner {
                        let after_voters = voters.len() - 1;
                        let after = counting - usize::from(sim.counts(m));
                        prop_assert!(after_voters >= 1);
                        prop_assert!(majority(after, after_voters), "{:?}", action);
                    }
                }
                // A new batch only when every member is a voter that answers; never more
                // learners than every member accepts, nor more members than the size asks for.
                Action::AddMembers { count } => {
                    prop_assert!(quorate);
                    prop_assert!(sim.members.iter().all(|m| !m.learner && m.answers));
                    prop_assert!(*count >= 1 && *count <= max_learners);
                    prop_assert!(
                        voters.len() + count <= capacity,
                        "{:?} with {} voters of {}", action, voters.len(), size
                    );
                }
                // The rest of a batch: every voter answers, the learners there are belong
                // to the same batch (they wait for it), and the limit holds after it.
                Action::JoinMembers { names: joining } => {
                    prop_assert!(quorate);
                    prop_assert!(voters.iter().all(|m| m.answers));
                    prop_assert!(!joining.is_empty());
                    prop_assert!(learners.len() + joining.len() <= max_learners, "{:?}", action);
                    prop_assert!(room, "{:?} with {} voters of {}", action, voters.len(), size);
                    let names: BTreeSet<String> =
                        sim.members.iter().map(|m| m.name.clone()).collect();
                    for name in joining {
                        let p = sim.pod(name).unwrap();
                        prop_assert!(p.current);
                        let mut batch = p.joining.clone().unwrap();
                        batch.insert(name.clone());
                        prop_assert!(names.is_subset(&batch), "{:?} names {:?}", action, batch);
                        prop_assert!(batch.len() <= capacity);
                        for l in &learners {
                            prop_assert!(batch.contains(&l.name));
                        }
                        for other in joining {
                            prop_assert!(batch.contains(other));
                        }
                    }
                }
                Action::Promote { id, .. } => {
                    prop_assert!(quorate);
                    let m = sim.members.iter().find(|m| m.id == *id).unwrap();
                    prop_assert!(m.learner && m.answers);
                    prop_assert!(room, "promoted a learner on scale-down");
                    prop_assert!(sim.pod(&m.name).unwrap().current);
                }
                Action::RecreatePod { name } => {
                    prop_assert!(persistent);
                    prop_assert!(sim.pod_state(name).is_none());
                    prop_assert!(sim.claims.contains(name), "recreated {} without its data", name);
                }
                Action::DeletePod { name, reason: DeleteReason::Outdated } => {
                    prop_assert!(quorate && persistent);
                    prop_assert!(sim.claims.contains(name));
                    prop_assert!(sim.stale(name));
                    let m = sim.members.iter().find(|m| &m.name == name).unwrap();
                    let after = counting - usize::from(sim.counts(m));
                    prop_assert!(majority(after, voters.len()), "{:?}", action);
                }
                Action::MoveLeader { id, .. } => {
                    prop_assert!(quorate);
                    let to = sim.members.iter().find(|m| m.id == *id).unwrap();
                    prop_assert!(sim.counts(to));
                }
                Action::DeleteClaim { name } => {
                    prop_assert!(quorate);
                    prop_assert!(sim.members.iter().all(|m| &m.name != name));
                    prop_assert!(sim.pod(name).is_none());
                }
                Action::Bootstrap => prop_assert!(false, "bootstrapped twice"),
                _ => {}
            }
            if !quorate {
                let rescue = matches!(action, Action::RecreatePod { .. })
                    || matches!(&action, Action::DeletePod { name, reason: DeleteReason::Ended }
                        if persistent && sim.pod_state(name) == Some(PodState::Gone));
                if !rescue {
                    prop_assert!(!action.is_membership_change(), "{:?} without quorum", action);
                    let changes = matches!(
                        action,
                        Action::DeletePod { .. }
                            | Action::RecreatePod { .. }
                            | Action::MoveLeader { .. }
                            | Action::DeleteClaim { .. }
                    );
                    prop_assert!(!changes, "{:?} without quorum", action);
                }
            }
        }

        /// From any state with quorum, applying the plan step by step reaches spec.size voters,
        /// all healthy, no learner, pods equal to members, every pod made from the current
        /// template (with volumes: claims equal to members), then stays there.
        #[test]
        fn repeated_steps_converge_to_size(
            mut sim in arb_sim(true),
            size in 1..=7usize,
            persistent in any::<bool>(),
            max_learners in 1..=4usize,
        ) {
            sim.persistent = persistent;
            let target = target_with(size, persistent, max_learners);
            let mut trace = Vec::new();
            for _ in 0..160 {
                let action = plan(&sim.observe(), &target);
                if action == Action::Steady {
                    break;
                }
                trace.push(action.clone());
                sim.apply(&action);
            }
            prop_assert_eq!(plan(&sim.observe(), &target), Action::Steady, "{:?}", trace);
            prop_assert_eq!(sim.members.len(), size);
            prop_assert!(sim.members.iter().all(|m| !m.learner && m.answers));
            prop_assert!(sim.pods.iter().all(|p| p.current), "{:?}", trace);
            let mut pods: Vec<_> = sim.pods.iter().map(|p| p.name.clone()).collect();
            let mut members: Vec<_> = sim.members.iter().map(|m| m.name.clone()).collect();
            pods.sort();
            members.sort();
            prop_assert_eq!(&pods, &members);
            if persistent {
                let claims: Vec<_> = sim.claims.iter().cloned().collect();
                prop_assert_eq!(claims, members, "{:?}", trace);
            }
        }

        /// A roll keeps every healthy voter it started with counting until a replacement that
        /// counts has joined: the number of counting voters never drops below the size minus
        /// one (restart in place) and, without volumes, never below the size.
        #[test]
        fn a_roll_never_costs_more_than_one_voter(
            n in 1..=7usize,
            persistent in any::<bool>(),
            leader in 0..7usize,
        ) {
            let mut sim = Sim {
                members: (0..n)
                    .map(|i| SimMember {
                        name: format!("m{i}"),
                        id: i as u64 + 1,
                        learner: false,
                        answers: true,
                    })
                    .collect(),
                pods: (0..n)
                    .map(|i| SimPod {
                        name: format!("m{i}"),
                        state: PodState::Running,
                        joining: None,
                        current: false,
                    })
                    .collect(),
                claims: (0..n).map(|i| format!("m{i}")).collect(),
                persistent,
                leader: Some((leader % n) as u64 + 1),
                silent_for: Duration::ZERO,
                next: 0,
            };
            let target = target_of(n, persistent);
            let floor = if persistent && n >= 3 { n - 1 } else { n };
            let old_leader = sim.leader;
            let mut trace = Vec::new();
            for _ in 0..100 {
                let action = plan(&sim.observe(), &target);
                if action == Action::Steady {
                    break;
                }
                // The leader is rolled last: leadership moves only from the leader the roll
                // started with, once every other voter runs the new template.
                if let Action::MoveLeader { from, .. } = &action {
                    let others_stale = sim
                        .voters()
                        .iter()
                        .any(|v| &v.name != from && sim.stale(&v.name));
                    prop_assert!(!others_stale, "leadership moved before the others: {:?}", trace);
                    prop_assert_eq!(
                        sim.members.iter().find(|m| &m.name == from).map(|m| m.id),
                        old_leader
                    );
                }
                trace.push(action.clone());
                sim.apply(&action);
                let counting = sim.voters().iter().filter(|m| sim.counts(m)).count();
                prop_assert!(counting >= floor, "{} counting after {:?}", counting, trace);
            }
            prop_assert!(sim.pods.iter().all(|p| p.current));
            prop_assert_eq!(sim.members.len(), n);
            if persistent && n >= 3 {
                // Restarted in place: the same members, no membership change.
                let names: BTreeSet<String> = sim.members.iter().map(|m| m.name.clone()).collect();
                prop_assert_eq!(names, (0..n).map(|i| format!("m{i}")).collect::<BTreeSet<_>>());
                prop_assert!(trace.iter().all(|a| !a.is_membership_change()), "{:?}", trace);
            }
        }
    }
}
