//! Helpers for tests that run against a real Kubernetes API server: the local cluster that
//! `hack/cluster.sh` starts, or any cluster that `KUBECONFIG` names.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// moto (S3) and Azurite (Azure Blob), shared with the unit tier's tests.
#[path = "../../tests/support/stores.rs"]
pub mod stores;

pub mod backups;

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `kubectl` against the cluster under test.
pub struct Kubectl {
    bin: PathBuf,
}

impl Kubectl {
    /// Uses `$KUBECTL` or `kubectl` from PATH, and `$KUBECONFIG`. Panics with instructions when
    /// no cluster is configured: these tests must not pass without judging anything.
    pub fn from_env() -> Self {
        assert!(
            std::env::var_os("KUBECONFIG").is_some(),
            "KUBECONFIG is not set: start the local control plane with \
             `hack/cluster.sh up --control-plane-only` and export \
             KUBECONFIG=$(hack/cluster.sh kubeconfig), or run `make test`"
        );
        let bin = std::env::var_os("KUBECTL")
            .map(PathBuf::from)
            .unwrap_or("kubectl".into());
        Kubectl { bin }
    }

    /// Runs kubectl with `args`, feeding `stdin`.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(&self.bin)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl and panics unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Installs the committed CRDs (server-side apply) and waits until they are served.
    pub fn apply_crds(&self) {
        let dir = repo_root().join("crds");
        self.ok(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                dir.to_str().unwrap(),
            ],
            None,
        );
        self.ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                dir.to_str().unwrap(),
            ],
            None,
        );
    }

    /// Creates a namespace with a unique name; [`Namespace`] deletes it when dropped.
    pub fn namespace(&self, prefix: &str) -> Namespace<'_> {
        let out = self.ok(
            &["create", "-o", "jsonpath={.metadata.name}", "-f", "-"],
            Some(
                &serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"generateName": format!("{prefix}-")}
                })
                .to_string(),
            ),
        );
        Namespace {
            kubectl: self,
            name: out.trim().to_string(),
        }
    }
}

/// A namespace that is deleted (without waiting) when the test ends.
pub struct Namespace<'a> {
    kubectl: &'a Kubectl,
    /// Its name.
    pub name: String,
}

impl Drop for Namespace<'_> {
    fn drop(&mut self) {
        self.kubectl
            .run(&["delete", "namespace", &self.name, "--wait=false"], None);
    }
}

/// A manifest of one of our kinds.
pub fn manifest(kind: &str, name: &str, spec: &Value) -> String {
    serde_json::json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    })
    .to_string()
}

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

/// The chart's release name in every test namespace.
pub const RELEASE: &str = "etcd-operator";
/// The label selector of the operator's pods.
pub const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

impl<'a> Operator<'a> {
    /// `helm install` into `ns` with `extra` `--set` values; waits until a replica is ready.
    pub fn install(k: &'a Kubectl, ns: &str, extra: &[&str]) -> Self {
        let chart = repo_root().join("charts/etcd-operator");
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
        let image = std::env::var("E2E_IMAGE").ok();
        let (repo, tag);
        if let Some((r, t)) = image.as_deref().and_then(|i| i.rsplit_once(':')) {
            repo = format!("image.repository={r}");
            tag = format!("image.tag={t}");
            args.extend(["--set", &repo, "--set", &tag]);
        }
        for e in extra {
            args.extend(["--set", e]);
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
            self.pods()
                .iter()
                .filter(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    }) && p["metadata"]["deletionTimestamp"].is_null()
                })
                .count()
                >= n
        });
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

impl Drop for Operator<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- operator logs ({}) ---\n{}", self.ns, self.logs());
        }
    }
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
        }
    }
}

