//! Hostile and mistaken input against the running operator, as a tenant of a shared cluster
//! could send it: every input gets a clear refusal (at `kubectl apply`, or a condition and an
//! Event naming the field), and afterwards the operator has not restarted, no member pod was
//! deleted, every key written before is still there, and a bystander cluster is untouched.
//!
//! Among them the hand-off of issue 48: a well-formed restore annotation with a made-up UID
//! once made the task delete every member within 25 s; a pod that only wore the cluster's
//! labels was deleted with them.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Instant;

use e2e::backups::{manifest, s3_spec, setup, sha256_hex, until_failed};
use e2e::{Kubectl, Operator, cluster_healthy, degraded_with, events, get, holds_for, until};
use serde_json::{Value, json};

const BUCKET: &str = "etcd-security";
const RESTORE_ANNOTATION: &str = "etcd.database.coreos.com/restore";

/// The client URL of one of `cluster`'s members, by pod IP (never the lookalike's).
fn endpoint(k: &Kubectl, ns: &str, cluster: &str) -> String {
    let pod = owned_pods(k, ns, cluster)[0].clone();
    let ip = get(k, ns, &format!("pod/{pod}"))["status"]["podIP"].clone();
    format!("http://{}:2379", ip.as_str().unwrap())
}

fn put(endpoint: &str, n: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        for i in 0..n {
            c.put(format!("tenant/{i:04}"), format!("v{i}"), None)
                .await
                .unwrap();
        }
    });
}

fn count(endpoint: &str) -> i64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let opts = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        c.get("tenant/", Some(opts)).await.unwrap().count()
    })
}

/// The pods the cluster owns (a controller ownerReference to it), sorted by name.
fn owned_pods(k: &Kubectl, ns: &str, cluster: &str) -> Vec<String> {
    let uid = get(k, ns, &format!("etcdcluster/{cluster}"))["metadata"]["uid"].clone();
    let mut names: Vec<String> = e2e::member_pods(k, ns, cluster)
        .iter()
        .filter(|p| {
            p["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|os| {
                    os.iter()
                        .any(|o| o["uid"] == uid && o["controller"] == true)
                })
        })
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    names
}

