//! `EtcdCluster`: an etcd cluster of `spec.size` members at `spec.version`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, PodSecurityContext, ResourceRequirements,
    Toleration, TopologySpreadConstraint,
};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, RecoveryStore};
use super::validation;

/// Image repository used when `spec.repository` is empty (the coreos default).
pub const DEFAULT_REPOSITORY: &str = "quay.io/coreos/etcd";
/// etcd release used when `spec.version` is empty: the newest release this operator supports.
pub const DEFAULT_VERSION: &str = "3.6.16";
/// Smallest and largest cluster the API accepts. Seven voters tolerate three failures; more only
/// slows every write down.
pub const MIN_SIZE: i32 = 1;
/// See [`MIN_SIZE`].
pub const MAX_SIZE: i32 = 7;

/// Desired state of an etcd cluster. Field names are those of the coreos etcd-operator
/// (etcd.database.coreos.com/v1beta2), so manifests written for it keep working.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcd",
    namespaced,
    status = "EtcdClusterStatus",
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".spec.size",
        description = "Desired number of members"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyMembers",
        description = "Members that are healthy voters"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.currentVersion",
        description = "etcd version the members run"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.readyMembers",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.TLS) && has(self.TLS.auto)) == (has(oldSelf.TLS) && has(oldSelf.TLS.auto)) && (has(self.TLS) && has(self.TLS.certManager)) == (has(oldSelf.TLS) && has(oldSelf.TLS.certManager)) && (has(self.TLS) && has(self.TLS.static) && has(self.TLS.static.member) && has(self.TLS.static.member.peerSecret) && self.TLS.static.member.peerSecret != '') == (has(oldSelf.TLS) && has(oldSelf.TLS.static) && has(oldSelf.TLS.static.member) && has(oldSelf.TLS.static.member.peerSecret) && oldSelf.TLS.static.member.peerSecret != '') && (has(self.TLS) && has(self.TLS.static) && has(self.TLS.static.member) && has(self.TLS.static.member.serverSecret) && self.TLS.static.member.serverSecret != '') == (has(oldSelf.TLS) && has(oldSelf.TLS.static) && has(oldSelf.TLS.static.member) && has(oldSelf.TLS.static.member.serverSecret) && oldSelf.TLS.static.member.serverSecret != '')",
    "message": "spec.TLS cannot be turned on or off, or switched between static, auto and certManager, on an existing cluster: members on either side could not talk to each other. Create a new cluster with the TLS you want and restore a backup into it"
}, {
    "rule": "!(has(self.tuning) && has(self.tuning.logFormat)) || !has(self.version) || !self.version.matches('^v?3[.][45][.]')",
    "message": "spec.tuning.logFormat needs etcd 3.6 or later: 3.4 and 3.5 have no --log-format"
}, {
    "rule": "!has(self.hibernation) || !self.hibernation.enabled || has(self.hibernation.store) || (has(self.pod) && has(self.pod.persistentVolumeClaimSpec))",
    "message": "spec.hibernation: a cluster without spec.pod.persistentVolumeClaimSpec keeps its data only in its pods; hibernating it needs spec.hibernation.store for the final snapshot, or its data would be lost"
}, {
    "rule": "!has(self.standby) || (has(self.auth) && self.auth.enabled)",
    "message": "spec.standby needs spec.auth.enabled: etcd itself refuses clients' writes on a standby, by giving every role read permissions only"
}, {
    "rule": "!has(self.standby) || !has(oldSelf.standby) || self.standby == oldSelf.standby",
    "message": "spec.standby.source cannot be changed on a standby: remove spec.standby to promote it, then set it again to follow another cluster"
}, {
    "rule": "!has(self.bootstrap) || has(oldSelf.bootstrap)",
    "message": "spec.bootstrap is given when the cluster is created: this cluster already has its data"
}]))]
pub struct EtcdClusterSpec {
    /// Number of etcd members, 1 to 7. The operator adds or removes one member at a time and
    /// never takes an action that would cost quorum. Odd sizes tolerate the same number of
    /// failures as the next even size with fewer members to write to.
    #[schemars(range(min = 1, max = 7))]
    pub size: i32,

