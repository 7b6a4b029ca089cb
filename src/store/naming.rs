//! Names, retention and schedule of periodic backups, as coreos named them and better than it
//! kept them. Pure.
//!
//! - A periodic backup of `path` writes `<path>_v<revision>_<UTC time as 2006-01-02-15:04:05>`
//!   (coreos's Go layout), so existing tooling finds the objects.
//! - `maxBackups` keeps the newest N by the time and revision parsed from the name, never by
//!   the name's string order: coreos sorted strings, so `_v9_` came after `_v10_` (its issue
//!   2113). Only names of exactly this pattern are ever candidates for deletion.
//! - The schedule is anchored on the last success recorded in status, so an operator restart or
//!   a leadership hand-over neither skips a slot nor takes it twice (coreos reset an in-memory
//!   timer).

use std::time::Duration;

use k8s_openapi::jiff::civil::DateTime;
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};

/// coreos's time layout in the name, in strftime form.
const TIME_FORMAT: &str = "%Y-%m-%d-%H:%M:%S";

/// The object name of a periodic backup of `path` at `revision`, taken at `at`.
pub fn periodic_name(path: &str, revision: i64, at: Timestamp) -> String {
    let time = at.to_zoned(TimeZone::UTC).strftime(TIME_FORMAT);
    format!("{path}_v{revision}_{time}")
}

/// The name of the safety snapshot a restore takes of the cluster it replaces, beside the
/// snapshot it restores: `<path>.pre-restore-<UTC time as 2006-01-02-15:04:05>`. Retention
/// never matches it.
pub fn pre_restore_name(path: &str, at: Timestamp) -> String {
    let time = at.to_zoned(TimeZone::UTC).strftime(TIME_FORMAT);
    format!("{path}.pre-restore-{time}")
}

/// The revision and time of `name` if it is a periodic backup of `path`; `None` for any other
/// name, which retention then never touches.
pub fn parse(path: &str, name: &str) -> Option<(DateTime, i64)> {
    let rest = name.strip_prefix(path)?.strip_prefix("_v")?;
    let (revision, time) = rest.split_once('_')?;
    if revision.is_empty() || !revision.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let revision: i64 = revision.parse().ok()?;
    // Exactly the layout: 19 characters, nothing after.
    if time.len() != 19 {
        return None;
    }
    let at = DateTime::strptime(TIME_FORMAT, time).ok()?;
    Some((at, revision))
}

/// The path a scheduled backup (one run of a CronJob) of `prefix` writes: the prefix and the
/// tick it ran for, `<prefix>_<UTC time as 2006-01-02-15:04:05>`, so that each tick has its
/// own object and a second run for the same tick names the same one.
pub fn scheduled_name(prefix: &str, tick: Timestamp) -> String {
    let time = tick.to_zoned(TimeZone::UTC).strftime(TIME_FORMAT);
    format!("{prefix}_{time}")
}

/// The tick of `name` if it is a scheduled backup of `prefix` (as [`parse`], revision 0).
pub fn parse_scheduled(prefix: &str, name: &str) -> Option<(DateTime, i64)> {
    let time = name.strip_prefix(prefix)?.strip_prefix('_')?;
    if time.len() != 19 {
        return None;
    }
    Some((DateTime::strptime(TIME_FORMAT, time).ok()?, 0))
}

/// The newest backup of `prefix` among `names`, periodic (`<prefix>_v<revision>_<time>`) or
/// scheduled (`<prefix>_<time>`, revision 0), by the time in its name and then the revision;
/// names of any other pattern are never candidates.
pub fn newest<'a>(prefix: &str, names: &'a [String]) -> Option<(&'a str, DateTime, i64)> {
    names
        .iter()
        .filter_map(|n| {
            let (at, revision) = parse(prefix, n).or_else(|| parse_scheduled(prefix, n))?;
            Some((n.as_str(), at, revision))
        })
        .max_by_key(|(_, at, revision)| (*at, *revision))
}

/// The period a backup falls in, for one tier: (year, number in the year, hour).
type Period = fn(DateTime) -> (i32, i32, i32);

/// Which backups retention keeps: the newest `last`, and besides them the newest backup of
/// each of the newest `hourly` hours, `daily` days, `weekly` ISO weeks and `monthly` months
/// that have one (grandfather-father-son), all in UTC. All zero keeps everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// The newest this many, whatever their times.
    pub last: usize,
    /// One per hour, for this many hours that have backups.
    pub hourly: usize,
    /// One per day.
    pub daily: usize,
    /// One per ISO week.
    pub weekly: usize,
    /// One per month.
    pub monthly: usize,
}

impl Retention {
    /// The newest `keep` (coreos's `maxBackups`).
    pub fn newest(keep: usize) -> Self {
        Retention {
            last: keep,
            ..Retention::default()
        }
    }

    fn keeps_everything(&self) -> bool {
        *self == Retention::default()
    }
}

/// Of `names` (every object under the backup's prefix), the periodic backups of `path` to
/// delete so that the newest `keep` remain, newest by time and then revision. `keep` 0 keeps
/// everything.
pub fn to_delete<'a>(path: &str, names: &'a [String], keep: usize) -> Vec<&'a str> {
    to_delete_by(parse, path, names, Retention::newest(keep))
}

