//! TLS fed by a real cert-manager: its controller, built from its Go module into the tool cache
//! (`hack/build-tools.sh cert-manager`), runs as a host process against the local cluster,
//! confined to the test's namespace, with its own CRDs. A CA Issuer is made from a self-signed
//! one, as cert-manager's documentation has it.
//! - `TLS.certManager`: the operator writes the three Certificates (owned by the cluster), waits
//!   for cert-manager to fill their Secrets, and the members come up over TLS; a renewal of all
//!   three (what `cmctl renew` asks) while a client writes over TLS rolls the members one at a
//!   time, never leaving Available, and no acknowledged write is lost.
//! - `TLS.static` naming Secrets cert-manager wrote for Certificates of the user's, in the
//!   `kubernetes.io/tls` layout: three members over TLS.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::tls::{TlsWriter, all_healthy, assert_written, etcdctl_health};
use e2e::{Kubectl, Operator, get, healthy_at_size, pod_names, until};
use serde_json::{Value, json};

/// The controllers of cert-manager an Issuer of kind CA or SelfSigned needs.
const CONTROLLERS: &str = "issuers,certificaterequests-approver,\
    certificaterequests-issuer-ca,certificaterequests-issuer-selfsigned,certificates-trigger,\
    certificates-issuing,certificates-key-manager,certificates-request-manager,\
    certificates-readiness,certificates-revision-manager";

/// cert-manager's controller, watching namespace `ns` only; stopped (by its PID) when dropped.
struct CertManager {
    child: Child,
    log: PathBuf,
}