/// The value of `--metrics-bind-address` in `args`, in either spelling.
fn metrics_bind_arg(args: &[&str]) -> Option<String> {
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
fn connect_address(bind: &str) -> String {
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
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().unwrap().port()
}

/// Warns when `bin` is older than a source file of the operator: the test would run old code.
fn warn_if_stale(bin: &Path) {
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

/// GET `path` from `addr` (`host:port`) over HTTP/1.0 (the server closes the connection after
/// the response); the body of a 200 response.
fn http_get(addr: &str, path: &str) -> Result<String, String> {
    let target = resolve(addr)?;
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| format!("writing to {addr}: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no complete response from {addr}: {response:?}"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("GET {path} from {addr}: {status}"));
    }
    Ok(body.to_string())
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to nothing"))
}

/// The value of a series in a Prometheus or OpenMetrics exposition, its name and labels given
/// exactly as exposed (`name{label="value"}`), if present.
pub fn series(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// Every series of metric `name` in a Prometheus or OpenMetrics exposition, as its labels
/// (name to value) and its value: `name{a="x",b="y"} 3` gives `({a: x, b: y}, 3.0)`. Label
/// values with escaped quotes or commas are not expected (ours have none).
pub fn labelled_series(metrics: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    metrics
        .lines()
        .filter_map(|l| {
            let (labels, rest) = l.strip_prefix(name)?.strip_prefix('{')?.split_once("} ")?;
            let value = rest.split(' ').next()?.parse().ok()?;
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect::<Option<_>>()?;
            Some((labels, value))
        })
        .collect()
}

/// The operator's count of its requests to the Kubernetes API.
pub const API_REQUESTS: &str = "etcd_operator_api_requests_total";

/// The operator's requests to the Kubernetes API so far, by `(verb, resource)`
/// ([`API_REQUESTS`]).
pub fn api_requests(metrics: &str) -> BTreeMap<(String, String), f64> {
    labelled_series(metrics, API_REQUESTS)
        .into_iter()
        .map(|(mut labels, v)| {
            let verb = labels.remove("verb").unwrap_or_default();
            let resource = labels.remove("resource").unwrap_or_default();
            ((verb, resource), v)
        })
        .collect()
}

/// The requests made between two readings of [`api_requests`]: those that moved, by how much.
pub fn requests_since(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, delta)| *delta > 0.0)
        .collect()
}

/// The resident set of process `pid` (`VmRSS` in `/proc/PID/status`), in KiB; 0 when the
/// process is gone.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Clock ticks per second of the CPU times in `/proc/PID/stat` (`USER_HZ`, what
/// `sysconf(_SC_CLK_TCK)` and `getconf CLK_TCK` report): 100 on every architecture Linux exposes
/// to user space with a fixed value, whatever the kernel's internal `HZ`. Fixed here rather than
/// asked for, to need no libc binding; one tick is 10 ms.
pub const CLK_TCK: u64 = 100;

/// CPU time a process has used so far, user plus system (`utime` + `stime`, fields 14 and 15 of
/// `/proc/PID/stat`), in ticks of [`CLK_TCK`] per second. Panics when the process is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/stat: {e}"));
    stat_cpu_ticks(&stat).unwrap_or_else(|| panic!("no CPU times in /proc/{pid}/stat: {stat}"))
}

/// utime + stime from the text of `/proc/PID/stat`. Field 2, the command name, is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted after the last
/// `)`: the first there is field 3 (the state).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// One client writing keys serially to one etcd endpoint through its JSON gateway
/// (`POST /v3/kv/put`), over a single kept-alive HTTP/1.1 connection that is opened again after
/// any error. Runs on its own thread until [`Writer::stop`], or by itself until the time limit
/// given at the start; dropping it stops it too.
pub struct Writer {
    endpoint: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<WriterTally>>,
}

/// What a writer did.
#[derive(Default, Debug)]
pub struct WriterTally {
    /// Writes etcd acknowledged.
    pub writes: u64,
    /// Writes that failed (some may have been applied all the same).
    pub errors: u64,
    /// The last error.
    pub last_error: String,
    /// With [`Keys::Unique`]: the numbers of the acknowledged writes, whose keys
    /// (`e2e-writer/<n>`) must all be there afterwards.
    pub acked: Vec<u64>,
    /// The longest time between two acknowledged writes (or from the start to the first): the
    /// longest a client waited.
    pub longest_stall: Duration,
}

/// Which keys a [`Writer`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// `e2e-writer/0` to `e2e-writer/999`, overwritten in turn.
    Cycle,
    /// A new key per write, `e2e-writer/<n>`, so that every acknowledged write can be checked.
    Unique,
}

