//! The operator's Prometheus metrics. One registry per process; the cluster tasks record into it
//! and `/metrics` encodes it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the per-controller series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `etcdcluster` (later also `etcdbackup`, `etcdrestore`).
    pub controller: &'static str,
}

/// Labels of the per-cluster series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The EtcdCluster's namespace.
    pub namespace: String,
    /// The EtcdCluster's name.
    pub name: String,
}

/// Labels of the error series: which controller, and what failed (an error's `metric_label`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// As in [`ControllerLabels`].
    pub controller: &'static str,
    /// What failed, for example `list_pods`, `etcd_remove`, `invalid_spec`.
    pub error: &'static str,
}

/// Labels of the API request series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` (see [`request_labels`]).
    pub verb: &'static str,
    /// The resource's plural name (`pods`, `leases`, `etcdclusters`), with its subresource
    /// (`etcdclusters/status`).
    pub resource: String,
}

/// The verb and resource of a request to the Kubernetes API, from its method and URL: what an
/// audit log would call it. Paths outside the resource API (`/version`) are `other`.
pub fn request_labels(method: &str, path: &str, query: Option<&str>) -> RequestLabels {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => {
            return RequestLabels {
                verb: "other",
                resource: "other".into(),
            };
        }
    };
    let rest = match rest {
        ["namespaces", _, r @ ..] if !r.is_empty() => r,
        r => r,
    };
    let (resource, named) = match rest {
        [] => ("other".to_string(), false),
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match method {
        "GET" if watch => "watch",
        "GET" if named => "get",
        "GET" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "other",
    };
    RequestLabels { verb, resource }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    namespace: String,
    name: String,
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    namespace: String,
    name: String,
    result: &'static str,
}

/// A cluster's members and whether clients are served.
#[derive(Default)]
struct MemberSeries {
    ready: Family<ClusterLabels, Gauge>,
    desired: Family<ClusterLabels, Gauge>,
    available: Family<ClusterLabels, Gauge>,
}

impl MemberSeries {
    fn registered(registry: &mut Registry) -> Self {
        let series = MemberSeries::default();
        registry.register(
            "cluster_members_ready",
            "Members of an EtcdCluster that are healthy voters",
            series.ready.clone(),
        );
        registry.register(
            "cluster_members_desired",
            "spec.size of an EtcdCluster",
            series.desired.clone(),
        );
        registry.register(
            "cluster_available",
            "1 when an EtcdCluster's Available condition is True: a client of its client \
             Service can read and write",
            series.available.clone(),
        );
        series
    }
}

/// The backup series, by cluster: a schedule's EtcdBackups come and go, the cluster stays (and
/// its series go with it, in [`Metrics::forget_cluster`]).
#[derive(Default)]
struct BackupSeries {
    last_success: Family<ClusterLabels, Gauge>,
    interval: Family<ClusterLabels, Gauge>,
    results: Family<ResultLabels, Counter>,
    archive_lag: Family<ClusterLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    archive_revision: Family<ClusterLabels, Gauge>,
}

impl BackupSeries {
    fn registered(registry: &mut Registry) -> Self {
        let series = BackupSeries::default();
        series.register(registry);
        series
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the newest backup of a cluster succeeded (Unix seconds), over its EtcdBackups",
            self.last_success.clone(),
        );
        registry.register(
            "backup_interval_seconds",
            "The interval of a cluster's periodic EtcdBackups (the shortest), for the \
             missing-backup alert",
            self.interval.clone(),
        );
        registry.register(
            "backups",
            "Backups taken, by cluster and result (succeeded, failed)",
            self.results.clone(),
        );
        registry.register(
            "archive_lag_seconds",
            "How long the oldest change a cluster's continuous archive received and has not yet \
             stored has waited (0: everything received is stored)",
            self.archive_lag.clone(),
        );
        registry.register(
            "archive_revision",
            "The newest revision of a cluster stored by its continuous archive",
            self.archive_revision.clone(),
        );
    }
}

type DurationFamily = Family<ControllerLabels, Histogram, fn() -> Histogram>;
type ClusterHistograms = Family<ClusterLabels, Histogram, fn() -> Histogram>;

/// Every series the operator exports.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: DurationFamily,
    clusters: Family<PhaseLabels, Gauge>,
    members: MemberSeries,
    changes: Family<ChangeLabels, Counter>,
    upkeep: Family<ChangeLabels, Counter>,
    defrag_seconds: ClusterHistograms,
    defrag_reclaimed: Family<ClusterLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    backups: BackupSeries,
    leader: Gauge,
    cached_secrets: Gauge,
    passed: Gauge,
    /// The phase each cluster was last counted under, so a cluster is counted once.
    phases: Mutex<HashMap<(String, String), String>>,
    ready: AtomicBool,
}

