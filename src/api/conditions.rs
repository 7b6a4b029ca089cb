//! The conditions the operator writes: their types, the reasons code reads back, and the one
//! rule for a condition's transition time, shared by the three controllers.

use k8s_openapi::jiff::Timestamp;

use super::common::Condition;

/// The type of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// EtcdCluster: a quorum of healthy voters serves clients through the client Service.
    Available,
    /// EtcdCluster: the members are being changed (scaling, rolling, restoring...).
    Progressing,
    /// EtcdCluster and EtcdBackup: something needs a human (a field, a Secret, a stall).
    Degraded,
    /// EtcdCluster: a recovery from lost quorum is under way.
    Recovering,
    /// EtcdRestore: the restore is over.
    Completed,
    /// EtcdCluster with `spec.auth`: etcd's authentication, roles and users are as declared.
    AuthApplied,
    /// EtcdCluster, only where the operator reads no Nodes (`False`): a member on a lost node
    /// waits for the node controller's eviction.
    NodeLossHandled,
    /// EtcdCluster with `spec.standby`, while it follows or promotes: the standby applies its
    /// source's changes as the source makes them (`False`: `status.standby.stalled` says
    /// why it does not, and `lagMilliseconds` keeps growing).
    Following,
}

impl ConditionType {
    /// The type as it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Available => "Available",
            ConditionType::Progressing => "Progressing",
            ConditionType::Degraded => "Degraded",
            ConditionType::Recovering => "Recovering",
            ConditionType::Completed => "Completed",
            ConditionType::AuthApplied => "AuthApplied",
            ConditionType::NodeLossHandled => "NodeLossHandled",
            ConditionType::Following => "Following",
        }
    }
}

/// Why an EtcdCluster is Available or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvailableReason {
    /// A quorum of voters is healthy and serves clients through the Service.
    QuorumHealthy,
    /// Fewer than a quorum of voters are healthy.
    QuorumUnavailable,
    /// etcd refuses writes: its NOSPACE alarm is raised.
    NoSpace,
    /// The Service's endpoints do not list the serving members yet.
    EndpointsNotReady,
    /// The Service's endpoints list members that do not serve.
    UnhealthyEndpoints,
    /// A read through the Service failed (or none was made).
    ServiceUnreachable,
    /// `spec.hibernation.enabled`: no member runs, by request.
    Hibernated,
}

impl AvailableReason {
    const ALL: [AvailableReason; 7] = [
        AvailableReason::QuorumHealthy,
        AvailableReason::QuorumUnavailable,
        AvailableReason::NoSpace,
        AvailableReason::EndpointsNotReady,
        AvailableReason::UnhealthyEndpoints,
        AvailableReason::ServiceUnreachable,
        AvailableReason::Hibernated,
    ];

    /// The reason as it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            AvailableReason::QuorumHealthy => "QuorumHealthy",
            AvailableReason::QuorumUnavailable => "QuorumUnavailable",
            AvailableReason::NoSpace => "NoSpace",
            AvailableReason::EndpointsNotReady => "EndpointsNotReady",
            AvailableReason::UnhealthyEndpoints => "UnhealthyEndpoints",
            AvailableReason::ServiceUnreachable => "ServiceUnreachable",
            AvailableReason::Hibernated => "Hibernated",
        }
    }

    /// The reason of a written Available condition, if it is one of these.
    pub fn of(condition: &Condition) -> Option<AvailableReason> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == condition.reason)
    }

    /// The members serve, but clients of the Service are not reached yet (no event announces
    /// when a node's proxy catches up).
    pub fn members_serve_unreached(self) -> bool {
        match self {
            AvailableReason::EndpointsNotReady
            | AvailableReason::UnhealthyEndpoints
            | AvailableReason::ServiceUnreachable => true,
            AvailableReason::QuorumHealthy
            | AvailableReason::QuorumUnavailable
            | AvailableReason::NoSpace
            | AvailableReason::Hibernated => false,
        }
    }
}

/// Why access control is applied or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthReason {
    /// etcd holds what the spec declares.
    Applied,
    /// Some entries of the spec cannot be applied (the message names their fields); they are
    /// left as they are in etcd, and the rest is applied.
    InvalidEntries,
    /// Nothing could be applied this pass (no member to apply it through, etcd refused).
    NotApplied,
}

impl AuthReason {
    /// The reason as it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthReason::Applied => "Applied",
            AuthReason::InvalidEntries => "InvalidEntries",
            AuthReason::NotApplied => "NotApplied",
        }
    }
}

/// Why an EtcdCluster is Progressing (or `Stable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressingReason {
    /// Members are being added or removed to reach `spec.size`.
    Scaling,
    /// A member is moved off a node that holds more voters than the cluster can lose.
    Spreading,
    /// A member is being replaced, restarted or its data reclaimed.
    Recovering,
    /// A restore replaces the members.
    Restoring,
    /// Members are rolled to a new etcd version.
    Upgrading,
    /// Members are rolled to a new pod template.
    RollingUpdate,
    /// The automatic CA is being rotated.
    CertificatesRotating,
    /// The cluster is being put to sleep (`spec.hibernation`).
    Hibernating,
    /// The members' volume claims are being expanded to the spec's storage request.
    ExpandingVolumes,
    /// Nothing is changing.
    Stable,
}

