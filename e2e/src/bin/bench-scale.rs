//! `make bench-scale`: the operator with many EtcdClusters, printed as a table (measure | value
//! | floor | target) per phase. Not a test: nothing here passes or fails on the figures. The
//! phase is chosen by `BENCH_ONLY`, because each needs its own cluster (`make bench-scale` runs
//! both in turn):
//!
//! - `nodes`, on the local cluster with its node: `SCALE_CLUSTERS` (100) EtcdClusters in one
//!   `kubectl apply`, all of `SCALE_SIZE` (1) members but one of 3; apply to Available beside
//!   the floor (one etcd pod started directly, as `make bench` measures it); then, after 30 s to
//!   settle, the operator's RSS, CPU, reconcile passes and API requests over a minute idle; then
//!   a member pod of the 3-member cluster deleted to healthy at full size.
//! - `control-plane`, on a control plane without a node (`hack/with-cluster.sh
//!   --control-plane-only`; member pods stay Pending): `SCALE_CP_CLUSTERS` (1000) clusters of
//!   3, 100 per `kubectl apply`; once the operator has made a pass over each, the same idle
//!   figures; then a spec change (`spec.size` 3 -> 4) to the pass that observes it, on 5
//!   clusters.
//!
//! The operator runs as a host process (`$ETCD_OPERATOR_BIN`, as in `make bench`) with leader
//! election on, as the chart runs it, its Lease in the benchmark's namespace: Lease renewals are
//! the requests it should make at idle, and the API request rows count them apart.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::{
    CLK_TCK, Kubectl, OperatorProcess, RECONCILES, cluster_healthy, cpu_ticks, get,
    healthy_at_size, pod_names, rss_kib, series, until, until_every,
};
use serde_json::{Value, json};

/// Time given to the operator after the clusters are ready, before the idle window.
const SETTLE: Duration = Duration::from_secs(30);
/// The idle window.
const WINDOW: Duration = Duration::from_secs(60);
/// Clusters per `kubectl apply` on the control plane.
const CP_BATCH: usize = 100;
/// The node's pod range in hack/cluster.sh is a /24: 253 addresses for pods.
const POD_ADDRESSES: usize = 253;
/// The kubelet's pod limit `make bench-scale` starts the local cluster with.
const MAX_PODS: usize = 250;

/// measure, value, floor, target.
type Row = (String, String, String, String);

fn row(measure: String, value: String, floor: &str, target: &str) -> Row {
    (measure, value, floor.into(), target.into())
}

fn main() {
    match std::env::var("BENCH_ONLY").unwrap_or_default().as_str() {
        "nodes" => nodes(),
        "control-plane" => control_plane(),
        other => panic!(
            "BENCH_ONLY={other:?}: set BENCH_ONLY=nodes (the local cluster with its node) or \
             BENCH_ONLY=control-plane (a control plane without a node), or run \
             `make bench-scale`, which runs both on the clusters they need"
        ),
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a whole number")),
        Err(_) => default,
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// The operator for `ns`, electing a leader through a Lease in `ns`.
fn start_operator(ns: &str) -> OperatorProcess {
    OperatorProcess::start_with(ns, &["--leader-elect", "--leader-election-namespace", ns])
}

/// One `kubectl apply` of EtcdClusters `names`, each of `size` members, as a multi-document
/// manifest.
fn apply_clusters(k: &Kubectl, ns: &str, names: &[(String, usize)]) {
    let docs: Vec<String> = names
        .iter()
        .map(|(name, size)| {
            // The default request (100m CPU per member) would fit 19 members on this 2-core
            // node; these members idle, so they ask for what they use.
            json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": {"name": name}, "spec": {"size": size, "version": "3.6.16",
                "pod": {"resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}}})
            .to_string()
        })
        .collect();
    // Starting with `---` makes kubectl read the stream as YAML documents (each JSON object is
    // one), not as a single JSON object.
    let manifest = format!("---\n{}\n", docs.join("\n---\n"));
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&manifest));
}

/// Prints `what` now and then (every 15 s) while a long wait runs.
struct Progress {
    last: Instant,
}

impl Progress {
    fn new() -> Self {
        Progress {
            last: Instant::now(),
        }
    }

    fn report(&mut self, what: impl FnOnce() -> String) {
        if self.last.elapsed() >= Duration::from_secs(15) {
            eprintln!("[bench-scale] {}", what());
            self.last = Instant::now();
        }
    }
}

/// What the operator did over the idle window.
struct Idle {
    elapsed: Duration,
    passes: f64,
    cpu_ticks: u64,
    rss_kib: u64,
    /// Requests sent during the window, by `(verb, resource)`; only those that moved.
    requests: BTreeMap<(String, String), f64>,
}

/// What an API request at rest is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The leader Lease's renewal (or a standby's look at it).
    Lease,
    /// A watch asked again after the API server ended it.
    Watch,
    /// Anything else: work the clusters made.
    Other,
}

