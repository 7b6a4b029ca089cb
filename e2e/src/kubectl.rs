//! kubectl, namespaces, objects and their Events, volumes: the cluster as a user drives it.

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
    kubeconfig: Option<PathBuf>,
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
        Kubectl {
            bin,
            kubeconfig: None,
        }
    }

    /// The same kubectl against another cluster (a second local cluster's kubeconfig).
    pub fn with_kubeconfig(path: impl Into<PathBuf>) -> Self {
        let bin = std::env::var_os("KUBECTL")
            .map(PathBuf::from)
            .unwrap_or("kubectl".into());
        Kubectl {
            bin,
            kubeconfig: Some(path.into()),
        }
    }

    /// The kubeconfig given, when not `$KUBECONFIG`'s.
    pub fn kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }

    /// Runs kubectl with `args` and `dir` first on its PATH, where kubectl finds plugins
    /// (`kubectl-NAME`); panics with stderr when it fails, returns stdout.
    pub fn plugin_ok(&self, dir: &Path, args: &[&str]) -> String {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        let out = Command::new(&self.bin)
            .args(args)
            .env("PATH", std::env::join_paths(dirs).unwrap())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        assert!(
            out.status.success(),
            "kubectl {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl with `args`, feeding `stdin`.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = Command::new(&self.bin);
        if let Some(k) = &self.kubeconfig {
            command.arg("--kubeconfig").arg(k);
        }
        let mut child = command
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

    /// kubectl with `args` started in the background, its stdout piped (a watch, say).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        let mut command = Command::new(&self.bin);
        if let Some(k) = &self.kubeconfig {
            command.arg("--kubeconfig").arg(k);
        }
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()))
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
        self.wait_established(&dir);
    }

    /// Waits until the CRDs in the files of `dir` are served.
    pub fn wait_established(&self, dir: &Path) {
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

/// Local volumes for clusters with persistent members: `n` hostPath PersistentVolumes of a
/// storage class of their own, on directories of this host that the members' non-root user may
/// write. Claims of that class bind to them statically, and, unlike the default class's
/// (local-path: a directory on one node's disk), they are reachable from every node of the
/// local cluster (all nodes share this host's disk), for tests about members' data rather than
/// nodes. Dropped, the volumes and their directories go; declare it before the test's
/// namespace, so that it is dropped after it.
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

/// Deletes `pods` at once, without grace and without waiting: a crash of their nodes' view,
/// their data (without volumes) gone with them.
pub fn force_delete_pods(k: &Kubectl, ns: &str, pods: &[String]) {
    let mut args = vec![
        "delete",
        "pod",
        "-n",
        ns,
        "--grace-period=0",
        "--force",
        "--wait=false",
    ];
    args.extend(pods.iter().map(String::as_str));
    k.ok(&args, None);
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
