//! The act stage: carrying out the planner's one action ([`act`] dispatches, one function per
//! action, in `membership`, `pods` and `restore`), and the prepare stage before observe
//! ([`ensure_services`]). All writes are server-side applies or creates with the operator's
//! field manager; children are owned by the EtcdCluster, so deleting it removes them.

use super::handles::Pass;
use super::observe::{ETCD_TIMEOUT, Observed};
use super::plan::Action;
use crate::api::DefragmentationRecord;
use crate::api::EtcdCluster;
use crate::etcd::{self, Etcd};
use crate::kube::cache::{Expect, Object, Write};
use crate::kube::invalid::Invalid;

mod certificates;
mod hibernation;
mod membership;
mod pods;
mod recover;
mod restore;
mod services;
mod space;

use certificates::rotate_ca;
use hibernation::{hibernate, take_final_snapshot};
use membership::{
    add_members, bootstrap, join_all, move_leader, promote, remove_member, replace_member,
};
use pods::{change_image, delete_claim, delete_member_pod, expand_claim, recreate_pod};

pub use recover::{RECOVERY_LABEL, withdraw_approval};
use recover::{recover_from_backup, recover_from_member, recover_from_store};
pub use restore::bumps_revision;
use restore::{restore_done, restore_seed, withdraw_restore};
pub use services::{ensure_services, holds};
use space::{defragment_member, reclaim_space};

