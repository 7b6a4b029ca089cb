//! Reclaiming space after etcd raised NOSPACE: the history compacted, the members defragmented
//! one at a time (followers first, the leader last, after leadership moved away), the alarm
//! disarmed. Each step is idempotent, so an operator that stops midway starts again from the
//! top on its next look.

use std::time::Duration;

use super::{Error, Outcome, connect};
use crate::cluster::observe::{ETCD_TIMEOUT, Observed};
use crate::cluster::plan::RECLAIM_MAX_IN_USE;
use crate::etcd::{self, Etcd};

/// How long one member's defragmentation may take: it rewrites the whole database file (etcd
/// needs about a second per hundred MiB on a slow disk), and the member serves nothing
/// meanwhile.
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(300);

/// Compacts, defragments and disarms; [`Outcome::Retry`] when the data itself, compacted,
/// uses `max_in_use` percent of `quota` or more (nothing is disarmed: the user must delete
/// data or raise the quota), with the sizes in the message.
///
/// What the data uses is read from a defragmented member's file: etcd's own "in use" figure
/// stays where it was right after a compaction (the freed pages are only released by a later
/// write, and NOSPACE refuses writes), so the first member, a follower, is defragmented
/// before anything is decided. When the compaction finds nothing new to compact and a
/// member's file is already tight (defragmented since), that file tells: a cluster whose data
/// does not fit is not defragmented again on every look while the user deletes nothing.
pub(super) async fn reclaim_space(
    obs: &Observed,
    quota: i64,
    max_in_use: u8,
) -> Result<Outcome, Error> {
    let mut etcd = connect(obs).await?;
    // The newest revision any member reported.
    let revision = obs.statuses.values().map(|s| s.revision).max().unwrap_or(0);
    let compacted = revision > 0 && etcd.compact(revision).await?;
    if compacted {
        crate::crash::point("after-compact");
    }
    let healthy: Vec<(String, u64)> = obs
        .plan
        .members
        .iter()
        .flatten()
        .filter(|m| m.healthy && obs.plan.pod_alive(&m.name))
        .map(|m| (m.name.clone(), m.id))
        .collect();
    let leader = obs.plan.leader;
    let (followers, leaders): (Vec<_>, Vec<_>) =
        healthy.iter().partition(|(_, id)| Some(*id) != leader);
    let mut order: Vec<&(String, u64)> = followers.iter().chain(leaders.iter()).copied().collect();
    let too_much = |bytes: i64| bytes as f64 >= quota as f64 * f64::from(max_in_use) / 100.0;
    let (mut before, mut after) = (0, 0);
    // A member whose file is (nearly) all in use was defragmented since the last compaction.
    let tight = obs
        .statuses
        .values()
        .filter(|s| healthy.iter().any(|(_, id)| *id == s.member_id))
        .filter(|s| (s.db_size - s.db_size_in_use) * 20 <= s.db_size)
        .map(|s| s.db_size)
        .min();
    let live = match tight.filter(|_| !compacted) {
        Some(size) => size,
        None => {
            let Some((first, _)) = order.first() else {
                return Err(Error::NoEndpoint);
            };
            (before, after) = defragment(obs, first).await?;
            order.remove(0);
            after
        }
    };
    if too_much(live) {
        return Ok(Outcome::Retry(exceeded(live, quota, max_in_use)));
    }
    for (name, _) in order {
        // Defragmenting the leader would stall every write for as long as it takes: another
        // leads meanwhile (a follower, defragmented by now).
        if Some(name) == leaders.first().map(|(n, _)| n)
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
    for id in &obs.plan.nospace {
        etcd.set_nospace_alarm(*id, false).await?;
    }
    Ok(Outcome::Done(Some(format!(
        "etcd raised NOSPACE (quota {}): compacted to revision {revision}, defragmented {} \
         member(s) from {} to {}, and disarmed the alarm; writes are served again",
        mib(quota),
        healthy.len(),
        mib(before),
        mib(after)
    ))))
}

fn exceeded(live: i64, quota: i64, max_in_use: u8) -> String {
    format!(
        "the data uses {} of the {} quota even with its history compacted (the alarm is \
         disarmed below {max_in_use}%{}); delete keys or raise \
         spec.maintenance.quotaBackendBytes",
        mib(live),
        mib(quota),
        if max_in_use < RECLAIM_MAX_IN_USE {
            ", as NOSPACE came back soon after space was last reclaimed"
        } else {
            ""
        }
    )
}
/// Defragments member `name` over a connection of its own; returns its database size before
/// and after.
async fn defragment(obs: &Observed, name: &str) -> Result<(i64, i64), Error> {
    let endpoint = obs.pod_endpoint(name).ok_or(Error::NoEndpoint)?;
    let before = etcd::status(&endpoint, ETCD_TIMEOUT).await?.db_size;
    let mut own = Etcd::connect(&endpoint, DEFRAG_TIMEOUT).await?;
    own.defragment(&endpoint.url).await?;
    let after = etcd::status(&endpoint, ETCD_TIMEOUT).await?.db_size;
    Ok((before, after))
}

fn mib(bytes: i64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
