//! TLS on the real local cluster, the operator installed by the chart:
//! - `examples/cluster-tls.yaml` unchanged, with the three coreos Secrets the test makes: three
//!   members, `etcdctl --cacert/--cert/--key` in a pod sees three healthy members over https,
//!   plain HTTP is refused, and a backup by `clusterName` succeeds with the cluster's own
//!   client certificate, and a restore from it brings the cluster back over TLS;
//! - a Secret whose certificate does not name the members: a condition and an Event naming the
//!   Secret, and no pod;
//! - `TLS.auto`: the operator's own CA; a forced rotation (the `rotate-tls` annotation) rolls the
//!   members three times while a client writes over TLS, and no acknowledged write is lost.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use e2e::backups::{aws_secret, manifest, s3_spec, store_host, until_status};
use e2e::stores::Moto;
use e2e::tls::{
    TlsWriter, all_healthy, assert_written, coreos_secrets, etcdctl_health, tls_client,
};
use e2e::{
    Kubectl, Operator, degraded_with, event_count, get, healthy_at_size, holds_for, pod_names,
    until,
};
use etcd_client::GetOptions;
use serde_json::{Value, json};

fn example_tls() -> String {
    std::fs::read_to_string(e2e::repo_root().join("examples/cluster-tls.yaml")).unwrap()
}