impl Class {
    fn of(verb: &str, resource: &str) -> Class {
        match (verb, resource) {
            (_, "leases") => Class::Lease,
            ("watch", _) => Class::Watch,
            _ => Class::Other,
        }
    }
}

impl Idle {
    fn per_minute(&self, n: f64) -> f64 {
        n * 60.0 / self.elapsed.as_secs_f64()
    }

    fn total(&self, class: Class) -> f64 {
        self.requests
            .iter()
            .filter(|((verb, resource), _)| Class::of(verb, resource) == class)
            // A fold from 0.0: an empty f64 sum is -0.0.
            .fold(0.0, |sum, (_, n)| sum + n)
    }

    /// `update leases 6, get leases 6`, or `none`.
    fn breakdown(&self) -> String {
        if self.requests.is_empty() {
            return "none".into();
        }
        self.requests
            .iter()
            .map(|((verb, resource), n)| format!("{verb} {resource} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The rows of the window, about `what` (`100 clusters`), the RSS against `rss_target`.
    fn rows(&self, what: &str, rss_target: &str) -> Vec<Row> {
        let cpu_ms = (self.cpu_ticks * 1000 / CLK_TCK) as f64;
        let (lease, watch, other) = (
            self.total(Class::Lease),
            self.total(Class::Watch),
            self.total(Class::Other),
        );
        vec![
            row(
                format!("operator RSS at idle, {what}"),
                format!("{:.1} MiB", self.rss_kib as f64 / 1024.0),
                "—",
                rss_target,
            ),
            row(
                format!("operator CPU at idle, {what}"),
                format!("{:.0} ms per minute", self.per_minute(cpu_ms)),
                "—",
                "—",
            ),
            row(
                format!("reconcile passes per minute at idle, {what}"),
                format!("{:.1}", self.per_minute(self.passes)),
                "—",
                "—",
            ),
            row(
                format!("API requests per minute at idle, all, {what}"),
                format!("{:.1}", self.per_minute(lease + watch + other)),
                "—",
                "—",
            ),
            row(
                format!(
                    "API requests per minute at idle, the watches' renewals (each of the \
                     operator's watches, one a kind, is asked again about every 5 minutes, \
                     however many clusters), {what}"
                ),
                format!("{:.1}", self.per_minute(watch)),
                "—",
                "—",
            ),
            row(
                format!(
                    "API requests per minute at idle, other than the Lease and the watches' \
                     renewals, {what}"
                ),
                format!("{:.1}", self.per_minute(other)),
                "—",
                "target 0 (Lease renewals only)",
            ),
            row(
                format!(
                    "API requests during the idle window ({:.0} s), {what}, by verb and resource",
                    self.elapsed.as_secs_f64()
                ),
                self.breakdown(),
                "—",
                "—",
            ),
        ]
    }
}

/// Waits [`SETTLE`], then measures the operator over [`WINDOW`].
fn idle(operator: &OperatorProcess) -> Idle {
    eprintln!(
        "[bench-scale] settling for {} s, then measuring for {} s",
        SETTLE.as_secs(),
        WINDOW.as_secs()
    );
    std::thread::sleep(SETTLE);
    let pid = operator.pid();
    let before = operator.scrape();
    let (ticks, start) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(WINDOW);
    let after = operator.scrape();
    let (ticks_after, elapsed) = (cpu_ticks(pid), start.elapsed());
    let rss = rss_kib(pid);
    let requests = e2e::requests_since(&e2e::api_requests(&before), &e2e::api_requests(&after));
    Idle {
        elapsed,
        passes: series(&after, RECONCILES).unwrap_or(0.0)
            - series(&before, RECONCILES).unwrap_or(0.0),
        cpu_ticks: ticks_after - ticks,
        rss_kib: rss,
        requests,
    }
}

fn print_table(title: &str, rows: &[Row]) {
    println!("\n{title}\n");
    println!("| measure | value | floor | target |");
    println!("| --- | --- | --- | --- |");
    for (m, v, f, t) in rows {
        println!("| {m} | {v} | {f} | {t} |");
    }
}

// --- phase A: the local cluster with its node ----------------------------------------------

/// Panics with what to do when the node cannot take `needed` more pods: the kubelet's `maxPods`
/// of a running cluster is what it was started with (`hack/with-cluster.sh` reuses it).
fn check_node_room(k: &Kubectl, needed: usize) {
    let nodes: Value = serde_json::from_str(&k.ok(&["get", "nodes", "-o", "json"], None)).unwrap();
    let nodes = nodes["items"].as_array().cloned().unwrap_or_default();
    assert!(
        !nodes.is_empty(),
        "no node: BENCH_ONLY=nodes needs the local cluster with its node \
         (`make bench-scale` runs it under hack/with-cluster.sh)"
    );
    let allocatable: usize = nodes
        .iter()
        .filter_map(|n| {
            n["status"]["allocatable"]["pods"]
                .as_str()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    let running = k
        .ok(
            &[
                "get",
                "pods",
                "--all-namespaces",
                "--field-selector=status.phase!=Succeeded,status.phase!=Failed",
                "-o",
                "name",
            ],
            None,
        )
        .lines()
        .count();
    eprintln!(
        "[bench-scale] the node admits {allocatable} pods; {running} run, the benchmark adds up \
         to {needed}"
    );
    assert!(
        running + needed <= POD_ADDRESSES,
        "{running} pods run and the benchmark adds up to {needed}: more than the {POD_ADDRESSES} \
         addresses of the node's pod range (a /24 in hack/cluster.sh); lower SCALE_CLUSTERS or \
         SCALE_SIZE"
    );
    assert!(
        running + needed <= allocatable,
        "the node admits {allocatable} pods (the kubelet's maxPods), {running} run already and \
         the benchmark adds up to {needed}: the running local cluster was started with a lower \
         limit, and hack/with-cluster.sh uses a running cluster as it is. Stop it \
         (`make cluster-down`) and run `make bench-scale` again, which starts it with \
         KUBELET_MAX_PODS={MAX_PODS}; or start it yourself with \
         `KUBELET_MAX_PODS={MAX_PODS} make cluster-up`; or lower SCALE_CLUSTERS"
    );
}

/// How many EtcdClusters of `ns` are Available and healthy at their size with their pods, of
/// how many: one list of clusters and one of pods.
fn available(k: &Kubectl, ns: &str) -> (usize, usize) {
    let clusters = get(k, ns, "etcdclusters");
    let pods = k.ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "etcd_cluster",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.labels.etcd_cluster} {.metadata.name}{"\n"}{end}"#,
        ],
        None,
    );
    let mut by_cluster: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for line in pods.lines() {
        if let Some((cluster, pod)) = line.split_once(' ') {
            by_cluster.entry(cluster).or_default().push(pod.to_string());
        }
    }
    by_cluster.values_mut().for_each(|pods| pods.sort());
    let items = clusters["items"].as_array().cloned().unwrap_or_default();
    let ready = items
        .iter()
        .filter(|c| {
            let name = c["metadata"]["name"].as_str().unwrap_or("");
            let size = c["spec"]["size"]
                .as_u64()
                .and_then(|s| usize::try_from(s).ok())
                .unwrap_or(0);
            let pods = by_cluster.get(name).map(Vec::as_slice).unwrap_or(&[]);
            cluster_healthy(c, size, pods)
        })
        .count();
    (ready, items.len())
}

fn nodes() {
    let n = env_usize("SCALE_CLUSTERS", 100);
    let size = env_usize("SCALE_SIZE", 1);
    assert!(n >= 1, "SCALE_CLUSTERS must be at least 1");
    assert!((1..=7).contains(&size), "SCALE_SIZE must be 1 to 7");
    let k = Kubectl::from_env();
    // The clusters' members, the heal's replacement, and a floor pod still terminating.
    check_node_room(&k, (n - 1) * size + 3 + 2);
    k.apply_crds();
    let ns = k.namespace("bench-scale");
    let ns = ns.name.as_str();
    // Declared after the namespace: stopped before the namespace goes.
    let operator = start_operator(ns);

    let floor = median((0..3).map(|i| e2e::etcd_pod_floor(&k, ns, i)).collect());
    until("the floor pods to be gone", 120, || {
        k.ok(&["get", "pods", "-n", ns, "-o", "name"], None)
            .trim()
            .is_empty()
    });

    let mut clusters: Vec<(String, usize)> = (0..n - 1)
        .map(|i| (format!("scale-{i:04}"), size))
        .collect();
    clusters.push(("heal".into(), 3));
    let members = (n - 1) * size + 3;
    let mut progress = Progress::new();
    let start = Instant::now();
    apply_clusters(&k, ns, &clusters);
    until_every(
        &format!("{n} clusters Available"),
        300 + 10 * n as u64,
        Duration::from_secs(1),
        || {
            let (ready, listed) = available(&k, ns);
            progress.report(|| {
                format!(
                    "{ready} of {n} clusters Available after {}",
                    secs(start.elapsed())
                )
            });
            ready == n && listed == n
        },
    );
    let took = start.elapsed();
    let what = format!("{n} clusters");
    let mut rows = vec![row(
        format!(
            "apply to Available, {what} ({} of size {size} and one of 3, {members} members; one \
             `kubectl apply`)",
            n - 1
        ),
        secs(took),
        &format!("{} (one etcd pod started directly)", secs(floor)),
        "—",
    )];

    rows.extend(idle(&operator).rows(&what, "< 48 MiB"));

    let victim = pod_names(&k, ns, "heal")[0].clone();
    let start = Instant::now();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
    until("the 3-member cluster healthy again", 300, || {
        !pod_names(&k, ns, "heal").contains(&victim) && healthy_at_size(&k, ns, "heal", 3)
    });
    rows.push(row(
        format!("member pod deleted to healthy at full size, while {what} exist"),
        secs(start.elapsed()),
        "—",
        "< 4 s",
    ));

    print_table(
        &format!(
            "bench-scale, nodes: {n} clusters on the local cluster's node (operator {})",
            operator_bin()
        ),
        &rows,
    );
    k.ok(
        &["delete", "etcdclusters", "--all", "-n", ns, "--wait=false"],
        None,
    );
}

fn operator_bin() -> String {
    std::env::var("ETCD_OPERATOR_BIN").unwrap_or_else(|_| "target/debug/etcd-operator".into())
}

// --- phase B: a control plane without a node -----------------------------------------------

/// How many EtcdClusters of `ns` have a status for their current generation, of how many: one
/// list.
fn observed(k: &Kubectl, ns: &str) -> (usize, usize) {
    let out = k.ok(
        &[
            "get",
            "etcdclusters",
            "-n",
            ns,
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.generation} {.status.observedGeneration}{"\n"}{end}"#,
        ],
        None,
    );
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    let seen = lines
        .iter()
        .filter(|l| matches!(l.split_once(' '), Some((g, o)) if !g.is_empty() && g == o.trim()))
        .count();
    (seen, lines.len())
}

fn observed_generation(k: &Kubectl, ns: &str, name: &str) -> Option<i64> {
    k.ok(
        &[
            "get",
            &format!("etcdcluster/{name}"),
            "-n",
            ns,
            "-o",
            "jsonpath={.status.observedGeneration}",
        ],
        None,
    )
    .trim()
    .parse()
    .ok()
}

fn control_plane() {
    let m = env_usize("SCALE_CP_CLUSTERS", 1000);
    assert!(
        m >= 5,
        "SCALE_CP_CLUSTERS must be at least 5 (5 spec changes)"
    );
    let k = Kubectl::from_env();
    let nodes = k.ok(&["get", "nodes", "-o", "name"], None);
    assert!(
        nodes.trim().is_empty(),
        "BENCH_ONLY=control-plane wants a control plane without a node (its {} members would \
         start here): run it under `hack/with-cluster.sh --control-plane-only`, as \
         `make bench-scale` does; nodes: {nodes}",
        3 * m
    );
    k.apply_crds();
    let ns = k.namespace("bench-scale-cp");
    let ns = ns.name.as_str();
    let operator = start_operator(ns);
    // The second replica, as the chart runs two: it watches from the start and takes over when
    // the leader is killed at the end.
    std::thread::sleep(Duration::from_secs(2));
    let standby = start_operator(ns);

    let names: Vec<(String, usize)> = (0..m).map(|i| (format!("cp-{i:05}"), 3)).collect();
    let mut progress = Progress::new();
    let start = Instant::now();
    for batch in names.chunks(CP_BATCH) {
        apply_clusters(&k, ns, batch);
    }
    let applied = start.elapsed();
    until_every(
        &format!("a pass over each of {m} clusters"),
        300 + m as u64,
        Duration::from_secs(2),
        || {
            let (seen, listed) = observed(&k, ns);
            progress.report(|| {
                format!(
                    "{seen} of {m} clusters observed after {}",
                    secs(start.elapsed())
                )
            });
            seen == m && listed == m
        },
    );
    let took = start.elapsed();
    let what = format!("{m} clusters (control plane only)");
    let mut rows = vec![row(
        format!(
            "apply to a pass over each (`status.observedGeneration` = `metadata.generation`), \
             {what} ({CP_BATCH} per `kubectl apply`, all applied after {})",
            secs(applied)
        ),
        secs(took),
        "—",
        "—",
    )];

    assert!(
        is_leader(&operator) != is_leader(&standby),
        "one replica leads"
    );
    let idle_leader = if is_leader(&operator) {
        &operator
    } else {
        &standby
    };
    // A new seed's address comes with the pod watch: reading it from the API server instead
    // (every 100 ms while it waited) was 527,015 GETs while 10,000 clusters were applied.
    let reads = idle_leader
        .api_requests()
        .get(&("get".to_string(), "pods".to_string()))
        .copied()
        .unwrap_or(0.0);
    rows.push(row(
        format!("GETs of pods by the leader from its start to a pass over each, {what}"),
        format!("{reads}"),
        "—",
        "0 (the pod watch has them)",
    ));
    rows.extend(idle(idle_leader).rows(&what, "< 512 MiB"));

    // A spec change to the pass that observes it, on clusters spread over the list.
    let mut took = Vec::new();
    for j in 0..5 {
        let name = &names[j * m / 5].0;
        let start = Instant::now();
        let generation: i64 = k
            .ok(
                &[
                    "patch",
                    &format!("etcdcluster/{name}"),
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"size":4}}"#,
                    "-o",
                    "jsonpath={.metadata.generation}",
                ],
                None,
            )
            .trim()
            .parse()
            .expect("the patched cluster's generation");
        until_every(
            &format!("{name}'s status to observe generation {generation}"),
            60,
            Duration::from_millis(20),
            || observed_generation(&k, ns, name).is_some_and(|o| o >= generation),
        );
        took.push(start.elapsed());
        std::thread::sleep(Duration::from_secs(1));
    }
    let max = *took.iter().max().unwrap();
    rows.push(row(
        format!(
            "spec change to pass, {what}: `spec.size` 3 -> 4 patched to `status.observedGeneration` \
             equal to the new generation, median / max of 5 (each includes a kubectl patch and \
             the poll's kubectl get, about 0.1 s)"
        ),
        format!("{} / {}", ms(median(took.clone())), ms(max)),
        "—",
        "< 1 s",
    ));
    eprintln!(
        "[bench-scale] spec change to pass, each: {}",
        took.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
    );

    let (leader, standby) = if is_leader(&operator) {
        (operator, standby)
    } else {
        (standby, operator)
    };
    rows.extend(failover_rows(leader, &standby, m, &what));

    print_table(
        &format!(
            "bench-scale, control plane: {m} clusters of 3, no node (operator {})",
            operator_bin()
        ),
        &rows,
    );
    k.ok(
        &["delete", "etcdclusters", "--all", "-n", ns, "--wait=false"],
        None,
    );
}