/// As [`to_delete`], for the names that `parse` reads as `path`'s, kept by `retention`.
pub fn to_delete_by<'a>(
    parse: fn(&str, &str) -> Option<(DateTime, i64)>,
    path: &str,
    names: &'a [String],
    retention: Retention,
) -> Vec<&'a str> {
    if retention.keeps_everything() {
        return Vec::new();
    }
    let mut ours: Vec<((DateTime, i64), &str)> = names
        .iter()
        .filter_map(|n| parse(path, n).map(|k| (k, n.as_str())))
        .collect();
    ours.sort_by_key(|o| std::cmp::Reverse(o.0));
    let mut keep = vec![false; ours.len()];
    for k in keep.iter_mut().take(retention.last) {
        *k = true;
    }
    let tiers: [(usize, Period); 4] = [
        (retention.hourly, |t| {
            (
                i32::from(t.year()),
                i32::from(t.day_of_year()),
                i32::from(t.hour()),
            )
        }),
        (retention.daily, |t| {
            (i32::from(t.year()), i32::from(t.day_of_year()), 0)
        }),
        (retention.weekly, |t| {
            let week = t.date().iso_week_date();
            (i32::from(week.year()), i32::from(week.week()), 0)
        }),
        (retention.monthly, |t| {
            (i32::from(t.year()), i32::from(t.month()), 0)
        }),
    ];
    for (count, period) in tiers {
        let mut seen = std::collections::BTreeSet::new();
        for (i, ((at, _), _)) in ours.iter().enumerate() {
            if seen.len() == count {
                break;
            }
            // The newest of each period (the list runs newest first).
            if seen.insert(period(*at)) {
                keep[i] = true;
            }
        }
    }
    ours.into_iter()
        .zip(keep)
        .filter(|(_, k)| !k)
        .map(|((_, n), _)| n)
        .collect()
}

