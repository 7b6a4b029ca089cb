//! A simulated cluster: plans applied one step at a time, with rolls traced and property tests
//! over random clusters and faults.

use proptest::prelude::*;

use super::*;

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
    /// Another maker (coreos's operator) shaped the pods the world started with.
    foreign: bool,
    /// The outdated pods differ from the template only in their image (an upgrade).
    image_only: bool,
    /// Pods whose image was changed, with whether the planner has looked once since: the
    /// kubelet stops the old container only after that look (in which the old etcd still
    /// answers, the worst case), then starts the new one in the same pod.
    restarting: BTreeMap<String, bool>,
    /// Members of a cluster running elsewhere that this one joins: no pods, ever.
    external: BTreeSet<String>,
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
                    image_only: self.image_only && !p.current,
                    // The pods the world started with, when another maker shaped them.
                    foreign: self.foreign && !p.current,
                    failing: None,
                    node_lost: None,
                    node: None,
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
            ca_rotation_due: false,
            open_nodes: None,
            nospace: Default::default(),
            space_exhausted: false,
            applied: Default::default(),
            defrag_due: Default::default(),
            external: self.external.clone(),
            existing: !self.external.is_empty(),
            released: BTreeSet::new(),
            final_snapshot: FinalSnapshot::NotLooked,
            volumes: Volumes::default(),
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
            Action::AddMembers { count, .. } => self.start_batch(*count),
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
            Action::ChangeImage { name } => {
                for p in self.pods.iter_mut().filter(|p| &p.name == name) {
                    p.current = true;
                    p.state = PodState::Terminating;
                }
                self.restarting.insert(name.clone(), false);
            }
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
        self.settle();
    }

    /// What happens by the next look: deleted pods finish terminating, pods that were
    /// scheduling start, members whose pod runs answer (a gated one once its whole batch is
    /// added), and a leader is elected among the voters that answer.
    fn settle(&mut self) {
        let mut swapped = Vec::new();
        for (name, looked) in &mut self.restarting {
            if *looked {
                swapped.push(name.clone());
            }
            *looked = true;
        }
        for name in swapped {
            self.restarting.remove(&name);
            for p in self.pods.iter_mut().filter(|p| p.name == name) {
                p.state = PodState::Running;
            }
        }
        let restarting = &self.restarting;
        self.pods
            .retain(|p| p.state != PodState::Terminating || restarting.contains_key(&p.name));
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
            m.answers = running.contains(&m.name)
                || self.external.contains(&m.name)
                || self.restarting.contains_key(&m.name);
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
            let mut sim = Sim::of_members(&ms, recent);
            if quorate {
                sim.make_quorate();
            }
            sim.add_strays(strays, ms.len());
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

/// One arbitrary member: learner, pod state (0..=4 running, 5 pending, 6 ended, 7
/// terminating, else none), answers, current, claim.
type ArbMember = (bool, u8, bool, bool, bool);

impl Sim {
    /// A cluster of `ms`, silent for a moment (`recent`) or for an hour.
    fn of_members(ms: &[ArbMember], recent: bool) -> Sim {
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
            foreign: false,
            image_only: false,
            restarting: BTreeMap::new(),
            external: BTreeSet::new(),
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
            let answers =
                *answers && matches!(state, Some(PodState::Running | PodState::Terminating));
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
        sim
    }

    /// A surplus voter is allowed while some voter must be replaced rather than restarted:
    /// outdated, or (with volumes) its claim gone while its pod runs.
    fn may_surge(&self) -> bool {
        self.voters().iter().any(|v| {
            self.stale(&v.name)
                || (self.persistent
                    && self.pod_state(&v.name).is_some_and(|s| !s.is_gone())
                    && !self.claims.contains(&v.name))
        })
    }

    /// A majority of the voters answer from running pods.
    fn make_quorate(&mut self) {
        let voters: Vec<usize> = (0..self.members.len())
            .filter(|&i| !self.members[i].learner)
            .collect();
        for &i in voters.iter().take(voters.len() / 2 + 1) {
            self.members[i].answers = true;
            let name = self.members[i].name.clone();
            let current = self.pod(&name).is_none_or(|p| p.current);
            self.pods.retain(|p| p.name != name);
            self.pods.push(SimPod {
                name,
                state: PodState::Running,
                joining: None,
                current,
            });
        }
    }

    /// Strays: plain pods without a member, or pods created ahead of their member whose
    /// `--initial-cluster` may or may not still match. `seed` varies which.
    fn add_strays(&mut self, strays: usize, seed: usize) {
        let names: BTreeSet<String> = self.members.iter().map(|m| m.name.clone()).collect();
        for s in 0..strays {
            let joining = match (s + seed) % 4 {
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
            self.pods.push(SimPod {
                name: format!("stray{s}"),
                state: PodState::Running,
                joining,
                current: s % 2 == 0,
            });
        }
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
        foreign: false,
        image_only: false,
        restarting: BTreeMap::new(),
        external: BTreeSet::new(),
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
            Action::ChangeImage { name } => format!("image {name}"),
            Action::MoveLeader { from, to, .. } => format!("lead {from}->{to}"),
            Action::Wait { .. } => "wait".into(),
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
fn with_volumes_an_upgrade_changes_each_members_image_in_its_pod_and_waits_for_the_restart() {
    let mut upgrade = outdated(3, true);
    upgrade.image_only = true;
    // Each change waits for the look in which the old container still runs (and its etcd
    // still answers): only once the kubelet has replaced it does the next member go.
    assert_eq!(
        roll_trace(upgrade),
        [
            "image m2",
            "wait",
            "image m3",
            "wait",
            "lead m1->m2",
            "image m1",
            "wait"
        ]
    );
    // Without volumes the new image joins first, as for any other roll: an image that never
    // starts then costs no voter.
    let mut plain = outdated(3, false);
    plain.image_only = true;
    assert!(!roll_trace(plain).iter().any(|t| t.starts_with("image")));
}

#[test]
fn members_another_maker_shaped_are_replaced_by_joining_first_even_with_volumes() {
    let mut coreos = outdated(3, true);
    coreos.foreign = true;
    let trace = roll_trace(coreos);
    assert_eq!(
        &trace[..4],
        ["add", "join", "promote", "remove m2 Outdated"]
    );
    assert!(
        !trace
            .iter()
            .any(|t| t.starts_with("delete m") || t.starts_with("recreate m")),
        "a foreign member was restarted on its claim: {trace:?}"
    );
    assert!(
        trace.contains(&"remove m1 Outdated".to_string()),
        "{trace:?}"
    );
}

/// A 3-member cluster running elsewhere (`e1`..`e3`, `e1` leading), joined by a cluster of
/// this operator's of size 3.
fn external_cluster() -> Sim {
    let mut sim = outdated(3, false);
    for m in &mut sim.members {
        m.name = m.name.replace('m', "e");
        sim.external.insert(m.name.clone());
    }
    sim.pods.clear();
    sim.claims.clear();
    sim
}

/// The actions from `sim` to Steady with `target`, checking at every step that the voters
/// that answer are a majority and that no external member is touched but by its removal.
fn migration_trace(sim: &mut Sim, target: &Target) -> Vec<String> {
    let mut trace = Vec::new();
    for _ in 0..64 {
        let action = plan(&sim.observe(), target);
        let voters = sim.voters();
        let healthy = voters.iter().filter(|m| m.answers).count();
        assert!(majority(healthy, voters.len()), "{trace:?}");
        trace.push(match &action {
            Action::Steady => break,
            Action::AddMembers { count, .. } => format!("add {count}"),
            Action::JoinMembers { names } => format!("join {}", names.join(",")),
            Action::Promote { name, .. } => format!("promote {name}"),
            Action::RemoveMember { name, reason, .. } => format!("remove {name} {reason:?}"),
            Action::MoveLeader { from, to, .. } => format!("lead {from}->{to}"),
            other => panic!("{other:?} after {trace:?}"),
        });
        sim.apply(&action);
    }
    trace
}

#[test]
fn an_external_cluster_is_joined_one_member_at_a_time_and_left_only_when_asked() {
    let mut sim = external_cluster();
    let mut target = target(3);
    let joined = migration_trace(&mut sim, &target);
    assert_eq!(
        joined,
        [
            "add 1",
            "join n1",
            "promote n1",
            "add 1",
            "join n3",
            "promote n3",
            "add 1",
            "join n5",
            "promote n5"
        ]
    );
    // Six voters, three of them external: steady until the user asks them to leave.
    assert_eq!(sim.voters().len(), 6);
    target.remove_external = true;
    let left = migration_trace(&mut sim, &target);
    assert_eq!(
        left,
        [
            "remove e2 External",
            "remove e3 External",
            "lead e1->n1",
            "remove e1 External"
        ]
    );
    let names: Vec<&str> = sim.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["n1", "n3", "n5"]);
}

#[test]
fn a_silent_external_member_is_not_replaced_and_leaves_first_when_asked() {
    let mut sim = external_cluster();
    sim.external.remove("e3");
    sim.members[2].answers = false;
    sim.external.insert("e3".into());
    let mut obs = sim.observe();
    obs.members.as_mut().unwrap()[2].healthy = false;
    let t = target(3);
    // Joining goes on; e3 is not this operator's to remove.
    assert_eq!(plan(&obs, &t), adds(1));
    let asked = Target {
        remove_external: true,
        ..t
    };
    // Asked to leave, and six voters of which this operator's three count: e3 goes first.
    for i in 1..=3 {
        obs.members
            .as_mut()
            .unwrap()
            .push(member(&format!("n{i}"), 10 + i, false, true));
        obs.pods.push(running(&format!("n{i}")));
    }
    assert!(matches!(
        plan(&obs, &asked),
        Action::RemoveMember {
            id: 3,
            reason: RemoveReason::External,
            ..
        }
    ));
    // Lost quorum with external members in: nothing is done.
    for m in obs.members.as_mut().unwrap().iter_mut().skip(1) {
        m.healthy = false;
        m.unhealthy_for = 60 * MINUTE;
    }
    assert!(matches!(plan(&obs, &asked), Action::Wait { reason } if reason.contains("external")));
}

#[test]
fn no_cluster_is_bootstrapped_beside_the_running_pods_of_a_released_one() {
    let fresh = Observation {
        members: None,
        bootstrapped: false,
        ..Observation::default()
    };
    assert_eq!(plan(&fresh, &target(3)), Action::Bootstrap);
    let beside = Observation {
        released: BTreeSet::from(["c-abcde".to_string()]),
        ..fresh
    };
    assert!(matches!(
        plan(&beside, &target(3)),
        Action::Wait { reason } if reason.contains("c-abcde") && reason.contains("released")
    ));
}

#[test]
fn a_cluster_joining_an_external_one_that_does_not_answer_is_never_bootstrapped() {
    let obs = Observation {
        members: None,
        bootstrapped: false,
        existing: true,
        ..Observation::default()
    };
    assert!(
        matches!(plan(&obs, &target(3)), Action::Wait { reason } if reason.contains("existing"))
    );
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

/// A restart of outdated voter `name` on its claim (a new pod, or a new image in its pod;
/// `leader` given when it must not lead) leaves the voters that count a majority.
fn check_restart(sim: &Sim, name: &str, leader: Option<u64>) -> Result<(), TestCaseError> {
    prop_assert!(sim.persistent && sim.claims.contains(name) && sim.stale(name));
    let voters = sim.voters();
    let counting = voters.iter().filter(|m| sim.counts(m)).count();
    let m = sim.members.iter().find(|m| m.name == name).unwrap();
    prop_assert!(Some(m.id) != leader, "the leader's image changed under it");
    let after = counting - usize::from(sim.counts(m));
    prop_assert!(
        majority(after, voters.len()),
        "restarting {} leaves {} of {}",
        name,
        after,
        voters.len()
    );
    Ok(())
}

/// A removal never removes a leader that counts, and leaves the voters that count a
/// majority.
fn check_removal(sim: &Sim, leader: Option<u64>, id: u64) -> Result<(), TestCaseError> {
    let m = sim.members.iter().find(|m| m.id == id).unwrap();
    if Some(id) == leader {
        prop_assert!(!sim.counts(m), "removed the leader {}", m.name);
    }
    if !m.learner {
        let voters = sim.voters();
        let counting = voters.iter().filter(|v| sim.counts(v)).count();
        let after_voters = voters.len() - 1;
        let after = counting - usize::from(sim.counts(m));
        prop_assert!(after_voters >= 1);
        prop_assert!(majority(after, after_voters), "removed {}", m.name);
    }
    Ok(())
}

/// The rest of a batch joins: every voter answers, the learners there are belong to the same
/// batch (they wait for it), and the limit holds after it.
fn check_join(
    sim: &Sim,
    joining: &[String],
    max_learners: usize,
    capacity: usize,
) -> Result<(), TestCaseError> {
    let learners: Vec<&SimMember> = sim.members.iter().filter(|m| m.learner).collect();
    prop_assert!(sim.voters().iter().all(|m| m.answers));
    prop_assert!(!joining.is_empty());
    prop_assert!(
        learners.len() + joining.len() <= max_learners,
        "{:?}",
        joining
    );
    let names: BTreeSet<String> = sim.members.iter().map(|m| m.name.clone()).collect();
    for name in joining {
        let p = sim.pod(name).unwrap();
        prop_assert!(p.current);
        let mut batch = p.joining.clone().unwrap();
        batch.insert(name.clone());
        prop_assert!(names.is_subset(&batch), "{:?} names {:?}", joining, batch);
        prop_assert!(batch.len() <= capacity);
        for l in &learners {
            prop_assert!(batch.contains(&l.name));
        }
        for other in joining {
            prop_assert!(batch.contains(other));
        }
    }
    Ok(())
}

/// Without a majority nothing is done but bringing a persistent member's pod back.
fn check_without_quorum(sim: &Sim, action: &Action, persistent: bool) -> Result<(), TestCaseError> {
    let rescue = matches!(action, Action::RecreatePod { .. })
        || matches!(action, Action::DeletePod { name, reason: DeleteReason::Ended }
            if persistent && sim.pod_state(name) == Some(PodState::Gone));
    if rescue {
        return Ok(());
    }
    prop_assert!(
        !action.is_membership_change(),
        "{:?} without quorum",
        action
    );
    let changes = matches!(
        action,
        Action::DeletePod { .. }
            | Action::RecreatePod { .. }
            | Action::MoveLeader { .. }
            | Action::DeleteClaim { .. }
    );
    prop_assert!(!changes, "{:?} without quorum", action);
    Ok(())
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
        image_only in any::<bool>(),
    ) {
        sim.persistent = persistent;
        sim.image_only = image_only;
        let obs = sim.observe();
        let action = plan(&obs, &target_with(size, persistent, max_learners));
        let voters = sim.voters();
        let counting = voters.iter().filter(|m| sim.counts(m)).count();
        let quorate = obs.members.is_some() && majority(counting, voters.len());
        let may_surge = sim.may_surge();
        let room = voters.len() < size || (voters.len() == size && may_surge);
        let capacity = size + usize::from(may_surge);
        match &action {
            Action::RemoveMember { id, .. } | Action::ReplaceMember { id, .. } => {
                prop_assert!(quorate);
                check_removal(&sim, obs.leader, *id)?;
            }
            // A new batch only when every member is a voter that answers; never more
            // learners than every member accepts, nor more members than the size asks for.
            Action::AddMembers { count, .. } => {
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
                prop_assert!(room, "{:?} with {} voters of {}", action, voters.len(), size);
                check_join(&sim, joining, max_learners, capacity)?;
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
            Action::ChangeImage { name } => {
                prop_assert!(quorate && image_only);
                check_restart(&sim, name, obs.leader)?;
            }
            Action::DeletePod { name, reason: DeleteReason::Outdated } => {
                prop_assert!(quorate);
                check_restart(&sim, name, None)?;
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
            check_without_quorum(&sim, &action, persistent)?;
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
        image_only in any::<bool>(),
    ) {
        sim.persistent = persistent;
        sim.image_only = image_only;
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
        image_only in any::<bool>(),
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
            foreign: false,
            image_only,
            restarting: BTreeMap::new(),
            external: BTreeSet::new(),
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
            // Only the image changed: every member is restarted in its own pod.
            let in_pod = trace.iter().filter(|a| matches!(a, Action::ChangeImage { .. })).count();
            let deleted = trace.iter().any(|a| matches!(a, Action::DeletePod { .. }));
            prop_assert_eq!((in_pod, deleted), if image_only { (n, false) } else { (0, true) });
        }
    }
}

#[test]
fn outside_the_maintenance_window_a_roll_waits_and_a_lost_member_does_not() {
    let opens: k8s_openapi::jiff::Timestamp = "2026-12-05T02:00:00Z".parse().unwrap();
    let closed = Target {
        window_opens: Some(opens),
        ..target_of(3, false)
    };
    let mut sim = outdated(3, false);
    match plan(&sim.observe(), &closed) {
        Action::WaitForWindow { what, opens: at } => {
            assert_eq!(at, opens);
            assert!(what.contains("rolling 3 outdated member(s)"), "{what}");
        }
        other => panic!("a roll outside the window: {other:?}"),
    }
    // A member whose pod is gone is replaced at once, window or not.
    sim.pods.retain(|p| p.name != "m2");
    sim.members[1].answers = false;
    let action = plan(&sim.observe(), &closed);
    assert!(
        matches!(
            action,
            Action::RemoveMember {
                reason: RemoveReason::PodGone,
                ..
            } | Action::ReplaceMember { .. }
        ),
        "{action:?}"
    );
    // The window open, the roll goes on as ever.
    assert_eq!(
        roll_trace(outdated(3, true)).first().map(String::as_str),
        Some("delete m2 Outdated")
    );
}

#[test]
fn outside_the_maintenance_window_defragmentation_waits_and_nospace_does_not() {
    let opens: k8s_openapi::jiff::Timestamp = "2026-12-05T02:00:00Z".parse().unwrap();
    let closed = Target {
        window_opens: Some(opens),
        ..target(3)
    };
    let mut obs = steady(3);
    obs.defrag_due = ["m2".to_string()].into_iter().collect();
    assert!(
        matches!(plan(&obs, &closed), Action::WaitForWindow { .. }),
        "{:?}",
        plan(&obs, &closed)
    );
    assert!(matches!(plan(&obs, &target(3)), Action::Defragment { .. }));
    obs.nospace = [2].into_iter().collect();
    assert_eq!(plan(&obs, &closed), Action::ReclaimSpace);
}
