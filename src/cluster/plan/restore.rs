//! A restore's plan: the members being replaced go, one seed restores the snapshot.

use super::*;

/// What a restore needs besides the observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreTarget {
    /// The EtcdRestore's UID: pods that carry it belong to the restored cluster.
    pub uid: String,
    /// Where this operator serves the snapshot to the seed, if it can.
    pub url: Option<String>,
    /// Whether new member pods can run `etcd-gate` (the operator knows its own image).
    pub gate: bool,
    /// For a recovery from lost quorum: the member whose snapshot the seed fetches. Its pod
    /// is the last to go, once the seed serves: until then its data is the only copy.
    pub source: Option<String>,
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
    let source = |p: &PodView| restore.source.as_deref() == Some(p.name.as_str());
    let seed = obs.pods.iter().find(|p| ours(p));
    let serving = seed.is_some_and(|seed| {
        obs.members
            .as_ref()
            .is_some_and(|ms| ms.iter().any(|m| m.name == seed.name && m.healthy))
    });
    // The source goes last, once the seed serves its data.
    let old = |p: &&PodView| !ours(p) && (serving || !source(p));
    if let Some(old) = obs
        .pods
        .iter()
        .filter(old)
        .find(|p| p.state != PodState::Terminating)
    {
        return Action::DeletePod {
            name: old.name.clone(),
            reason: DeleteReason::Restore,
        };
    }
    if obs.pods.iter().any(|p| old(&p)) {
        return Action::Restoring {
            reason: "the replaced members' pods are stopping".into(),
        };
    }
    if let Some(name) = restore
        .source
        .as_ref()
        .filter(|n| !serving && !obs.pod_alive(n))
    {
        return Action::WithdrawRestore {
            seed: seed.map(|s| s.name.clone()),
            reason: format!(
                "member {name}, whose data the cluster was to be rebuilt from, went before \
                 the seed could restore it; the recovery is withdrawn and decided again"
            ),
        };
    }
    let Some(seed) = seed else {
        return Action::RestoreSeed;
    };
    if serving {
        return Action::RestoreDone {
            seed: seed.name.clone(),
        };
    }
    starting_seed(seed, url)
}

/// The seed, made and not serving yet: made again if it ended or fetches from an operator
/// that no longer leads, else waited for.
fn starting_seed(seed: &PodView, url: &str) -> Action {
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
