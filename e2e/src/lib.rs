//! Helpers for tests that run against a real Kubernetes API server: the local cluster that
//! `hack/cluster.sh` starts, or any cluster that `KUBECONFIG` names.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