impl Writer {
    /// Starts writing to `endpoint` (`http://IP:2379`) for at most `max`, cycling through
    /// `e2e-writer/0` to `e2e-writer/999`.
    pub fn start(endpoint: &str, max: Duration) -> Self {
        Writer::start_with(endpoint, max, Keys::Cycle)
    }

    /// Starts writing `keys` to `endpoint` for at most `max`.
    pub fn start_with(endpoint: &str, max: Duration, keys: Keys) -> Self {
        let addr = endpoint
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("{endpoint}: the writer speaks plain http:// only"))
            .trim_end_matches('/')
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let deadline = Instant::now() + max;
        let thread = std::thread::spawn(move || write_until(&addr, &flag, deadline, keys));
        Writer {
            endpoint: endpoint.into(),
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the writer (waiting for the write in flight) and returns how many writes
    /// succeeded. Failed writes, if any, are reported on stderr.
    pub fn stop(self) -> u64 {
        self.report().writes
    }

    /// Stops the writer and returns all it did. Failed writes, if any, are reported on stderr.
    pub fn report(mut self) -> WriterTally {
        let tally = self.finish();
        if tally.errors > 0 {
            eprintln!(
                "writer to {}: {} writes failed, the last with: {}",
                self.endpoint, tally.errors, tally.last_error
            );
        }
        tally
    }

    fn finish(&mut self) -> WriterTally {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().expect("the writer thread panicked"))
            .unwrap_or_default()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.finish();
    }
}

fn write_until(addr: &str, stop: &AtomicBool, deadline: Instant, keys: Keys) -> WriterTally {
    let mut tally = WriterTally::default();
    let mut conn = None;
    let mut last_ack = Instant::now();
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let n = tally.writes + tally.errors;
        let key = match keys {
            Keys::Cycle => n % 1000,
            Keys::Unique => n,
        };
        match put(&mut conn, addr, key, n) {
            Ok(()) => {
                tally.writes += 1;
                tally.longest_stall = tally.longest_stall.max(last_ack.elapsed());
                last_ack = Instant::now();
                if keys == Keys::Unique {
                    tally.acked.push(n);
                }
            }
            Err(e) => {
                conn = None;
                tally.errors += 1;
                tally.last_error = e;
                // Not a busy loop against an endpoint that refuses.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    tally
}

/// The keys under `prefix` that the etcd member behind `endpoint` (`http://IP:2379`) serves,
/// read linearizably through its JSON gateway (`POST /v3/kv/range`, keys only).
pub fn keys_under(
    endpoint: &str,
    prefix: &str,
) -> Result<std::collections::BTreeSet<String>, String> {
    let addr = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint}: plain http:// only"))?
        .trim_end_matches('/');
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let body = format!(
        r#"{{"key":"{}","range_end":"{}","keys_only":true}}"#,
        base64(prefix.as_bytes()),
        base64(&end)
    );
    let stream = TcpStream::connect_timeout(&resolve(addr)?, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let request = format!(
        "POST /v3/kv/range HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    reader
        .get_mut()
        .write_all(request.as_bytes())
        .map_err(|e| format!("writing to {addr}: {e}"))?;
    let (status, body, _) = read_response(&mut reader).map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("range answered {status}"));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let key = kv["key"].as_str().ok_or("a key without a key")?;
            String::from_utf8(unbase64(key)?).map_err(|e| e.to_string())
        })
        .collect()
}

/// One put of key `e2e-writer/<key>`, value `value-<n>`, on `conn`, connecting first when
/// there is none.
fn put(
    conn: &mut Option<BufReader<TcpStream>>,
    addr: &str,
    key: u64,
    n: u64,
) -> Result<(), String> {
    if conn.is_none() {
        let stream = TcpStream::connect_timeout(&resolve(addr)?, Duration::from_secs(2))
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        // Bounded, so that a hung endpoint cannot hold `stop` for long.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(5))))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| e.to_string())?;
        *conn = Some(BufReader::new(stream));
    }
    let reader = conn.as_mut().unwrap();
    let body = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        base64(format!("e2e-writer/{key}").as_bytes()),
        base64(format!("value-{n}").as_bytes())
    );
    let request = format!(
        "POST /v3/kv/put HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    reader
        .get_mut()
        .write_all(request.as_bytes())
        .map_err(|e| format!("writing to {addr}: {e}"))?;
    let (status, body, keep_alive) =
        read_response(reader).map_err(|e| format!("reading from {addr}: {e}"))?;
    if !keep_alive {
        *conn = None;
    }
    let body = String::from_utf8_lossy(&body);
    if status != 200 || !body.contains("\"header\"") {
        return Err(format!("put answered {status}: {body}"));
    }
    Ok(())
}