#[test]
fn the_coreos_tls_example_runs_with_secrets_the_user_made() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let moto = Moto::start(&store_host());
    moto.create_bucket("tls-backups");
    let namespace = k.namespace("tls-static");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let names = vec![
        format!("*.example-tls.{ns}.svc"),
        format!("*.example-tls.{ns}.svc.cluster.local"),
    ];
    coreos_secrets(&k, ns, "example-tls", &names);
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&example_tls()));
    let took = until("3 healthy members over TLS", 240, || {
        healthy_at_size(&k, ns, "example-tls", 3)
    });
    eprintln!("static TLS: 3 members healthy after {took:?}");

    // A client in a pod with the client certificate sees three healthy members over https.
    let health = etcdctl_health(&k, ns, "example-tls", "etcd-client-tls", "etcdctl");
    assert!(all_healthy(&health, 3), "{health}");
    for h in health.as_array().unwrap() {
        assert!(
            h["endpoint"]
                .as_str()
                .is_some_and(|e| e.starts_with("https://")),
            "{h}"
        );
    }
    // Plain HTTP to a member's client port is refused.
    let ip = e2e::member_ip(&k, ns, "example-tls");
    let plain = e2e::keys_under(&format!("http://{ip}:2379"), "a");
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    eprintln!("plain HTTP: {}", plain.unwrap_err());
    let pods: Vec<Value> = pod_names(&k, ns, "example-tls")
        .iter()
        .map(|p| get(&k, ns, &format!("pod/{p}")))
        .collect();
    for pod in &pods {
        let args = pod["spec"]["containers"][0]["args"].to_string()
            + &pod["spec"]["containers"][0]["command"].to_string();
        assert!(args.contains("--client-cert-auth=true"), "{args}");
        assert!(args.contains("--peer-client-cert-auth=true"), "{args}");
    }

    // A backup by clusterName uses the cluster's own client certificate.
    aws_secret(&k, ns);
    put_key(&k, ns, "example-tls", "etcd-client-tls", "before-backup");
    let backup = manifest(
        "EtcdBackup",
        "tls-backup",
        json!({"clusterName": "example-tls", "storageType": "S3",
            "s3": s3_spec(&moto, "tls-backups", "etcd/tls.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(&k, ns, "etcdbackup/tls-backup", 120, |s| {
        s["succeeded"] == true
    });
    let object = moto.curl(&[], "/tls-backups/etcd/tls.db");
    assert!(object.len() > 1000, "{} bytes", object.len());

    // And the coreos way, by endpoints and `clientTLSSecret`.
    let backup = manifest(
        "EtcdBackup",
        "tls-endpoints",
        json!({"etcdEndpoints": [format!("https://example-tls-client.{ns}.svc:2379")],
            "clientTLSSecret": "etcd-client-tls", "storageType": "S3",
            "s3": s3_spec(&moto, "tls-backups", "etcd/endpoints.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(&k, ns, "etcdbackup/tls-endpoints", 120, |s| {
        s["succeeded"] == true
    });

    // A restore of the TLS cluster from its backup: members over TLS again, the data of then.
    put_key(&k, ns, "example-tls", "etcd-client-tls", "after-backup");
    let restore = manifest(
        "EtcdRestore",
        "tls-restore",
        json!({"etcdCluster": {"name": "example-tls"}, "backupStorageType": "S3",
            "s3": s3_spec(&moto, "tls-backups", "etcd/tls.db", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&restore));
    until_status(&k, ns, "etcdrestore/tls-restore", 300, |s| {
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Completed"
    });
    until("3 healthy members after the restore", 240, || {
        healthy_at_size(&k, ns, "example-tls", 3)
    });
    let keys = keys_of(&k, ns, "example-tls", "etcd-client-tls");
    assert!(keys.contains(&"before-backup".to_string()), "{keys:?}");
    assert!(!keys.contains(&"after-backup".to_string()), "{keys:?}");
    let health = etcdctl_health(&k, ns, "example-tls", "etcd-client-tls", "etcdctl-restored");
    assert!(all_healthy(&health, 3), "{health}");
    // The seed fetched the snapshot over TLS from the operator, trusting the CA it was given.
    let seed = e2e::member_pods(&k, ns, "example-tls")
        .into_iter()
        .find(|p| !p["metadata"]["annotations"][RESTORE_FROM].is_null())
        .expect("the restore's seed among the members");
    let from = seed["metadata"]["annotations"][RESTORE_FROM]
        .as_str()
        .unwrap();
    assert!(
        from.starts_with("https://") && from.contains("/ca-"),
        "{from}"
    );
    let command = seed["spec"]["containers"][0]["command"].to_string();
    assert!(command.contains("--server-ca="), "{command}");
    let name = seed["metadata"]["name"].as_str().unwrap();
    let log = k.ok(&["logs", "-n", ns, name, "-c", "etcd"], None);
    assert!(log.contains("fetched the snapshot"), "{log}");
}

/// The annotation with the URL a restore's seed fetched its snapshot from.
const RESTORE_FROM: &str = "etcd.database.coreos.com/restore-from";

/// Puts `key` through the client Service over TLS.
fn put_key(k: &Kubectl, ns: &str, cluster: &str, secret: &str, key: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = tls_client(k, ns, cluster, secret).await.unwrap();
        c.put(key, "v", None).await.unwrap();
    });
}

/// Every key, read through the client Service over TLS.
fn keys_of(k: &Kubectl, ns: &str, cluster: &str, secret: &str) -> Vec<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = tls_client(k, ns, cluster, secret).await.unwrap();
        let r = c
            .get("", Some(GetOptions::new().with_all_keys().with_keys_only()))
            .await
            .unwrap();
        r.kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok().map(String::from))
            .collect()
    })
}

#[test]
fn a_certificate_that_does_not_name_the_members_is_reported_before_any_pod() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("tls-san");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    coreos_secrets(
        &k,
        ns,
        "example-tls",
        &["*.somebody-else.default.svc".to_string()],
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&example_tls()));
    until("the Degraded condition naming the Secret", 60, || {
        degraded_with(
            &get(&k, ns, "etcdcluster/example-tls"),
            "InvalidTLSSecret",
            &[
                "spec.TLS.static.member.peerSecret",
                "etcd-peer-tls",
                "do not cover",
            ],
        )
    });
    assert!(event_count(&k, ns, "example-tls", "InvalidTLSSecret") >= 1);
    holds_for("no member pod", 10, || {
        pod_names(&k, ns, "example-tls").is_empty()
    });
}

