//! Reclaiming space after etcd raised NOSPACE: the history compacted, the members defragmented
//! one at a time (followers first, the leader last, after leadership moved away), the alarm
//! disarmed. Each step is idempotent, so an operator that stops midway starts again from the
//! top on its next look.

use std::time::Duration;

use super::{Error, Outcome, connect};
use crate::cluster::observe::{ETCD_TIMEOUT, Observed};
use crate::etcd::{self, Etcd};

/// How long one member's defragmentation may take: it rewrites the whole database file (etcd
/// needs about a second per hundred MiB on a slow disk), and the member serves nothing
/// meanwhile.
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(300);

/// The share of the quota the data may still use once compacted for the alarm to be disarmed:
/// above it the next writes would raise it again at once, so the cluster is reported as
/// holding more than its quota allows instead.
const DISARM_BELOW: f64 = 0.9;

/// Compacts, defragments and disarms; [`Outcome::Retry`] when the data itself, compacted,
/// leaves too little of `quota` (nothing is disarmed: the user must delete data or raise the
/// quota), with the sizes in the message.
pub(super) async fn reclaim_space(obs: &Observed, quota: i64) -> Result<Outcome, Error> {
    let mut etcd = connect(obs).await?;
    // The newest revision any member reported; a compaction at or below what is already
    // compacted is no error.
    let revision = obs.statuses.values().map(|s| s.revision).max().unwrap_or(0);
    if revision > 0 {
        etcd.compact(revision).await?;
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
    // What the data needs once compacted: the most any member still uses.
    let mut in_use = 0;
    for (name, _) in &healthy {
        if let Some(endpoint) = obs.pod_endpoint(name) {
            in_use = in_use.max(etcd::status(&endpoint, ETCD_TIMEOUT).await?.db_size_in_use);
        }
    }
    if in_use as f64 >= quota as f64 * DISARM_BELOW {
        return Ok(Outcome::Retry(format!(
            "the data uses {} of the {} quota even with its history compacted; delete keys or \
             raise spec.maintenance.quotaBackendBytes",
            mib(in_use),
            mib(quota)
        )));
    }
    let leader = obs.plan.leader;
    let (followers, leaders): (Vec<_>, Vec<_>) =
        healthy.iter().partition(|(_, id)| Some(*id) != leader);
    let mut before = 0;
    let mut after = 0;
    for (name, _) in &followers {
        let (b, a) = defragment(obs, name).await?;
        before += b;
        after += a;
    }
    for (name, _) in &leaders {
        // Defragmenting the leader would stall every write for as long as it takes: another
        // leads meanwhile (any follower, each is defragmented by now).
        if let Some((_, to)) = followers.first()
            && let Some(endpoint) = obs.pod_endpoint(name)
        {
            let mut own = Etcd::connect(&endpoint, ETCD_TIMEOUT).await?;
            own.move_leader(*to).await?;
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