/// Reads one HTTP/1.1 response: (status, body, whether the connection stays open). Bodies with
/// a Content-Length, chunked, or up to the end of the connection.
fn read_response(r: &mut BufReader<TcpStream>) -> std::io::Result<(u16, Vec<u8>, bool)> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("status line {line:?}")))?;
    let mut keep_alive = line.starts_with("HTTP/1.1");
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = line.trim_end().split(';').next().unwrap_or("");
            let size =
                usize::from_str_radix(size, 16).map_err(|_| bad(format!("chunk size {line:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
        keep_alive = false;
    }
    Ok((status, body, keep_alive))
}

/// Decodes standard base64 (etcd's gateway answers keys and values in it).
// Both casts keep what they must: an index into the 64-letter alphabet, and the low byte of
// the accumulator, which is the decoded byte.
#[allow(clippy::cast_possible_truncation)]
pub fn unbase64(text: &str) -> Result<Vec<u8>, String> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET
            .iter()
            .position(|a| *a == c)
            .ok_or_else(|| format!("not base64: {text}"))?;
        acc = acc << 6 | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// Standard base64 with padding, which etcd's gateway wants for keys and values.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = byte(0) << 16 | byte(1) << 8 | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The host PID of the operator process running in pod `pod`, when this machine runs it (the
/// local cluster's node is this host): found by its `POD_NAME` environment variable.
pub fn host_pid(pod: &str) -> Option<u32> {
    host_process(
        b"/usr/local/bin/etcd-operator\0run",
        &format!("POD_NAME={pod}"),
    )
}

/// The host PID of a process whose command line starts with `cmdline` and whose environment
/// holds `env` (`NAME=value`): how tests find a container's process on the local cluster's
/// node, which is this host.
pub fn host_process(cmdline: &[u8], env: &str) -> Option<u32> {
    let needle = format!("{env}\0");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let own = std::fs::read(e.path().join("cmdline")).ok()?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        (own.starts_with(cmdline)
            && environ
                .windows(needle.len())
                .any(|w| w == needle.as_bytes()))
        .then_some(pid)
    })
}

/// The pod IP of one member of `cluster`.
pub fn member_ip(k: &Kubectl, ns: &str, cluster: &str) -> String {
    k.ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("app=etcd,etcd_cluster={cluster}"),
            "-o",
            "jsonpath={.items[0].status.podIP}",
        ],
        None,
    )
    .trim()
    .to_string()
}

/// `kubectl get -n NS WHAT -o json`.
pub fn get(k: &Kubectl, ns: &str, what: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", "-n", ns, what, "-o", "json"], None)).unwrap()
}

/// Polls `check` every 200 ms until it holds; panics after `secs`. Returns the time it took.
pub fn until(what: &str, secs: u64, check: impl FnMut() -> bool) -> Duration {
    until_every(what, secs, Duration::from_millis(200), check)
}

/// Polls `check` every `period` until it holds; panics after `secs`. Returns the time it took.
/// A longer period than [`until`]'s for checks that cost the API server (bulk lists), a shorter
/// one for latencies.
pub fn until_every(
    what: &str,
    secs: u64,
    period: Duration,
    mut check: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}"
        );
        std::thread::sleep(period);
    }
    start.elapsed()
}

/// Polls `check` every 200 ms for `secs` seconds and panics the first time it does not hold: for
/// what must *not* happen, which no status can show. Wait for the status to show that the
/// operator has seen what it must not act on before starting the window, so that the window
/// measures the operator's decision rather than its latency.
pub fn holds_for(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        assert!(
            check(),
            "{what}: stopped holding after {:.1}s of {secs}s",
            start.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The status (`True`/`False`) of a condition of an object, or "".
pub fn condition(object: &Value, type_: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Whether `object` is `Degraded` with `reason` and a message that contains every one of
/// `parts` (a field, a Secret, the problem).
pub fn degraded_with(object: &Value, reason: &str, parts: &[&str]) -> bool {
    object["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "Degraded"
                && c["status"] == "True"
                && c["reason"] == reason
                && c["message"]
                    .as_str()
                    .is_some_and(|m| parts.iter().all(|p| m.contains(p)))
        })
    })
}