fn defrag_histogram() -> Histogram {
    // 10 ms .. ~5 min: a member's file rewritten, from a few MiB to several GiB.
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~80 s: a pass is a few API calls, or a membership change waiting on etcd.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// The series of upkeep: maintenance operations, and scheduled defragmentations' time and
/// reclaimed bytes.
fn register_upkeep(
    registry: &mut Registry,
    upkeep: &Family<ChangeLabels, Counter>,
    seconds: &ClusterHistograms,
    reclaimed: &Family<ClusterLabels, Counter>,
) {
    registry.register(
        "maintenance_operations",
        "Upkeep done on a cluster's databases (SpaceReclaimed: NOSPACE compacted, \
         defragmented and disarmed; Defragmented: one member's scheduled defragmentation), \
         by cluster",
        upkeep.clone(),
    );
    registry.register(
        "defragmentation_seconds",
        "Time one member's scheduled defragmentation took (it serves nothing meanwhile), by \
         cluster",
        seconds.clone(),
    );
    registry.register(
        "defragmentation_reclaimed_bytes",
        "Bytes scheduled defragmentations took off the members' database files, by cluster",
        reclaimed.clone(),
    );
}

fn register_leader(registry: &mut Registry, leader: &Gauge) {
    registry.register(
        "leader",
        "1 when this replica holds the leader Lease (or runs without leader election)",
        leader.clone(),
    );
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every series registered and empty.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("etcd_operator");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations = DurationFamily::new_with_constructor(duration_histogram);
        let clusters = Family::<PhaseLabels, Gauge>::default();
        let members = MemberSeries::registered(&mut registry);
        let changes = Family::<ChangeLabels, Counter>::default();
        let upkeep = Family::<ChangeLabels, Counter>::default();
        let defrag_seconds = ClusterHistograms::new_with_constructor(defrag_histogram);
        let defrag_reclaimed = Family::<ClusterLabels, Counter>::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let leader = Gauge::default();
        registry.register(
            "api_requests",
            "Requests this process sent to the Kubernetes API, by verb and resource (watches \
             count when they are opened)",
            requests.clone(),
        );
        registry.register(
            "reconciles",
            "Reconcile passes, by controller",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile passes that failed, by controller",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile pass took, by controller",
            durations.clone(),
        );
        registry.register(
            "clusters",
            "EtcdClusters this replica manages, by phase",
            clusters.clone(),
        );
        registry.register(
            "membership_changes",
            "Membership changes made (seed, add, promote, remove, pod replaced), by cluster",
            changes.clone(),
        );
        register_upkeep(&mut registry, &upkeep, &defrag_seconds, &defrag_reclaimed);
        let backups = BackupSeries::registered(&mut registry);
        register_leader(&mut registry, &leader);
        let cached_secrets = Gauge::default();
        registry.register(
            "cached_secrets",
            "Secrets whose metadata the operator's watch cache holds: only those it made",
            cached_secrets.clone(),
        );
        let passed = Gauge::default();
        registry.register(
            "clusters_passed",
            "EtcdClusters whose task has finished a pass since this replica began leading: \
             equal to the number of clusters once a new leader has looked at every one",
            passed.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            durations,
            clusters,
            members,
            changes,
            upkeep,
            defrag_seconds,
            defrag_reclaimed,
            requests,
            backups,
            leader,
            cached_secrets,
            passed,
            phases: Mutex::default(),
            ready: AtomicBool::new(false),
        }
    }

    /// One reconcile pass of `controller`, how long it took and, if it failed, what failed.
    pub fn reconciled(
        &self,
        controller: &'static str,
        took: Duration,
        error: Option<&'static str>,
    ) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if let Some(error) = error {
            self.errors
                .get_or_create(&ErrorLabels { controller, error })
                .inc();
        }
    }

    /// What the last pass over a cluster saw.
    pub fn cluster_state(
        &self,
        namespace: &str,
        name: &str,
        phase: &str,
        (ready, size, available): (i64, i64, bool),
    ) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.members.ready.get_or_create(&labels).set(ready);
        self.members.desired.get_or_create(&labels).set(size);
        self.members
            .available
            .get_or_create(&labels)
            .set(i64::from(available));
        // A counter first exported at 1 has no increase to Prometheus (`increase()` starts at
        // its first sample): the first failed backup would never fire EtcdBackupFailed. Each
        // cluster's counters are exported at 0 as soon as it is seen, before any backup.
        for result in ["succeeded", "failed"] {
            let _ = self.backups.results.get_or_create(&ResultLabels {
                namespace: labels.namespace.clone(),
                name: labels.name.clone(),
                result,
            });
        }
        let _ = self.defrag_reclaimed.get_or_create(&labels);
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        let key = (labels.namespace, labels.name);
        match phases.get(&key) {
            Some(old) if old == phase => return,
            Some(old) => {
                self.clusters
                    .get_or_create(&PhaseLabels { phase: old.clone() })
                    .dec();
            }
            None => {}
        }
        self.clusters
            .get_or_create(&PhaseLabels {
                phase: phase.into(),
            })
            .inc();
        phases.insert(key, phase.into());
    }

    /// The cluster is no longer managed here (deleted, or leadership lost).
    pub fn forget_cluster(&self, namespace: &str, name: &str) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.members.ready.remove(&labels);
        self.members.desired.remove(&labels);
        self.members.available.remove(&labels);
        self.defrag_seconds.remove(&labels);
        self.defrag_reclaimed.remove(&labels);
        self.backups.last_success.remove(&labels);
        self.backups.interval.remove(&labels);
        self.backups.archive_lag.remove(&labels);
        self.backups.archive_revision.remove(&labels);
        for result in ["succeeded", "failed"] {
            self.backups.results.remove(&ResultLabels {
                namespace: labels.namespace.clone(),
                name: labels.name.clone(),
                result,
            });
        }
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = phases.remove(&(labels.namespace, labels.name)) {
            self.clusters
                .get_or_create(&PhaseLabels { phase: old })
                .dec();
        }
    }

    /// An EtcdBackup of a cluster, as its status says: when it last succeeded (Unix seconds),
    /// and its interval if it is periodic.
    pub fn backup_seen(
        &self,
        namespace: &str,
        cluster: &str,
        last_success: Option<i64>,
        interval: Option<i64>,
    ) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: cluster.into(),
        };
        if let Some(at) = last_success {
            let gauge = self.backups.last_success.get_or_create(&labels);
            if at > gauge.get() {
                gauge.set(at);
            }
        }
        if let Some(secs) = interval.filter(|s| *s > 0) {
            let gauge = self.backups.interval.get_or_create(&labels);
            if gauge.get() == 0 || secs < gauge.get() {
                gauge.set(secs);
            }
        }
    }

    /// A cluster's continuous archive: its lag, and the newest revision it stored.
    pub fn archive(&self, namespace: &str, cluster: &str, lag: Duration, revision: i64) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: cluster.into(),
        };
        self.backups
            .archive_lag
            .get_or_create(&labels)
            .set(lag.as_secs_f64());
        self.backups
            .archive_revision
            .get_or_create(&labels)
            .set(revision);
    }

    /// A backup of a cluster ended.
    pub fn backup_result(&self, namespace: &str, cluster: &str, succeeded: bool) {
        self.backups
            .results
            .get_or_create(&ResultLabels {
                namespace: namespace.into(),
                name: cluster.into(),
                result: if succeeded { "succeeded" } else { "failed" },
            })
            .inc();
    }

    /// A membership change was made on a cluster.
    pub fn membership_change(&self, namespace: &str, name: &str, change: &'static str) {
        self.changes
            .get_or_create(&ChangeLabels {
                namespace: namespace.into(),
                name: name.into(),
                change,
            })
            .inc();
    }

    /// Upkeep was done on a cluster's databases (`change` names it, as its Event does).
    pub fn maintenance(&self, namespace: &str, name: &str, change: &'static str) {
        self.upkeep
            .get_or_create(&ChangeLabels {
                namespace: namespace.into(),
                name: name.into(),
                change,
            })
            .inc();
    }

    /// A member of a cluster was defragmented on schedule in `seconds`, its file shrinking
    /// by `reclaimed` bytes.
    pub fn defragmented(&self, namespace: &str, name: &str, seconds: f64, reclaimed: i64) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.defrag_seconds.get_or_create(&labels).observe(seconds);
        self.defrag_reclaimed
            .get_or_create(&labels)
            .inc_by(u64::try_from(reclaimed).unwrap_or(0));
    }

    /// A request to the Kubernetes API is being sent.
    pub fn api_request(&self, labels: RequestLabels) {
        self.requests.get_or_create(&labels).inc();
    }

    /// Records how many Secrets the watch cache holds.
    pub fn set_cached_secrets(&self, n: usize) {
        self.cached_secrets
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// A cluster's task finished its first pass (`true`), or a task that had ended (`false`).
    pub fn cluster_passed(&self, passed: bool) {
        self.passed.inc_by(if passed { 1 } else { -1 });
    }

    /// Whether this replica leads, as last recorded.
    pub fn is_leader(&self) -> bool {
        self.leader.get() == 1
    }

    /// The watches have listed everything once.
    pub fn set_synced(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the watches have listed everything once.
    pub fn synced(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The Prometheus text format of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_is_counted_under_its_latest_phase_only() {
        let m = Metrics::new();
        m.cluster_state("ns", "a", "Creating", (0, 3, false));
        m.cluster_state("ns", "a", "Running", (3, 3, true));
        m.cluster_state("ns", "b", "Running", (1, 1, true));
        let text = m.encode();
        assert!(
            text.contains("etcd_operator_clusters{phase=\"Running\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_clusters{phase=\"Creating\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_cluster_members_ready{namespace=\"ns\",name=\"a\"} 3"),
            "{text}"
        );
        m.forget_cluster("ns", "a");
        let text = m.encode();
        assert!(
            text.contains("etcd_operator_clusters{phase=\"Running\"} 1"),
            "{text}"
        );
        assert!(!text.contains("name=\"a\""), "{text}");
    }

    #[test]
    fn a_clusters_counters_start_at_zero_before_its_first_backup_or_defragmentation() {
        let m = Metrics::new();
        m.cluster_state("ns", "a", "Running", (3, 3, true));
        let text = m.encode();
        for line in [
            "etcd_operator_backups_total{namespace=\"ns\",name=\"a\",result=\"failed\"} 0",
            "etcd_operator_backups_total{namespace=\"ns\",name=\"a\",result=\"succeeded\"} 0",
            "etcd_operator_defragmentation_reclaimed_bytes_total{namespace=\"ns\",name=\"a\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        m.backup_result("ns", "a", false);
        assert!(m.encode().contains(
            "etcd_operator_backups_total{namespace=\"ns\",name=\"a\",result=\"failed\"} 1"
        ));
    }

    #[test]
    fn backups_are_counted_per_cluster_with_the_newest_success_and_shortest_interval() {
        let m = Metrics::new();
        m.backup_seen("ns", "a", Some(100), Some(3600));
        m.backup_seen("ns", "a", Some(50), Some(600));
        m.backup_seen("ns", "a", None, None);
        m.backup_result("ns", "a", true);
        m.backup_result("ns", "a", false);
        let text = m.encode();
        for line in [
            "etcd_operator_backup_last_success_timestamp_seconds{namespace=\"ns\",name=\"a\"} 100",
            "etcd_operator_backup_interval_seconds{namespace=\"ns\",name=\"a\"} 600",
            "etcd_operator_backups_total{namespace=\"ns\",name=\"a\",result=\"failed\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        m.forget_cluster("ns", "a");
        assert!(!m.encode().contains("name=\"a\""));
    }

    #[test]
    fn reconciles_errors_and_durations_are_per_controller() {
        let m = Metrics::new();
        m.reconciled("etcdcluster", Duration::from_millis(20), None);
        m.reconciled("etcdcluster", Duration::from_millis(30), Some("list_pods"));
        m.membership_change("ns", "a", "MemberAdded");
        m.set_leader(true);
        let text = m.encode();
        for series in [
            "etcd_operator_reconciles_total{controller=\"etcdcluster\"} 2",
            "etcd_operator_reconcile_errors_total{controller=\"etcdcluster\",error=\"list_pods\"} 1",
            "etcd_operator_reconcile_duration_seconds_count{controller=\"etcdcluster\"} 2",
            "etcd_operator_membership_changes_total{namespace=\"ns\",name=\"a\",change=\"MemberAdded\"} 1",
            "etcd_operator_leader 1",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
    }

    #[test]
    fn requests_are_named_by_verb_and_resource() {
        let cases = [
            ("GET", "/api/v1/namespaces/ns/pods", None, "list", "pods"),
            (
                "GET",
                "/api/v1/namespaces/ns/pods",
                Some("labelSelector=a&watch=true"),
                "watch",
                "pods",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/secrets/s",
                None,
                "get",
                "secrets",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                None,
                "update",
                "leases",
            ),
            (
                "PATCH",
                "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/c/status",
                Some("fieldManager=x"),
                "patch",
                "etcdclusters/status",
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/ns/events",
                None,
                "create",
                "events",
            ),
            (
                "GET",
                "/apis/etcd.database.coreos.com/v1beta2/etcdclusters",
                Some("watch=1"),
                "watch",
                "etcdclusters",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/pods/p",
                None,
                "delete",
                "pods",
            ),
            ("GET", "/api/v1/namespaces/ns", None, "get", "namespaces"),
            ("GET", "/version", None, "other", "other"),
        ];
        for (method, path, query, verb, resource) in cases {
            let l = request_labels(method, path, query);
            assert_eq!(
                (l.verb, l.resource.as_str()),
                (verb, resource),
                "{method} {path}"
            );
        }
        let m = Metrics::new();
        m.api_request(request_labels("GET", "/api/v1/namespaces/ns/pods", None));
        assert!(
            m.encode()
                .contains("etcd_operator_api_requests_total{verb=\"list\",resource=\"pods\"} 1")
        );
    }
}
