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

/// The operator as a process (`target/debug/etcd-operator run --namespace NS`, or
/// `$ETCD_OPERATOR_BIN`), killed on drop. Its log goes to `$TMPDIR/etcd-operator-NS.log`.
pub struct Operator(Child);

impl Operator {
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
            .args(["run", "--namespace", ns])
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        Operator(child)
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
