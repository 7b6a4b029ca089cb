//! The EtcdCluster controller end to end on a real cluster: the operator is installed by the
//! chart into each test's namespace (in-cluster, with its ServiceAccount and namespaced RBAC)
//! on the cluster that KUBECONFIG names, and reaches members by pod IP.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::{
    Kubectl, Operator, condition, get, healthy_at_size, holds_for, pod_names, repo_root, until,
};
use serde_json::{Value, json};

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
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
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
    let _operator = Operator::install(&k, ns, &[]);

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
    until("status.controlPaused for the paused generation", 30, || {
        let c = get(&k, ns, "etcdcluster/example");
        c["status"]["controlPaused"] == true
            && c["status"]["observedGeneration"] == c["metadata"]["generation"]
    });
    let victim = pod_names(&k, ns, "example")[0].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=true"], None);
    // The operator has looked at the cluster since the deletion (woken by the pod's event, or
    // at its periodic look while paused) once the status no longer counts the member ready.
    until("the status to count the deleted member unready", 60, || {
        assert!(
            pod_names(&k, ns, "example").len() <= 2,
            "a paused cluster was changed"
        );
        let c = get(&k, ns, "etcdcluster/example");
        c["status"]["controlPaused"] == true
            && c["status"]["members"]["ready"]
                .as_array()
                .is_some_and(|r| r.len() == 2 && r.iter().all(|m| *m != victim.as_str()))
    });
    // That the paused operator replaces nothing has no status to show, so a bounded window is
    // still needed. It starts only once the status shows that the operator has seen both the
    // pause (observedGeneration) and the deletion, so it judges the paused decision, not how
    // soon the operator looks.
    holds_for("a paused cluster staying at 2 pods", 10, || {
        pod_names(&k, ns, "example").len() == 2
    });
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

/// etcdctl inside a member pod (the image has no shell; exec runs etcdctl directly).
fn exec_etcdctl(k: &Kubectl, ns: &str, pod: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut all = vec!["exec", "-n", ns, pod];
    if stdin.is_some() {
        all.push("-i");
    }
    all.extend(["--", "/usr/local/bin/etcdctl", "--command-timeout=20s"]);
    all.extend_from_slice(args);
    k.ok(&all, stdin)
}

fn ready_pod(k: &Kubectl, ns: &str, cluster: &str) -> String {
    let c = get(k, ns, &format!("etcdcluster/{cluster}"));
    c["status"]["members"]["ready"][0]
        .as_str()
        .expect("a ready member")
        .to_string()
}

fn count_keys(k: &Kubectl, ns: &str, cluster: &str) -> usize {
    let pod = ready_pod(k, ns, cluster);
    let out = exec_etcdctl(
        k,
        ns,
        &pod,
        &["get", "--prefix", "key-", "--count-only", "-w", "fields"],
        None,
    );
    out.lines()
        .find_map(|l| l.strip_prefix("\"Count\" : "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in {out}"))
}

fn scale(k: &Kubectl, ns: &str, cluster: &str, size: usize) {
    e2e::patch_spec(k, ns, cluster, serde_json::json!({ "size": size }));
}

fn has_learner(k: &Kubectl, ns: &str, cluster: &str) -> bool {
    let c = get(k, ns, &format!("etcdcluster/{cluster}"));
    c["status"]["memberStatuses"]
        .as_array()
        .is_some_and(|ms| ms.iter().any(|m| m["role"] == "learner"))
}

#[test]
fn scaling_keeps_every_key_and_survives_operator_restarts() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("scale");
    let ns = ns.name.as_str();
    let operator = Operator::install(&k, ns, &[]);
    let example = repo_root().join("examples/basic-cluster.yaml");
    k.ok(&["apply", "-n", ns, "-f", example.to_str().unwrap()], None);
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });

    // 1000 keys in transactions of 100 puts (etcd allows 128 operations per transaction).
    let pod = ready_pod(&k, ns, "example");
    for batch in 0..10 {
        let puts: String = (0..100)
            .map(|i| format!("put key-{:04} value-{}\n", batch * 100 + i, i))
            .collect();
        exec_etcdctl(&k, ns, &pod, &["txn"], Some(&format!("\n{puts}\n\n")));
    }
    assert_eq!(count_keys(&k, ns, "example"), 1000);

    // 3 -> 5, with the operator killed in the middle of an addition: while a learner waits
    // for promotion, or while a new pod waits for its member to be added, whichever is seen.
    scale(&k, ns, "example", 5);
    until("an addition under way", 120, || {
        has_learner(&k, ns, "example") || pod_names(&k, ns, "example").len() > 3
    });
    operator.kill();
    until("5 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 5)
    });
    assert_eq!(count_keys(&k, ns, "example"), 1000);

    // 5 -> 3, with the operator killed right after the first removal.
    scale(&k, ns, "example", 3);
    until("the first removal", 120, || {
        get(&k, ns, "etcdcluster/example")["status"]["size"]
            .as_i64()
            .is_some_and(|n| n < 5)
            || pod_names(&k, ns, "example").len() < 5
    });
    operator.kill();
    until("3 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    assert_eq!(count_keys(&k, ns, "example"), 1000);
    assert!(!has_learner(&k, ns, "example"));
}