impl ProgressingReason {
    /// The reason as it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgressingReason::Scaling => "Scaling",
            ProgressingReason::Spreading => "Spreading",
            ProgressingReason::Recovering => "Recovering",
            ProgressingReason::Restoring => "Restoring",
            ProgressingReason::Upgrading => "Upgrading",
            ProgressingReason::RollingUpdate => "RollingUpdate",
            ProgressingReason::CertificatesRotating => "CertificatesRotating",
            ProgressingReason::Hibernating => "Hibernating",
            ProgressingReason::ExpandingVolumes => "ExpandingVolumes",
            ProgressingReason::Stable => "Stable",
        }
    }
}

/// Why an EtcdCluster is Degraded (or not), as its status stage decides. A spec that cannot
/// be acted on is Degraded too, with the reason its check names (`SecretNotFound`,
/// `InvalidRestore`...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DegradedReason {
    /// Fewer than a quorum of voters are healthy.
    QuorumLost,
    /// A roll reached a member that does not come up with the new template.
    RollStalled,
    /// etcd raised NOSPACE.
    NoSpace,
    /// Some member is not ready.
    MembersUnhealthy,
    /// Every member is healthy.
    AllMembersHealthy,
    /// No member runs, by request (`spec.hibernation`): not degraded.
    Hibernated,
    /// The version asked for is not a step etcd allows from what the members run.
    UpgradeBlocked,
    /// A field etcd's schema check could not judge is wrong (a defragmentation schedule).
    InvalidSpec,
    /// The data itself, compacted, leaves too little of the quota.
    QuotaExceeded,
    /// The spec asks for more storage than the members' claims have, and the API server
    /// refused to expand them (the StorageClass does not allow it): nothing is changed
    /// unless `spec.pod.onResize` is `Replace`.
    VolumeExpansionRefused,
}

impl DegradedReason {
    /// The reason as it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            DegradedReason::QuorumLost => "QuorumLost",
            DegradedReason::RollStalled => "RollStalled",
            DegradedReason::NoSpace => "NoSpace",
            DegradedReason::MembersUnhealthy => "MembersUnhealthy",
            DegradedReason::AllMembersHealthy => "AllMembersHealthy",
            DegradedReason::Hibernated => "Hibernated",
            DegradedReason::UpgradeBlocked => "UpgradeBlocked",
            DegradedReason::InvalidSpec => "InvalidSpec",
            DegradedReason::QuotaExceeded => "QuotaExceeded",
            DegradedReason::VolumeExpansionRefused => "VolumeExpansionRefused",
        }
    }
}

/// Finds a condition by type.
pub fn find_condition(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

impl Condition {
    /// The condition of `type_` as computed now from `generation`. Its transition time is the
    /// previous one's (in `previous`) while the status stays the same, now when it changes.
    pub fn computed(
        previous: &[Condition],
        type_: ConditionType,
        generation: Option<i64>,
        status: bool,
        reason: &str,
        message: String,
    ) -> Condition {
        let status = if status { "True" } else { "False" }.to_string();
        let last_transition_time = find_condition(previous, type_)
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .or_else(|| Some(Timestamp::now().to_string()));
        Condition {
            type_: type_.as_str().into(),
            status,
            observed_generation: generation,
            last_transition_time,
            reason: reason.into(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let before = Condition {
            type_: "Degraded".into(),
            status: "False".into(),
            last_transition_time: Some("2026-01-01T00:00:00Z".into()),
            ..Condition::default()
        };
        let previous = [before];
        let same = Condition::computed(
            &previous,
            ConditionType::Degraded,
            Some(2),
            false,
            "AsExpected",
            String::new(),
        );
        assert_eq!(
            same.last_transition_time.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(same.observed_generation, Some(2));
        let changed = Condition::computed(
            &previous,
            ConditionType::Degraded,
            Some(2),
            true,
            "InvalidSpec",
            "spec.size".into(),
        );
        assert_ne!(
            changed.last_transition_time.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(
            (changed.status.as_str(), changed.reason.as_str()),
            ("True", "InvalidSpec")
        );
        // Another type's time is never borrowed.
        let other = Condition::computed(
            &previous,
            ConditionType::Available,
            None,
            false,
            "QuorumUnavailable",
            String::new(),
        );
        assert_ne!(
            other.last_transition_time.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
    }

    #[test]
    fn available_reasons_read_back_as_written() {
        for r in AvailableReason::ALL {
            let c = Condition {
                reason: r.as_str().into(),
                ..Condition::default()
            };
            assert_eq!(AvailableReason::of(&c), Some(r));
        }
        assert!(AvailableReason::ServiceUnreachable.members_serve_unreached());
        assert!(!AvailableReason::QuorumUnavailable.members_serve_unreached());
    }
}