/// The operator pod's HTTP address (metrics, probes, restore snapshots).
fn http_address(operator: &Operator) -> std::net::SocketAddr {
    let ip = operator.pods()[0]["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    format!("{ip}:8080").parse().unwrap()
}

/// The path prefix that names the operator process's snapshot CA (`/ca-<hex>`), from its log.
fn snapshot_prefix(k: &Kubectl, operator: &Operator) -> String {
    let pod = operator.pods()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let ns = operator.pods()[0]["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let log = k.ok(&["logs", "-n", &ns, &pod], None);
    let line = log
        .lines()
        .find(|l| l.contains("serving restore snapshots over TLS"))
        .expect("the snapshot server's start in the operator's log");
    let from = line.find("/ca-").unwrap();
    line[from..from + 4 + 16].to_string()
}

/// curl's HTTP status (`000`: no HTTP answer) for `url` with bearer token `token`.
fn status_of(url: &str, token: &str, extra: &[&str]) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(extra)
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(url)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The answer (body, then the HTTP status) with which the operator answers a request for
/// `ns`/example's restore snapshot with bearer token `token`, on its TLS snapshot port. (`-k`:
/// what is checked here is who is served, not the certificate, which the gate's tests check.)
fn snapshot_answer(k: &Kubectl, ns: &str, operator: &Operator, token: &str) -> String {
    let ip = http_address(operator).ip();
    let prefix = snapshot_prefix(k, operator);
    let out = Command::new("curl")
        .args(["-s", "-k", "-w", " %{http_code}", "--max-time", "10", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!(
            "https://{ip}:8443{prefix}/restores/{ns}/example/snapshot"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Snapshots are served over TLS alone: not on the plain HTTP port, and the TLS port gives no
/// HTTP answer to plain HTTP.
fn snapshots_only_over_tls(k: &Kubectl, ns: &str, operator: &Operator, token: &str) {
    let addr = http_address(operator);
    let ip = addr.ip();
    let plain = format!("http://{addr}/restores/{ns}/example/snapshot");
    assert_eq!(status_of(&plain, token, &[]), "404", "{plain}");
    let prefix = snapshot_prefix(k, operator);
    let plain_to_tls = format!("http://{ip}:8443{prefix}/restores/{ns}/example/snapshot");
    assert_eq!(
        status_of(&plain_to_tls, token, &[]),
        "000",
        "{plain_to_tls}"
    );
}

/// `etcd_operator_cached_secrets` as the operator serves it.
fn cached_secrets(operator: &Operator) -> Option<usize> {
    let addr = http_address(operator);
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("etcd_operator_cached_secrets "))
        .and_then(|v| v.trim().parse().ok())
}

/// Opens `n` connections to the operator's HTTP port (every other one sending the start of a
/// request head and no more), then times `/healthz` five times while they are open; returns
/// how many were open and the slowest answer.
fn flood(operator: &Operator, n: usize) -> (usize, std::time::Duration) {
    use std::io::Write;
    let addr = http_address(operator);
    let mut open = Vec::with_capacity(n);
    for i in 0..n {
        let Ok(mut s) =
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))
        else {
            break;
        };
        if i % 2 == 1 {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nx-slow: ");
        }
        open.push(s);
    }
    let mut worst = std::time::Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "5", &format!("http://{addr}/healthz")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "/healthz not answered under the flood: {out:?}"
        );
        worst = worst.max(started.elapsed());
    }
    (open.len(), worst)
}

/// Applies `manifest` and asserts that the API server refuses it with `text` in its message.
fn refused_at_apply(k: &Kubectl, ns: &str, what: &str, manifest: &Value, text: &str) {
    let out = k.run(&["apply", "-n", ns, "-f", "-"], Some(&manifest.to_string()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: accepted, but must be refused"
    );
    assert!(
        stderr.contains(text),
        "{what}: refused without {text:?}: {stderr}"
    );
    eprintln!("refused at apply: {what}");
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": name}, "spec": spec})
}

fn backup(name: &str, spec: Value) -> Value {
    serde_json::from_str(&manifest("EtcdBackup", name, spec)).unwrap()
}

/// The schema's bounds: each of these was accepted before, some silently clamped.
fn apply_time_refusals(k: &Kubectl, ns: &str, moto: &e2e::stores::Moto) -> usize {
    let s3 = s3_spec(moto, BUCKET, "etcd/x.db", "aws");
    let periodic = |policy: Value| json!({"clusterName": "example", "storageType": "S3", "s3": s3, "backupPolicy": policy});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "backupIntervalInSecond of i64::MAX",
            backup(
                "huge-interval",
                periodic(json!({"backupIntervalInSecond": i64::MAX})),
            ),
            "should be less than or equal to 31536000",
        ),
        (
            "timeoutInSecond of 10^12",
            backup(
                "huge-timeout",
                periodic(json!({"timeoutInSecond": 1_000_000_000_000_i64})),
            ),
            "should be less than or equal to 86400",
        ),
        (
            "continuous.maxChunkBytes of 64Mi",
            backup(
                "huge-chunks",
                periodic(json!({"backupIntervalInSecond": 60,
                    "continuous": {"maxChunkBytes": "64Mi"}})),
            ),
            "maxChunkBytes must be from 64Ki to 32Mi",
        ),
        (
            "continuous.flushInterval of 99999m",
            backup(
                "slow-flush",
                periodic(json!({"backupIntervalInSecond": 60,
                    "continuous": {"flushInterval": "99999m"}})),
            ),
            "flushInterval must be from 1s to 10m",
        ),
        (
            "an s3.path of 2,000 characters",
            backup(
                "long-path",
                json!({"clusterName": "example", "storageType": "S3",
                    "s3": {"path": format!("b/{}", "k".repeat(2000)), "awsSecret": "aws"}}),
            ),
            "Too long",
        ),
        (
            "17 etcdEndpoints",
            backup(
                "many-endpoints",
                json!({"storageType": "S3", "s3": s3,
                    "etcdEndpoints": vec!["http://example-client:2379"; 17]}),
            ),
            "Too many",
        ),
        (
            "pod.annotations setting the operator's restore-uid",
            cluster(
                "annotated",
                json!({"size": 1, "pod": {"annotations":
                    {"etcd.database.coreos.com/restore-uid": "x"}}}),
            ),
            "may not use keys under etcd.database.coreos.com/",
        ),
        (
            "pod.labels setting etcd_cluster",
            cluster(
                "relabelled",
                json!({"size": 1, "pod": {"labels": {"etcd_cluster": "example"}}}),
            ),
            "may not use keys starting with 'etcd_'",
        ),
        (
            "a repository that is not an image repository",
            cluster(
                "odd-image",
                json!({"size": 1, "repository": "quay.io/coreos/etcd:v3.6.16 --privileged"}),
            ),
            "spec.repository in body should match",
        ),
    ];
    for (what, m, text) in &cases {
        refused_at_apply(k, ns, what, m, text);
    }
    cases.len()
}