    /// Container image repository of etcd; the image is `<repository>:v<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        extend("default" = DEFAULT_REPOSITORY),
        length(min = 1, max = 255),
        regex(pattern = validation::REPOSITORY_PATTERN)
    )]
    pub repository: Option<String>,

    /// etcd version, a semantic version such as `3.6.16` (a leading `v` is accepted). At least
    /// 3.4: members join as learners, which etcd 3.4 introduced. On update it may move up one
    /// minor version at a time and never down; the operator then replaces members one by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = DEFAULT_VERSION), transform = validation::version_rules)]
    pub version: Option<String>,

    /// Stop all changes to this cluster: no member is added, removed, replaced or upgraded until
    /// this is false again. Status keeps being reported, with `status.controlPaused: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    /// Policy for the member pods: labels, scheduling, resources, environment, storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Box<PodPolicy>>,

    /// TLS for peer and client traffic: from Secrets the user provides (`static`), from a CA
    /// the operator makes for the cluster (`auto`), or from cert-manager (`certManager`). Set
    /// when the cluster is created: turning TLS on or off, or switching between them, would
    /// leave members unable to talk to each other, so it is refused.
    #[serde(rename = "TLS", default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Box<TlsPolicy>>,

    /// Upkeep of the members' databases (an extension of this operator: the coreos operator
    /// has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Box<Maintenance>>,

    /// What the operator does when a majority of the members is lost for good (an extension
    /// of this operator: the coreos operator has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Box<Recovery>>,

    /// Who may reach the members (an extension of this operator). The operator gives each
    /// cluster a NetworkPolicy: the peer port only from its members, the metrics port from the
    /// monitoring namespaces its administrator named (else from anyone), the client port from
    /// the members, the operator and `clients` (else from anyone, as without a policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<Box<ClusterNetworkPolicy>>,

    /// etcd's own access control: authentication, and the roles and users the operator keeps
    /// (an extension of this operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<super::auth::Auth>,

    /// Where the data comes from when the cluster is created (an extension of this operator):
    /// `existing` joins an etcd that runs elsewhere. Given only at creation; it may be removed
    /// once `status.migration.phase` is `Complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<super::bootstrap::Bootstrap>,

    /// etcd's own settings (an extension of this operator): heartbeat, election timeout,
    /// snapshot count, request and transaction limits, gRPC keepalive, logging, the initial
    /// corruption check, and other flags by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<Box<super::settings::Tuning>>,

    /// How the client Service `<name>-client` is exposed (an extension of this operator):
    /// its type (`ClusterIP`, `NodePort`, `LoadBalancer`), annotations, labels, source
    /// ranges and traffic distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_service: Option<Box<super::settings::ClientService>>,

    /// Stop the cluster without losing it (an extension of this operator): a final snapshot
    /// to `store` when one is given, then the member pods are deleted; the volume claims are
    /// kept unless `keepVolumes` is false. `enabled: false` (or removing the section) wakes
    /// it: the same members on their claims, or the cluster restored from the final snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<super::settings::Hibernation>,
    /// A standby (an extension of this operator): a read-only copy of another cluster,
    /// possibly in another Kubernetes cluster, bootstrapped from its continuous archive and
    /// fed from it; removing it promotes the cluster. Needs `spec.auth.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<super::standby::Standby>,
}

/// A cluster's NetworkPolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkPolicy {
    /// Whether the cluster gets its NetworkPolicy; unset: as the operator was started
    /// (chart `networkPolicies.enabled`, on by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Who may reach the client port (2379) besides the members and the operator, as
    /// NetworkPolicy peers (`namespaceSelector`, `podSelector`, `ipBlock`). Unset or empty:
    /// anyone may, so that existing clients keep working; list them to close it to others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub clients: Vec<NetworkPolicyPeer>,
}