/// The CA Secret's rotation phase and the token it last acted on.
fn rotation(k: &Kubectl, ns: &str) -> (String, String, String) {
    let s = get(k, ns, "secret/example-ca");
    let ann = &s["metadata"]["annotations"];
    (
        ann["etcd.database.coreos.com/tls-phase"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        ann["etcd.database.coreos.com/tls-rotated-for"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        s["data"]["ca.crt"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn auto_tls_comes_up_and_a_forced_rotation_rolls_the_members_without_losing_a_write() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("tls-auto");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"},
        "spec": {"size": 3, "version": "3.6.16", "TLS": {"auto": {}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    let took = until("3 healthy members with auto TLS", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    eprintln!("auto TLS: 3 members healthy after {took:?}");
    for s in [
        "example-ca",
        "example-peer-tls",
        "example-server-tls",
        "example-client-tls",
    ] {
        let secret = get(&k, ns, &format!("secret/{s}"));
        assert_eq!(
            secret["metadata"]["ownerReferences"][0]["kind"], "EtcdCluster",
            "{s} is not owned by the cluster"
        );
    }
    let health = etcdctl_health(&k, ns, "example", "example-client-tls", "etcdctl-before");
    assert!(all_healthy(&health, 3), "{health}");

    let before_ids = e2e::RollView::of(&k, ns, "example").ids();
    let (_, _, old_ca) = rotation(&k, ns);
    let mut writer = TlsWriter::start(ns, "example", "example-client-tls");
    std::thread::sleep(Duration::from_secs(3));
    k.ok(
        &[
            "annotate",
            "-n",
            ns,
            "etcdcluster/example",
            "etcd.database.coreos.com/rotate-tls=now",
        ],
        None,
    );
    // Each change of what the wait sees is printed: a rotation that stalls in CI says where.
    let asked = Instant::now();
    let mut seen = String::new();
    let took = until("the rotation to finish", 600, || {
        let (phase, token, ca) = rotation(&k, ns);
        let view = e2e::RollView::of(&k, ns, "example");
        assert!(
            view.available,
            "the cluster left Available mid-rotation: {view:?}"
        );
        let cluster = get(&k, ns, "etcdcluster/example");
        let progressing = cluster["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Progressing")
            .map(|c| format!("{} {}: {}", c["status"], c["reason"], c["message"]))
            .unwrap_or_default();
        let healthy = healthy_at_size(&k, ns, "example", 3);
        let events = event_count(&k, ns, "example", "CertificatesRotating");
        let now = format!(
            "phase {phase}, token {token:?}, new CA {}, healthy at 3 {healthy}, \
             {events} CertificatesRotating, Progressing {progressing}, pods {:?}",
            ca != old_ca,
            pod_names(&k, ns, "example")
        );
        if now != seen {
            eprintln!("rotation at {:?}: {now}", asked.elapsed());
            seen = now;
        }
        phase == "steady"
            && token == "now"
            && ca != old_ca
            && healthy
            && events >= 3
            && progressing.starts_with("\"False\"")
    });
    std::thread::sleep(Duration::from_secs(2));
    let (acked, errors, longest) = writer.finish();
    eprintln!(
        "rotation took {took:?}; {} writes acknowledged, {errors} failed, longest stall {longest:?}",
        acked.len()
    );
    assert!(
        acked.len() > 100,
        "the writer barely wrote: {}",
        acked.len()
    );
    let after_ids = e2e::RollView::of(&k, ns, "example").ids();
    assert!(
        after_ids.iter().all(|m| !before_ids.contains(m)),
        "some member was not rolled: before {before_ids:?}, after {after_ids:?}"
    );

    // Every acknowledged write is there, read with the new client certificate.
    assert_written(&k, ns, "example", "example-client-tls", &acked);
    let health = etcdctl_health(&k, ns, "example", "example-client-tls", "etcdctl-after");
    assert!(all_healthy(&health, 3), "{health}");
}