/// The floor of the benchmarks: one bare etcd 3.6.16 pod `floor-<i>` in `ns` (the image
/// imported, no operator involved), from create to Ready; the pod is deleted (without waiting)
/// afterwards.
pub fn etcd_pod_floor(k: &Kubectl, ns: &str, i: usize) -> Duration {
    let name = format!("floor-{i}");
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.16",
          "imagePullPolicy": "Never",
          "command": ["/usr/local/bin/etcd"],
          "args": ["--data-dir=/tmp/data", "--listen-client-urls=http://0.0.0.0:2379",
                   "--advertise-client-urls=http://127.0.0.1:2379",
                   "--listen-metrics-urls=http://0.0.0.0:2381"],
          "readinessProbe": {"httpGet": {"path": "/readyz", "port": 2381}, "periodSeconds": 2}}]}});
    let start = Instant::now();
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&pod.to_string()));
    k.ok(
        &[
            "wait",
            "-n",
            ns,
            &format!("pod/{name}"),
            "--for=condition=Ready",
            "--timeout=120s",
        ],
        None,
    );
    let took = start.elapsed();
    k.ok(
        &["delete", "-n", ns, &format!("pod/{name}"), "--wait=false"],
        None,
    );
    took
}

/// Names of the member pods of `cluster`, sorted.
pub fn pod_names(k: &Kubectl, ns: &str, cluster: &str) -> Vec<String> {
    let selector = format!("etcd_cluster={cluster}");
    let out = k.ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &selector,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    );
    let mut names: Vec<String> = out.split_whitespace().map(String::from).collect();
    names.sort();
    names
}

/// Whether `cluster` has exactly `n` member pods, none being deleted, every one Ready.
pub fn pods_ready(k: &Kubectl, ns: &str, cluster: &str, n: usize) -> bool {
    all_ready(&member_pods(k, ns, cluster), n)
}

/// `cluster`'s member pods, as JSON, in one request.
pub fn member_pods(k: &Kubectl, ns: &str, cluster: &str) -> Vec<Value> {
    let selector = format!("etcd_cluster={cluster}");
    let out = k.ok(
        &["get", "pods", "-n", ns, "-l", &selector, "-o", "json"],
        None,
    );
    let pods: Value = serde_json::from_str(&out).unwrap();
    pods["items"].as_array().cloned().unwrap_or_default()
}

/// The names of `pods` (as [`member_pods`] gives them), sorted.
pub fn names_of(pods: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    names.sort();
    names
}

/// Whether `pods` are exactly `n`, none being deleted, every one Ready.
pub fn all_ready(pods: &[Value], n: usize) -> bool {
    pods.len() == n
        && pods.iter().all(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
}

/// One write of key `e2e-writer/<key>` through `endpoint` (`http://IP:2379`, etcd's JSON
/// gateway), on a connection of its own, with no retry: what a script does right after it
/// waited for a condition.
pub fn write_once(endpoint: &str, key: u64) -> Result<(), String> {
    let addr = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint}: plain http:// only"))?
        .trim_end_matches('/');
    put(&mut None, addr, key, key)
}

/// Whether `cluster` is Available with `size` healthy voters whose names equal its pods.
pub fn healthy_at_size(k: &Kubectl, ns: &str, cluster: &str, size: usize) -> bool {
    let c = get(k, ns, &format!("etcdcluster/{cluster}"));
    cluster_healthy(&c, size, &pod_names(k, ns, cluster))
}

/// Whether the EtcdCluster `c` (as JSON) is Available with `size` healthy voters whose names
/// equal `pods` (its member pods' names, sorted): [`healthy_at_size`] on objects already read,
/// for checks of many clusters from one list.
pub fn cluster_healthy(c: &Value, size: usize, pods: &[String]) -> bool {
    let statuses = c["status"]["memberStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut members: Vec<String> = statuses
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_string())
        .collect();
    members.sort();
    condition(c, "Available") == "True"
        && c["status"]["readyMembers"] == serde_json::json!(size)
        && statuses.len() == size
        && statuses
            .iter()
            .all(|m| m["healthy"] == true && m["role"] != "learner")
        && members == pods
}

