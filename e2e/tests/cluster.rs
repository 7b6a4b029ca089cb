//! The EtcdCluster controller end to end on a real cluster: the operator runs as a process
//! (`target/debug/etcd-operator run --namespace <test namespace>`) against the cluster that
//! KUBECONFIG names, and reaches members by pod IP.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::{Kubectl, repo_root};
use serde_json::{Value, json};

struct Operator(Child);

impl Operator {
    fn start(ns: &str) -> Self {
        let bin = std::env::var("ETCD_OPERATOR_BIN")
            .map(Into::into)
            .unwrap_or_else(|_| repo_root().join("target/debug/etcd-operator"));
        let log =
            std::fs::File::create(std::env::temp_dir().join(format!("etcd-operator-{ns}.log")))
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
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(k: &Kubectl, ns: &str, what: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", "-n", ns, what, "-o", "json"], None)).unwrap()
}

fn until(what: &str, secs: u64, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    start.elapsed()
}

fn condition(cluster: &Value, type_: &str) -> String {
    cluster["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

fn pod_names(k: &Kubectl, ns: &str, cluster: &str) -> Vec<String> {
    let out = k.ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("etcd_cluster={cluster}"),
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    );
    let mut names: Vec<String> = out.split_whitespace().map(String::from).collect();
    names.sort();
    names
}

fn healthy_at_size(k: &Kubectl, ns: &str, name: &str, size: usize) -> bool {
    let c = get(k, ns, &format!("etcdcluster/{name}"));
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
        && c["status"]["readyMembers"] == json!(size)
        && statuses.len() == size
        && statuses
            .iter()
            .all(|m| m["healthy"] == true && m["role"] != "learner")
        && members == pod_names(k, ns, name)
}

/// etcdctl from a pod, against the client Service; returns its output.
fn etcdctl(k: &Kubectl, ns: &str, job: &str, args: &[&str]) -> String {
    let endpoints = format!("--endpoints=http://example-client.{ns}.svc:2379");
    let mut all = vec![
        endpoints.as_str(),
        "--dial-timeout=3s",
        "--command-timeout=10s",
    ];
    all.extend_from_slice(args);
    let manifest = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job},
        "spec": {"backoffLimit": 4, "template": {"spec": {"restartPolicy": "Never",
          "containers": [{"name": "etcdctl", "image": "quay.io/coreos/etcd:v3.6.16",
            "imagePullPolicy": "Never", "command": ["/usr/local/bin/etcdctl"], "args": all}]}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&manifest.to_string()));
    k.ok(
        &[
            "wait",
            "-n",
            ns,
            &format!("job/{job}"),
            "--for=condition=Complete",
            "--timeout=120s",
        ],
        None,
    );
    k.ok(&["logs", "-n", ns, &format!("job/{job}")], None)
}

#[test]
fn a_three_member_cluster_comes_up_heals_pauses_and_goes_away() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("cluster");
    let ns = ns.name.as_str();
    let _operator = Operator::start(ns);

    // 1. The basic example becomes Available with three healthy members that equal the pods.
    let example = repo_root().join("examples/basic-cluster.yaml");
    k.ok(&["apply", "-n", ns, "-f", example.to_str().unwrap()], None);
    let took = until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    eprintln!("apply to Available with 3 members: {took:?}");
    let health = etcdctl(&k, ns, "health", &["endpoint", "health", "--cluster"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    let svc = get(&k, ns, "service/example");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    get(&k, ns, "service/example-client");

    // 3. A deleted member pod is replaced by a new member; the cluster returns to full size.
    etcdctl(&k, ns, "put", &["put", "survivor", "yes"]);
    let victim = pod_names(&k, ns, "example")[0].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
    let took = until("recovery to 3 healthy members", 240, || {
        let pods = pod_names(&k, ns, "example");
        !pods.contains(&victim) && healthy_at_size(&k, ns, "example", 3)
    });
    eprintln!("member pod deleted to healthy at full size: {took:?}");
    let value = etcdctl(&k, ns, "get", &["get", "survivor", "--print-value-only"]);
    assert_eq!(value.trim(), "yes");

    // 6. Paused: a deleted pod is not replaced until unpaused.
    k.ok(
        &[
            "patch",
            "etcdcluster/example",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ],
        None,
    );
    until("status.controlPaused", 30, || {
        get(&k, ns, "etcdcluster/example")["status"]["controlPaused"] == true
    });
    let victim = pod_names(&k, ns, "example")[0].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=true"], None);
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        pod_names(&k, ns, "example").len(),
        2,
        "a paused cluster was changed"
    );
    k.ok(
        &[
            "patch",
            "etcdcluster/example",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":false}}"#,
        ],
        None,
    );
    until("recovery after unpausing", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });

    // 7. Deleting the EtcdCluster removes its pods and Services.
    k.ok(&["delete", "etcdcluster/example", "-n", ns], None);
    until("pods and Services to be garbage-collected", 120, || {
        pod_names(&k, ns, "example").is_empty()
            && !k
                .run(&["get", "-n", ns, "service/example"], None)
                .status
                .success()
            && !k
                .run(&["get", "-n", ns, "service/example-client"], None)
                .status
                .success()
    });
}
