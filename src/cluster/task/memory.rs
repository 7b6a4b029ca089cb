//! What a task remembers between its passes, and what of it changes what is planned.

use std::time::{Duration, Instant};

use crate::cluster::observe::HealthMemory;
use crate::cluster::plan::Action;
use crate::cluster::upkeep;
use crate::kube::cache::Expectations;

/// What a task remembers between its passes, in two parts kept apart so that it is plain
/// which can change a decision. None of it is truth of its own: after a restart it is found
/// again (or the task errs on the side of waiting).
#[derive(Default)]
pub(super) struct Memory {
    /// When to look again and when to write; never what is planned or reported.
    pub(super) pace: Pace,
    /// What earlier passes found that this pass's observation, plan or status depends on.
    pub(super) carried: Carried,
}

/// What only paces a task.
#[derive(Default)]
pub(super) struct Pace {
    /// When the status was last written in full (fast-changing figures included).
    pub(super) refreshed: Option<Instant>,
    /// Since when the members have served while clients of the Service were not reached.
    pub(super) unserved_since: Option<Instant>,
    /// The refusal met by the last pass: what, how many passes in a row met it, since when.
    pub(super) refused: Option<(String, u32, Instant)>,
}

/// What earlier passes found that changes what a pass observes, plans or reports.
#[derive(Default)]
pub(super) struct Carried {
    /// Since when members have been unhealthy: the planner replaces one only after a while.
    pub(super) health: HealthMemory,
    /// Pods and claims this task created or deleted that the caches do not show yet: until
    /// they do, the pass lists them from the API server.
    pub(super) expect: Expectations,
    /// What the last reclaim found when the data did not fit: the revision and the quota it
    /// looked at, and why (for the planner and the status, until NOSPACE is gone).
    pub(super) exhausted: Option<(i64, i64, String)>,
    /// The newest revision a member reported: a recovery from lost quorum raises the restored
    /// revision past it (and reports the difference as what was lost).
    pub(super) revision_seen: Option<i64>,
    /// The defragmentation schedule armed, and when.
    pub(super) armed: upkeep::Armed,
    /// The record of the recovery this pass starts, written before its hand-off.
    pub(super) recovering: Option<crate::api::RecoveryRecord>,
    /// The defragmentation asked for by annotation, as this pass saw it.
    pub(super) defrag_request: Option<crate::api::DefragRequest>,
    /// What the access-control stage last applied.
    pub(super) auth: crate::cluster::auth::Memory,
    /// root's password and the token obtained with it, kept while the password stays: one
    /// token serves every connection of every pass until etcd forgets it.
    pub(super) root: Option<std::sync::Arc<crate::etcd::Root>>,
    /// When a pass last found the cluster Available (see [`crate::cluster::status::AVAILABLE_GRACE`]).
    pub(super) available_at: Option<std::time::Instant>,
    /// The final snapshot of the hibernation under way, once found: the status records it
    /// after the pods are gone, when the cluster object seen may not show it yet.
    pub(super) final_snapshot: Option<crate::cluster::plan::FinalSnapshot>,
    /// The API server's last refusal to expand a claim to the spec's storage request.
    pub(super) expansion_refused: crate::cluster::volumes::Refusal,
    /// A standby's replayer.
    pub(super) standby: crate::cluster::standby::Memory,
}

impl Carried {
    /// `root` as read this pass, the one kept when its password is the same.
    pub(super) fn keep_root(
        &mut self,
        root: Option<std::sync::Arc<crate::etcd::Root>>,
    ) -> Option<std::sync::Arc<crate::etcd::Root>> {
        match (&self.root, root) {
            (Some(kept), Some(read)) if *kept == read => Some(kept.clone()),
            (_, read) => {
                self.root = read.clone();
                read
            }
        }
    }
}

impl Pace {
    /// Counts one more pass refused with `why` for `action` at `now`: how many passes in a row
    /// (1 for a new refusal), and for how long.
    pub(super) fn refused_again(
        &mut self,
        action: &Action,
        why: &str,
        now: Instant,
    ) -> (u32, Duration) {
        let key = format!("{action:?}: {why}");
        match &mut self.refused {
            Some((k, n, since)) if *k == key => {
                *n = n.saturating_add(1);
                (*n, now.saturating_duration_since(*since))
            }
            _ => {
                self.refused = Some((key, 1, now));
                (1, Duration::ZERO)
            }
        }
    }
}
