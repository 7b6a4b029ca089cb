//! Hibernation (`spec.hibernation`): the final snapshot when a store is given, then every
//! member pod deleted at once (the members stay in etcd's member list, so that members with
//! claims come back as themselves), then the claims when they are not kept. Waking needs no
//! step of its own: members with claims are brought back by [`super::rescue_persistent`], and
//! a cluster whose data is only in the final snapshot is restored from it by the recovery
//! path ([`crate::cluster::recovery`]).

use super::{Action, Observation, PodState};

/// What a hibernation asks of the planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hibernate {
    /// A store is given: the final snapshot is taken before any pod goes.
    pub store: bool,
    /// The claims stay (`spec.hibernation.keepVolumes`).
    pub keep_volumes: bool,
}

/// The final snapshot, as found for the cluster's current revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FinalSnapshot {
    /// Not looked for (no hibernation with a store, or no pod left to snapshot).
    #[default]
    NotLooked,
    /// None holds the revision the members are at.
    Missing,
    /// Its EtcdBackup is being taken.
    Taking { backup: String },
    /// Its EtcdBackup failed.
    Failed { backup: String, reason: String },
    /// EtcdBackup `backup` holds `revision`, the members' newest.
    Taken { backup: String, revision: i64 },
}

/// The next step of a hibernation.
pub fn plan(obs: &Observation, h: &Hibernate) -> Action {
    let staying: Vec<String> = obs
        .pods
        .iter()
        .filter(|p| p.state != PodState::Terminating)
        .map(|p| p.name.clone())
        .collect();
    if !staying.is_empty() {
        if let Some(wait) = h.store.then(|| snapshot_first(obs)).flatten() {
            return wait;
        }
        return Action::Hibernate { pods: staying };
    }
    if !obs.pods.is_empty() {
        return Action::Wait {
            reason: "hibernating: the member pods are stopping".into(),
        };
    }
    if !h.keep_volumes
        && let Some(name) = obs.claims.iter().next()
    {
        return Action::DeleteClaim { name: name.clone() };
    }
    Action::Hibernated
}

/// What stands before the pods are deleted, while the final snapshot is not taken.
fn snapshot_first(obs: &Observation) -> Option<Action> {
    let reason = match &obs.final_snapshot {
        FinalSnapshot::Taken { .. } => return None,
        FinalSnapshot::Missing | FinalSnapshot::NotLooked if obs.members.is_none() => {
            "hibernating waits for a member to answer: the final snapshot is taken from a \
             serving cluster, and the pods are kept until it is"
                .to_string()
        }
        FinalSnapshot::Missing | FinalSnapshot::NotLooked => {
            return Some(Action::TakeFinalSnapshot);
        }
        FinalSnapshot::Taking { backup } => {
            format!("hibernating: EtcdBackup {backup} takes the final snapshot")
        }
        FinalSnapshot::Failed { backup, reason } => format!(
            "hibernating waits: the final snapshot (EtcdBackup {backup}) failed: {reason}; the \
             members keep running. Delete that EtcdBackup to take it again"
        ),
    };
    Some(Action::Wait { reason })
}