/// How long until the next periodic backup is due: at once without a recorded success, else one
/// interval after it (at once if that moment has passed; a missed slot is taken once, not
/// once per interval missed).
pub fn next_due(last_success: Option<Timestamp>, interval: Duration, now: Timestamp) -> Duration {
    let Some(last) = last_success else {
        return Duration::ZERO;
    };
    let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
    interval.saturating_sub(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_backup_of_a_prefix_is_found_by_the_time_in_its_name() {
        let names: Vec<String> = [
            "etcd/example_v9_2026-11-26-10:00:00",
            "etcd/example_v10_2026-11-26-09:00:00",
            "etcd/example_2026-11-26-10:30:00",
            "etcd/example_v12_2026-11-26-10:30:00",
            // Not this prefix's, or not of the pattern: never the newest.
            "etcd/example-other_v99_2027-01-01-00:00:00",
            "etcd/example_v13_2026-11-26-10:30:00.pre-restore-2027-01-01-00:00:00",
            "etcd/example.db",
        ]
        .map(String::from)
        .to_vec();
        let (name, _, revision) = newest("etcd/example", &names).unwrap();
        assert_eq!(
            (name, revision),
            ("etcd/example_v12_2026-11-26-10:30:00", 12)
        );
        assert_eq!(newest("etcd/none", &names), None);
        let scheduled = [
            "etcd/nightly_2026-11-25-03:00:00",
            "etcd/nightly_2026-11-26-03:00:00",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            newest("etcd/nightly", &scheduled).unwrap().0,
            "etcd/nightly_2026-11-26-03:00:00"
        );
    }

    /// A year of hourly ticks through the retention, pruning after each as the controller
    /// does: what is left is exactly the tiers' worth, each the newest of its period, and
    /// nothing kept is ever deleted later by a tier that should have kept it.
    #[test]
    fn a_year_of_hourly_backups_keeps_the_grandfather_father_son_tiers() {
        let path = "bucket/etcd/prod";
        let retention = Retention {
            last: 3,
            hourly: 24,
            daily: 7,
            weekly: 4,
            monthly: 12,
        };
        let start: Timestamp = "2026-01-01T00:30:00Z".parse().unwrap();
        let mut names: Vec<String> = Vec::new();
        for hour in 0..(365 * 24_i64) {
            let at = start + Duration::from_secs(3600 * hour.unsigned_abs());
            names.push(periodic_name(path, 1000 + hour, at));
            let gone: Vec<String> = to_delete_by(parse, path, &names, retention)
                .into_iter()
                .map(String::from)
                .collect();
            names.retain(|n| !gone.contains(n));
        }
        let kept: Vec<(DateTime, i64)> = names.iter().filter_map(|n| parse(path, n)).collect();
        let newest = kept.iter().max().unwrap().0;
        assert_eq!(newest.to_string(), "2026-12-31T23:30:00");
        // The last 24 hours, one per day for the last 7 days, per week for 4, per month for
        // 12: overlapping, so fewer than their sum.
        let days: std::collections::BTreeSet<_> = kept.iter().map(|(t, _)| t.date()).collect();
        let months: std::collections::BTreeSet<_> =
            kept.iter().map(|(t, _)| (t.year(), t.month())).collect();
        assert_eq!(months.len(), 12, "{kept:?}");
        assert!(days.len() >= 7, "{days:?}");
        let last_day = kept
            .iter()
            .filter(|(t, _)| *t > newest - k8s_openapi::jiff::Span::new().hours(24))
            .count();
        assert_eq!(last_day, 24);
        assert!(kept.len() <= 3 + 24 + 7 + 4 + 12, "{}", kept.len());
        // Each month's survivor is its newest backup: the last hour of the month.
        for (t, _) in &kept {
            if t.day() == 1 && t.hour() == 0 {
                panic!("a month kept by its oldest backup: {t}");
            }
        }
        // Another's names are never touched.
        let mut with_foreign = names.clone();
        with_foreign.push("bucket/etcd/other_v1_2025-01-01-00:00:00".into());
        assert!(
            to_delete_by(parse, path, &with_foreign, retention)
                .iter()
                .all(|n| n.starts_with(path))
        );
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn names_follow_the_coreos_layout_and_parse_back() {
        let name = periodic_name("bucket/etcd/prod", 42, at("2026-01-02T15:04:05Z"));
        assert_eq!(name, "bucket/etcd/prod_v42_2026-01-02-15:04:05");
        assert_eq!(
            pre_restore_name("bucket/etcd/prod", at("2026-01-02T15:04:05Z")),
            "bucket/etcd/prod.pre-restore-2026-01-02-15:04:05"
        );
        let (time, revision) = parse("bucket/etcd/prod", &name).unwrap();
        assert_eq!(revision, 42);
        assert_eq!(time.to_string(), "2026-01-02T15:04:05");
        // Other backups' names, the one-shot object, and near misses are not ours.
        for other in [
            "bucket/etcd/prod",
            "bucket/etcd/prod-old_v1_2026-01-02-15:04:05",
            "bucket/etcd/prod_v_2026-01-02-15:04:05",
            "bucket/etcd/prod_vx1_2026-01-02-15:04:05",
            "bucket/etcd/prod_v1_2026-01-02-15:04:05.tmp",
            "bucket/etcd/prod_v1_2026-13-02-15:04:05",
            "bucket/etcd/prod.pre-restore-2026-01-02-15:04:05",
        ] {
            assert_eq!(parse("bucket/etcd/prod", other), None, "{other}");
        }
    }

    #[test]
    fn scheduled_names_carry_their_tick_and_keep_the_newest_by_it() {
        let name = scheduled_name("bucket/nightly", at("2026-01-02T03:00:00Z"));
        assert_eq!(name, "bucket/nightly_2026-01-02-03:00:00");
        assert!(parse_scheduled("bucket/nightly", &name).is_some());
        for other in [
            "bucket/nightly",
            "bucket/nightly_v3_2026-01-02-03:00:00",
            "bucket/nightly-old_2026-01-02-03:00:00",
            "bucket/nightly.pre-restore-2026-01-02-03:00:00",
        ] {
            assert_eq!(parse_scheduled("bucket/nightly", other), None, "{other}");
        }
        // Ticks a day apart sort by time, not by the string (the year first makes them agree
        // here; the point is that only this pattern is touched).
        let names: Vec<String> = [
            "p_2026-01-09-03:00:00",
            "p_2026-01-10-03:00:00",
            "p_2025-12-31-03:00:00",
            "p_v1_2026-01-11-03:00:00",
            "p",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            to_delete_by(parse_scheduled, "p", &names, Retention::newest(2)),
            ["p_2025-12-31-03:00:00"]
        );
    }

    #[test]
    fn retention_keeps_the_newest_by_time_and_revision_not_by_string_order() {
        let names: Vec<String> = [
            "p_v9_2026-01-01-00:00:09",
            "p_v10_2026-01-01-00:00:10",
            "p_v11_2026-01-01-00:00:11",
            "p_v100_2026-01-01-00:01:40",
            "p_v8_2026-01-01-00:00:08",
            "p.pre-restore-2026",
            "unrelated",
        ]
        .map(String::from)
        .into();
        let mut gone = to_delete("p", &names, 3);
        gone.sort();
        // String order would keep v9 (it sorts after v100, v10, v11) and delete v100.
        assert_eq!(
            gone,
            ["p_v8_2026-01-01-00:00:08", "p_v9_2026-01-01-00:00:09"]
        );
        assert!(to_delete("p", &names, 0).is_empty());
        assert!(to_delete("p", &names, 10).is_empty());
    }

    #[test]
    fn the_schedule_is_anchored_on_the_last_success() {
        let hour = Duration::from_secs(3600);
        let last = at("2026-01-01T10:00:00Z");
        assert_eq!(next_due(None, hour, last), Duration::ZERO);
        assert_eq!(
            next_due(Some(last), hour, at("2026-01-01T10:20:00Z")),
            Duration::from_secs(40 * 60)
        );
        // The operator was down for three intervals: one backup now, not three.
        assert_eq!(
            next_due(Some(last), hour, at("2026-01-01T13:30:00Z")),
            Duration::ZERO
        );
    }
}
