//! The operator under test: installed by the chart, or run as a process on this host.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::*;

/// `helm` for the cluster under test: `$HELM`, or `helm` from PATH.
pub fn helm(args: &[&str]) -> String {
    let bin = std::env::var("HELM").unwrap_or_else(|_| "helm".into());
    let out = Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}; set HELM or put helm on PATH"));
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The operator installed the way users install it: the chart in `charts/etcd-operator`, in the
/// test's namespace, watching that namespace only (so its namespaced RBAC is what the test
/// exercises). The image is the chart's default, `$E2E_IMAGE` (`repository:tag`) when set, with
/// pull policy `$E2E_IMAGE_PULL_POLICY` (default `Never`: the local cluster has it imported).
/// On a failing test its logs are printed.
pub struct Operator<'a> {
    kubectl: &'a Kubectl,
    /// The release's namespace.
    pub ns: String,
}

/// The operator image under test: `$E2E_IMAGE`, else the chart's default (what `make image`
/// builds and imports).
pub fn image() -> String {
    std::env::var("E2E_IMAGE").unwrap_or_else(|_| {
        let chart = std::fs::read_to_string(repo_root().join("charts/etcd-operator/Chart.yaml"))
            .expect("reading Chart.yaml");
        let app = chart
            .lines()
            .find_map(|l| l.strip_prefix("appVersion:"))
            .expect("Chart.yaml has an appVersion")
            .trim()
            .trim_matches('"');
        format!("quay.io/etcd-operator/etcd-operator:v{app}")
    })
}