/// Local volumes for clusters with persistent members: `n` hostPath PersistentVolumes of a
/// storage class of their own, on directories of this host (the local cluster's node) that
/// the members' non-root user may write. Claims of that class bind to them statically (no
/// provisioner runs here). Dropped, the volumes and their directories go; declare it before the
/// test's namespace, so that it is dropped after it.
pub struct Volumes<'a> {
    kubectl: &'a Kubectl,
    /// The storage class claims must name.
    pub class: String,
    names: Vec<String>,
    dir: PathBuf,
}

impl<'a> Volumes<'a> {
    /// Creates `n` volumes of 1 GiB in a new storage class starting with `prefix`.
    pub fn create(k: &'a Kubectl, prefix: &str, n: usize) -> Self {
        let class = format!(
            "{prefix}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                % 100_000_000
        );
        let dir = std::env::temp_dir()
            .join("etcd-operator-e2e-volumes")
            .join(&class);
        let mut names = Vec::new();
        for i in 0..n {
            let path = dir.join(i.to_string());
            std::fs::create_dir_all(&path).expect("creating a volume directory");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            let name = format!("{class}-{i}");
            let pv = serde_json::json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"e2e-class": class}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": class,
                    "hostPath": {"path": path.to_str().unwrap(), "type": "Directory"},
                },
            });
            k.ok(&["create", "-f", "-"], Some(&pv.to_string()));
            names.push(name);
        }
        Volumes {
            kubectl: k,
            class,
            names,
            dir,
        }
    }

    /// A `persistentVolumeClaimSpec` that binds to these volumes.
    pub fn claim_spec(&self) -> Value {
        serde_json::json!({
            "storageClassName": self.class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        })
    }
}

