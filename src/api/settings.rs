//! Production settings of a cluster beyond the coreos API: etcd's own tuning (`spec.tuning`)
//! and how clients reach the members (`spec.clientService`). No I/O here.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The etcd flags the operator sets itself, which `tuning.extraArgs` may not name: the members'
/// identity, addresses and data, their TLS, what the operator reads back from the pods (the
/// quota, the learner limit) and what has a typed field here or under `spec.maintenance`.
pub const OWNED_FLAGS: &[&str] = &[
    // With a config file etcd ignores every flag and variable given beside it: the operator's
    // own included.
    "config-file",
    "name",
    "data-dir",
    "wal-dir",
    "initial-advertise-peer-urls",
    "listen-peer-urls",
    "listen-client-urls",
    "listen-client-http-urls",
    "advertise-client-urls",
    "listen-metrics-urls",
    "initial-cluster",
    "initial-cluster-state",
    "initial-cluster-token",
    "discovery",
    "discovery-srv",
    "force-new-cluster",
    "peer-client-cert-auth",
    "peer-trusted-ca-file",
    "peer-cert-file",
    "peer-key-file",
    "peer-auto-tls",
    "client-cert-auth",
    "trusted-ca-file",
    "cert-file",
    "key-file",
    "auto-tls",
    "quota-backend-bytes",
    "auto-compaction-mode",
    "auto-compaction-retention",
    "max-learners",
    "experimental-max-learners",
    "heartbeat-interval",
    "election-timeout",
    "snapshot-count",
    "max-request-bytes",
    "max-txn-ops",
    "grpc-keepalive-min-time",
    "grpc-keepalive-interval",
    "grpc-keepalive-timeout",
    "log-level",
    "log-format",
    "logger",
    "experimental-initial-corrupt-check",
    "feature-gates",
];

/// etcd's own settings that users tune. Each is etcd's flag of the same name; unset, etcd's
/// default. A change is rolled into the members one at a time, like a pod-policy change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.electionTimeout) ? self.electionTimeout : 1000) >= 5 * (has(self.heartbeatInterval) ? self.heartbeatInterval : 100)",
    "message": "spec.tuning.electionTimeout must be at least 5 times spec.tuning.heartbeatInterval (etcd's defaults: 1000 and 100 ms), or etcd refuses to start"
}]))]
pub struct Tuning {
    /// Milliseconds between the leader's heartbeats (`--heartbeat-interval`, etcd's default
    /// 100). Around the round-trip time between members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 10000))]
    pub heartbeat_interval: Option<i64>,
    /// Milliseconds a follower waits for a heartbeat before it calls an election
    /// (`--election-timeout`, etcd's default 1000): at least 5 × `heartbeatInterval`, at most
    /// 50000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 50, max = 50000))]
    pub election_timeout: Option<i64>,
    /// Applied entries between snapshots of the raft log (`--snapshot-count`; etcd's default
    /// 100000 in 3.4 and 3.5, 10000 in 3.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000000))]
    pub snapshot_count: Option<i64>,
    /// Largest client request, in bytes (`--max-request-bytes`, etcd's default 1.5 MiB); at
    /// most 64 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 67108864))]
    pub max_request_bytes: Option<i64>,
    /// Most operations in one transaction (`--max-txn-ops`, etcd's default 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_txn_ops: Option<i64>,
    /// The members' gRPC keepalive towards clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_keepalive: Option<GrpcKeepalive>,
    /// etcd's log level (`--log-level`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// etcd's log format (`--log-format`; etcd 3.6 and later, whose default is `json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Check a member's data against its peers' before it serves
    /// (`--experimental-initial-corrupt-check` before 3.6,
    /// `--feature-gates=InitialCorruptCheck=true` from 3.6). A member whose data differs then
    /// refuses to start, and is replaced after `replaceUnhealthyAfter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_corrupt_check: Option<bool>,
    /// Other etcd flags, each `--flag=value` (or `--flag`). The flags the operator sets itself
    /// or that have a field here are refused by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), transform = extra_args_rules)]
    pub extra_args: Vec<String>,
}

/// gRPC keepalive of etcd's client listener; each a duration such as `5s`, `2h`, `500ms`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcKeepalive {
    /// Shortest interval a client may ping at (`--grpc-keepalive-min-time`, default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 16))]
    pub min_time: Option<String>,
    /// How often the server pings an idle client (`--grpc-keepalive-interval`, default 2h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 16))]
    pub interval: Option<String>,
    /// How long the server waits for a ping's answer before it closes the connection
    /// (`--grpc-keepalive-timeout`, default 20s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"), length(max = 16))]
    pub timeout: Option<String>,
}

/// etcd's log levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Everything.
    Debug,
    /// etcd's default.
    Info,
    /// Warnings and errors.
    Warn,
    /// Errors only.
    Error,
    /// Panics only.
    Panic,
    /// Fatal errors only.
    Fatal,
}