/// Waits until the cluster reports `InvalidRestore` naming `parts`, with its Event.
fn invalid_restore(k: &Kubectl, ns: &str, parts: &[&str]) {
    until("the forged hand-off to be reported", 60, || {
        degraded_with(&get(k, ns, "etcdcluster/example"), "InvalidRestore", parts)
    });
    // kube's recorder folds Events of one reason on one object into a series that keeps its
    // first note: the condition says what this hand-off was; the Event, that one was refused.
    assert!(
        events(k, ns, "example", "InvalidRestore")
            .iter()
            .any(|m| m.contains(RESTORE_ANNOTATION)),
        "no InvalidRestore Event"
    );
}

fn annotate(k: &Kubectl, ns: &str, value: &str, manager: &str) {
    let arg = format!("{RESTORE_ANNOTATION}={value}");
    let manager = format!("--field-manager={manager}");
    k.ok(
        &[
            "annotate",
            "--overwrite",
            "-n",
            ns,
            "etcdcluster/example",
            &arg,
            &manager,
        ],
        None,
    );
}

fn remove_annotation(k: &Kubectl, ns: &str) {
    let arg = format!("{RESTORE_ANNOTATION}-");
    k.ok(&["annotate", "-n", ns, "etcdcluster/example", &arg], None);
}

/// What the members must still be after every hostile input: the same pods, all of the data.
struct Baseline {
    pods: Vec<String>,
    bystander: Vec<String>,
    keys: i64,
}

impl Baseline {
    fn holds(&self, k: &Kubectl, ns: &str, after: &str) {
        assert_eq!(
            owned_pods(k, ns, "example"),
            self.pods,
            "after {after}: member pods changed"
        );
        assert_eq!(
            owned_pods(k, ns, "bystander"),
            self.bystander,
            "after {after}: the bystander's pods changed"
        );
        assert_eq!(
            count(&endpoint(k, ns, "example")),
            self.keys,
            "after {after}: keys lost"
        );
    }
}

/// Forged, malformed and replayed restore hand-offs: refused, no pod touched.
fn forged_hand_offs(
    k: &Kubectl,
    ns: &str,
    operator: &Operator,
    base: &Baseline,
    real_restore_uid: &str,
) -> usize {
    // 1. The input of issue 48, as a tenant would write it.
    annotate(
        k,
        ns,
        r#"{"name":"x","uid":"bogus","sha256":"00"}"#,
        "kubectl-annotate",
    );
    invalid_restore(k, ns, &[RESTORE_ANNOTATION, "kubectl-annotate"]);
    holds_for("no member pod deleted after a forged hand-off", 20, || {
        owned_pods(k, ns, "example") == base.pods
    });
    base.holds(k, ns, "a forged hand-off");

    // 2. The same, with the restore controller's field manager borrowed and a real
    //    EtcdRestore's UID (one that failed, so never handed anything over).
    let replayed = json!({"name": "no-secret", "uid": real_restore_uid, "sha256": "00",
        "tokenSha256": sha256_hex(b"letmein")})
    .to_string();
    annotate(k, ns, &replayed, "etcd-operator-restore");
    invalid_restore(k, ns, &["EtcdRestore no-secret", "not Restoring"]);
    // Nor does the snapshot server serve it to whoever wrote the token's hash there.
    let answer = snapshot_answer(k, ns, operator, "letmein");
    assert!(
        answer.contains("no restore is pending on EtcdCluster") && answer.ends_with(" 404"),
        "{answer}"
    );
    snapshots_only_over_tls(k, ns, operator, "letmein");
    holds_for(
        "no member pod deleted after a replayed hand-off",
        20,
        || owned_pods(k, ns, "example") == base.pods,
    );
    base.holds(k, ns, "a replayed hand-off");

    // 3. Not JSON at all.
    annotate(k, ns, "{not json", "kubectl-annotate");
    invalid_restore(k, ns, &[RESTORE_ANNOTATION]);
    base.holds(k, ns, "a malformed hand-off");

    remove_annotation(k, ns);
    until("the cluster to be managed again", 120, || {
        let c = get(k, ns, "etcdcluster/example");
        !degraded_with(&c, "InvalidRestore", &[]) && cluster_healthy(&c, 3, &base.pods)
    });
    3
}