/// What failed, named after the action.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Applying a Service failed.
    #[error("applying Service {name}: {source}")]
    ApplyService {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Applying or deleting the PodDisruptionBudget failed.
    #[error("applying PodDisruptionBudget {name}: {source}")]
    ApplyBudget {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Applying or deleting the NetworkPolicy failed.
    #[error("applying NetworkPolicy {name}: {source}")]
    ApplyPolicy {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Creating a member's pod (or its volume claim) failed.
    #[error("creating the pod of member {member}: {source}")]
    CreatePod {
        member: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting a pod failed.
    #[error("deleting pod {name}: {source}")]
    DeletePod {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Changing the etcd image of a member's pod failed.
    #[error("changing the etcd image of pod {name}: {source}")]
    ChangeImage {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting a volume claim failed.
    #[error("deleting volume claim {name}: {source}")]
    DeleteClaim {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Asking for more storage on a claim failed (other than by the API server's refusal,
    /// which the status reports).
    #[error("expanding volume claim {name}: {source}")]
    ExpandClaim {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Reading the pod or the EndpointSlices that show whether a new member's address is
    /// published failed.
    #[error("looking up the address of member {member}: {source}")]
    Lookup {
        member: String,
        #[source]
        source: kube::Error,
    },
    /// An etcd call failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// No member could be reached for a membership change.
    #[error("no member of the cluster answers")]
    NoEndpoint,
    /// Writing what a recovery from lost quorum starts with failed.
    #[error("recovering from lost quorum, writing {what}: {source}")]
    Recover {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Creating a hibernation's final snapshot (its EtcdBackup) failed.
    #[error("hibernating: creating EtcdBackup {name} for the final snapshot: {source}")]
    FinalSnapshot {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A step of the automatic CA's rotation failed.
    #[error(transparent)]
    Tls(#[from] crate::tls::Error),
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::ApplyService { .. } => "apply_service",
            Error::ApplyBudget { .. } => "apply_budget",
            Error::ApplyPolicy { .. } => "apply_network_policy",
            Error::CreatePod { .. } => "create_pod",
            Error::DeletePod { .. } => "delete_pod",
            Error::ChangeImage { .. } => "change_image",
            Error::DeleteClaim { .. } => "delete_claim",
            Error::ExpandClaim { .. } => "expand_claim",
            Error::Lookup { .. } => "lookup_address",
            Error::Etcd(e) => e.metric_label(),
            Error::NoEndpoint => "no_endpoint",
            Error::Recover { .. } => "recover",
            Error::FinalSnapshot { .. } => "final_snapshot",
            Error::Tls(crate::tls::Error::Invalid(Invalid { .. })) => "invalid_spec",
            Error::Tls(crate::tls::Error::Api { .. }) => "tls_secret",
            Error::Tls(crate::tls::Error::Pki { .. }) => "tls_certificate",
        }
    }
}

/// What came of an action.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the text says what changed (for an Event), if anything did.
    Done(Option<String>),
    /// etcd refused for now (it is settling); try again shortly.
    Retry(String),
}

/// A connection for a membership change: to the leader when it is known (it would forward the
/// request anyway), else to a member that answered its status.
pub async fn connect(obs: &Observed) -> Result<Etcd, Error> {
    let endpoint = voter_endpoints(obs)
        .into_iter()
        .next()
        .ok_or(Error::NoEndpoint)?;
    Ok(Etcd::connect(&endpoint, ETCD_TIMEOUT).await?)
}

/// The healthy voters' endpoints as last observed, the leader's first.
pub fn voter_endpoints(obs: &Observed) -> Vec<etcd::Endpoint> {
    let members = obs.plan.members.as_deref().unwrap_or_default();
    let healthy = members.iter().filter(|m| m.healthy && !m.is_learner);
    let leader = healthy.clone().find(|m| Some(m.id) == obs.plan.leader);
    leader
        .into_iter()
        .chain(healthy.filter(|m| Some(m.id) != obs.plan.leader))
        .filter_map(|m| obs.pod_endpoint(&m.name))
        .collect()
}

/// Whether a membership change that answered `e` was applied all the same, read back from
/// the healthy voters (`applied` judges the list). Taking a lost answer for a refusal would
/// leave the step half done (a removed member's pod kept) and unreported until a later pass
/// tidied up after it, with no Event to say a voting change was made.
async fn applied_despite(
    obs: &Observed,
    e: &etcd::Error,
    applied: impl Fn(&[etcd::Member]) -> bool,
) -> bool {
    // etcd's own refusals (a learner not caught up, a cluster not healthy enough) are certain.
    if e.is_settling() {
        return false;
    }
    let Some(members) = etcd::members_from(&voter_endpoints(obs), ETCD_TIMEOUT).await else {
        return false;
    };
    let done = applied(&members);
    if done {
        tracing::info!(
            "a membership change answered \"{e}\", but the member list shows it applied"
        );
    }
    done
}

/// `--initial-cluster` from etcd's member list (members that have not started yet have no
/// name; their peer URL's host label is their name).
fn initial_cluster(members: &[etcd::Member]) -> String {
    members
        .iter()
        .filter_map(|m| {
            let name = if m.name.is_empty() {
                m.host_label()?
            } else {
                m.name.as_str()
            };
            Some(format!("{name}={}", m.peer_urls.first()?))
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn settling(e: etcd::Error) -> Result<Outcome, Error> {
    if e.is_settling() {
        Ok(Outcome::Retry(e.to_string()))
    } else {
        Err(e.into())
    }
}

/// What carrying out an action did besides its outcome, for the rest of the pass: the pods and
/// claims it created or deleted (which the caches must show before they are read again), and
/// the defragmentation it made (for the status).
#[derive(Debug, Default)]
pub struct Effects {
    /// The pods and claims created or deleted.
    pub writes: Vec<Expect>,
    /// The defragmentation made.
    pub defragmented: Option<DefragmentationRecord>,
    /// The API server refused to expand a claim to this many bytes, and why.
    pub expansion_refused: Option<(u64, String)>,
}

/// A pass while it acts: what it knows ([`Pass`], which it derefs to), the nodes the pods it
/// creates are kept off, and what it did so far. The effects are recorded behind a lock
/// because one action may create several pods at once.
pub struct Acting<'a> {
    pass: &'a Pass<'a>,
    keep_off: &'a [String],
    effects: std::sync::Mutex<Effects>,
}

impl<'a> std::ops::Deref for Acting<'a> {
    type Target = Pass<'a>;

    fn deref(&self) -> &Pass<'a> {
        self.pass
    }
}

impl Acting<'_> {
    /// The nodes the pods this action creates are kept off.
    fn kept_off(&self) -> &[String] {
        self.keep_off
    }

    fn effects(&self) -> std::sync::MutexGuard<'_, Effects> {
        self.effects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that this action created or deleted a pod or a claim.
    fn wrote(&self, kind: Object, name: &str, change: Write) {
        self.effects().writes.push(Expect {
            kind,
            name: name.into(),
            change,
        });
    }

    /// Records the defragmentation this action made.
    fn defragmented(&self, record: DefragmentationRecord) {
        self.effects().defragmented = Some(record);
    }

    /// Records that the API server refused to expand a claim to `bytes`.
    fn expansion_refused(&self, bytes: u64, why: String) {
        self.effects().expansion_refused = Some((bytes, why));
    }
}

/// Carries out `action`, and returns what it did besides its outcome. The nodes a new
/// member's pod must avoid come with the action.
pub async fn act(
    pass: &Pass<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
) -> (Result<Outcome, Error>, Effects) {
    let keep_off = match action {
        Action::AddMembers { avoid, .. } | Action::SpreadMember { avoid, .. } => avoid.as_slice(),
        _ => &[],
    };
    let acting = Acting {
        pass,
        keep_off,
        effects: std::sync::Mutex::default(),
    };
    let outcome = dispatch(&acting, cluster, obs, action).await;
    let effects = acting
        .effects
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    (outcome, effects)
}

/// Carries out `action`: one function per action that changes something.
async fn dispatch(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
) -> Result<Outcome, Error> {
    match action {
        Action::Bootstrap => bootstrap(pass, cluster).await,
        Action::AddMembers { count, .. } => add_members(pass, cluster, obs, *count).await,
        Action::SpreadMember { crowded, avoid } => {
            Ok(match add_members(pass, cluster, obs, 1).await? {
                Outcome::Done(Some(added)) => Outcome::Done(Some(format!(
                    "node {crowded} holds more voters than the cluster can lose: {added}, \
                     kept off {}; one of {crowded}'s goes next",
                    avoid.join(", ")
                ))),
                other => other,
            })
        }
        Action::JoinMembers { names } => join_all(pass.handles, cluster, obs, names).await,
        Action::Promote { name, id } => promote(obs, name, *id).await,
        Action::RemoveMember { name, id, reason } => {
            remove_member(pass, cluster, obs, name, *id, *reason).await
        }
        Action::ReplaceMember { name, id } => replace_member(pass, cluster, obs, name, *id).await,
        Action::RecreatePod { name } => recreate_pod(pass, cluster, obs, name).await,
        Action::MoveLeader {
            from,
            to,
            id,
            reason,
        } => move_leader(obs, from, to, *id, *reason).await,
        Action::DeleteClaim { name } => delete_claim(pass, name).await,
        Action::ExpandClaim { name } => expand_claim(pass, cluster, name).await,
        Action::DeletePod { name, reason } => delete_member_pod(pass, cluster, name, *reason).await,
        Action::ChangeImage { name } => change_image(pass, cluster, obs, name).await,
        Action::RestoreSeed => restore_seed(pass, cluster).await,
        Action::RotateCa => rotate_ca(pass, cluster).await,
        Action::ReclaimSpace => reclaim_space(obs, super::observe::running_quota(obs)).await,
        Action::Defragment { name, id } => defragment_member(pass, obs, name, *id).await,
        Action::RecoverFromMember {
            name,
            uid,
            revision_before,
            ..
        } => recover_from_member(pass, cluster, name, uid, *revision_before).await,
        Action::RecoverFromBackup {
            backup,
            stored: false,
            uid,
            ..
        } => recover_from_backup(pass, cluster, backup, uid).await,
        Action::RecoverFromBackup {
            backup,
            stored: true,
            uid,
            ..
        } => recover_from_store(pass, cluster, backup, uid).await,
        Action::RestoreDone { seed } => restore_done(pass, cluster, seed).await,
        Action::WithdrawRestore { seed, reason } => {
            withdraw_restore(pass, cluster, seed.as_deref(), reason).await
        }
        Action::TakeFinalSnapshot => take_final_snapshot(pass, cluster, obs).await,
        Action::Hibernate { pods } => hibernate(pass, pods).await,
        Action::Wait { .. }
        | Action::WaitForWindow { .. }
        | Action::Hibernated
        | Action::RollStalled { .. }
        | Action::Restoring { .. }
        | Action::QuorumLost { .. }
        | Action::Paused
        | Action::Steady => Ok(Outcome::Done(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_service_as_the_api_server_returns_it_holds_what_was_applied() {
        let want = json!({
            "metadata": {"name": "c", "labels": {"app": "etcd"}},
            "spec": {"clusterIP": "None", "ports": [{"name": "client", "port": 2379}]},
        });
        let have = json!({
            "metadata": {"name": "c", "labels": {"app": "etcd", "other": "x"},
                         "resourceVersion": "7"},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP",
                     "ports": [{"name": "client", "port": 2379, "protocol": "TCP",
                                "targetPort": 2379}]},
            "status": {"loadBalancer": {}},
        });
        assert!(holds(&have, &want));
        // A port changed or added by someone else, or a label gone: applied again.
        let mut moved = have.clone();
        moved["spec"]["ports"][0]["port"] = json!(2380);
        assert!(!holds(&moved, &want));
        let mut more = have.clone();
        more["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "x", "port": 1}));
        assert!(!holds(&more, &want));
        let mut unlabeled = have;
        unlabeled["metadata"]["labels"] = json!({});
        assert!(!holds(&unlabeled, &want));
    }
}