/// etcd's log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line (etcd's default).
    Json,
    /// Text for people.
    Console,
}

fn extra_args_rules(schema: &mut schemars::Schema) {
    let owned = OWNED_FLAGS.join("|");
    let items = schema
        .as_object_mut()
        .and_then(|o| o.get_mut("items"))
        .and_then(|i| i.as_object_mut());
    if let Some(items) = items {
        items.insert("maxLength".into(), serde_json::json!(512));
        items.insert(
            "pattern".into(),
            serde_json::json!("^--[a-z0-9][a-z0-9-.]*(=.*)?$"),
        );
    }
    super::validation::add_rules(
        schema,
        vec![super::validation::rule(
            format!("self.all(a, !a.matches('^--({owned})(=|$)'))"),
            "spec.tuning.extraArgs may not set a flag the operator sets itself or that has a field of its own in spec.tuning or spec.maintenance (--name, --data-dir, the URLs, the TLS files, --quota-backend-bytes, --heartbeat-interval, ...)",
        )],
    );
}

impl Tuning {
    /// The etcd flags these settings make, for etcd `version` (`3.6.16`).
    pub fn flags(&self, version: &str) -> Vec<String> {
        let minor: u32 = version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or(6);
        let mut args = Vec::new();
        let mut number = |flag: &str, v: Option<i64>| {
            if let Some(v) = v {
                args.push(format!("--{flag}={v}"));
            }
        };
        number("heartbeat-interval", self.heartbeat_interval);
        number("election-timeout", self.election_timeout);
        number("snapshot-count", self.snapshot_count);
        number("max-request-bytes", self.max_request_bytes);
        number("max-txn-ops", self.max_txn_ops);
        if let Some(k) = &self.grpc_keepalive {
            for (flag, v) in [
                ("min-time", &k.min_time),
                ("interval", &k.interval),
                ("timeout", &k.timeout),
            ] {
                if let Some(v) = v {
                    args.push(format!("--grpc-keepalive-{flag}={v}"));
                }
            }
        }
        if let Some(level) = self.log_level {
            // etcd 3.4 logs through capnslog unless told otherwise, which ignores the level.
            if minor < 5 {
                args.push("--logger=zap".into());
            }
            args.push(format!("--log-level={}", wire_name(&level)));
        }
        if let Some(format) = self.log_format.filter(|_| minor >= 6) {
            args.push(format!("--log-format={}", wire_name(&format)));
        }
        if self.initial_corrupt_check == Some(true) {
            args.push(if minor >= 6 {
                "--feature-gates=InitialCorruptCheck=true".into()
            } else {
                "--experimental-initial-corrupt-check=true".into()
            });
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// A unit enum's name as the API writes it (its serde name): `warn`, `NodePort`.
pub fn wire_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// How the client Service `<cluster>-client` is exposed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.loadBalancerSourceRanges) || size(self.loadBalancerSourceRanges) == 0 || (has(self.type) && self.type == 'LoadBalancer')",
    "message": "spec.clientService.loadBalancerSourceRanges applies to type LoadBalancer only"
}, {
    "rule": "!has(self.nodePort) || (has(self.type) && self.type != 'ClusterIP')",
    "message": "spec.clientService.nodePort applies to types NodePort and LoadBalancer only"
}]))]
pub struct ClientService {
    /// `ClusterIP` (the default), `NodePort` (also on a port of every node, reachable from
    /// outside the cluster's network) or `LoadBalancer`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<ServiceType>,
    /// The node port with `NodePort` or `LoadBalancer` (30000–32767 by default); unset, one is
    /// allocated (the Service's `spec.ports[0].nodePort` says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
    /// Extra annotations (a cloud's load-balancer settings, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
    /// Extra labels. `app` and keys starting with `etcd_` are the operator's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64), transform = client_service_label_rules)]
    pub labels: BTreeMap<String, String>,
    /// Who may reach a `LoadBalancer` (CIDRs such as `203.0.113.0/24`), where the cloud
    /// enforces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), transform = cidr_list_rules)]
    pub load_balancer_source_ranges: Vec<String>,
    /// Which endpoints traffic prefers: `PreferClose` (Kubernetes 1.31+), `PreferSameZone` or
    /// `PreferSameNode` (1.34+); unset, every ready member alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<TrafficDistribution>,
}

/// What a larger storage request in `spec.pod.persistentVolumeClaimSpec` does to the claims
/// members already have.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OnResize {
    /// Each member's claim is expanded in place, one member at a time, waiting for its file
    /// system to grow; where the StorageClass does not allow expansion, nothing is done and
    /// the status says so (Degraded, `VolumeExpansionRefused`).
    #[default]
    Expand,
    /// As `Expand` where the StorageClass allows it; where it does not, members move to
    /// claims of the new size one at a time, each new member added before the old one is
    /// removed (a roll, which waits for the maintenance window).
    Replace,
}

