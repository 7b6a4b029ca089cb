//! What the backup and restore tests share: coreos-style manifests, status waits, the object
//! stores' Secrets, and checks of a downloaded snapshot.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::stores::{AZURITE_ACCOUNT, AZURITE_KEY, Azurite, Moto};
use crate::{Kubectl, Namespace, Operator, get, healthy_at_size, repo_root, until};

/// Where pods reach servers the tests start: the local cluster's bridge.
pub fn store_host() -> String {
    std::env::var("E2E_S3_HOST").unwrap_or_else(|_| "10.244.0.1".into())
}

/// A coreos-style manifest of `kind` (EtcdBackup, EtcdRestore) with `spec`.
pub fn manifest(kind: &str, name: &str, spec: Value) -> String {
    json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": kind,
        "metadata": {"name": name}, "spec": spec})
    .to_string()
}

/// An S3 section for moto: `path` in `bucket`, the Secret `secret`.
pub fn s3_spec(moto: &Moto, bucket: &str, path: &str, secret: &str) -> Value {
    json!({"path": format!("{bucket}/{path}"), "awsSecret": secret,
        "endpoint": moto.url, "forcePathStyle": true})
}

/// The status of `what` (`etcdbackup/NAME`, `etcdrestore/NAME`).
pub fn status(k: &Kubectl, ns: &str, what: &str) -> Value {
    get(k, ns, what)["status"].clone()
}

/// Waits until the status of `what` satisfies `check`; on a timeout the panic shows the last
/// status, which names the cause of a failure.
pub fn until_status(k: &Kubectl, ns: &str, what: &str, secs: u64, check: impl Fn(&Value) -> bool) {
    let start = Instant::now();
    loop {
        let s = status(k, ns, what);
        if check(&s) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}; its status: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The coreos S3 Secret `aws` (AWS shared files) for moto, in `ns`.
pub fn aws_secret(k: &Kubectl, ns: &str) {
    k.ok(
        &[
            "create",
            "secret",
            "generic",
            "aws",
            "-n",
            ns,
            "--from-literal=credentials=[default]\naws_access_key_id = test\naws_secret_access_key = test\n",
            "--from-literal=config=[default]\nregion = us-east-1\n",
        ],
        None,
    );
}

/// The coreos ABS Secret `abs` for Azurite, plus our storage-endpoint, in `ns`.
pub fn abs_secret(k: &Kubectl, ns: &str, azurite: &Azurite) {
    k.ok(
        &[
            "create",
            "secret",
            "generic",
            "abs",
            "-n",
            ns,
            &format!("--from-literal=storage-account={AZURITE_ACCOUNT}"),
            &format!("--from-literal=storage-key={AZURITE_KEY}"),
            &format!("--from-literal=storage-endpoint={}", azurite.url),
        ],
        None,
    );
}

/// sha256 of `bytes` in hex, by sha256sum(1).
pub fn sha256_hex(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// etcdutl (3.6, the build the local cluster uses) on a downloaded snapshot.
pub fn snapshot_status(file: &std::path::Path) -> Value {
    let dir = Command::new(repo_root().join("hack/build-tools.sh"))
        .arg("etcd-3.6")
        .output()
        .unwrap();
    let dir = String::from_utf8_lossy(&dir.stdout).trim().to_string();
    let out = Command::new(format!("{dir}/etcdutl"))
        .args(["snapshot", "status", "--write-out=json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdutl snapshot status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What the backup and restore tests start from: moto with `bucket`, a namespace with the
/// operator installed by the chart, the coreos S3 Secret `aws`, and a healthy cluster
/// `example` of `size` members.
pub fn setup<'k>(
    k: &'k Kubectl,
    prefix: &str,
    bucket: &str,
    size: usize,
) -> (Moto, Namespace<'k>, Operator<'k>) {
    let spec = json!({"size": size, "version": "3.6.16"});
    setup_with(k, prefix, bucket, "example", spec, &[])
}

/// [`setup`] with the cluster `name` of `spec`, and `extra` manifests applied before it.
pub fn setup_with<'k>(
    k: &'k Kubectl,
    prefix: &str,
    bucket: &str,
    name: &str,
    spec: Value,
    extra: &[String],
) -> (Moto, Namespace<'k>, Operator<'k>) {
    k.apply_crds();
    let moto = Moto::start(&store_host());
    moto.create_bucket(bucket);
    let namespace = k.namespace(prefix);
    let ns = namespace.name.clone();
    let operator = Operator::install(k, &ns, &[]);
    aws_secret(k, &ns);
    for m in extra {
        k.ok(&["apply", "-n", &ns, "-f", "-"], Some(m));
    }
    let size = usize::try_from(spec["size"].as_u64().unwrap_or(1)).unwrap_or(1);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": name}, "spec": spec});
    k.ok(&["apply", "-n", &ns, "-f", "-"], Some(&cluster.to_string()));
    until(&format!("{size} healthy members"), 240, || {
        healthy_at_size(k, &ns, name, size)
    });
    (moto, namespace, operator)
}

/// Waits until `what` (an EtcdBackup or an EtcdRestore) is Failed with a reason that contains
/// `text` (coreos spells it `Reason` on EtcdBackup, `reason` on EtcdRestore).
pub fn until_failed(k: &Kubectl, ns: &str, what: &str, secs: u64, text: &str) {
    until_status(k, ns, what, secs, |s| {
        s["phase"] == "Failed"
            && [&s["Reason"], &s["reason"]]
                .iter()
                .any(|r| r.as_str().is_some_and(|r| r.contains(text)))
    });
}
