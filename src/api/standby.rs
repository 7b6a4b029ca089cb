//! `spec.standby` and `status.standby`: a cluster that follows another cluster's continuous
//! archive (issue 53), its promotion, and the demotion of a primary for a planned switchover.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::RecoveryStore;

/// The annotation by which a user demotes a primary for a switchover: etcd then refuses its
/// clients' writes (the declared roles keep read permissions only), the operator waits until
/// the continuous archive holds the last revision and records it in the archive's store
/// (`<path>_handover`), where the standby that promotes next finds it. Its value is free text;
/// removing it makes the cluster writable again.
pub const DEMOTE_ANNOTATION: &str = "etcd.database.coreos.com/demote";

/// The key in a standby's etcd that holds how far it has replayed its source (JSON:
/// `{"restore": <the EtcdRestore it was bootstrapped by>, "revision": <the source's>}`),
/// changed in the same transaction as the changes it counts, so that a change is never
/// applied twice or skipped. Promotion marks it `"promoted": true` (and `"switchover"`): a
/// replay started later replays nothing over clients' writes.
pub const MARKER_KEY: &str = "etcd-operator/standby";

/// A standby: a read-only copy of another cluster, fed from its continuous archive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Standby {
    /// The source's continuous archive: a storage section as `spec.recovery.backups`, whose
    /// path is that of the source's periodic EtcdBackup with `backupPolicy.continuous` (its
    /// `path`, as in its spec). The cluster starts from the newest full snapshot there and
    /// the changes archived after it, then replays every change archived later, in order.
    /// Removing `spec.standby` promotes the cluster.
    pub source: RecoveryStore,
}

/// Where a cluster stands as a standby or a demoted primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StandbyPhase {
    /// Restored from the source's newest snapshot and archived changes (an EtcdRestore).
    Bootstrapping,
    /// Following the source's archive; clients may read, etcd refuses their writes.
    Standby,
    /// `spec.standby` removed: replaying what remains of the archive (up to the revision a
    /// demoted source recorded, else all there is), then accepting writes.
    Promoting,
    /// Promoted: clients may write again.
    Promoted,
    /// A primary asked to step down (annotation): clients' writes refused; waiting for the
    /// continuous archive to hold the last revision.
    Demoting,
    /// The archive holds the last revision, recorded for the standby that promotes next.
    Demoted,
}

/// `status.standby`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StandbyStatus {
    /// Where the cluster stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<StandbyPhase>,
    /// The archive followed (kept so that a promotion can finish once `spec.standby` is gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RecoveryStore>,
    /// The EtcdRestore the standby was bootstrapped by.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub restore: String,
    /// The source's revision the data holds: every archived change up to it is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_revision: Option<i64>,
    /// The newest revision the source's archive holds, when last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_revision: Option<i64>,
    /// The source's newest revision, as its archiver last reported it next to the archive:
    /// what the source has acknowledged, whether or not its archive holds it yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<i64>,
    /// How long the oldest change the source made and this cluster does not serve has
    /// waited, in milliseconds: since the archive received it, or, for a change the archive
    /// does not hold yet, since the archiver knew of it; while nothing vouches for the source
    /// (`stalled: SourceSilent`), since the source's archiver last reported. 0: every change
    /// the source is known to have made is served here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_milliseconds: Option<i64>,
    /// When `lagMilliseconds` was measured (RFC 3339): the standby's look at its source's
    /// archive that found it. Every change acknowledged by the source more than
    /// `lagMilliseconds` and one flush interval before then was served here by the end of
    /// that look. It moves only when what it measures changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_measured_at: Option<String>,
    /// Why the standby does not follow its source, while it does not: `ArchiveGap` (the
    /// archive lacks revisions right after what is applied; replay stops there),
    /// `SourceSilent` (no archiver has reported for the source for too long),
    /// `ReplayFailing` (applying or reading fails; `message` says why). Empty while it
    /// follows. The `Following` condition says the same.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stalled: String,
    /// The source's revision the cluster was promoted at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_revision: Option<i64>,
    /// When it was promoted (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_at: Option<String>,
    /// How the promotion ended: `Switchover` (at the revision the demoted source recorded:
    /// nothing lost) or `Failover` (at the end of the archive: changes the source made after
    /// it, if any, are not here).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub promotion: String,
    /// For a demoted primary: its last revision, which its archive holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_revision: Option<i64>,
    /// What is being waited for, or what went wrong.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl StandbyStatus {
    /// Whether clients' writes must be refused: while the cluster is, or is becoming, a copy,
    /// and until a promotion has replayed the last change.
    pub fn read_only(&self) -> bool {
        matches!(
            self.phase,
            Some(
                StandbyPhase::Bootstrapping
                    | StandbyPhase::Standby
                    | StandbyPhase::Promoting
                    | StandbyPhase::Demoting
                    | StandbyPhase::Demoted
            )
        )
    }
}

/// What a demoted primary records in its archive's store for the standby that promotes next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// The primary's last revision: its archive holds every change up to it.
    pub revision: i64,
    /// etcd's cluster ID of the primary, in hex.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// When it was recorded (RFC 3339).
    pub at: String,
}