#[test]
fn lost_quorum_is_reported_and_nothing_destructive_happens() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("quorum");
    let ns = ns.name.as_str();
    let operator = Operator::install(&k, ns, &[]);
    let example = repo_root().join("examples/basic-cluster.yaml");
    k.ok(&["apply", "-n", ns, "-f", example.to_str().unwrap()], None);
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let before = get(&k, ns, "etcdcluster/example")["status"]["memberStatuses"].clone();

    // Two members lost at once. kubectl deletes one pod after the other, and an operator that
    // looks in between rightly replaces the first while the second still makes a quorum (a
    // clean make test on a loaded machine saw it): the loss is made while the operator is
    // away, so that it finds both gone.
    let scale = |n: &str| {
        let args = [
            "scale",
            "deployment/etcd-operator",
            "-n",
            ns,
            "--replicas",
            n,
        ];
        k.ok(&args, None)
    };
    scale("0");
    until("the operator to stop", 60, || operator.pods().is_empty());
    let pods = pod_names(&k, ns, "example");
    k.ok(
        &[
            "delete",
            "pod",
            "-n",
            ns,
            &pods[0],
            &pods[1],
            "--wait=false",
        ],
        None,
    );
    scale("1");
    operator.wait_ready(1);
    until("phase Failed", 120, || {
        get(&k, ns, "etcdcluster/example")["status"]["phase"] == "Failed"
    });
    let c = get(&k, ns, "etcdcluster/example");
    assert!(
        c["status"]["reason"].as_str().unwrap().contains("healthy"),
        "{}",
        c["status"]
    );
    assert_eq!(condition(&c, "Available"), "False");
    let events = k.ok(
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=QuorumLost",
            "-o",
            "name",
        ],
        None,
    );
    assert!(!events.trim().is_empty(), "no QuorumLost event");

    // Nothing is removed or replaced while quorum is lost. First, the state the operator must
    // not act on, in full: both deleted pods gone and no longer reported healthy (their etcd
    // has stopped, not merely been asked to), the cluster still Failed and not Available.
    let survivor = vec![pods[2].clone()];
    until("the deleted pods to be gone and reported so", 120, || {
        let c = get(&k, ns, "etcdcluster/example");
        let statuses = c["status"]["memberStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        pod_names(&k, ns, "example") == survivor
            && c["status"]["phase"] == "Failed"
            && condition(&c, "Available") == "False"
            && !statuses
                .iter()
                .any(|m| m["healthy"] == true && m["name"] != pods[2].as_str())
    });
    let ids = |v: &Value| -> Vec<String> {
        let mut ids: Vec<String> = v
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    // Then a bounded window, since what must not happen has no status to show; it starts once
    // the status shows that the operator has seen the members gone, and spans several of its
    // looks at a Failed cluster.
    holds_for("a cluster without quorum staying as it is", 15, || {
        let c = get(&k, ns, "etcdcluster/example");
        assert_eq!(c["status"]["phase"], "Failed", "{}", c["status"]);
        assert_eq!(
            ids(&c["status"]["memberStatuses"]),
            ids(&before),
            "membership changed (or is no longer reported) without quorum: {}",
            c["status"]
        );
        assert_eq!(
            pod_names(&k, ns, "example"),
            survivor,
            "pods were created or deleted"
        );
        true
    });
}

#[test]
fn a_missing_secret_is_reported_by_field_until_it_exists() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("secret");
    let ns = ns.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"},
        "spec": {"size": 1, "pod": {"etcdEnv": [{"name": "ETCD_AUTH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "etcd-auth", "key": "token"}}}]}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));

    let field = "spec.pod.etcdEnv[0].valueFrom.secretKeyRef.name";
    until("a Degraded condition naming the field", 60, || {
        e2e::degraded_with(
            &get(&k, ns, "etcdcluster/example"),
            "SecretNotFound",
            &[field, "etcd-auth"],
        )
    });
    let events = k.ok(
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=SecretNotFound",
            "-o",
            "jsonpath={.items[*].note}{.items[*].message}",
        ],
        None,
    );
    assert!(events.contains(field), "no Event names the field: {events}");
    assert!(
        pod_names(&k, ns, "example").is_empty(),
        "pods were created for an unusable spec"
    );

    k.ok(
        &[
            "create",
            "secret",
            "generic",
            "etcd-auth",
            "-n",
            ns,
            "--from-literal=token=simple",
        ],
        None,
    );
    until("the cluster to come up once the Secret exists", 180, || {
        healthy_at_size(&k, ns, "example", 1)
    });
}
