//! Scheduled defragmentation, the task's side: which voters are due (a tick of
//! `spec.maintenance.defrag.schedule` passed since the schedule was armed and since each was
//! last defragmented, and their free space over the threshold), and the status records of the
//! defragmentations made.

use std::collections::BTreeSet;
use std::time::Duration;

use croner::Cron;
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};

use super::observe::Observed;
use kube::ResourceExt;

use crate::api::{
    DEFRAG_ANNOTATION, DefragRequest, DefragmentationRecord, EtcdCluster, EtcdClusterStatus,
    MemberRole,
};

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

/// When `spec.maintenance.window` next opens, if it is closed at `now`: `None` without a
/// window or while it is open. An error names the field (croner reads what the schema's shape
/// lets through); the window then counts as open, so that a typo never holds an upgrade back
/// for good (the status says why).
pub fn window_opens(cluster: &EtcdCluster, now: Timestamp) -> Result<Option<Timestamp>, String> {
    let Some(w) = (cluster.spec.maintenance.as_ref()).and_then(|m| m.window.as_ref()) else {
        return Ok(None);
    };
    let field = "spec.maintenance.window";
    let cron: Cron =
        (w.schedule.parse()).map_err(|e| format!("{field}.schedule {:?}: {e}", w.schedule))?;
    let duration = crate::api::cluster::parse_duration(&w.duration)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{field}.duration {:?}: not a duration", w.duration))?;
    let span = k8s_openapi::jiff::SignedDuration::try_from(duration).map_err(|e| e.to_string())?;
    // The first opening after `now - duration`: open now when it is not after `now`.
    let from = now.checked_sub(span).map_err(|e| e.to_string())?;
    let next = cron
        .find_next_occurrence(&from.to_zoned(TimeZone::UTC), false)
        .map_err(|e| format!("{field}.schedule {:?}: {e}", w.schedule))?
        .timestamp();
    Ok((next > now).then_some(next))
}

/// The schedule the task armed, and when: ticks before it are not acted on (a new schedule,
/// or an operator that restarted, does not catch up on ticks it did not see).
#[derive(Debug, Default)]
pub struct Armed(Option<(String, Timestamp)>);

/// The defragmentation asked for by annotation: the status's if it has the same token, else
/// a new one seen `now`; `None` without the annotation.
pub fn requested(cluster: &EtcdCluster, now: Timestamp) -> Option<DefragRequest> {
    let token = cluster.annotations().get(DEFRAG_ANNOTATION)?;
    let previous = cluster
        .status
        .as_ref()
        .and_then(|s| s.defrag_request.clone());
    Some(match previous {
        Some(p) if p.token == *token => p,
        _ => DefragRequest {
            token: token.clone(),
            at: now.to_string(),
            done: false,
        },
    })
}

/// `request` as `status` leaves it: done once every voter's last defragmentation is at or
/// after the request.
pub fn settle(mut request: DefragRequest, status: &EtcdClusterStatus) -> DefragRequest {
    let Ok(at) = request.at.parse::<Timestamp>() else {
        return request;
    };
    request.done |= status
        .member_statuses
        .iter()
        .filter(|m| m.role != Some(MemberRole::Learner))
        .all(|m| last_defrag(status, &m.name).is_some_and(|t| t >= at));
    request
}

/// When `member` was last defragmented, by the status's records.
fn last_defrag(status: &EtcdClusterStatus, member: &str) -> Option<Timestamp> {
    status
        .defragmentations
        .iter()
        .find(|d| d.member == member)
        .and_then(|d| d.at.parse().ok())
}

/// The voters due for defragmentation now: by the schedule or threshold, and every healthy
/// voter not defragmented since a `request` that is not done.
pub fn due(
    cluster: &EtcdCluster,
    obs: &Observed,
    armed: &mut Armed,
    request: Option<&DefragRequest>,
    now: Timestamp,
) -> BTreeSet<String> {
    let mut due = scheduled(cluster, obs, armed, now);
    let at = request
        .filter(|r| !r.done)
        .and_then(|r| r.at.parse::<Timestamp>().ok());
    if let (Some(at), Some(status)) = (at, cluster.status.as_ref()) {
        due.extend(
            obs.plan
                .members
                .iter()
                .flatten()
                .filter(|m| m.healthy && !m.is_learner)
                .filter(|m| last_defrag(status, &m.name).is_none_or(|t| t < at))
                .map(|m| m.name.clone()),
        );
    }
    due
}