/// Recovery from lost quorum.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recovery {
    /// `Manual` (the default): the cluster is reported `Failed` with what to do next, and the
    /// operator recovers it when the annotation `etcd.database.coreos.com/recover` is set to
    /// `force-new-cluster` or `restore-latest-backup`. `ForceNewCluster`: the cluster is
    /// rebuilt from the surviving member with the most data once quorum has been lost for
    /// `after`. `RestoreLatestBackup`: the same while a member survives, otherwise the newest
    /// succeeded EtcdBackup of this cluster is restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_loss: Option<QuorumLossPolicy>,
    /// How long the lost members must have been gone or silent before an automatic recovery
    /// starts, as `30s`, `5m`, `1h` (default `5m`). Members whose pods are gone count as lost
    /// at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"))]
    pub after: Option<String>,
    /// Where else this cluster's backups are: a storage section as an EtcdRestore's, whose
    /// path is the `<bucket>/<key prefix>` its periodic (`<prefix>_v<revision>_<time>`) or
    /// scheduled (`<prefix>_<time>`) backups are written under. Restoring the newest backup
    /// takes the newest of these (by the time in the name, then the revision) and of the
    /// succeeded EtcdBackups of this cluster: the snapshots stay when their EtcdBackups are
    /// deleted (a schedule's `keep`, a namespace recreated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backups: Option<RecoveryStore>,
}

/// What is done about lost quorum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum QuorumLossPolicy {
    /// Report, and wait for approval by annotation.
    #[default]
    Manual,
    /// Rebuild from the surviving member with the most data.
    ForceNewCluster,
    /// Rebuild from a surviving member, else restore the newest backup.
    RestoreLatestBackup,
}

/// The annotation by which a user approves a recovery of a cluster that lost quorum:
/// `force-new-cluster` or `restore-latest-backup`. The operator removes it once it has acted.
pub const RECOVER_ANNOTATION: &str = "etcd.database.coreos.com/recover";

/// The annotation by which a user asks for every voter to be defragmented now, one at a time
/// as a scheduled defragmentation is (followers first, the leader last): its value is a token
/// of the request (any text); a new token is a new request. `status.defragRequest` says when
/// the operator saw it and whether it is done.
pub const DEFRAG_ANNOTATION: &str = "etcd.database.coreos.com/defrag";

/// [`Recovery::after`] when unset.
pub const DEFAULT_RECOVERY_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

impl Recovery {
    /// `after`, parsed (the schema admits only what parses).
    pub fn after(&self) -> std::time::Duration {
        self.after
            .as_deref()
            .and_then(parse_duration)
            .unwrap_or(DEFAULT_RECOVERY_AFTER)
    }
}

/// `1h30m`, `5m`, `0s`: whole hours, minutes and seconds.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let mut total = 0u64;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        total = total.checked_add(n.checked_mul(match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return None,
        })?)?;
    }
    (digits.is_empty() && !text.is_empty()).then(|| std::time::Duration::from_secs(total))
}

/// Upkeep of the members' databases.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// Size in bytes at which a member's database raises etcd's NOSPACE alarm, after which the
    /// cluster refuses every write that would grow it (etcd's `--quota-backend-bytes`; etcd's
    /// default, 2 GiB, when unset). When the alarm is raised the operator compacts the history,
    /// defragments the members one at a time and disarms it; a change is rolled into the
    /// members like a pod-policy change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1048576, max = 8589934592_i64))]
    pub quota_backend_bytes: Option<i64>,
    /// etcd's own compaction of the key history (`--auto-compaction-mode`,
    /// `--auto-compaction-retention`), rolled into the members like a pod-policy change.
    /// Without it etcd keeps every revision until a NOSPACE reclaim compacts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction: Option<AutoCompaction>,
    /// Scheduled defragmentation, one member at a time, followers first, the leader last after
    /// leadership moved away; never during a roll, a restore or a recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag: Option<Defrag>,
    /// When voluntary disruptions may happen: version upgrades, pod-policy, tuning and
    /// certificate rolls, defragmentation (scheduled, by threshold or by annotation) and
    /// spreading members back onto a healed node wait for the window; a dead or unhealthy
    /// member, NOSPACE, lost quorum, scaling, restores and recoveries never wait. A step
    /// under way when the window closes is finished. Unset: any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<MaintenanceWindow>,
}

