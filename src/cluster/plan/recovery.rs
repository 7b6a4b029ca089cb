//! Recovery from lost quorum: whether a cluster whose majority is gone is rebuilt, and from
//! what. The only path that acts without quorum, so it acts only where the members that are
//! gone cannot come back as a majority (or a user approved it), once per approval.

use super::*;

/// How a cluster that lost quorum is rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    /// From the surviving member with the most data.
    ForceNewCluster,
    /// From the newest backup (for the policy: only when no member survives).
    RestoreLatestBackup,
}

/// `spec.recovery` and the user's approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryPolicy {
    /// What the operator may do on its own (`quorumLoss`); `None` for `Manual`.
    pub automatic: Option<Approval>,
    /// How long a silent member must have been silent to count as lost.
    pub after: Duration,
    /// What a user approved with the recover annotation.
    pub approved: Option<Approval>,
}

/// What is done about a cluster that lost quorum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recover {
    /// Rebuild from member `name`, which has applied raft index `applied`.
    FromMember {
        name: String,
        applied: u64,
        approved: bool,
    },
    /// Restore the newest backup of the cluster.
    FromBackup { approved: bool },
    /// Nothing, for now: why, and what a user may do.
    Hold { reason: String },
}

/// The decision for a cluster the planner found without quorum (its action is
/// [`Action::QuorumLost`]). An approval is acted on at once; a policy only once the members
/// that do not answer cannot make a majority again: their pods are gone (their data with
/// them), their nodes lost for the node grace, or they have been silent for `after`.
pub fn recover(obs: &Observation, target: &Target, policy: &RecoveryPolicy) -> Recover {
    let survivor = survivor(obs);
    let next = next_steps(survivor);
    match policy.approved {
        Some(Approval::ForceNewCluster) => {
            return match survivor {
                Some((name, applied)) => Recover::FromMember {
                    name: name.to_string(),
                    applied,
                    approved: true,
                },
                None => Recover::Hold {
                    reason: "force-new-cluster was approved, but no member answers, so none \
                             can be rebuilt from; restore-latest-backup restores the newest \
                             backup"
                        .into(),
                },
            };
        }
        Some(Approval::RestoreLatestBackup) => return Recover::FromBackup { approved: true },
        None => {}
    }
    let Some(automatic) = policy.automatic else {
        return Recover::Hold { reason: next };
    };
    if let Some(why) = may_come_back(obs, target, policy.after) {
        return Recover::Hold {
            reason: format!("{why}; the automatic recovery waits for them"),
        };
    }
    match (survivor, automatic) {
        (Some((name, applied)), _) => Recover::FromMember {
            name: name.to_string(),
            applied,
            approved: false,
        },
        (None, Approval::RestoreLatestBackup) => Recover::FromBackup { approved: false },
        (None, Approval::ForceNewCluster) => Recover::Hold {
            reason: "no member answers, so none can be rebuilt from; annotate the \
                     EtcdCluster with etcd.database.coreos.com/recover=restore-latest-backup \
                     to restore the newest backup"
                .into(),
        },
    }
}

/// The member with the most data that answers and whose pod is not going: the highest
/// applied index, a voter before a learner.
fn survivor(obs: &Observation) -> Option<(&str, u64)> {
    let learner = |name: &str| {
        obs.members
            .iter()
            .flatten()
            .any(|m| m.name == name && m.is_learner)
    };
    obs.applied
        .iter()
        .filter(|(name, _)| obs.pod_alive(name))
        .max_by_key(|(name, applied)| (**applied, !learner(name)))
        .map(|(name, applied)| (name.as_str(), *applied))
}

/// What a user may do, for the status and the Event.
fn next_steps(survivor: Option<(&str, u64)>) -> String {
    let backup = "etcd.database.coreos.com/recover=restore-latest-backup restores the newest \
                  backup of this cluster";
    match survivor {
        Some((name, applied)) => format!(
            "to rebuild the cluster from member {name} (applied index {applied}; what it had \
             not applied is lost), annotate the EtcdCluster with \
             etcd.database.coreos.com/recover=force-new-cluster; {backup}"
        ),
        None => format!("no member answers; annotating the EtcdCluster with {backup}"),
    }
}

/// Why the voters that do not answer may still make a majority with those that do, if they
/// may.
fn may_come_back(obs: &Observation, target: &Target, after: Duration) -> Option<String> {
    let voters: Vec<(&str, Duration)> = match &obs.members {
        Some(members) => members
            .iter()
            .filter(|m| !m.is_learner)
            .map(|m| (m.name.as_str(), m.unhealthy_for))
            .collect(),
        None => obs
            .known_members
            .iter()
            .map(|n| (n.as_str(), obs.silent_for))
            .collect(),
    };
    let lost = |name: &str, silent: Duration| {
        let answers = obs.applied.contains_key(name) && obs.pod_alive(name);
        let on_claim = target.persistent && obs.claims.contains(name);
        let pod_gone = !(obs.pod_alive(name) || on_claim);
        let node_gone = !target.node_grace.is_zero() && obs.node_lost(name, target.node_grace);
        !answers && (pod_gone || node_gone || silent >= after)
    };
    let returning: Vec<&str> = voters
        .iter()
        .filter(|(name, silent)| !lost(name, *silent))
        .map(|(name, _)| *name)
        .collect();
    (!voters.is_empty() && returning.len() >= quorum(voters.len())).then(|| {
        format!(
            "{} of {} voters ({}) answer or may still come back: their pods run, and they \
             have been silent for less than {} s",
            returning.len(),
            voters.len(),
            returning.join(", "),
            after.as_secs()
        )
    })
}