/// The voters due by the schedule or threshold of `spec.maintenance.defrag`.
fn scheduled(
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
    use crate::api::{Defrag, EtcdClusterSpec, Maintenance};
    use crate::cluster::plan::MemberView;
    use crate::etcd::Status;

    /// m1 and m2, healthy voters, each with a 100 MiB file holding 10 MiB of data.
    fn observed() -> Observed {
        let mut obs = Observed::default();
        let mut members = vec![];
        for id in 1..=2u64 {
            members.push(MemberView {
                name: format!("m{id}"),
                id,
                is_learner: false,
                healthy: true,
                unhealthy_for: Duration::ZERO,
                caught_up: true,
            });
            obs.statuses.insert(
                id,
                Status {
                    member_id: id,
                    cluster_id: 7,
                    leader: 1,
                    version: "3.6.16".into(),
                    db_size: 100 << 20,
                    db_size_in_use: 10 << 20,
                    raft_index: 9,
                    raft_term: 2,
                    revision: 5,
                    raft_applied_index: 9,
                    is_learner: false,
                    errors: vec![],
                },
            );
        }
        obs.plan.members = Some(members);
        obs
    }

    fn cluster(
        schedule: Option<&str>,
        threshold: Option<i64>,
        done: &[(&str, &str)],
    ) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            "c",
            EtcdClusterSpec {
                size: 2,
                maintenance: Some(Box::new(Maintenance {
                    defrag: Some(Defrag {
                        schedule: schedule.map(String::from),
                        threshold,
                    }),
                    ..Maintenance::default()
                })),
                ..EtcdClusterSpec::default()
            },
        );
        c.status = Some(EtcdClusterStatus {
            defragmentations: done
                .iter()
                .map(|(member, at)| DefragmentationRecord {
                    member: member.to_string(),
                    at: at.to_string(),
                    ..DefragmentationRecord::default()
                })
                .collect(),
            ..EtcdClusterStatus::default()
        });
        c
    }

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    #[test]
    fn a_schedule_makes_each_voter_due_once_per_tick_and_never_for_a_tick_before_it_was_armed() {
        let obs = observed();
        let mut armed = Armed::default();
        let daily = cluster(Some("0 3 * * *"), None, &[]);
        // Armed at 10:00: the 03:00 tick that day passed before; nothing is due until 03:00
        // the next day.
        assert!(due(&daily, &obs, &mut armed, None, at("2026-11-26T10:00:00Z")).is_empty());
        assert!(due(&daily, &obs, &mut armed, None, at("2026-11-27T02:59:00Z")).is_empty());
        let both: BTreeSet<String> = ["m1".into(), "m2".into()].into();
        assert_eq!(
            due(&daily, &obs, &mut armed, None, at("2026-11-27T03:00:30Z")),
            both
        );
        // m2 done at 03:01: only m1 is left of this tick.
        let one_done = cluster(Some("0 3 * * *"), None, &[("m2", "2026-11-27T03:01:00Z")]);
        assert_eq!(
            due(
                &one_done,
                &obs,
                &mut armed,
                None,
                at("2026-11-27T03:02:00Z")
            ),
            ["m1".to_string()].into()
        );
        // A threshold above the free space (90 MiB): nobody.
        let high = cluster(Some("0 3 * * *"), Some(200 << 20), &[]);
        assert!(due(&high, &obs, &mut armed, None, at("2026-11-27T03:02:00Z")).is_empty());
        // A new schedule is armed afresh.
        let hourly = cluster(Some("0 * * * *"), None, &[]);
        assert!(due(&hourly, &obs, &mut armed, None, at("2026-11-27T03:30:00Z")).is_empty());
        assert_eq!(
            due(&hourly, &obs, &mut armed, None, at("2026-11-27T04:00:01Z")),
            both
        );
    }

    #[test]
    fn a_threshold_alone_is_checked_at_every_look_with_a_spacing() {
        let obs = observed();
        let mut armed = Armed::default();
        let now = at("2026-11-27T03:00:00Z");
        let over = cluster(None, Some(50 << 20), &[("m1", "2026-11-27T02:55:00Z")]);
        assert_eq!(
            due(&over, &obs, &mut armed, None, now),
            ["m2".to_string()].into()
        );
        let under = cluster(None, Some(95 << 20), &[]);
        assert!(due(&under, &obs, &mut armed, None, now).is_empty());
    }

    #[test]
    fn a_defragmentation_asked_for_by_annotation_takes_every_voter_once() {
        let obs = observed();
        let mut armed = Armed::default();
        let now = at("2026-11-26T10:00:00Z");
        // Neither schedule nor threshold: only a request makes voters due.
        let mut c = cluster(None, None, &[("m1", "2026-11-26T09:00:00Z")]);
        assert!(requested(&c, now).is_none());
        assert!(due(&c, &obs, &mut armed, None, now).is_empty());
        c.metadata.annotations = Some([(DEFRAG_ANNOTATION.to_string(), "t1".to_string())].into());
        let r = requested(&c, now).unwrap();
        assert_eq!(
            (r.token.as_str(), r.at.as_str(), r.done),
            ("t1", "2026-11-26T10:00:00Z", false)
        );
        let both: BTreeSet<String> = ["m1".into(), "m2".into()].into();
        assert_eq!(due(&c, &obs, &mut armed, Some(&r), now), both);

        // m1 done since: only m2 is left; the request keeps the time it was first seen.
        let later = at("2026-11-26T10:00:30Z");
        let status = c.status.as_mut().unwrap();
        status.defragmentations[0].at = "2026-11-26T10:00:05Z".into();
        status.defrag_request = Some(r);
        status.member_statuses = ["m1", "m2"]
            .map(|name| crate::api::MemberStatus {
                name: name.into(),
                role: Some(MemberRole::Follower),
                ..Default::default()
            })
            .to_vec();
        let r = requested(&c, later).unwrap();
        assert_eq!(r.at, "2026-11-26T10:00:00Z");
        assert_eq!(
            due(&c, &obs, &mut armed, Some(&r), later),
            ["m2".to_string()].into()
        );
        let status = c.status.clone().unwrap();
        assert!(!settle(r.clone(), &status).done);

        // m2 done too: the request is settled and makes nobody due again.
        let mut status = status;
        status.defragmentations.push(DefragmentationRecord {
            member: "m2".into(),
            at: "2026-11-26T10:00:20Z".into(),
            ..DefragmentationRecord::default()
        });
        let r = settle(r, &status);
        assert!(r.done);
        assert!(due(&c, &obs, &mut armed, Some(&r), later).is_empty());
        // A new token is a new request.
        c.metadata.annotations = Some([(DEFRAG_ANNOTATION.to_string(), "t2".to_string())].into());
        c.status.as_mut().unwrap().defrag_request = Some(r);
        assert!(!requested(&c, later).unwrap().done);
    }

    #[test]
    fn records_keep_members_of_the_cluster_and_the_newest_of_each() {
        let c = cluster(None, Some(1), &[("m1", "a"), ("gone", "b")]);
        let status = EtcdClusterStatus {
            member_statuses: vec![
                crate::api::MemberStatus {
                    name: "m1".into(),
                    ..Default::default()
                },
                crate::api::MemberStatus {
                    name: "m2".into(),
                    ..Default::default()
                },
            ],
            ..EtcdClusterStatus::default()
        };
        let made = DefragmentationRecord {
            member: "m2".into(),
            at: "c".into(),
            ..DefragmentationRecord::default()
        };
        let r = records(&c, &status, Some(made));
        let names: Vec<(&str, &str)> = r
            .iter()
            .map(|d| (d.member.as_str(), d.at.as_str()))
            .collect();
        assert_eq!(names, [("m1", "a"), ("m2", "c")]);
    }

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

    #[test]
    fn the_maintenance_window_is_open_for_its_duration_after_each_tick() {
        let with = |schedule: &str, duration: &str| {
            let mut c = cluster(None, None, &[]);
            c.spec.maintenance = Some(Box::new(Maintenance {
                window: Some(crate::api::MaintenanceWindow {
                    schedule: schedule.into(),
                    duration: duration.into(),
                }),
                ..Maintenance::default()
            }));
            c
        };
        let daily = with("0 2 * * *", "2h");
        assert_eq!(window_opens(&daily, at("2026-12-02T02:00:00Z")), Ok(None));
        assert_eq!(window_opens(&daily, at("2026-12-02T03:59:59Z")), Ok(None));
        assert_eq!(
            window_opens(&daily, at("2026-12-02T04:00:00Z")),
            Ok(Some(at("2026-12-03T02:00:00Z")))
        );
        assert_eq!(
            window_opens(&daily, at("2026-12-02T01:59:00Z")),
            Ok(Some(at("2026-12-02T02:00:00Z")))
        );
        let none = cluster(None, None, &[]);
        assert_eq!(window_opens(&none, at("2026-12-02T04:00:00Z")), Ok(None));
        let bad = with("99 * * * *", "1h");
        let why = window_opens(&bad, at("2026-12-02T04:00:00Z")).unwrap_err();
        assert!(why.contains("spec.maintenance.window.schedule"), "{why}");
    }
}