/// A recurring maintenance window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// When the window opens: a cron expression (five fields, UTC), such as `0 2 * * 6` for
    /// Saturdays at 02:00.
    #[schemars(regex(pattern = r"^\S+( +\S+){4}$"), length(max = 128))]
    pub schedule: String,
    /// How long it stays open, as `30m`, `2h`, `1h30m`.
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"), length(max = 16))]
    pub duration: String,
}

/// etcd's automatic compaction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.mode == 'revision' ? self.retention.matches('^[0-9]+$') : self.retention.matches('^([0-9]+|([0-9]+(h|m|s))+)$')",
    "message": "retention is a number of revisions for mode revision, and a duration such as 1h or 30m (or a number of hours) for mode periodic"
}]))]
pub struct AutoCompaction {
    /// `periodic`: keep `retention` of history (a duration); `revision`: keep the last
    /// `retention` revisions.
    pub mode: AutoCompactionMode,
    /// How much history is kept (see `mode`).
    #[schemars(length(min = 1, max = 32))]
    pub retention: String,
}

/// How etcd compacts by itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AutoCompactionMode {
    /// By age.
    #[default]
    Periodic,
    /// By count of revisions.
    Revision,
}

/// When members are defragmented.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.schedule) || has(self.threshold)",
    "message": "set a schedule, a threshold, or both"
}]))]
pub struct Defrag {
    /// A cron expression (five fields, UTC): at each tick every voter is defragmented in turn
    /// (only those over `threshold`, when it is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\S+( +\S+){4}$"))]
    pub schedule: Option<String>,
    /// Bytes a member's database file may hold beyond what its data uses (`dbSize -
    /// dbSizeInUse`) before it is defragmented: alone, checked at every look; with a
    /// schedule, checked at its ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub threshold: Option<i64>,
}

/// etcd's backend quota when `--quota-backend-bytes` is not given.
pub const DEFAULT_QUOTA_BACKEND_BYTES: i64 = 2 * 1024 * 1024 * 1024;

impl EtcdClusterSpec {
    /// `spec.hibernation` when it asks the cluster to sleep.
    pub fn hibernating(&self) -> Option<&super::settings::Hibernation> {
        self.hibernation.as_ref().filter(|h| h.enabled)
    }

    /// The image repository, defaulted.
    pub fn repository(&self) -> &str {
        self.repository
            .as_deref()
            .filter(|r| !r.is_empty())
            .unwrap_or(DEFAULT_REPOSITORY)
    }

    /// The etcd version without a leading `v`, defaulted.
    pub fn version(&self) -> &str {
        let v = self
            .version
            .as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_VERSION);
        v.strip_prefix('v').unwrap_or(v)
    }

    /// The member image, `<repository>:v<version>`.
    pub fn image(&self) -> String {
        format!("{}:v{}", self.repository(), self.version())
    }

    /// The store `recovery.backups` names, if any.
    pub fn recovery_store(&self) -> Option<&RecoveryStore> {
        self.recovery.as_ref()?.backups.as_ref()
    }

    /// The backend quota members run with, defaulted.
    pub fn quota_backend_bytes(&self) -> i64 {
        self.maintenance
            .as_ref()
            .and_then(|m| m.quota_backend_bytes)
            .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES)
    }

    /// Whether the user paused reconciliation.
    pub fn is_paused(&self) -> bool {
        self.paused.unwrap_or(false)
    }

    /// The running cluster this one joins (`spec.bootstrap.existing`), if any.
    pub fn existing(&self) -> Option<&super::bootstrap::ExistingCluster> {
        self.bootstrap.as_ref()?.existing.as_ref()
    }

    /// `size` as a count of members; a negative size (which the CRD's minimum keeps out) as
    /// none.
    pub fn members(&self) -> usize {
        usize::try_from(self.size).unwrap_or(0)
    }
}

