//! Volume growth: a larger storage request in `spec.pod.persistentVolumeClaimSpec` reaches the
//! claims members already have. Each claim is expanded in place, one at a time, the next only
//! once the last one's file system has grown; where the API server refuses (the StorageClass
//! does not allow expansion), nothing is expanded and the status says so, unless
//! `onResize: Replace` moves those members to new claims, which the roll does
//! ([`Volumes::moving`]: their pods count as outdated and cannot restart in place).

use std::collections::{BTreeMap, BTreeSet};

use super::Action;

/// What the observation found of the members' claims against the spec's storage request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volumes {
    /// Claims, by member name, that ask for less storage than the spec.
    pub small: BTreeSet<String>,
    /// Claims whose expansion is under way (asked for more than they hold yet), with the
    /// resize state the API server reports (`ControllerResizeInProgress`,
    /// `NodeResizePending`...).
    pub expanding: BTreeMap<String, String>,
    /// Why expanding to the spec's request was refused (the StorageClass does not allow it,
    /// or the driver called it infeasible), naming the claim: as long as it holds, nothing
    /// is expanded.
    pub refused: Option<String>,
    /// With `onResize: Replace` and a refusal: the small claims' members, which move to new
    /// claims of the spec's size by the roll.
    pub moving: BTreeSet<String>,
}

impl Volumes {
    /// The growth step: wait while a claim grows, else expand the next small one; nothing when
    /// expansion was refused (the status says so, or the roll moves the members).
    pub(super) fn next(&self, alive: impl Fn(&str) -> bool) -> Option<Action> {
        if let Some((name, state)) = self.expanding.iter().next() {
            return Some(Action::Wait {
                reason: format!("the volume claim of {name} is being expanded ({state})"),
            });
        }
        if self.refused.is_some() {
            return None;
        }
        // Members whose pod runs first: a claim mounted by a running pod grows online, and
        // a member down for another reason is not waited on.
        let next = (self.small.iter().find(|n| alive(n))).or_else(|| self.small.first())?;
        Some(Action::ExpandClaim { name: next.clone() })
    }

    /// Whether `name` must move to a new claim: its pod counts as outdated.
    pub fn must_move(&self, name: &str) -> bool {
        self.moving.contains(name)
    }
}
