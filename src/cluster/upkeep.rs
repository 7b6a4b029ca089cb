//! Scheduled defragmentation, the task's side: which voters are due (a tick of
//! `spec.maintenance.defrag.schedule` passed since the schedule was armed and since each was
//! last defragmented, and their free space over the threshold), and the status records of the
//! defragmentations made.

use std::collections::BTreeSet;
use std::time::Duration;

use croner::Cron;
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};

use super::observe::Observed;
use crate::api::{DefragmentationRecord, EtcdCluster, EtcdClusterStatus};

/// With a threshold and no schedule, a member is not defragmented again sooner than this:
/// etcd's "in use" figure lags a defragmentation, and a loop would stall the member.
pub const THRESHOLD_SPACING: Duration = Duration::from_secs(600);

/// The schedule, parsed; an error names the field.
pub fn schedule(cluster: &EtcdCluster) -> Result<Option<Cron>, String> {
    let Some(expr) = cluster
        .spec
        .maintenance
        .as_ref()
        .and_then(|m| m.defrag.as_ref())
        .and_then(|d| d.schedule.as_deref())
    else {
        return Ok(None);
    };
    expr.parse::<Cron>()
        .map(Some)
        .map_err(|e| format!("spec.maintenance.defrag.schedule {expr:?}: {e}"))
}

/// The schedule the task armed, and when: ticks before it are not acted on (a new schedule,
/// or an operator that restarted, does not catch up on ticks it did not see).
#[derive(Debug, Default)]
pub struct Armed(Option<(String, Timestamp)>);

/// The voters due for defragmentation now.
pub fn due(
    cluster: &EtcdCluster,
    obs: &Observed,
    armed: &mut Armed,
    now: Timestamp,
) -> BTreeSet<String> {
    let Some(defrag) = cluster
        .spec
        .maintenance
        .as_ref()
        .and_then(|m| m.defrag.as_ref())
    else {
        armed.0 = None;
        return BTreeSet::new();
    };
    let last = |member: &str| -> Option<Timestamp> {
        cluster
            .status
            .as_ref()?
            .defragmentations
            .iter()
            .find(|d| d.member == member)
            .and_then(|d| d.at.parse().ok())
    };
    let over = |db: i64, in_use: i64| defrag.threshold.is_none_or(|t| db - in_use >= t);
    let voters = obs
        .plan
        .members
        .iter()
        .flatten()
        .filter(|m| m.healthy && !m.is_learner)
        .filter_map(|m| Some((m.name.clone(), obs.statuses.get(&m.id)?)))
        .filter(|(_, s)| over(s.db_size, s.db_size_in_use));
    let Ok(Some(cron)) = schedule(cluster) else {
        // A threshold alone (the schema asks for one of the two).
        let spaced = |name: &str| {
            last(name).is_none_or(|at| now.duration_since(at).unsigned_abs() >= THRESHOLD_SPACING)
        };
        return voters
            .map(|(name, _)| name)
            .filter(|name| defrag.threshold.is_some() && spaced(name))
            .collect();
    };
    let expr = defrag.schedule.clone().unwrap_or_default();
    let since = match &armed.0 {
        Some((armed_expr, at)) if *armed_expr == expr => *at,
        _ => {
            armed.0 = Some((expr, now));
            now
        }
    };
    let Ok(tick) = cron
        .find_previous_occurrence(&now.to_zoned(TimeZone::UTC), true)
        .map(|z| z.timestamp())
    else {
        return BTreeSet::new();
    };
    if tick <= since {
        return BTreeSet::new();
    }
    voters
        .map(|(name, _)| name)
        .filter(|name| last(name).is_none_or(|at| at < tick))
        .collect()
}

/// The status's defragmentation records: the previous ones of members still in the cluster,
/// with `made` (this pass's) in place of its member's.
pub fn records(
    cluster: &EtcdCluster,
    status: &EtcdClusterStatus,
    made: Option<DefragmentationRecord>,
) -> Vec<DefragmentationRecord> {
    let members: BTreeSet<&str> = status
        .member_statuses
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let mut records: Vec<DefragmentationRecord> = cluster
        .status
        .iter()
        .flat_map(|s| s.defragmentations.iter())
        .filter(|d| members.contains(d.member.as_str()))
        .filter(|d| made.as_ref().is_none_or(|m| m.member != d.member))
        .cloned()
        .collect();
    records.extend(made);
    records.sort_by(|a, b| a.member.cmp(&b.member));
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_is_found_before_now_in_utc() {
        let cron: Cron = "0 3 * * *".parse().unwrap();
        let now: Timestamp = "2026-11-26T10:00:00Z".parse().unwrap();
        let tick = cron
            .find_previous_occurrence(&now.to_zoned(TimeZone::UTC), true)
            .unwrap()
            .timestamp();
        assert_eq!(tick.to_string(), "2026-11-26T03:00:00Z");
        assert!("every day".parse::<Cron>().is_err());
    }
}