/// Policy for the etcd member pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.onResize) || has(self.persistentVolumeClaimSpec)",
    "message": "spec.pod.onResize says what a larger persistentVolumeClaimSpec does to the members' claims: it needs spec.pod.persistentVolumeClaimSpec"
}]))]
pub struct PodPolicy {
    /// Extra labels for member pods. `app` and keys starting with `etcd_` are reserved: the
    /// operator selects its pods with `app=etcd` and `etcd_cluster=<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::pod_label_rules)]
    pub labels: BTreeMap<String, String>,

    /// Node labels a member pod's node must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Scheduling constraints of member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Deprecated: use `affinity`. When true, member pods of this cluster are spread over nodes
    /// (a required pod anti-affinity on `kubernetes.io/hostname`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<bool>,

    /// Compute resources of the etcd container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Tolerations of member pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// PriorityClass of member pods: with one above the cluster's workloads, a member is the
    /// last to be preempted and the first to be scheduled on a full node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub priority_class_name: Option<String>,

    /// How member pods spread over zones, nodes or other topology domains. Unset or empty:
    /// the operator's own (zones, then nodes, both preferred). A constraint without a
    /// `labelSelector` counts this cluster's members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,

    /// Extra environment variables of the etcd container, for example `ETCD_QUOTA_BACKEND_BYTES`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_env: Vec<EnvVar>,

    /// When set, each member keeps its data on a PersistentVolumeClaim made from this spec, and a
    /// member whose pod dies is restarted on the same volume instead of being replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_spec: Option<PersistentVolumeClaimSpec>,

    /// What a larger storage request in `persistentVolumeClaimSpec` does to the members'
    /// claims: `Expand` (the default) grows them in place where the StorageClass allows it,
    /// and says so in the status where it does not; `Replace` moves members to new claims
    /// where it does not. A smaller request only shapes new members' claims: a claim never
    /// shrinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_resize: Option<super::settings::OnResize>,

    /// Extra annotations for member pods. Keys under `etcd.database.coreos.com/` are reserved:
    /// the operator reads some of them back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::pod_annotation_rules)]
    pub annotations: BTreeMap<String, String>,

    /// Accepted for compatibility with coreos manifests and ignored: the operator's own image
    /// does the DNS wait that a busybox init container used to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busybox_image: Option<String>,

    /// Security context of member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,

    /// How long a new member waits for its own DNS name to resolve before etcd starts, in
    /// seconds. 0 means the default (no limit beyond the pod's own restart policy).
    #[serde(
        rename = "DNSTimeoutInSecond",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub dns_timeout_in_second: Option<i64>,

    /// DNS domain of the Kubernetes cluster, appended to member host names
    /// (`<member>.<cluster>.<namespace>.svc.<ClusterDomain>`). Empty means the short form that
    /// the pod's DNS search path completes. A leading dot, as coreos examples wrote it, is accepted.
    #[serde(
        rename = "ClusterDomain",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(
        regex(pattern = r"^\.?([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(max = 253)
    )]
    pub cluster_domain: Option<String>,
}

