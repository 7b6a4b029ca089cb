//! The steps of [`plan`](super::plan), in the order it tries them, on a cluster whose member
//! list is known; and what is done without one.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// The next step for a cluster whose member list is known: lost quorum first, then the steps
/// in order of priority; the first that has something to do decides.
pub(super) fn next(obs: &Observation, target: &Target, members: &[MemberView]) -> Action {
    let c = Cluster::of(obs, target, members);
    if let Some(a) = c.quorum_lost() {
        return a;
    }
    [
        Cluster::reclaim_space,
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
        Cluster::external_leave,
        Cluster::grow_volumes,
        Cluster::roll,
        Cluster::spread,
        Cluster::defragment,
    ]
    .iter()
    .find_map(|step| step(&c))
    .unwrap_or(if obs.ca_rotation_due {
        Action::RotateCa
    } else {
        Action::Steady
    })
}

/// What every step needs to know about a cluster whose member list is known.
struct Cluster<'a> {
    obs: &'a Observation,
    target: &'a Target,
    members: &'a [MemberView],
    voters: Vec<&'a MemberView>,
    /// Voters that are this operator's (not external; see [`Observation::external`]): what
    /// the size counts.
    own: usize,
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
            .filter(|m| m.healthy && obs.alive(&m.name))
            .count();
        let own = voters
            .iter()
            .filter(|v| !obs.external.contains(&v.name))
            .count();
        let mut c = Cluster {
            obs,
            target,
            members,
            voters,
            own,
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

    /// Whether `v`'s node has been lost long enough to give `v` up: [`Target::node_grace`]
    /// without a volume; with one, [`Target::volume_loss_after`] (never less than the grace),
    /// and never when that is zero (the member waits for its node and its data).
    fn node_gone(&self, v: &MemberView) -> bool {
        if !self.target.persistent {
            return self.node_lost_past(&v.name, self.target.node_grace);
        }
        !self.target.volume_loss_after.is_zero()
            && self.node_lost_past(
                &v.name,
                self.target.volume_loss_after.max(self.target.node_grace),
            )
    }

    /// Whether member `name`'s node has not been Ready for `wait`; never when the node grace
    /// is zero (Nodes not read).
    fn node_lost_past(&self, name: &str, wait: Duration) -> bool {
        !self.target.node_grace.is_zero() && self.obs.node_lost(name, wait)
    }

    /// Whether `m` counts towards quorum.
    fn counts(&self, m: &MemberView) -> bool {
        m.healthy && !m.is_learner && self.obs.alive(&m.name)
    }

    fn external(&self, m: &MemberView) -> bool {
        self.obs.external.contains(&m.name)
    }

    /// Whether `v` can be restarted in place on its volume: its claim is there, its pod is of
    /// this operator's making (see [`super::PodView::foreign`]), and the healthy voters
    /// without it are still a quorum of the whole membership. (A 1- or 2-member cluster cannot
    /// restart a healthy member without losing quorum for a moment; it rolls by adding first,
    /// as clusters without volumes do.)
    fn restartable(&self, v: &MemberView) -> bool {
        self.target.persistent
            && self.obs.claims.contains(&v.name)
            && !self.obs.volumes.must_move(&v.name)
            && !self.obs.pod(&v.name).is_some_and(|p| p.foreign)
            && self.healthy - usize::from(self.counts(v)) >= quorum(self.voters.len())
    }

    /// How many voters may be there: the size, and one more while a roll adds first.
    fn capacity(&self) -> usize {
        self.target.size + usize::from(self.surge)
    }

    /// Scheduled defragmentation, once nothing else is to be done and every voter is healthy:
    /// one due voter at a time, followers before the leader (whose leadership the act moves
    /// away first, so that writes never wait for its file to be rewritten).
    fn defragment(&self) -> Option<Action> {
        if self.obs.defrag_due.is_empty() || self.healthy < self.voters.len() {
            return None;
        }
        let what = format!("defragmenting {} member(s)", self.obs.defrag_due.len());
        if let Some(w) = self.closed_window(&what) {
            return Some(w);
        }
        let leader = self.obs.leader;
        let next = self
            .voters
            .iter()
            .filter(|m| self.obs.defrag_due.contains(&m.name) && !self.external(m))
            .min_by_key(|m| (Some(m.id) == leader, m.name.clone()))?;
        Some(Action::Defragment {
            name: next.name.clone(),
            id: next.id,
        })
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
            .filter(|m| !m.healthy && obs.alive(&m.name) && m.unhealthy_for < target.quorum_grace)
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
        // A recovery rebuilds the cluster from one member of this operator's: with members
        // running elsewhere still in it, that would split the data in two.
        if !obs.external.is_empty() {
            return Some(Action::Wait {
                reason: format!(
                    "{reason}; nothing is done while members of the external cluster are in it"
                ),
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
        // An external cluster's own learners are its operator's business.
        let learners: Vec<&MemberView> = (self.members.iter())
            .filter(|m| m.is_learner && !self.external(m))
            .collect();
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
        // A spread's learner is the one beyond the size that the next shrink makes good.
        let spreading =
            usize::from(self.voters.len() == self.target.size && self.crowded().is_some());
        let needed = (self.capacity() + spreading).saturating_sub(self.own);
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
                // Its pod went to a node that died (scheduled before the node was seen
                // NotReady): it never starts there. A learner holds nothing the cluster needs,
                // so the node grace alone decides, even with volumes.
                Some(_) if !l.healthy && self.node_lost_past(&l.name, self.target.node_grace) => {
                    RemoveReason::NodeLost
                }
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
            let own = all
                .iter()
                .filter(|n| !self.obs.external.contains(*n))
                .count();
            let fits = own <= self.capacity()
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
        let kept = if self.own < self.capacity() {
            self.joining()
        } else {
            Vec::new()
        };
        // On a node that is not Ready, even a pod already being deleted stays until its
        // kubelet confirms, which a dead node never does: it is deleted at once.
        let stranded = |p: &PodView| p.node_lost.is_some() && !self.target.node_grace.is_zero();
        self.obs
            .pods
            .iter()
            .find(|p| {
                !names.contains(&p.name)
                    && (p.state != PodState::Terminating || stranded(p))
                    && !kept.contains(&p.name)
            })
            .map(|p| Action::DeletePod {
                name: p.name.clone(),
                reason: if stranded(p) {
                    DeleteReason::NodeLost
                } else {
                    DeleteReason::NoMember
                },
            })
    }

    fn names(&self) -> BTreeSet<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// A NOSPACE alarm refuses every write that grows the database, whatever else is going
    /// on; reclaiming changes no membership and needs only the quorum there is, so it comes
    /// first.
    ///
    /// Every member checks the quota against its own backend as it applies a write, learners
    /// too, and etcd refuses Defragment on a learner. A learner that joined by replaying a log
    /// that filled the database once (the leader had not snapshotted since) has a backend
    /// over the quota, and raises the alarm again at each write it applies, however often it
    /// is disarmed: while only learners raise it, reclaiming is futile (the chaos run found the
    /// operator reclaiming twice a second, a 3 -> 5 scale stuck behind it). The learner step
    /// promotes it; as a voter it is defragmented by the next reclaim.
    fn reclaim_space(&self) -> Option<Action> {
        let by_learners = self
            .obs
            .nospace
            .iter()
            .all(|id| self.members.iter().any(|m| m.id == *id && m.is_learner));
        (!self.obs.nospace.is_empty() && !self.obs.space_exhausted && !by_learners)
            .then_some(Action::ReclaimSpace)
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
            if self.obs.alive(&v.name) || (v.healthy && !deleted) {
                continue;
            }
            // A pod being deleted on a lost node (the node's taint evicted it) never stops, and
            // never comes back on its claim unless the node does.
            let stranded = self.target.persistent && !v.healthy && self.node_gone(v);
            if self.target.persistent && self.obs.claims.contains(&v.name) && !stranded {
                return Some(Action::Wait {
                    reason: format!(
                        "the pod of {} is stopping; it comes back on its volume",
                        v.name
                    ),
                });
            }
            // A leader being stopped hands leadership over first (etcd would as it stops, but
            // only once the kubelet has signalled it, a second or more later); removing it
            // under its feet would leave the cluster without a leader for an election timeout.
            if v.healthy && self.obs.leader == Some(v.id) {
                return Some(self.move_leader_from(v, MoveReason::Leaving));
            }
            if self.healthy >= quorum(self.voters.len() - 1) {
                // Its replacement in the same step when the size still wants it and nothing
                // else is joining.
                let replace = self.own <= self.target.size
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
                    reason: if stranded {
                        RemoveReason::NodeLost
                    } else if self.target.persistent {
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
            if self.own < self.capacity() && self.voters.iter().all(|v| v.healthy) {
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
            return Some(self.move_leader_from(v, MoveReason::Leaving));
        }
        Some(Action::RemoveMember {
            name: v.name.clone(),
            id: v.id,
            reason: RemoveReason::DataGone,
        })
    }

    /// Hands leadership from `from` to a healthy, caught-up voter made from the current
    /// template (any healthy voter when none is), the one whose pod has run longest. The
    /// membership change that follows is asked of the leader, and etcd refuses it ("unhealthy
    /// cluster") while the leader has been connected to some voter for less than 5 s (its
    /// strict reconfiguration check): handing leadership to the member a roll had just added
    /// held the last step of a 3-member roll for 3.4 s (issue 54's timeline).
    fn move_leader_from(&self, from: &MemberView, reason: MoveReason) -> Action {
        let candidates = || {
            self.voters
                .iter()
                .filter(|v| v.id != from.id && self.counts(v) && v.caught_up && !self.external(v))
        };
        // The first of those that ran equally long.
        let younger = |v: &&&MemberView| std::cmp::Reverse(self.obs.pod(&v.name).map(|p| p.age));
        let to = (candidates()
            .filter(|v| !self.obs.stale(&v.name))
            .min_by_key(younger))
        .or_else(|| candidates().min_by_key(younger));
        match to {
            Some(to) => Action::MoveLeader {
                from: from.name.clone(),
                to: to.name.clone(),
                id: to.id,
                reason,
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
        if self.own <= self.target.size {
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
        let follower = |v: &&&MemberView| Some(v.id) != obs.leader && !self.external(v);
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
            // The surplus of a roll leaves from the node holding the most voters: the new
            // member may have landed beside an old one, and removing an old member elsewhere
            // would leave that node holding two voters of a cluster that can lose one.
            let per = self.voters_per_node();
            let load = |v: &&&MemberView| self.node_of(v).and_then(|n| per.get(n)).copied();
            if let Some(v) =
                (stale.iter().copied().filter(follower)).min_by_key(|v| std::cmp::Reverse(load(v)))
            {
                return remove(v, RemoveReason::Outdated);
            }
            return Some(self.move_leader_from(stale[0], MoveReason::Roll));
        }
        // From the node holding the most voters (the first such follower): a scale-down
        // spreads the rest, and the surplus of a spread leaves the crowded node.
        let per = self.voters_per_node();
        let load = |v: &&&MemberView| self.node_of(v).and_then(|n| per.get(n)).copied();
        let v = (voters.iter().filter(follower).filter(|v| v.healthy))
            .min_by_key(|v| std::cmp::Reverse(load(v)))?;
        let reason = if self.target.spread && load(&v).unwrap_or(0) > can_lose(self.target.size) {
            RemoveReason::Spread
        } else {
            RemoveReason::ScaleDown
        };
        remove(v, reason)
    }

    /// The node member `v`'s pod was put on.
    fn node_of(&self, v: &MemberView) -> Option<&'a str> {
        self.obs.pod(&v.name).and_then(|p| p.node.as_deref())
    }

    /// How many voters each node holds (voters whose pod is scheduled).
    fn voters_per_node(&self) -> BTreeMap<&'a str, usize> {
        let mut per = BTreeMap::new();
        for v in &self.voters {
            if let Some(n) = self.node_of(v) {
                *per.entry(n).or_default() += 1;
            }
        }
        per
    }

    /// The node holding the most voters (the first such), when it holds more than the cluster
    /// can lose and the cluster is spread by the operator.
    fn crowded(&self) -> Option<&'a str> {
        if !self.target.spread || self.obs.open_nodes.is_none() {
            return None;
        }
        let per = self.voters_per_node();
        let (node, _) = (per.iter().rev())
            .max_by_key(|(_, c)| **c)
            .filter(|(_, c)| **c > can_lose(self.target.size))?;
        Some(*node)
    }

    /// The cluster as asked (every voter healthy, scheduled and current, no learner), but
    /// one node holds more voters than the cluster can lose: one is moved off it, a member
    /// added first on a node that then still holds no more than that ([`Action::SpreadMember`]),
    /// when an open node allows it. Where none does, nothing moves: an addition that could
    /// only land on a crowded node would be removed again, round after round.
    fn spread(&self) -> Option<Action> {
        let size = self.target.size;
        let open = self
            .obs
            .open_nodes
            .as_ref()
            .filter(|_| self.target.spread)?;
        if size < 3
            || !self.obs.external.is_empty()
            || self.voters.len() != size
            || self.members.len() != size
            || self.healthy < size
            || self.obs.leader.is_none()
        {
            return None;
        }
        let per = self.voters_per_node();
        if per.values().sum::<usize>() != size {
            return None;
        }
        let lose = can_lose(size);
        let crowded = self.crowded()?;
        let avoid: Vec<String> = (per.iter())
            .filter(|(_, c)| **c >= lose)
            .map(|(n, _)| n.to_string())
            .collect();
        if open.iter().all(|n| avoid.contains(n)) {
            return None;
        }
        if let Some(w) = self.closed_window(&format!("moving a member off {crowded}")) {
            return Some(w);
        }
        if let Some(w) = self.catching_up() {
            return Some(w);
        }
        Some(Action::SpreadMember {
            crowded: crowded.to_string(),
            avoid,
        })
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

    /// A wait, saying `what` waits and until when, while the maintenance window is closed.
    fn closed_window(&self, what: &str) -> Option<Action> {
        self.target.window_opens.map(|opens| Action::WaitForWindow {
            what: what.into(),
            opens,
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
        // A member on a lost node is replaced first: nothing brings it back (with a volume,
        // only once the user's bound for waiting on the node has passed).
        let lost = |v: &MemberView| !v.healthy && self.node_gone(v);
        // An external member is not this operator's to replace ([`Cluster::external_leave`]).
        let own = || self.voters.iter().filter(|v| !self.external(v));
        let sick =
            (own().find(|v| !v.healthy && lost(v))).or_else(|| own().find(|v| !v.healthy))?;
        let n = self.voters.len();
        let removable = self.healthy >= quorum(n - 1) && Some(sick.id) != self.obs.leader;
        if lost(sick) && removable {
            return Some(Action::RemoveMember {
                name: sick.name.clone(),
                id: sick.id,
                reason: RemoveReason::NodeLost,
            });
        }
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
        if self.own >= self.target.size {
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
        let missing = self.capacity().saturating_sub(self.own);
        let count = missing.min(self.target.max_learners).max(1);
        Action::AddMembers {
            count,
            avoid: self.full_nodes(self.own + 1),
        }
    }

    /// The nodes a new member must not land on, for a cluster of `after` voters once it is
    /// added: those already holding as many voters as it can lose (one more there and that
    /// node's loss would take quorum), when some open node is not one of them. A surge of a
    /// roll (5 members on 3 nodes growing to 6) or a replacement then never stacks a third
    /// voter on a node; where every open node is full, the scheduler's spreading decides, and
    /// the surplus leaves the fullest node ([`Self::shrink`]).
    fn full_nodes(&self, after: usize) -> Vec<String> {
        let Some(open) = self.obs.open_nodes.as_ref().filter(|_| self.target.spread) else {
            return Vec::new();
        };
        let lose = can_lose(after);
        let full: Vec<String> = (self.voters_per_node().into_iter())
            .filter(|(_, c)| *c >= lose)
            .map(|(n, _)| n.to_string())
            .collect();
        if open.iter().all(|n| full.contains(n)) {
            return Vec::new();
        }
        full
    }

    /// The external members leave once this operator's members are the size (the grow step
    /// comes first) and the user asked (`removeExternal`), every voter caught up: one at a
    /// time, an unhealthy one first, the leader last (its leadership moved to a member of this
    /// operator), and only while the healthy voters without it are a quorum of the smaller
    /// membership.
    fn external_leave(&self) -> Option<Action> {
        let external: Vec<&&MemberView> = self.voters.iter().filter(|v| self.external(v)).collect();
        if external.is_empty() || !self.target.remove_external {
            return None;
        }
        let leader = |v: &&&MemberView| Some(v.id) == self.obs.leader;
        let next = (external.iter().find(|v| !v.healthy))
            .or_else(|| external.iter().find(|v| !leader(v)))
            .or_else(|| external.first())?;
        if next.healthy {
            if let Some(w) = self.catching_up() {
                return Some(w);
            }
            if leader(next) {
                return Some(self.move_leader_from(next, MoveReason::Leaving));
            }
        }
        if self.healthy - usize::from(self.counts(next)) < quorum(self.voters.len() - 1) {
            return Some(Action::Wait {
                reason: format!(
                    "external member {} leaves once that keeps quorum",
                    next.name
                ),
            });
        }
        Some(Action::RemoveMember {
            name: next.name.clone(),
            id: next.id,
            reason: RemoveReason::External,
        })
    }

    /// Claims smaller than the spec asks for are expanded in place, one at a time
    /// ([`super::Volumes`]), once membership is as asked: an expansion never disrupts a
    /// member, so it does not wait for the maintenance window.
    fn grow_volumes(&self) -> Option<Action> {
        self.obs.volumes.next(|n| self.obs.pod_alive(n))
    }

    /// Every voter healthy, none missing: the next outdated member is rolled, followers
    /// first, the leader last. A member with a volume is restarted on it (no membership
    /// change): in its own pod when only the image changed, else in a new pod; one without
    /// is replaced, a member with the new template joining first so the cluster never has
    /// fewer healthy voters than it had (a new image that never starts then costs no voter).
    /// Each step waits until every voter has caught up with the leader.
    fn roll(&self) -> Option<Action> {
        let stale: Vec<&&MemberView> = self
            .voters
            .iter()
            .filter(|v| self.obs.stale(&v.name))
            .collect();
        if stale.is_empty() {
            return None;
        }
        let what = format!("rolling {} outdated member(s)", stale.len());
        if let Some(w) = self.closed_window(&what) {
            return Some(w);
        }
        // A pod still stopping (the last step's restart) answers for a moment: it is not
        // rolled again, and nothing else moves until it is gone.
        if let Some(v) = self.voters.iter().find(|v| !self.obs.alive(&v.name)) {
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
            return Some(self.move_leader_from(next, MoveReason::Roll));
        }
        if self.obs.pod(&next.name).is_some_and(|p| p.image_only) {
            return Some(Action::ChangeImage {
                name: next.name.clone(),
            });
        }
        Some(Action::DeletePod {
            name: next.name.clone(),
            reason: DeleteReason::Outdated,
        })
    }
}

/// How many voters a cluster of `size` can lose and keep quorum: a node holding more takes
/// quorum with it.
fn can_lose(size: usize) -> usize {
    size.saturating_sub(1) / 2
}

/// For clusters with volumes: a member's pod that ended (evicted, its node rebooted) is
/// deleted, and a member with its claim but no pod gets its pod back, same name, same member
/// ID. Voters from etcd's member list; when no member answers, the members the last status
/// listed. Neither step changes the membership, so neither needs quorum.
pub(super) fn rescue_persistent(obs: &Observation, target: &Target) -> Option<Action> {
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

pub(super) fn without_member_list(obs: &Observation, target: &Target) -> Action {
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
