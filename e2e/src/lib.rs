//! Helpers for tests that run against a real Kubernetes API server: the local cluster that
//! `hack/cluster.sh` starts, or any cluster that `KUBECONFIG` names.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

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
/// `$ETCD_OPERATOR_BIN`), killed on drop; for the benchmark, which reads its RSS. Its log goes to
/// `$TMPDIR/etcd-operator-NS.log`.
pub struct OperatorProcess(Child);

impl OperatorProcess {
    /// Starts the operator for namespace `ns`.
    pub fn start(ns: &str) -> Self {
        let bin = std::env::var("ETCD_OPERATOR_BIN")
            .map(Into::into)
            .unwrap_or_else(|_| repo_root().join("target/debug/etcd-operator"));
        // Appended, so a restarted operator's log follows its predecessor's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(std::env::temp_dir().join(format!("etcd-operator-{ns}.log")))
            .unwrap();
        let child = Command::new(&bin)
            .args([
                "run",
                "--namespace",
                ns,
                "--metrics-bind-address",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "info,kube=warn")
            .env("MEMBER_GATE_IMAGE", image())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        OperatorProcess(child)
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The host PID of the operator process running in pod `pod`, when this machine runs it (the
/// local cluster's node is this host): found by its `POD_NAME` environment variable.
pub fn host_pid(pod: &str) -> Option<u32> {
    let needle = format!("POD_NAME={pod}\0");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        (cmdline.starts_with(b"/usr/local/bin/etcd-operator\0run")
            && environ
                .windows(needle.len())
                .any(|w| w == needle.as_bytes()))
        .then_some(pid)
    })
}

/// `kubectl get -n NS WHAT -o json`.
pub fn get(k: &Kubectl, ns: &str, what: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", "-n", ns, what, "-o", "json"], None)).unwrap()
}

/// Polls `check` every 200 ms until it holds; panics after `secs`. Returns the time it took.
pub fn until(what: &str, secs: u64, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    start.elapsed()
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

/// Whether `cluster` is Available with `size` healthy voters whose names equal its pods.
pub fn healthy_at_size(k: &Kubectl, ns: &str, cluster: &str, size: usize) -> bool {
    let c = get(k, ns, &format!("etcdcluster/{cluster}"));
    let statuses = c["status"]["memberStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut members: Vec<String> = statuses
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_string())
        .collect();
    members.sort();
    condition(&c, "Available") == "True"
        && c["status"]["readyMembers"] == serde_json::json!(size)
        && statuses.len() == size
        && statuses
            .iter()
            .all(|m| m["healthy"] == true && m["role"] != "learner")
        && members == pod_names(k, ns, cluster)
}