/// TLS for an etcd cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.static) ? 1 : 0) + (has(self.auto) ? 1 : 0) + (has(self.certManager) ? 1 : 0) == 1",
    "message": "spec.TLS takes exactly one of static (Secrets you provide), auto (certificates the operator makes) and certManager (certificates cert-manager issues)"
}]))]
pub struct TlsPolicy {
    /// Certificates provided as Secrets by the user.
    #[serde(rename = "static", default, skip_serializing_if = "Option::is_none")]
    pub static_: Option<StaticTls>,
    /// Certificates the operator makes: a CA per cluster, and peer, server and client
    /// certificates it signs, in Secrets owned by the EtcdCluster (`<name>-ca`,
    /// `<name>-peer-tls`, `<name>-server-tls`, `<name>-client-tls`; the last is what clients
    /// use, in the layout of `TLS.static.operatorSecret`). They are renewed when two thirds of
    /// their validity have passed, and the CA when two thirds of its own have; each renewal
    /// rolls the members one at a time. A new value of the annotation
    /// `etcd.database.coreos.com/rotate-tls` rotates the CA and every certificate now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoTls>,
    /// Certificates cert-manager issues. The operator writes a cert-manager `Certificate` for
    /// each of the peer, server and client certificates (`<name>-peer-tls`,
    /// `<name>-server-tls`, `<name>-client-tls`, each into the Secret of its own name, in the
    /// `kubernetes.io/tls` layout) with the names and usages `TLS.auto` gives them, waits for
    /// cert-manager to fill their Secrets, and rolls the members one at a time when it renews
    /// them. The issuer must sign with a CA that stays the same across renewals (an Issuer of
    /// kind CA, for example): members trust the `ca.crt` of the Secrets they start with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerTls>,
}

/// Certificates of a cluster issued by cert-manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerTls {
    /// The cert-manager issuer that signs the certificates.
    pub issuer_ref: IssuerRef,
    /// How long the certificates are valid, in hours such as `2160h`; cert-manager's default
    /// (90 days) when unset. cert-manager renews each when two thirds of it have passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}h$"))]
    pub duration: Option<String>,
}

/// A cert-manager issuer, as a `Certificate` names it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    /// Name of the issuer.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Issuer` (in the cluster's namespace; the default) or `ClusterIssuer`, or the kind of
    /// an external issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,
    /// API group of the issuer: `cert-manager.io` (the default), or an external issuer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub group: Option<String>,
}

/// The automatic PKI of a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoTls {
    /// How long the peer, server and client certificates are valid, in hours such as `8760h`
    /// (the default, a year). The CA is valid ten times as long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}h$"))]
    pub certificate_validity: Option<String>,
}

impl AutoTls {
    /// Default of `certificateValidity`.
    pub const DEFAULT_VALIDITY: std::time::Duration = std::time::Duration::from_secs(8760 * 3600);

    /// `certificateValidity`, defaulted.
    pub fn validity(&self) -> std::time::Duration {
        self.certificate_validity
            .as_deref()
            .and_then(|v| v.strip_suffix('h')?.parse::<u64>().ok())
            .filter(|h| *h > 0)
            .map_or(Self::DEFAULT_VALIDITY, |h| {
                std::time::Duration::from_secs(h * 3600)
            })
    }
}

/// TLS from Secrets the user created beforehand.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.operatorSecret) && self.operatorSecret != '') == (has(self.member) && has(self.member.serverSecret) && self.member.serverSecret != '')",
    "message": "TLS.static.operatorSecret and TLS.static.member.serverSecret go together: set both (clients then need a certificate) or neither"
}]))]
pub struct StaticTls {
    /// Secrets of the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberSecret>,
    /// Secret with the client certificate the operator uses to reach etcd (`etcd-client.crt`,
    /// `etcd-client.key`, `etcd-client-ca.crt`). Required when `member.serverSecret` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_secret: Option<String>,
}

/// Secrets holding the members' certificates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSecret {
    /// Secret for peer traffic (`peer.crt`, `peer.key`, `peer-ca.crt`); peer URLs become https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_secret: Option<String>,
    /// Secret for client traffic (`server.crt`, `server.key`, `server-ca.crt`); client URLs
    /// become https and clients must present a certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_secret: Option<String>,
}