#[test]
fn hostile_input_is_refused_clearly_and_costs_no_pod_no_key_and_no_restart() {
    let k = Kubectl::from_env();
    let (moto, namespace, operator) = setup(&k, "security", BUCKET, 3);
    let ns = namespace.name.as_str();
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&cluster("bystander", json!({"size": 1, "version": "3.6.16"})).to_string()),
    );
    until("the bystander to serve", 240, || {
        let c = get(&k, ns, "etcdcluster/bystander");
        let pods = owned_pods(&k, ns, "bystander");
        cluster_healthy(&c, 1, &pods)
    });
    put(&endpoint(&k, ns, "example"), 200);
    let base = Baseline {
        pods: owned_pods(&k, ns, "example"),
        bystander: owned_pods(&k, ns, "bystander"),
        keys: count(&endpoint(&k, ns, "example")),
    };
    assert_eq!((base.pods.len(), base.keys), (3, 200));
    let restarts_before = operator.restarts();
    let started = Instant::now();

    let mut tried = apply_time_refusals(&k, ns, &moto);

    // A pod that only wears the cluster's labels is no member: never counted, never deleted.
    let lookalike = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lookalike",
        "labels": {"app": "etcd", "etcd_cluster": "example"}},
        "spec": {"containers": [{"name": "c", "image": "quay.io/coreos/etcd:v3.6.16",
            "imagePullPolicy": "Never", "command": ["/usr/local/bin/etcd"],
            "args": ["--data-dir=/tmp/d"]}]}});
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&lookalike.to_string()),
    );
    tried += 1;

    // No borrowed identity: S3 sections without a Secret are refused, naming the field.
    let bare = json!({"path": format!("{BUCKET}/etcd/bare.db"), "endpoint": moto.url,
        "forcePathStyle": true});
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest(
            "EtcdBackup",
            "no-secret",
            json!({"clusterName": "example",
            "storageType": "S3", "s3": bare}),
        )),
    );
    until_failed(
        &k,
        ns,
        "etcdbackup/no-secret",
        60,
        "s3.awsSecret is not set",
    );
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest(
            "EtcdRestore",
            "no-secret",
            json!({"etcdCluster": {"name": "example"},
            "backupStorageType": "S3", "s3": bare}),
        )),
    );
    until_failed(
        &k,
        ns,
        "etcdrestore/no-secret",
        60,
        "s3.awsSecret is not set",
    );
    tried += 2;

    // No confused deputy: another namespace's etcd is not copied into this tenant's bucket.
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest(
            "EtcdBackup",
            "elsewhere",
            json!({
            "etcdEndpoints": ["http://example-client.kube-system.svc:2379"],
            "storageType": "S3", "s3": s3_spec(&moto, BUCKET, "etcd/elsewhere.db", "aws")}),
        )),
    );
    until_failed(
        &k,
        ns,
        "etcdbackup/elsewhere",
        60,
        "is not a Service of namespace",
    );
    tried += 1;
    base.holds(&k, ns, "backups and restores without credentials");

    // A one-shot backup onto someone else's object: refused, the object kept.
    let theirs = std::env::temp_dir().join(format!("theirs-{}.db", std::process::id()));
    std::fs::write(&theirs, "someone's data").unwrap();
    moto.curl(
        &["-T", theirs.to_str().unwrap()],
        &format!("/{BUCKET}/etcd/theirs.db"),
    );
    let _ = std::fs::remove_file(&theirs);
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&manifest(
            "EtcdBackup",
            "overwrite",
            json!({"clusterName": "example",
            "storageType": "S3", "s3": s3_spec(&moto, BUCKET, "etcd/theirs.db", "aws")}),
        )),
    );
    until_failed(
        &k,
        ns,
        "etcdbackup/overwrite",
        60,
        "never overwrites an object",
    );
    let kept = moto.curl(&[], &format!("/{BUCKET}/etcd/theirs.db"));
    assert_eq!(kept, b"someone's data", "the object was overwritten");
    tried += 1;

    // Two periodic backups under one path: reported, neither prunes the other's snapshots.
    for name in ["twin-a", "twin-b"] {
        k.ok(
            &["apply", "-n", ns, "-f", "-"],
            Some(&manifest(
                "EtcdBackup",
                name,
                json!({"clusterName": "example",
                "storageType": "S3", "s3": s3_spec(&moto, BUCKET, "etcd/twins", "aws"),
                "backupPolicy": {"backupIntervalInSecond": 5, "maxBackups": 1}}),
            )),
        );
    }
    until("the shared prefix to be reported", 90, || {
        ["twin-a", "twin-b"]
            .iter()
            .any(|n| !events(&k, ns, n, "SharedPrefix").is_empty())
    });
    // With maxBackups 1 each, more than two snapshots under the path means nothing was pruned.
    until("both twins' snapshots to be kept", 60, || {
        moto.keys(BUCKET, "etcd/twins").len() >= 3
    });
    k.ok(
        &["delete", "etcdbackup", "twin-a", "twin-b", "-n", ns],
        None,
    );
    tried += 1;

    // A user's Secret under a name TLS.auto would use is reported, never taken over.
    k.ok(
        &[
            "create",
            "secret",
            "generic",
            "taken-client-tls",
            "-n",
            ns,
            "--from-literal=tls.crt=mine",
        ],
        None,
    );
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(
            &cluster(
                "taken",
                json!({"size": 1, "version": "3.6.16", "TLS": {"auto": {}}}),
            )
            .to_string(),
        ),
    );
    until("the TLS conflict to be reported", 60, || {
        degraded_with(
            &get(&k, ns, "etcdcluster/taken"),
            "TLSSecretConflict",
            &["taken-client-tls", "not this cluster's"],
        )
    });
    let mine = get(&k, ns, "secret/taken-client-tls");
    assert_eq!(
        mine["data"],
        json!({"tls.crt": "bWluZQ=="}),
        "the user's Secret was changed"
    );
    assert!(mine["metadata"]["ownerReferences"].is_null());
    k.ok(
        &["delete", "etcdcluster/taken", "-n", ns, "--wait=false"],
        None,
    );
    tried += 1;

    // The cache holds only the operator's own Secrets, however many others the namespace has.
    let unrelated: Vec<Value> = (0..1000)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("app-{i}"),
                "annotations": {"note": "x".repeat(100)}}, "stringData": {"password": "p"}})
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": unrelated});
    k.ok(&["create", "-n", ns, "-f", "-"], Some(&list.to_string()));
    let own = || {
        let out = k.ok(
            &[
                "get",
                "secrets",
                "-n",
                ns,
                "-l",
                "app.kubernetes.io/managed-by=etcd-operator",
                "-o",
                "name",
            ],
            None,
        );
        out.lines().count()
    };
    until(
        "the cache to hold exactly the operator's own Secrets",
        30,
        || cached_secrets(&operator) == Some(own()),
    );
    let held = cached_secrets(&operator).unwrap();
    eprintln!("Secrets held in the cache with 1,000 unrelated ones: {held} (the operator's own)");
    assert!(held < 10, "{held}");

    let uid = get(&k, ns, "etcdrestore/no-secret")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    tried += forged_hand_offs(&k, ns, &operator, &base, &uid);

    // 10,000 idle or slow-header connections to the operator: its probes are still answered.
    let (held, worst) = flood(&operator, 10_000);
    eprintln!("/healthz with {held} idle or slow-header connections open: worst of 5 {worst:?}");
    assert!(held >= 9_000, "only {held} connections could be opened");
    assert!(worst < std::time::Duration::from_secs(1), "{worst:?}");
    tried += 1;

    // The lookalike was never touched, and the members never counted it.
    let pod = get(&k, ns, "pod/lookalike");
    assert!(
        pod["metadata"]["deletionTimestamp"].is_null(),
        "the lookalike pod was deleted"
    );
    let c = get(&k, ns, "etcdcluster/example");
    assert_eq!(c["status"]["size"], 3, "{}", c["status"]);
    base.holds(&k, ns, "everything");
    assert_eq!(
        operator.restarts(),
        restarts_before,
        "the operator restarted"
    );
    eprintln!(
        "hostile inputs tried: {tried}, refused clearly: {tried}, operator restarts: 0, \
         member pods deleted: 0, keys lost: 0 ({:?})",
        started.elapsed()
    );
    assert!(tried >= 15, "only {tried} inputs tried");
}
