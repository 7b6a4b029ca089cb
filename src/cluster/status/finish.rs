//! The whole status of a pass: what [`super::compute`] makes of the observation and the action,
//! completed with what the rest of the pass found (a restore's record, a held-back upgrade, a
//! recovery, defragmentations, a bad schedule, a CA rotation's step, a quota the data
//! exceeds). The task only writes it and publishes its warning.

use crate::api::{
    DefragRequest, DefragmentationRecord, DegradedReason, EtcdCluster, EtcdClusterStatus,
    RecoveryRecord, RestoreRecord,
};
use crate::cluster::observe::Observed;
use crate::cluster::plan::Action;
use crate::cluster::upkeep;

/// What the pass found beside the observation and the action.
#[derive(Debug, Default)]
pub struct Findings {
    /// The record of the restore under way, if one is.
    pub restore: Option<RestoreRecord>,
    /// Why the spec's version is held back (`UpgradeBlocked`), naming the field.
    pub held_back: Option<String>,
    /// The action was carried out (its outcome was a change or nothing to do).
    pub acted: bool,
    /// The step of a CA rotation the action just wrote.
    pub rotation_step: Option<String>,
    /// The newest revision a member reported.
    pub revision_seen: Option<i64>,
    /// The recovery record written before this pass's hand-off.
    pub early_recovery: Option<RecoveryRecord>,
    /// The defragmentation this pass made.
    pub defragmented: Option<DefragmentationRecord>,
    /// The defragmentation asked for by annotation, as this pass saw it.
    pub defrag_request: Option<DefragRequest>,
    /// Why the data itself leaves too little of the quota (`QuotaExceeded`), while NOSPACE
    /// stays.
    pub exceeded: Option<String>,
    /// What the access-control stage found, when the cluster has access control.
    pub auth: Option<crate::cluster::auth::Finding>,
    /// How long ago a pass last found the cluster Available, if one did.
    pub available_ago: Option<std::time::Duration>,
    /// `status.standby` as the standby stage left it; `None`: as it was.
    pub standby: Option<Option<crate::api::StandbyStatus>>,
}

/// The status of a pass, and what it says that deserves an Event.
#[derive(Debug)]
pub struct Finished {
    /// The status to write.
    pub status: EtcdClusterStatus,
    /// A recovery whose rebuilt cluster this pass saw serve for the first time.
    pub recovered: Option<RecoveryRecord>,
    /// The warning the status carries (reason, message), if any: published once.
    pub warning: Option<(&'static str, String)>,
    /// Whether this pass found the cluster Available, before [`super::AVAILABLE_GRACE`] held
    /// a previous verdict.
    pub available: bool,
}

/// The status after `action` was planned on `obs`, with what the pass found.
pub fn finish(cluster: &EtcdCluster, obs: &Observed, action: &Action, found: Findings) -> Finished {
    let mut status = super::compute(cluster, obs, action);
    let previous = cluster.status.clone().unwrap_or_default();
    let available = super::hold_available(&mut status, &previous, action, found.available_ago);
    status.restore = found.restore.or(status.restore);
    status.standby = found.standby.unwrap_or(status.standby);
    let generation = cluster.metadata.generation;
    super::mark_following(&mut status, &previous.conditions, generation);
    if let Some(message) = &found.held_back {
        super::mark_degraded(
            &mut status,
            DegradedReason::UpgradeBlocked.as_str(),
            message,
        );
    }
    let recovered = super::recovery::report(
        cluster,
        obs,
        action,
        found.acted,
        &mut status,
        found.revision_seen,
        found.early_recovery,
    );
    status.defragmentations = upkeep::records(cluster, &status, found.defragmented);
    if let Some(request) = found.defrag_request {
        status.defrag_request = Some(upkeep::settle(request, &status));
    }
    // A schedule croner cannot read (the schema checks only its shape): no defragmentation,
    // everything else goes on.
    let bad_schedule = (upkeep::schedule(cluster).err())
        .or_else(|| upkeep::window_opens(cluster, k8s_openapi::jiff::Timestamp::now()).err());
    if let Some(why) = &bad_schedule {
        super::mark_degraded(&mut status, DegradedReason::InvalidSpec.as_str(), why);
    }
    if let Some(step) = &found.rotation_step {
        super::mark_rotating(&mut status, cluster.metadata.generation, step);
    }
    // The data itself, compacted, leaves too little of the quota: nothing is disarmed, and
    // the status says why for as long as the alarm stays.
    if let Some(why) = &found.exceeded {
        super::mark_degraded(&mut status, DegradedReason::QuotaExceeded.as_str(), why);
    }
    let refused = expansion_refused(obs);
    if let Some(why) = &refused {
        let reason = DegradedReason::VolumeExpansionRefused.as_str();
        super::mark_degraded(&mut status, reason, why);
    }
    let auth = found.auth.as_ref();
    super::mark_auth(
        &mut status,
        &previous,
        cluster.metadata.generation,
        auth,
        crate::access::wanted(cluster),
    );
    let auth_warning = auth.and_then(|a| {
        a.error
            .clone()
            .or_else(|| (!a.problems.is_empty()).then(|| a.problems.join("; ")))
    });
    let warning = match (action, &found.held_back) {
        (Action::RollStalled { reason }, _) => Some((DegradedReason::RollStalled, reason.clone())),
        _ if found.exceeded.is_some() => found
            .exceeded
            .map(|why| (DegradedReason::QuotaExceeded, why)),
        (_, Some(message)) => Some((DegradedReason::UpgradeBlocked, message.clone())),
        _ if refused.is_some() => refused.map(|why| (DegradedReason::VolumeExpansionRefused, why)),
        _ => bad_schedule.map(|why| (DegradedReason::InvalidSpec, why)),
    }
    .map(|(reason, message)| (reason.as_str(), message))
    .or(auth_warning.map(|why| ("AuthNotApplied", why)));
    Finished {
        status,
        recovered,
        warning,
        available,
    }
}

/// Why the claims do not grow, when the API server refused to expand them and no member
/// moves to a new claim instead: nothing changes until the class allows it, `onResize:
/// Replace` is set, or the request goes back.
fn expansion_refused(obs: &Observed) -> Option<String> {
    let volumes = &obs.plan.volumes;
    let why = volumes.refused.as_ref()?;
    (volumes.moving.is_empty() && !volumes.small.is_empty()).then(|| {
        format!(
            "spec.pod.persistentVolumeClaimSpec.resources.requests.storage is more than {} of \
             the members' claims hold, and {why}; allow expansion in the claims' StorageClass \
             (allowVolumeExpansion), or set spec.pod.onResize: Replace to move the members to \
             new claims",
            volumes.small.len()
        )
    })
}

/// The status written before an act that takes long or hands the cluster over (a NOSPACE
/// reclaim, a recovery's hand-off): what [`super::compute`] makes of it, with the recovery's
/// record when the action starts one, so that an operator stopped right after still left it.
pub fn early(
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
    revision_seen: Option<i64>,
) -> EtcdClusterStatus {
    let mut status = super::compute(cluster, obs, action);
    if matches!(
        action,
        Action::RecoverFromMember { .. } | Action::RecoverFromBackup { .. }
    ) {
        super::recovery::report(cluster, obs, action, true, &mut status, revision_seen, None);
    }
    status
}