/// The holder of the chart's operator Lease in `ns` ("" when none).
pub fn lease_holder(k: &Kubectl, ns: &str) -> String {
    get(k, ns, &format!("lease/{RELEASE}"))["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Whether an operator pod (as JSON) is Ready and not being deleted.
pub fn operator_pod_ready(p: &Value) -> bool {
    p["metadata"]["deletionTimestamp"].is_null()
        && p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The chart's release name in every test namespace.
pub const RELEASE: &str = "etcd-operator";
/// The label selector of the operator's pods.
pub const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

impl<'a> Operator<'a> {
    /// `helm install` into `ns` with `extra` `--set` values; waits until a replica is ready.
    /// One replica that reads no Nodes unless `extra` says otherwise: most tests are about
    /// one cluster, not about the operator's own placement, and a namespaced install that
    /// reads Nodes leaves a ClusterRole behind its namespace (see `tests/nodes.rs`).
    pub fn install(k: &'a Kubectl, ns: &str, extra: &[&str]) -> Self {
        let mut values = vec!["replicas=1", "readNodes=false"];
        values.extend(extra);
        Self::install_chart(
            k,
            ns,
            &repo_root().join("charts/etcd-operator"),
            std::env::var("E2E_IMAGE").ok().as_deref(),
            &values,
        )
    }

    /// `helm install` into `ns` with the chart's defaults, as `make demo` installs it (only
    /// the namespace, the image and the test's Lease timings set).
    pub fn install_defaults(k: &'a Kubectl, ns: &str) -> Self {
        Self::install_chart(
            k,
            ns,
            &repo_root().join("charts/etcd-operator"),
            std::env::var("E2E_IMAGE").ok().as_deref(),
            &[],
        )
    }

    /// `helm upgrade --install` of `chart` into `ns` with the image `image` (`repository:tag`;
    /// the chart's default when `None`) and `extra` `--set` values; waits until a replica is
    /// ready.
    pub fn install_chart(
        k: &'a Kubectl,
        ns: &str,
        chart: &Path,
        image: Option<&str>,
        extra: &[&str],
    ) -> Self {
        let watch = format!("watchNamespaces={{{ns}}}");
        let policy = format!(
            "image.pullPolicy={}",
            std::env::var("E2E_IMAGE_PULL_POLICY").unwrap_or_else(|_| "Never".into())
        );
        let mut args = vec![
            "upgrade",
            "--install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            ns,
            "--set",
            &watch,
            "--set",
            &policy,
            "--set",
            "log.format=text",
            "--set",
            "leaderElection.leaseDuration=10",
            "--set",
            "leaderElection.leaseGrace=3",
        ];
        let (repo, tag);
        if let Some((r, t)) = image.and_then(|i| i.rsplit_once(':')) {
            repo = format!("image.repository={r}");
            tag = format!("image.tag={t}");
            args.extend(["--set", &repo, "--set", &tag]);
        }
        // E2E_OPERATOR_LOG: the operator's log filter (`info,etcd_operator=debug` logs every
        // pass's action), for chasing a test that stalls. helm's --set splits at commas.
        let level = std::env::var("E2E_OPERATOR_LOG")
            .ok()
            .map(|l| format!("log.level={}", l.replace(',', "\\,")));
        if let Some(level) = &level {
            args.extend(["--set", level]);
        }
        for e in extra {
            args.extend(["--set", e]);
        }
        let config = k.kubeconfig().map(|p| p.to_string_lossy().into_owned());
        if let Some(config) = &config {
            args.extend(["--kubeconfig", config]);
        }
        helm(&args);
        let op = Operator {
            kubectl: k,
            ns: ns.into(),
        };
        op.wait_ready(1);
        op
    }

    /// Waits until `n` operator pods are Ready.
    pub fn wait_ready(&self, n: usize) {
        until("the operator to be ready", 120, || {
            self.pods().iter().filter(|p| operator_pod_ready(p)).count() >= n
        });
    }

    /// How many times the operator's containers have restarted, all replicas together.
    pub fn restarts(&self) -> i64 {
        (self.pods().iter())
            .flat_map(|p| p["status"]["containerStatuses"].as_array().cloned())
            .flatten()
            .map(|c| c["restartCount"].as_i64().unwrap_or(0))
            .sum()
    }

    /// The operator's pods, as JSON.
    pub fn pods(&self) -> Vec<Value> {
        let list = self.kubectl.ok(
            &[
                "get",
                "pods",
                "-n",
                &self.ns,
                "-l",
                OPERATOR_SELECTOR,
                "-o",
                "json",
            ],
            None,
        );
        let list: Value = serde_json::from_str(&list).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Kills every replica at once (no grace: a crash, not a shutdown) and waits for a new one.
    pub fn kill(&self) {
        self.kubectl.ok(
            &[
                "delete",
                "pods",
                "-n",
                &self.ns,
                "-l",
                OPERATOR_SELECTOR,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ],
            None,
        );
        self.wait_ready(1);
    }

    /// The operator's logs (every replica, current and previous containers).
    pub fn logs(&self) -> String {
        let out = self.kubectl.run(
            &[
                "logs",
                "-n",
                &self.ns,
                "-l",
                OPERATOR_SELECTOR,
                "--prefix",
                "--tail=200",
                "--all-containers",
            ],
            None,
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// For a failed test: the namespace's pods, clusters and events, the nodes, and the end of
/// every etcd member's log (etcd says there why it refused a request; the events say why a
/// pod never ran).
pub fn namespace_report(kubectl: &Kubectl, ns: &str) -> String {
    let text_of = |o: std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let mut out = text_of(kubectl.run(&["get", "pods,etcdclusters", "-n", ns, "-o", "wide"], None));
    out.push_str("--- events ---\n");
    let events = text_of(kubectl.run(
        &["get", "events", "-n", ns, "--sort-by=.lastTimestamp"],
        None,
    ));
    let lines: Vec<&str> = events.lines().collect();
    out.push_str(&lines[lines.len().saturating_sub(60)..].join("\n"));
    out.push_str("\n--- nodes ---\n");
    out.push_str(&text_of(kubectl.run(&["get", "nodes", "-o", "wide"], None)));
    // A taint (DiskPressure, NotReady) is why a pod stays unscheduled.
    out.push_str(&text_of(kubectl.run(
        &[
            "get",
            "nodes",
            "-o",
            "custom-columns=NODE:.metadata.name,TAINTS:.spec.taints[*].key",
        ],
        None,
    )));
    // Every member's whole log, once: its end (etcd says there why it refused a request),
    // and what its transport and membership did over the whole test (a refusal such as
    // "unhealthy cluster" is explained by which peer became inactive when, which the end
    // of the log no longer shows).
    let all = kubectl.run(
        &[
            "logs",
            "-n",
            ns,
            "-l",
            "etcd_cluster",
            "--prefix",
            "--all-containers",
            "--max-log-requests=20",
        ],
        None,
    );
    let text = String::from_utf8_lossy(&all.stdout);
    out.push_str(&String::from_utf8_lossy(&all.stderr));
    let mut by_pod: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for line in text.lines() {
        let pod = line.split(']').next().unwrap_or_default();
        by_pod.entry(pod).or_default().push(line);
    }
    for lines in by_pod.values() {
        for line in &lines[lines.len().saturating_sub(40)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    let notable: Vec<&str> = text
        .lines()
        .filter(|l| NOTABLE.iter().any(|n| l.contains(n)))
        .collect();
    out.push_str("--- membership and transport, every member ---\n");
    for line in &notable[notable.len().saturating_sub(80)..] {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// etcd log messages that tell how members saw each other.
const NOTABLE: [&str; 7] = [
    "peer became",
    "rejecting member",
    "lost TCP streaming",
    "elected leader",
    "added member",
    "removed member",
    "failed to dial",
];

impl Drop for Operator<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.logs();
            eprintln!("--- operator logs ({}) ---\n{logs}", self.ns);
            eprintln!(
                "--- the namespace ({}) ---\n{}",
                self.ns,
                namespace_report(self.kubectl, &self.ns)
            );
            eprintln!("{}", summary(self.kubectl, &self.ns, &logs));
        }
    }
}

/// The few lines that say where a failed test stood, printed last: a CI log keeps the end of
/// a long report, and the middle (the operator's own log) may be cut from it. Each cluster's
/// conditions, then the operator's last lines.
fn summary(kubectl: &Kubectl, ns: &str, logs: &str) -> String {
    let clip = |s: &str, n: usize| s.chars().take(n).collect::<String>();
    let mut out = format!("--- in short ({ns}) ---\n");
    let list = kubectl.run(&["get", "etcdclusters", "-n", ns, "-o", "json"], None);
    let list: Value = serde_json::from_slice(&list.stdout).unwrap_or_default();
    for c in list["items"].as_array().into_iter().flatten() {
        for cond in c["status"]["conditions"].as_array().into_iter().flatten() {
            out.push_str(&clip(
                &format!(
                    "{} {}={} {}: {}",
                    c["metadata"]["name"].as_str().unwrap_or_default(),
                    cond["type"].as_str().unwrap_or_default(),
                    cond["status"].as_str().unwrap_or_default(),
                    cond["reason"].as_str().unwrap_or_default(),
                    cond["message"].as_str().unwrap_or_default()
                ),
                300,
            ));
            out.push('\n');
        }
    }
    let lines: Vec<&str> = logs.lines().collect();
    for line in &lines[lines.len().saturating_sub(8)..] {
        out.push_str(&clip(line, 400));
        out.push('\n');
    }
    out
}

/// The operator as a host process (`target/debug/etcd-operator run --namespace NS`, or
/// `$ETCD_OPERATOR_BIN`), killed on drop; for the benchmark, which reads its RSS and CPU time,
/// and for tests that count its reconcile passes through its `/metrics`. Its log goes to
/// `$TMPDIR/etcd-operator-NS.log`; the end of it is printed when a test fails.
///
/// The binary is not built by `cargo test -p e2e` (it belongs to another package): build it
/// first (`cargo build --bin etcd-operator`) or point `ETCD_OPERATOR_BIN` at a release build.
pub struct OperatorProcess {
    child: Child,
    /// Where `/metrics` answers, as `host:port`.
    metrics: String,
    log: PathBuf,
    ns: String,
}

/// The series of reconcile passes of the EtcdCluster controller, as exposed.
pub const RECONCILES: &str = "etcd_operator_reconciles_total{controller=\"etcdcluster\"}";

impl OperatorProcess {
    /// Starts the operator for namespace `ns`, serving its metrics on a free loopback port.
    pub fn start(ns: &str) -> Self {
        Self::start_with(ns, &[])
    }

    /// Starts the operator for namespace `ns` with `extra_args` after `run --namespace NS`. Unless
    /// they set `--metrics-bind-address` (to a fixed port: [`Self::metrics_url`] must know it),
    /// a free 127.0.0.1 port is chosen (bound, read and released just before the start).
    pub fn start_with(ns: &str, extra_args: &[&str]) -> Self {
        let bin: PathBuf = std::env::var("ETCD_OPERATOR_BIN")
            .map(Into::into)
            .unwrap_or_else(|_| repo_root().join("target/debug/etcd-operator"));
        warn_if_stale(&bin);
        let log_path = std::env::temp_dir().join(format!("etcd-operator-{ns}.log"));
        // Appended, so a restarted operator's log follows its predecessor's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut args: Vec<String> = vec!["run".into(), "--namespace".into(), ns.into()];
        let bind = match metrics_bind_arg(extra_args) {
            Some(addr) => addr,
            None => {
                let addr = format!("127.0.0.1:{}", free_port());
                args.extend(["--metrics-bind-address".into(), addr.clone()]);
                addr
            }
        };
        args.extend(extra_args.iter().map(|a| a.to_string()));
        let child = Command::new(&bin)
            .args(&args)
            .env("RUST_LOG", "info,kube=warn")
            .env("MEMBER_GATE_IMAGE", image())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {}: {e} (build it with `cargo build --bin etcd-operator`, \
                     or set ETCD_OPERATOR_BIN)",
                    bin.display()
                )
            });
        OperatorProcess {
            child,
            metrics: connect_address(&bind),
            log: log_path,
            ns: ns.to_string(),
        }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://HOST:PORT/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.metrics)
    }

    /// The body of `/metrics`. Waits up to 20 s for the endpoint to answer (the process may be
    /// starting), then panics.
    pub fn scrape(&self) -> String {
        let start = Instant::now();
        loop {
            match http_get(&self.metrics, "/metrics") {
                Ok(body) => return body,
                Err(e) if start.elapsed() > Duration::from_secs(20) => panic!(
                    "scraping {}: {e}\n--- operator log ({}) ---\n{}",
                    self.metrics_url(),
                    self.log.display(),
                    self.log_tail(50)
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// The EtcdCluster controller's reconcile passes so far ([`RECONCILES`]), over every cluster
    /// the process manages; 0 before the first.
    pub fn reconciles(&self) -> f64 {
        series(&self.scrape(), RECONCILES).unwrap_or(0.0)
    }

    /// The process's requests to the Kubernetes API so far, by `(verb, resource)`
    /// ([`API_REQUESTS`]).
    pub fn api_requests(&self) -> BTreeMap<(String, String), f64> {
        api_requests(&self.scrape())
    }

    /// The process's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the process's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- operator log ({}, last 200 lines) ---\n{}",
                self.log.display(),
                self.log_tail(200)
            );
            eprintln!(
                "--- the namespace ({}) ---\n{}",
                self.ns,
                namespace_report(&Kubectl::from_env(), &self.ns)
            );
        }
    }
}

/// The value of `--metrics-bind-address` in `args`, in either spelling.
pub(crate) fn metrics_bind_arg(args: &[&str]) -> Option<String> {
    const FLAG: &str = "--metrics-bind-address";
    args.iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix(FLAG) {
            Some("") => args.get(i + 1).map(|v| v.to_string()),
            Some(v) => v.strip_prefix('=').map(String::from),
            None => None,
        })
}

/// Where to connect to reach a listener bound to `bind`: loopback for an unspecified address.
pub(crate) fn connect_address(bind: &str) -> String {
    let mut addr: SocketAddr = bind
        .parse()
        .unwrap_or_else(|e| panic!("--metrics-bind-address {bind}: {e}"));
    assert!(
        addr.port() != 0,
        "--metrics-bind-address {bind}: give a fixed port (or none, for a free one), so the \
         metrics can be scraped"
    );
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr.to_string()
}

/// A 127.0.0.1 port that was free a moment ago: bound to port 0, read, released.
pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().unwrap().port()
}

/// Warns when `bin` is older than a source file of the operator: the test would run old code.
pub(crate) fn warn_if_stale(bin: &Path) {
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return;
    };
    fn newest(dir: &Path) -> Option<std::time::SystemTime> {
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| {
                let e = e.ok()?;
                let t = e.file_type().ok()?;
                if t.is_dir() {
                    newest(&e.path())
                } else {
                    e.metadata().ok()?.modified().ok()
                }
            })
            .max()
    }
    if newest(&repo_root().join("src")).is_some_and(|src| src > built) {
        eprintln!(
            "warning: {} is older than the operator's sources; rebuild it \
             (`cargo build --bin etcd-operator`)",
            bin.display()
        );
    }
}