impl Drop for Volumes<'_> {
    fn drop(&mut self) {
        let mut args = vec![
            "delete",
            "persistentvolume",
            "--wait=false",
            "--ignore-not-found",
        ];
        args.extend(self.names.iter().map(String::as_str));
        self.kubectl.run(&args, None);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `kubectl patch` of `etcdcluster/<cluster>`'s spec with a JSON merge patch.
pub fn patch_spec(k: &Kubectl, ns: &str, cluster: &str, spec: Value) {
    k.ok(
        &[
            "patch",
            &format!("etcdcluster/{cluster}"),
            "-n",
            ns,
            "--type=merge",
            "-p",
            &serde_json::json!({ "spec": spec }).to_string(),
        ],
        None,
    );
}

/// `http://<ClusterIP of <cluster>-client>:2379`: the route clients of the cluster take.
pub fn client_endpoint(k: &Kubectl, ns: &str, cluster: &str) -> String {
    let svc = get(k, ns, &format!("service/{cluster}-client"));
    format!("http://{}:2379", svc["spec"]["clusterIP"].as_str().unwrap())
}

/// Labels namespace `ns` to enforce the `restricted` Pod Security Standard.
pub fn enforce_restricted(k: &Kubectl, ns: &str) {
    k.ok(
        &[
            "label",
            "namespace",
            ns,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        ],
        None,
    );
}

/// Asks the API server to evict `pod`, as `kubectl drain` does; whether it was allowed, and
/// what it answered.
pub fn evict(k: &Kubectl, ns: &str, pod: &str) -> (bool, String) {
    let eviction = serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns}});
    let out = k.run(
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        Some(&eviction.to_string()),
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One observation of a cluster in the middle of a roll: each member's name, ID, role and
/// version from its status, and whether it is Available.
#[derive(Clone, Debug)]
pub struct RollView {
    /// `(name, id, role, version)` of each member.
    pub members: Vec<(String, String, String, String)>,
    /// Condition Available.
    pub available: bool,
}

impl RollView {
    /// Reads the EtcdCluster `cluster`.
    pub fn of(k: &Kubectl, ns: &str, cluster: &str) -> Self {
        let c = get(k, ns, &format!("etcdcluster/{cluster}"));
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        RollView {
            members: c["status"]["memberStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| (s(&m["name"]), s(&m["id"]), s(&m["role"]), s(&m["version"])))
                .collect(),
            available: condition(&c, "Available") == "True",
        }
    }

    /// The leader's name and version, if one is listed.
    pub fn leader(&self) -> Option<(&str, &str)> {
        self.members
            .iter()
            .find(|m| m.2 == "leader")
            .map(|m| (m.0.as_str(), m.3.as_str()))
    }

    /// `(name, id)` of each member, sorted.
    pub fn ids(&self) -> Vec<(String, String)> {
        let mut ids: Vec<(String, String)> = self
            .members
            .iter()
            .map(|m| (m.0.clone(), m.1.clone()))
            .collect();
        ids.sort();
        ids
    }

    /// Names of the members that do not run `version`.
    pub fn not_on(&self, version: &str) -> std::collections::BTreeSet<String> {
        self.members
            .iter()
            .filter(|m| m.3 != version)
            .map(|m| m.0.clone())
            .collect()
    }
}

/// How many times an Event with `reason` was reported about object `name`, counting the
/// repeats that Kubernetes folds into one Event's series.
pub fn event_count(k: &Kubectl, ns: &str, name: &str, reason: &str) -> u64 {
    get(k, ns, "events")["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .map(|e| {
            e["series"]["count"]
                .as_u64()
                .or(e["count"].as_u64())
                .unwrap_or(1)
                .max(1)
        })
        .sum()
}

/// The Events about `object` (`Kind/name` as Events name it) with `reason`, oldest first.
pub fn events(k: &Kubectl, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let list = get(k, ns, "events");
    let mut found: Vec<(String, String)> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .map(|e| {
            let at = e["eventTime"]
                .as_str()
                .or(e["firstTimestamp"].as_str())
                .unwrap_or("")
                .to_string();
            (at, e["message"].as_str().unwrap_or("").to_string())
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_like_the_standard() {
        for (raw, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("e2e-writer/7", "ZTJlLXdyaXRlci83"),
        ] {
            assert_eq!(base64(raw.as_bytes()), encoded);
            assert_eq!(unbase64(encoded).unwrap(), raw.as_bytes());
        }
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn cpu_ticks_count_fields_after_the_command_name() {
        let stat = "4242 (etcd (op) r) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 37 0 0 20 0 12 0 123456 0 0";
        assert_eq!(stat_cpu_ticks(stat), Some(287));
        assert_eq!(stat_cpu_ticks("1 (x) S 1 2"), None);
        // This process has used some CPU, and the figure only grows.
        let a = cpu_ticks(std::process::id());
        let b = cpu_ticks(std::process::id());
        assert!(b >= a);
    }

    #[test]
    fn series_reads_the_exposed_line() {
        let m = "# TYPE etcd_operator_reconciles counter\n\
                 etcd_operator_reconciles_total{controller=\"etcdcluster\"} 17\n\
                 etcd_operator_reconciles_total{controller=\"etcdbackup\"} 3 1700000000\n# EOF\n";
        assert_eq!(series(m, RECONCILES), Some(17.0));
        assert_eq!(
            series(
                m,
                "etcd_operator_reconciles_total{controller=\"etcdbackup\"}"
            ),
            Some(3.0)
        );
        assert_eq!(series(m, "etcd_operator_leader"), None);
    }

    #[test]
    fn labelled_series_reads_every_series_of_a_metric() {
        let m = "# HELP etcd_operator_api_requests Requests.\n\
                 # TYPE etcd_operator_api_requests counter\n\
                 etcd_operator_api_requests_total{verb=\"update\",resource=\"leases\"} 12\n\
                 etcd_operator_api_requests_total{verb=\"patch\",resource=\"etcdclusters/status\"} 3 1700000000\n\
                 etcd_operator_api_requests_totally{verb=\"get\",resource=\"pods\"} 9\n\
                 etcd_operator_leader 1\n# EOF\n";
        let all = api_requests(m);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[&("update".into(), "leases".into())], 12.0);
        assert_eq!(all[&("patch".into(), "etcdclusters/status".into())], 3.0);
        assert!(labelled_series(m, "etcd_operator_leader").is_empty());
        assert!(rss_kib(std::process::id()) > 0);
    }

    #[test]
    fn the_metrics_address_is_taken_from_the_arguments_or_chosen() {
        assert_eq!(
            metrics_bind_arg(&["--leader-elect", "--metrics-bind-address", "0.0.0.0:9000"]),
            Some("0.0.0.0:9000".into())
        );
        assert_eq!(
            metrics_bind_arg(&["--metrics-bind-address=127.0.0.1:9001"]),
            Some("127.0.0.1:9001".into())
        );
        assert_eq!(metrics_bind_arg(&["--leader-elect"]), None);
        assert_eq!(connect_address("0.0.0.0:9000"), "127.0.0.1:9000");
        assert_eq!(connect_address("[::]:9000"), "[::1]:9000");
        assert_eq!(connect_address("10.0.0.1:9000"), "10.0.0.1:9000");
        assert_ne!(free_port(), 0);
    }

    /// Reads one request (headers and Content-Length body) from `r`; None at the end.
    fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, String)> {
        let mut head = String::new();
        let mut line = String::new();
        let mut length = 0;
        loop {
            line.clear();
            if r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if line.trim_end().is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        r.read_exact(&mut body).ok()?;
        Some((head, String::from_utf8(body).unwrap()))
    }

    #[test]
    fn http_get_returns_the_body_of_a_200() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            for (i, conn) in listener.incoming().take(2).enumerate() {
                let mut r = BufReader::new(conn.unwrap());
                let (head, _) = read_request(&mut r).unwrap();
                assert!(head.starts_with("GET /metrics HTTP/1.0\r\n"), "{head}");
                let status = if i == 0 { "200 OK" } else { "404 Not Found" };
                write!(r.get_mut(), "HTTP/1.0 {status}\r\n\r\nline 1\nline 2\n").unwrap();
            }
        });
        assert_eq!(http_get(&addr, "/metrics").unwrap(), "line 1\nline 2\n");
        assert!(http_get(&addr, "/metrics").unwrap_err().contains("404"));
        server.join().unwrap();
    }

    /// A fake gateway: answers puts with a Content-Length body, every third chunked, and closes
    /// the connection after every fifth request. Returns the keys it was sent.
    fn fake_gateway(listener: TcpListener, stop: Arc<AtomicBool>) -> Vec<String> {
        listener.set_nonblocking(true).unwrap();
        let mut keys = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let conn = match listener.accept() {
                Ok((conn, _)) => conn,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut r = BufReader::new(conn);
            for i in 0..5 {
                let Some((head, body)) = read_request(&mut r) else {
                    break;
                };
                assert!(head.starts_with("POST /v3/kv/put HTTP/1.1\r\n"), "{head}");
                let v: Value = serde_json::from_str(&body).unwrap();
                keys.push(v["key"].as_str().unwrap().to_string());
                let answer = r#"{"header":{"revision":"2"}}"#;
                let w = r.get_mut();
                if i == 4 {
                    write!(w, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{answer}").unwrap();
                } else if keys.len() % 3 == 0 {
                    let (a, b) = answer.split_at(5);
                    write!(
                        w,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                         {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                        a.len(),
                        b.len()
                    )
                    .unwrap();
                } else {
                    write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                        answer.len()
                    )
                    .unwrap();
                }
            }
        }
        keys
    }

    #[test]
    fn the_writer_writes_serially_reconnects_and_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = stop.clone();
            std::thread::spawn(move || fake_gateway(listener, stop))
        };
        let writer = Writer::start(&endpoint, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(300));
        let writes = writer.stop();
        stop.store(true, Ordering::Relaxed);
        let keys = server.join().unwrap();
        assert!(writes > 10, "{writes} writes");
        // Every write the server saw succeeded (none failed, none was retried).
        assert_eq!(keys.len() as u64, writes);
        assert_eq!(keys[7], base64(b"e2e-writer/7"));

        // Bounded by itself: with nothing listening it gives up at its deadline.
        let free = format!("http://127.0.0.1:{}", free_port());
        let start = Instant::now();
        let writer = Writer::start(&free, Duration::from_millis(300));
        std::thread::sleep(Duration::from_millis(600));
        assert!(writer.thread.as_ref().unwrap().is_finished());
        assert_eq!(writer.stop(), 0);
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
