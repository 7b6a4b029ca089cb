//! Proof that the cluster under test is a real one: a Ready node, a running Deployment, cluster
//! DNS for a headless Service's pod, a ClusterIP Service that answers, a CronJob that fires,
//! garbage collection of an owner's children, and every etcd image at its expected version.
//! Needs a cluster with a node (`hack/cluster.sh up`); `make smoke` runs it.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::{Kubectl, until};
use serde_json::{Value, json};

/// The etcd images the local cluster imports, under both official names.
const ETCD_VERSIONS: [&str; 3] = ["3.4.23", "3.5.35", "3.6.16"];
const ETCD_REPOSITORIES: [&str; 2] = ["quay.io/coreos/etcd", "gcr.io/etcd-development/etcd"];

fn apply(k: &Kubectl, ns: &str, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&list.to_string()));
}

fn wait(k: &Kubectl, ns: &str, what: &str, condition: &str, secs: u64) {
    let timeout = format!("--timeout={secs}s");
    let out = k.run(
        &[
            "wait",
            "-n",
            ns,
            what,
            &format!("--for={condition}"),
            &timeout,
        ],
        None,
    );
    if !out.status.success() {
        let describe = k.run(&["describe", "-n", ns, what], None);
        let events = k.run(
            &["get", "events", "-n", ns, "--sort-by=.lastTimestamp"],
            None,
        );
        panic!(
            "{what} did not reach {condition} in {secs}s: {}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&describe.stdout),
            String::from_utf8_lossy(&events.stdout)
        );
    }
}

fn etcd_container(name: &str, image: &str, args: &[&str]) -> Value {
    json!({"name": name, "image": image, "imagePullPolicy": "Never", "command": ["/usr/local/bin/etcd"], "args": args})
}

#[test]
fn the_cluster_is_real() {
    let k = Kubectl::from_env();

    let nodes: Value = serde_json::from_str(&k.ok(&["get", "nodes", "-o", "json"], None)).unwrap();
    let ready = nodes["items"].as_array().unwrap().iter().any(|n| {
        n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    assert!(ready, "no Ready node: {nodes}");

    let ns = k.namespace("smoke");
    let ns = ns.name.as_str();
    let image = format!("quay.io/coreos/etcd:v{}", ETCD_VERSIONS[2]);

    // A Deployment whose pod is both behind a ClusterIP Service and, by hostname and subdomain,
    // in a headless Service's DNS.
    let serve = [
        "--name=member",
        "--data-dir=/tmp/data",
        "--listen-client-urls=http://0.0.0.0:2379",
        "--advertise-client-urls=http://member.peers:2379",
    ];
    apply(
        &k,
        ns,
        &[
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                  "spec": {"hostname": "member", "subdomain": "peers",
                    "containers": [etcd_container("etcd", &image, &serve)]}}}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "peers"},
              "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                "selector": {"app": "web"}, "ports": [{"name": "client", "port": 2379}]}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
              "spec": {"selector": {"app": "web"}, "ports": [{"name": "client", "port": 2379}]}}),
        ],
    );
    wait(&k, ns, "deployment/web", "condition=Available", 120);

    // From another pod: the headless name resolves and the ClusterIP Service answers.
    let headless = format!("http://member.peers.{ns}.svc.cluster.local:2379");
    let endpoints = format!("--endpoints={headless},http://web.{ns}.svc:2379");
    let check = json!({"name": "etcdctl", "image": image, "imagePullPolicy": "Never",
        "command": ["/usr/local/bin/etcdctl"],
        "args": [endpoints, "--dial-timeout=3s", "--command-timeout=5s", "endpoint", "health"]});
    apply(
        &k,
        ns,
        &[
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "client"},
          "spec": {"backoffLimit": 6, "template": {"spec": {"restartPolicy": "Never",
            "containers": [check]}}}}),
        ],
    );
    wait(&k, ns, "job/client", "condition=Complete", 180);
    // The pod that succeeded: `logs job/client` picks any of the Job's pods, and a first
    // attempt may have run before the node's proxy had programmed the new Service (a Deployment
    // is Available when its pod is Ready, which says nothing of the proxies).
    let succeeded = k.ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "job-name=client",
            "--field-selector=status.phase=Succeeded",
            "-o",
            "name",
        ],
        None,
    );
    let pod = succeeded
        .lines()
        .next()
        .unwrap_or_else(|| panic!("job/client completed without a Succeeded pod"));
    let logs = k.ok(&["logs", "-n", ns, pod], None);
    assert!(
        logs.contains(&format!("{headless} is healthy")) && logs.contains(".svc:2379 is healthy"),
        "unexpected etcdctl output: {logs}"
    );

    // A CronJob fires a Job.
    apply(
        &k,
        ns,
        &[
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
          "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [etcd_container("version", &image, &["--version"])]}}}}}}),
        ],
    );

    // Deleting an owner garbage-collects its child.
    apply(
        &k,
        ns,
        &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})],
    );
    let uid = k.ok(
        &[
            "get",
            "-n",
            ns,
            "configmap/owner",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    );
    apply(
        &k,
        ns,
        &[
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "child",
          "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}),
        ],
    );
    k.ok(&["delete", "-n", ns, "configmap/owner"], None);
    until("the child ConfigMap to be garbage-collected", 60, || {
        !k.run(&["get", "-n", ns, "configmap/child"], None)
            .status
            .success()
    });

    // Every etcd image, under both names, runs and reports its version.
    let mut pods = Vec::new();
    for (i, version) in ETCD_VERSIONS.iter().enumerate() {
        for (j, repo) in ETCD_REPOSITORIES.iter().enumerate() {
            let name = format!("version-{i}-{j}");
            let c = etcd_container("etcd", &format!("{repo}:v{version}"), &["--version"]);
            pods.push(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
              "spec": {"restartPolicy": "Never", "containers": [c]}}),
            );
        }
    }
    apply(&k, ns, &pods);
    for (i, version) in ETCD_VERSIONS.iter().enumerate() {
        for j in 0..ETCD_REPOSITORIES.len() {
            let pod = format!("pod/version-{i}-{j}");
            wait(&k, ns, &pod, "jsonpath={.status.phase}=Succeeded", 120);
            let logs = k.ok(&["logs", "-n", ns, &pod], None);
            assert!(
                logs.contains(&format!("etcd Version: {version}")),
                "{pod}: {logs}"
            );
        }
    }

    until(
        "the CronJob to have fired a Job that completed",
        150,
        || {
            let jobs = k.ok(&["get", "jobs", "-n", ns, "-o", "json"], None);
            let jobs: Value = serde_json::from_str(&jobs).unwrap();
            jobs["items"].as_array().unwrap().iter().any(|j| {
                j["metadata"]["ownerReferences"][0]["name"] == "tick"
                    && j["status"]["succeeded"].as_i64() == Some(1)
            })
        },
    );
}
