//! Reclaiming space after etcd raised NOSPACE: the history compacted, the voters defragmented
//! one at a time (followers first, the leader last, after leadership moved away), the alarm
//! disarmed. Each step is idempotent, so an operator that stops midway starts again from the
//! top on its next look.

use std::time::Duration;

use super::{Acting, Error, Outcome};
use crate::api::DefragmentationRecord;
use crate::cluster::observe::{ETCD_TIMEOUT, Observed};
use crate::cluster::plan::RECLAIM_MAX_IN_USE;
use crate::etcd::{self, Etcd};

/// How long a compaction or one member's defragmentation may take: a defragmentation
/// rewrites the whole database file (about a second per hundred MiB on a slow disk) and the
/// member serves nothing meanwhile; a physical compaction of a long history goes in batches.
const LONG_TIMEOUT: Duration = Duration::from_secs(300);

/// Compacts, defragments and disarms; [`Outcome::Retry`] when the data itself, compacted,
/// uses [`RECLAIM_MAX_IN_USE`] percent of `quota` (what the members run with) or more: nothing
/// is disarmed, the user must delete data or raise the quota. The message has the sizes.
///
/// What the data uses is read from the first voter's file once it is compacted and
/// defragmented: etcd's own "in use" figure stays at its value before a compaction until a
/// later write (which NOSPACE refuses) releases the freed pages. The compaction is asked of
/// that member, so that it returns only once that member has applied it. Learners are left
/// alone: etcd serves them neither defragmentation nor leadership.
pub(super) async fn reclaim_space(obs: &Observed, quota: i64) -> Result<Outcome, Error> {
    let voters: Vec<(String, u64)> = obs
        .plan
        .members
        .iter()
        .flatten()
        .filter(|m| m.healthy && !m.is_learner && obs.plan.pod_alive(&m.name))
        .map(|m| (m.name.clone(), m.id))
        .collect();
    let leader = obs.plan.leader;
    let (followers, leaders): (Vec<_>, Vec<_>) =
        voters.iter().partition(|(_, id)| Some(*id) != leader);
    let order: Vec<&(String, u64)> = followers.iter().chain(leaders.iter()).copied().collect();
    let Some(((first, _), rest)) = order.split_first() else {
        return Err(Error::NoEndpoint);
    };
    let endpoint = obs.pod_endpoint(first).ok_or(Error::NoEndpoint)?;
    let revision = obs.statuses.values().map(|s| s.revision).max().unwrap_or(0);
    if revision > 0
        && Etcd::connect(&endpoint, LONG_TIMEOUT)
            .await?
            .compact(revision)
            .await?
    {
        crate::crash::point("after-compact");
    }
    let (mut before, mut after) = defragment(obs, first).await?;
    let live = after;
    if live as f64 >= quota as f64 * f64::from(RECLAIM_MAX_IN_USE) / 100.0 {
        return Ok(Outcome::Retry(format!(
            "the data uses {} of the {} quota the members run with, even with its history \
             compacted (the alarm is disarmed below {RECLAIM_MAX_IN_USE}%); delete keys or \
             raise spec.maintenance.quotaBackendBytes",
            mib(live),
            mib(quota),
        )));
    }
    for (name, _) in rest {
        // Defragmenting the leader would stall every write for as long as it takes: another
        // leads meanwhile (a follower, defragmented by now).
        if leaders.first().is_some_and(|(n, _)| n == name)
            && let Some((_, to)) = followers.first()
            && let Some(endpoint) = obs.pod_endpoint(name)
        {
            Etcd::connect(&endpoint, ETCD_TIMEOUT)
                .await?
                .move_leader(*to)
                .await?;
        }
        let (b, a) = defragment(obs, name).await?;
        before += b;
        after += a;
    }
    let mut etcd = Etcd::connect(&endpoint, ETCD_TIMEOUT).await?;
    for id in &obs.plan.nospace {
        etcd.set_nospace_alarm(*id, false).await?;
    }
    Ok(Outcome::Done(Some(format!(
        "etcd raised NOSPACE (quota {}): compacted to revision {revision}, defragmented {} \
         voter(s) from {} to {}, and disarmed the alarm; writes are served again",
        mib(quota),
        voters.len(),
        mib(before),
        mib(after)
    ))))
}

/// A scheduled defragmentation of voter `name`: if it leads, leadership moves first to a
/// healthy, caught-up follower (writes never wait for the leader's file to be rewritten); its
/// time and sizes are left on the pass for the status.
pub(super) async fn defragment_member(
    pass: &Acting<'_>,
    obs: &Observed,
    name: &str,
    id: u64,
) -> Result<Outcome, Error> {
    let members = obs.plan.members.as_deref().unwrap_or_default();
    if obs.plan.leader == Some(id)
        && let Some(to) = members.iter().find(|m| {
            m.id != id && m.healthy && !m.is_learner && m.caught_up && obs.plan.pod_alive(&m.name)
        })
    {
        let endpoint = obs.pod_endpoint(name).ok_or(Error::NoEndpoint)?;
        Etcd::connect(&endpoint, ETCD_TIMEOUT)
            .await?
            .move_leader(to.id)
            .await?;
    }
    let started = std::time::Instant::now();
    let (before, after) = defragment(obs, name).await?;
    crate::crash::point("after-defragment");
    let took = started.elapsed();
    let record = DefragmentationRecord {
        member: name.to_string(),
        at: k8s_openapi::jiff::Timestamp::now().to_string(),
        milliseconds: i64::try_from(took.as_millis()).unwrap_or(i64::MAX),
        size_before: before,
        size_after: after,
    };
    pass.defragmented(record);
    Ok(Outcome::Done(Some(format!(
        "defragmented member {name} in {:.1} s: {} → {} ({} reclaimed)",
        took.as_secs_f64(),
        mib(before),
        mib(after),
        mib(before - after)
    ))))
}

/// Defragments member `name` over a connection of its own; returns its database size before
/// and after.
async fn defragment(obs: &Observed, name: &str) -> Result<(i64, i64), Error> {
    let endpoint = obs.pod_endpoint(name).ok_or(Error::NoEndpoint)?;
    let before = etcd::status(&endpoint, ETCD_TIMEOUT).await?.db_size;
    let mut own = Etcd::connect(&endpoint, LONG_TIMEOUT).await?;
    own.defragment(&endpoint.url).await?;
    let after = etcd::status(&endpoint, ETCD_TIMEOUT).await?.db_size;
    Ok((before, after))
}

fn mib(bytes: i64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