/// Coarse state of a cluster, as the coreos operator reported it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterPhase {
    /// Bootstrapping the seed member.
    Creating,
    /// The cluster has quorum; the operator is reconciling it.
    Running,
    /// The operator cannot go on without the user (for example quorum is lost); see `reason`.
    Failed,
    /// `spec.hibernation.enabled`: no member pod runs; see `status.hibernation`.
    Hibernated,
}

/// Observed state of an etcd cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Creating, Running or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Why the cluster is in this phase, for Failed in particular.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// True while `spec.paused` holds the operator back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub control_paused: bool,
    /// Available, Progressing (reasons Scaling, Upgrading, Recovering) and Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Number of members in etcd's member list.
    #[serde(default)]
    pub size: i32,
    /// Name of the client Service.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    /// Port of the client Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_port: Option<i32>,
    /// Names of ready and unready members.
    #[serde(default)]
    pub members: MembersStatus,
    /// etcd version the cluster runs (the lowest among its members).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_version: String,
    /// Version an upgrade in progress is heading to; empty when none is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_version: String,
    /// The metadata.generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of healthy voting members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_members: Option<i32>,
    /// The label selector of the member pods, as text (`app=etcd,etcd_cluster=<name>`): the
    /// `/scale` subresource's, for tooling that finds the pods behind a scalable object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// etcd's cluster ID, in hex.
    #[serde(
        rename = "clusterID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_id: String,
    /// Per-member detail as etcd reports it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub member_statuses: Vec<MemberStatus>,
    /// The last restore from a snapshot that this cluster's members went through (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreRecord>,
    /// The last recovery from lost quorum (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryRecord>,
    /// Each member's last scheduled defragmentation (ours).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["member"]))]
    pub defragmentations: Vec<DefragmentationRecord>,
    /// The last defragmentation asked for by annotation (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_request: Option<DefragRequest>,
    /// etcd's access control as last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<super::auth::AuthStatus>,
    /// A migration from an external cluster (`spec.bootstrap.existing`), as far as it went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<super::bootstrap::MigrationStatus>,
    /// Hibernation and waking, while either is under way or the cluster sleeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<super::settings::HibernationStatus>,
    /// As a standby, promoted, or a demoted primary (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<super::standby::StandbyStatus>,
}

/// A defragmentation of every voter asked for by annotation ([`DEFRAG_ANNOTATION`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragRequest {
    /// The annotation's value.
    pub token: String,
    /// When the operator first saw it (RFC 3339): voters defragmented since count as done.
    pub at: String,
    /// Whether every voter has been defragmented since `at`.
    pub done: bool,
}

/// One member's defragmentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragmentationRecord {
    /// The member.
    pub member: String,
    /// When it ended (RFC 3339).
    pub at: String,
    /// How long the member's file took to rewrite, in milliseconds (it serves nothing
    /// meanwhile).
    pub milliseconds: i64,
    /// Its database file before, in bytes.
    pub size_before: i64,
    /// And after.
    pub size_after: i64,
}

/// A recovery from lost quorum: what was chosen, and what it cost.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRecord {
    /// `ForceNewCluster` (rebuilt from a surviving member) or `RestoredFromBackup`.
    pub reason: String,
    /// Whether a user approved it by annotation (else the policy started it).
    #[serde(default)]
    pub approved: bool,
    /// The surviving member rebuilt from, or the EtcdBackup restored.
    pub source: String,
    /// The raft index the surviving member had applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_index: Option<i64>,
    /// The newest revision this operator saw the cluster at before quorum was lost (as far as
    /// its process saw; unknown after it restarted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_before: Option<i64>,
    /// The revision of the data recovered (the member's, or the backup's): what was written
    /// between the two is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_recovered: Option<i64>,
    /// When it started (RFC 3339).
    pub started: String,
    /// The restore that carries it out (the EtcdRestore for a backup; for a member, the
    /// restore handed to the cluster's own task).
    pub restore: String,
    /// Whether the rebuilt cluster serves.
    #[serde(default)]
    pub completed: bool,
}