impl Drop for CertManager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CertManager {
    fn start(k: &Kubectl, ns: &str) -> CertManager {
        let out = Command::new(e2e::repo_root().join("hack/build-tools.sh"))
            .arg("cert-manager")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let crds = bin.parent().unwrap().join("crds");
        k.ok(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                crds.to_str().unwrap(),
            ],
            None,
        );
        until("cert-manager's CRDs to be served", 60, || {
            k.run(&["get", "certificates.cert-manager.io", "-n", ns], None)
                .status
                .success()
        });
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = e2e::repo_root().join(format!("target/e2e-cert-manager-{ns}.log"));
        let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG (hack/with-cluster.sh)");
        let child = Command::new(bin.join("cert-manager-controller"))
            .args([
                format!("--kubeconfig={kubeconfig}"),
                "--leader-elect=false".into(),
                format!("--namespace={ns}"),
                format!("--cluster-resource-namespace={ns}"),
                format!("--metrics-listen-address=127.0.0.1:{port}"),
                "--enable-certificate-owner-ref".into(),
                format!("--controllers={CONTROLLERS}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        CertManager { child, log }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// A self-signed Issuer, a CA certificate it signs, and Issuer `etcd-ca` signing with that CA.
fn ca_issuer(k: &Kubectl, ns: &str) {
    let objects = [
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": "selfsigned"}, "spec": {"selfSigned": {}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "etcd-ca"},
            "spec": {"isCA": true, "commonName": "etcd-ca", "secretName": "etcd-ca",
                "duration": "87600h",
                "privateKey": {"algorithm": "ECDSA", "size": 256},
                "issuerRef": {"name": "selfsigned", "kind": "Issuer"}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": "etcd-ca"}, "spec": {"ca": {"secretName": "etcd-ca"}}}),
    ];
    for o in objects {
        k.ok(&["apply", "-n", ns, "-f", "-"], Some(&o.to_string()));
    }
}

/// Certificates of the user's for a `TLS.static` cluster `cluster`, issued by `etcd-ca`.
fn static_certificates(k: &Kubectl, ns: &str, cluster: &str) {
    let members = [
        format!("*.{cluster}.{ns}.svc"),
        format!("*.{cluster}.{ns}.svc.cluster.local"),
    ];
    let mut server = members.to_vec();
    server.extend([format!("{cluster}-client.{ns}.svc"), "localhost".into()]);
    let both = [
        "digital signature",
        "key encipherment",
        "server auth",
        "client auth",
    ];
    for (name, dns, usages, cn) in [
        (
            format!("{cluster}-peer"),
            members.to_vec(),
            &both[..],
            "peer",
        ),
        (format!("{cluster}-server"), server, &both[..], "server"),
        (
            format!("{cluster}-client"),
            vec![],
            &["digital signature", "key encipherment", "client auth"][..],
            "client",
        ),
    ] {
        let mut spec = json!({"secretName": name, "commonName": cn, "usages": usages,
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": "etcd-ca", "kind": "Issuer"}});
        if !dns.is_empty() {
            spec["dnsNames"] = json!(dns);
        }
        let o = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": name}, "spec": spec});
        k.ok(&["apply", "-n", ns, "-f", "-"], Some(&o.to_string()));
    }
}

/// Asks cert-manager to renew Certificate `name` now, as `cmctl renew` does: the Issuing
/// condition set on its status.
fn renew(k: &Kubectl, ns: &str, name: &str) {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let condition = json!({"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "renewal asked by the e2e test", "lastTransitionTime": now});
    let patch = json!([{"op": "add", "path": "/status/conditions/-", "value": condition}]);
    k.ok(
        &[
            "patch",
            "-n",
            ns,
            &format!("certificate/{name}"),
            "--subresource=status",
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
}

fn revision(secret: &Value) -> String {
    secret["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn cert_manager_issues_the_certificates_and_a_renewal_rolls_the_members_without_losing_a_write() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("cert-manager");
    let ns = namespace.name.as_str();
    let cm = CertManager::start(&k, ns);
    let _operator = Operator::install(&k, ns, &[]);
    ca_issuer(&k, ns);
    static_certificates(&k, ns, "static");
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"},
        "spec": {"size": 3, "version": "3.6.16",
            "TLS": {"certManager": {"issuerRef": {"name": "etcd-ca"}}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    let started = Instant::now();
    until(
        "3 healthy members with cert-manager's certificates",
        300,
        || {
            let healthy = healthy_at_size(&k, ns, "example", 3);
            if !healthy && started.elapsed() > Duration::from_secs(240) {
                eprintln!("cert-manager:\n{}", cm.log_tail());
            }
            healthy
        },
    );
    eprintln!(
        "TLS.certManager: 3 members healthy after {:?}",
        started.elapsed()
    );
    for name in [
        "example-peer-tls",
        "example-server-tls",
        "example-client-tls",
    ] {
        let c = get(&k, ns, &format!("certificate/{name}"));
        assert_eq!(
            c["metadata"]["ownerReferences"][0]["kind"], "EtcdCluster",
            "{c}"
        );
        let s = get(&k, ns, &format!("secret/{name}"));
        assert_eq!(s["type"], "kubernetes.io/tls", "{name}");
    }
    let client = get(&k, ns, "certificate/example-client-tls");
    assert_eq!(client["spec"]["commonName"], "root");
    let health = etcdctl_health(&k, ns, "example", "example-client-tls", "etcdctl-before");
    assert!(all_healthy(&health, 3), "{health}");

    // A TLS.static cluster on Secrets in cert-manager's layout, the user's own Certificates.
    let static_cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "metadata": {"name": "static"},
        "spec": {"size": 3, "version": "3.6.16", "TLS": {"static": {
            "member": {"peerSecret": "static-peer", "serverSecret": "static-server"},
            "operatorSecret": "static-client"}}}});
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&static_cluster.to_string()),
    );

    // Renewal of all three under writes.
    let pods_before = pod_names(&k, ns, "example");
    let secrets_before: Vec<String> = ["example-peer-tls", "example-server-tls"]
        .iter()
        .map(|s| revision(&get(&k, ns, &format!("secret/{s}"))))
        .collect();
    let mut writer = TlsWriter::start(ns, "example", "example-client-tls");
    std::thread::sleep(Duration::from_secs(3));
    let asked = Instant::now();
    for name in [
        "example-peer-tls",
        "example-server-tls",
        "example-client-tls",
    ] {
        renew(&k, ns, name);
    }
    let renewed = until("cert-manager to renew the member certificates", 120, || {
        ["example-peer-tls", "example-server-tls"]
            .iter()
            .zip(&secrets_before)
            .all(|(s, before)| revision(&get(&k, ns, &format!("secret/{s}"))) != *before)
    });
    eprintln!("renewed by cert-manager after {renewed:?}");
    let mut seen = String::new();
    let took = until(
        "the members to roll onto the renewed certificates",
        600,
        || {
            let view = e2e::RollView::of(&k, ns, "example");
            assert!(
                view.available,
                "the cluster left Available mid-roll: {view:?}"
            );
            let pods = pod_names(&k, ns, "example");
            let now = format!("pods {pods:?}, members {:?}", view.ids());
            if now != seen {
                eprintln!("roll at {:?}: {now}", asked.elapsed());
                seen = now;
            }
            pods.iter().all(|p| !pods_before.contains(p)) && healthy_at_size(&k, ns, "example", 3)
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let (acked, errors, longest) = writer.finish();
    eprintln!(
        "renewal rolled in {took:?}; {} writes acknowledged, {errors} failed, longest stall {longest:?}",
        acked.len()
    );
    assert!(acked.len() > 50, "the writer barely wrote: {}", acked.len());
    assert_written(&k, ns, "example", "example-client-tls", &acked);
    let health = etcdctl_health(&k, ns, "example", "example-client-tls", "etcdctl-after");
    assert!(all_healthy(&health, 3), "{health}");

    let took = until("the static cluster on cert-manager's Secrets", 300, || {
        healthy_at_size(&k, ns, "static", 3)
    });
    eprintln!("TLS.static on kubernetes.io/tls Secrets: healthy, {took:?} after the renewal");
    let health = etcdctl_health(&k, ns, "static", "static-client", "etcdctl-static");
    assert!(all_healthy(&health, 3), "{health}");
    let pod = get(&k, ns, &format!("pod/{}", pod_names(&k, ns, "static")[0]));
    let peer = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "peer-tls")
        .cloned()
        .unwrap();
    assert_eq!(peer["secret"]["items"][0]["key"], "tls.crt", "{peer}");
    assert_eq!(peer["secret"]["items"][0]["path"], "peer.crt", "{peer}");
}