/// A client Service's type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    /// Inside the cluster only.
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through the cloud's load balancer.
    LoadBalancer,
}

/// A Service's `trafficDistribution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TrafficDistribution {
    /// Endpoints in the client's zone first (the older name of `PreferSameZone`).
    PreferClose,
    /// Endpoints in the client's zone first.
    PreferSameZone,
    /// An endpoint on the client's node first.
    PreferSameNode,
}

fn client_service_label_rules(schema: &mut schemars::Schema) {
    super::validation::add_rules(
        schema,
        vec![super::validation::rule(
            "!('app' in self) && self.all(k, !k.startsWith('etcd_') && !k.startsWith('app.kubernetes.io/'))".into(),
            "spec.clientService.labels may not set 'app', keys starting with 'etcd_' or app.kubernetes.io/ keys: the operator labels the Service with them",
        )],
    );
}

fn cidr_list_rules(schema: &mut schemars::Schema) {
    // A bound on each item keeps the rule's cost within the API server's budget.
    if let Some(items) = schema
        .as_object_mut()
        .and_then(|o| o.get_mut("items"))
        .and_then(|i| i.as_object_mut())
    {
        items.insert("maxLength".into(), serde_json::json!(43));
    }
    super::validation::add_rules(
        schema,
        vec![super::validation::rule(
            "self.all(c, isCIDR(c))".into(),
            "spec.clientService.loadBalancerSourceRanges must be CIDRs such as 203.0.113.0/24",
        )],
    );
}

impl ClientService {
    /// The Service type, defaulted.
    pub fn service_type(&self) -> ServiceType {
        self.type_.unwrap_or_default()
    }
}

/// `spec.hibernation`: the cluster stopped, its data kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.keepVolumes) || self.keepVolumes || has(self.store)",
    "message": "spec.hibernation.keepVolumes: false deletes the volume claims, which then hold the only copy of the data: it needs spec.hibernation.store for the final snapshot"
}]))]
pub struct Hibernation {
    /// true: sleep (the final snapshot, then no member pod); false: wake.
    pub enabled: bool,
    /// Where the final snapshot is written before the pods go, as `spec.recovery.backups`
    /// names a store (`path` is the prefix; the object is `<name>-hibernation-r<revision>`).
    /// Needed when the members have no volume claims, or `keepVolumes` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<super::common::RecoveryStore>,
    /// Keep the members' volume claims while the cluster sleeps (the default), so that it
    /// wakes on them; false deletes them once the final snapshot is safe (it wakes from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_volumes: Option<bool>,
}

impl Hibernation {
    /// `keepVolumes`, defaulted.
    pub fn keep_volumes(&self) -> bool {
        self.keep_volumes.unwrap_or(true)
    }
}

/// Where hibernation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HibernationPhase {
    /// The final snapshot is taken, then the member pods are deleted.
    Hibernating,
    /// No member pod runs.
    Hibernated,
    /// `spec.hibernation.enabled` is false again: the members come back.
    Waking,
}

/// `status.hibernation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HibernationStatus {
    /// Hibernating, Hibernated or Waking.
    pub phase: HibernationPhase,
    /// The EtcdBackup holding the final snapshot (none without a store).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup: String,
    /// The revision the final snapshot holds: the cluster wakes at it or later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// When the last member pod was gone (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_makes_the_flags_of_each_etcd_version() {
        let t = Tuning {
            heartbeat_interval: Some(200),
            election_timeout: Some(2000),
            log_level: Some(LogLevel::Warn),
            log_format: Some(LogFormat::Console),
            initial_corrupt_check: Some(true),
            grpc_keepalive: Some(GrpcKeepalive {
                interval: Some("30s".into()),
                ..GrpcKeepalive::default()
            }),
            extra_args: vec!["--experimental-watch-progress-notify-interval=5s".into()],
            ..Tuning::default()
        };
        assert_eq!(
            t.flags("3.6.16"),
            [
                "--heartbeat-interval=200",
                "--election-timeout=2000",
                "--grpc-keepalive-interval=30s",
                "--log-level=warn",
                "--log-format=console",
                "--feature-gates=InitialCorruptCheck=true",
                "--experimental-watch-progress-notify-interval=5s",
            ]
        );
        let old = t.flags("3.4.23");
        assert!(old.contains(&"--logger=zap".to_string()), "{old:?}");
        assert!(old.contains(&"--experimental-initial-corrupt-check=true".to_string()));
        assert!(
            !old.iter().any(|a| a.starts_with("--log-format")),
            "{old:?}"
        );
        assert!(Tuning::default().flags("3.6.16").is_empty());
    }
}
