//! The planner's tests: fixtures here (an observation built member by member), examples of
//! each step in `examples`, and a simulated cluster that replays plans with faults in `sim`
//! (rolls traced step by step, and property tests over random clusters).

use super::*;

mod examples;
mod hibernation;
mod recovery;
mod sim;
mod volumes;

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
        node_grace: MINUTE / 2,
        volume_loss_after: Duration::ZERO,
        max_learners: 1,
        spread: false,
        remove_external: false,
        window_opens: None,
        hibernate: None,
        standby_bootstrap: false,
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
        image_only: false,
        foreign: false,
        failing: None,
        node_lost: None,
        node: None,
    }
}

/// `n` healthy voters m1..mn with running pods made from the current template and their
/// claims, m1 leading.
fn steady(n: u64) -> Observation {
    (1..=n)
        .fold(cluster(), |c, i| c.voter(&format!("m{i}")))
        .led_by("m1")
        .build()
}

/// An observation built member by member: `cluster().voter("m1").voter("m2").unhealthy()`
/// describes m2, the member added last. Each member has a running pod made from the current
/// template and a claim, and is named in the last status; IDs count from 1.
fn cluster() -> Fixture {
    Fixture {
        obs: Observation {
            members: Some(vec![]),
            leader: None,
            pods: vec![],
            bootstrapped: true,
            silent_for: Duration::ZERO,
            claims: BTreeSet::new(),
            known_members: BTreeSet::new(),
            unpublished: BTreeSet::new(),
            nospace: BTreeSet::new(),
            space_exhausted: false,
            applied: BTreeMap::new(),
            defrag_due: BTreeSet::new(),
            ca_rotation_due: false,
            open_nodes: None,
            external: BTreeSet::new(),
            existing: false,
            released: BTreeSet::new(),
            final_snapshot: FinalSnapshot::NotLooked,
            volumes: Volumes::default(),
        },
    }
}

struct Fixture {
    obs: Observation,
}

impl Fixture {
    fn add(mut self, name: &str, is_learner: bool) -> Self {
        let members = self.obs.members.get_or_insert_with(Vec::new);
        let id = members.len() as u64 + 1;
        members.push(member(name, id, is_learner, true));
        self.obs.pods.push(running(name));
        self.obs.claims.insert(name.into());
        self.obs.known_members.insert(name.into());
        self
    }

    /// A healthy voter.
    fn voter(self, name: &str) -> Self {
        self.add(name, false)
    }

    /// A learner that has started (it answers).
    fn learner(self, name: &str) -> Self {
        self.add(name, true)
    }

    fn last(&mut self) -> &mut MemberView {
        self.obs
            .members
            .as_mut()
            .and_then(|m| m.last_mut())
            .expect("a member first")
    }

    /// The member added last does not answer (and has not for an hour).
    fn unhealthy(mut self) -> Self {
        let m = self.last();
        let name = m.name.clone();
        *m = member(&name, m.id, m.is_learner, false);
        self
    }

    /// The member added last answers as itself, at applied index `index`, but without a
    /// leader (quorum is lost): unhealthy.
    fn answers(mut self, index: u64) -> Self {
        let name = self.last().name.clone();
        self = self.unhealthy();
        self.obs.applied.insert(name, index);
        self
    }

    /// The member added last has been silent for `for_`.
    fn silent_for(mut self, for_: Duration) -> Self {
        self.last().unhealthy_for = for_;
        self
    }

    /// The pod of the member added last is in `state`.
    fn pod(mut self, state: PodState) -> Self {
        let name = self.last().name.clone();
        for p in self.obs.pods.iter_mut().filter(|p| p.name == name) {
            p.state = state;
        }
        self
    }

    /// The node of the member added last has not been Ready for `for_`.
    fn node_lost(mut self, for_: Duration) -> Self {
        let name = self.last().name.clone();
        for p in self.obs.pods.iter_mut().filter(|p| p.name == name) {
            p.node_lost = Some(for_);
        }
        self
    }

    /// The pod of the member added last runs on node `node`.
    fn on(mut self, node: &str) -> Self {
        let name = self.last().name.clone();
        for p in self.obs.pods.iter_mut().filter(|p| p.name == name) {
            p.node = Some(node.into());
        }
        self
    }

    /// The nodes a new member could be put on.
    fn open(mut self, nodes: &[&str]) -> Self {
        self.obs.open_nodes = Some(nodes.iter().map(|n| n.to_string()).collect());
        self
    }

    /// The member added last has no pod.
    fn no_pod(mut self) -> Self {
        let name = self.last().name.clone();
        self.obs.pods.retain(|p| p.name != name);
        self
    }

    /// `name` leads.
    fn led_by(mut self, name: &str) -> Self {
        self.obs.leader = self
            .obs
            .members
            .iter()
            .flatten()
            .find(|m| m.name == name)
            .map(|m| m.id);
        self
    }

    fn build(self) -> Observation {
        self.obs
    }
}

fn restore_target(url: Option<&str>) -> RestoreTarget {
    RestoreTarget {
        uid: "r1".into(),
        url: url.map(String::from),
        gate: true,
        source: None,
    }
}

fn seed(state: PodState, url: &str) -> PodView {
    PodView {
        state,
        restore: Some(("r1".into(), url.into())),
        ..running("seed")
    }
}

/// The addition of `count` members placed where the scheduler likes.
fn adds(count: usize) -> Action {
    Action::AddMembers {
        count,
        avoid: vec![],
    }
}

fn learners(n: usize) -> Target {
    Target {
        max_learners: n,
        ..target(5)
    }
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
