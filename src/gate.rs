//! `etcd-operator await-membership`: the init container of a member pod created ahead of its
//! member (see [`crate::cluster::resources::Gate`]). It returns once etcd's member list has the
//! new member's peer URL, so etcd starts with `--initial-cluster-state=existing` only when the
//! cluster expects it. It reaches the members by pod IP and never looks up a cluster name.

use std::time::Duration;

use tracing::info;

use crate::etcd::Etcd;

/// How long one member-list request may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Whether some member at `endpoints` lists a member with `peer_url`; `None` when none answered.
pub async fn is_member(endpoints: &[String], peer_url: &str) -> Option<bool> {
    for ep in endpoints {
        if let Ok(mut etcd) = Etcd::connect(std::slice::from_ref(ep), TIMEOUT).await
            && let Ok(members) = etcd.members().await
        {
            return Some(
                members
                    .iter()
                    .any(|m| m.peer_urls.iter().any(|u| u == peer_url)),
            );
        }
    }
    None
}

/// Polls every `poll` until the member with `peer_url` is listed. It has no deadline of its
/// own: the operator deletes a pod whose member is not added in time.
pub async fn await_membership(endpoints: &[String], peer_url: &str, poll: Duration) {
    let started = tokio::time::Instant::now();
    let mut next_report = started;
    loop {
        let answer = is_member(endpoints, peer_url).await;
        if answer == Some(true) {
            info!(peer_url, waited = ?started.elapsed(), "the member is added; etcd may start");
            return;
        }
        if tokio::time::Instant::now() >= next_report {
            let why = match answer {
                Some(_) => "not in the member list yet",
                None => "no member answers",
            };
            info!(
                peer_url,
                ?endpoints,
                "waiting for the member to be added: {why}"
            );
            next_report += Duration::from_secs(10);
        }
        tokio::time::sleep(poll).await;
    }
}
