//! The planner's tests: fixtures here (an observation built member by member), examples of
//! each step in `examples`, and a simulated cluster that replays plans with faults in `sim`
//! (rolls traced step by step, and property tests over random clusters).

use super::*;

mod examples;
mod sim;

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
        ca_rotation_due: false,
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