/// `etcd_operator_leader` of `operator` is 1.
fn is_leader(operator: &OperatorProcess) -> bool {
    series(&operator.scrape(), "etcd_operator_leader") == Some(1.0)
}

/// The leader killed (SIGKILL, as a node lost with it) to the standby replica having finished a
/// pass over each of the `m` clusters (`etcd_operator_clusters_passed`), beside the floor: the
/// Lease's duration, before which no replica may take over. Then what the new leader sent the
/// API server from the kill to 30 s after that: a takeover that rewrites statuses that did not
/// change is a burst of writes.
fn failover_rows(
    leader: OperatorProcess,
    standby: &OperatorProcess,
    m: usize,
    what: &str,
) -> Vec<Row> {
    const PASSED: &str = "etcd_operator_clusters_passed";
    let before = standby.api_requests();
    let rss_before = rss_kib(standby.pid());
    let start = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &leader.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL {}", leader.pid());
    drop(leader);
    let mut took_lead = None;
    let mut progress = Progress::new();
    until_every(
        &format!("the standby replica to pass over each of {m} clusters"),
        600,
        Duration::from_millis(250),
        || {
            let metrics = standby.scrape();
            if took_lead.is_none() && series(&metrics, "etcd_operator_leader") == Some(1.0) {
                took_lead = Some(start.elapsed());
            }
            let passed = series(&metrics, PASSED).unwrap_or(0.0);
            progress.report(|| {
                format!(
                    "{passed} of {m} clusters passed over after {}",
                    secs(start.elapsed())
                )
            });
            passed >= m as f64
        },
    );
    let took = start.elapsed();
    let took_lead = took_lead.unwrap_or(took);
    let rss_after = rss_kib(standby.pid());
    std::thread::sleep(Duration::from_secs(30));
    let requests = e2e::requests_since(&before, &standby.api_requests());
    let writes: f64 = requests
        .iter()
        .filter(|((verb, resource), _)| {
            resource != "leases" && !matches!(verb.as_str(), "get" | "list" | "watch")
        })
        .map(|(_, n)| n)
        // A sum of no floats is -0.
        .fold(0.0, |a, n| a + n);
    let breakdown = requests
        .iter()
        .map(|((verb, resource), n)| format!("{verb} {resource} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        row(
            format!(
                "leader killed -> the standby replica has passed over each of {what} \
                 (`etcd_operator_clusters_passed`; it held the Lease after {})",
                secs(took_lead)
            ),
            secs(took),
            "15.0 s (the Lease's duration)",
            "< 120 s",
        ),
        row(
            format!("the new leader's RSS, {what}: before the kill / after its passes"),
            format!(
                "{:.1} / {:.1} MiB",
                rss_before as f64 / 1024.0,
                rss_after as f64 / 1024.0
            ),
            "—",
            "< 512 MiB",
        ),
        row(
            format!(
                "API requests of the new leader from the kill to 30 s after its passes, {what} \
                 (writes other than the Lease: {writes})"
            ),
            if breakdown.is_empty() {
                "none".into()
            } else {
                breakdown
            },
            "—",
            "no burst of writes (no status rewritten that did not change)",
        ),
    ]
}