/// A restore the cluster went through, as its own task records it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRecord {
    /// The EtcdRestore.
    pub name: String,
    /// Its UID (a restore of the same name made again is another restore).
    pub uid: String,
    /// The seed member, bootstrapped from the snapshot.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seed: String,
    /// Whether the seed serves the snapshot's data: the restore's part of the cluster's task
    /// is over, and the cluster grows back to its size by the usual path.
    #[serde(default)]
    pub completed: bool,
}

/// The annotation on an EtcdCluster through which the restore controller hands a restore to
/// the cluster's task, the only writer of the cluster's membership. Its value is a
/// [`RestoreHandoff`] in JSON.
pub const RESTORE_ANNOTATION: &str = "etcd.database.coreos.com/restore";

/// What the cluster's task needs to carry out a restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreHandoff {
    /// The EtcdRestore.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The sha256 (hex) of the bearer token with which the seed fetches the snapshot from the
    /// operator. The token is in the Secret `<cluster>-restore-token`, mounted into the seed
    /// alone: neither this annotation nor the seed's pod spec lets a reader fetch the data.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_sha256: String,
    /// sha256 of the snapshot object, verified by the restore controller, checked again by the
    /// seed before it uses a byte of it.
    pub sha256: String,
    /// How much the restored revision is raised (etcdutl `--bump-revision`), so that watchers
    /// never see the revision go back; 0 for none.
    #[serde(default)]
    pub bump_revision: u64,
    /// The safety snapshot of the cluster being replaced, if it answered (coreos path).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pre_restore_path: String,
    /// For a recovery from lost quorum: the pod of the surviving member whose snapshot the
    /// seed restores (served straight from it, with etcd's own trailing hash instead of
    /// `sha256`); empty for a restore from a backup. Its pod is kept until the seed serves.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub member: String,
    /// For a point-in-time restore: the storage key of the full snapshot chosen (the spec's
    /// path names the backup, not one object); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// For a point-in-time restore: the revision the archived changes are replayed up to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_revision: Option<i64>,
    /// The size of the snapshot the restore controller verified (decompressed, if it was
    /// stored with zstd): the seed is served no more than this, so an object replaced after
    /// verification, or a frame that expands without end, cannot fill the seed's disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_size: Option<u64>,
}

impl EtcdCluster {
    /// The restore handed to this cluster and not yet carried out, if any; an annotation
    /// that cannot be read is reported as such.
    pub fn pending_restore(&self) -> Option<Result<RestoreHandoff, String>> {
        let value = self
            .metadata
            .annotations
            .as_ref()?
            .get(RESTORE_ANNOTATION)?;
        let handoff = match serde_json::from_str::<RestoreHandoff>(value) {
            Ok(h) => h,
            Err(e) => return Some(Err(format!("annotation {RESTORE_ANNOTATION}: {e}"))),
        };
        let done = self
            .status
            .as_ref()
            .and_then(|s| s.restore.as_ref())
            .is_some_and(|r| r.uid == handoff.uid && r.completed);
        (!done).then_some(Ok(handoff))
    }
}

/// Names of ready and unready members (coreos shape).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembersStatus {
    /// Members that are healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready: Vec<String>,
    /// Members that are not (yet) healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unready: Vec<String>,
}

/// Role of a member in raft.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MemberRole {
    /// The raft leader.
    Leader,
    /// A voting member that is not the leader.
    Follower,
    /// A non-voting member catching up.
    Learner,
}

/// One member as etcd reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Member name (also its pod's name).
    pub name: String,
    /// etcd member ID, in hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// leader, follower or learner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<MemberRole>,
    /// etcd server version of the member.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Whether the member answered its status request.
    #[serde(default)]
    pub healthy: bool,
    /// Size of the member's database in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size: Option<i64>,
    /// Bytes of the database in use: what it would shrink to when defragmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_in_use: Option<i64>,
    /// Alarms raised for the member (`NOSPACE`, `CORRUPT`), as the members report them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<String>,
    /// The member's raft index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<i64>,
}
