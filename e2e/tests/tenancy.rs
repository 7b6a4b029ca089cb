//! One tenant against another, as issue 65 found it: the operator installed by the chart
//! watching three namespaces; `team-b` runs `victim` with keys in it; from `team-a`, whose
//! author may only create objects in its own namespace, every way of naming `team-b`'s etcd
//! (or the operator, or the API server) in an etcd client URL. Each attempt is refused with a
//! reason naming the field, before anything dials it; afterwards `victim`'s keys, member,
//! authentication (still off: its keys read without credentials), phase and conditions are as
//! before, and the operator has not restarted.
//!
//! Before the gate (src/reference), `bootstrap.existing.endpoints` aimed at `victim` had the
//! operator turn authentication on inside `team-b`'s etcd within 60 s, with a root password
//! kept in `team-a`: `victim` went `Failed`, its clients locked out.
//!
//! Link-local and metadata addresses are not aimed at here, even to be refused: if the gate
//! were wrong a packet would leave the machine. The resolver's unit tests (src/reference)
//! refuse them where the gate decides; here loopback (the operator pod's own) and the API
//! server's Service stand for "addresses a tenant may not name".

#![allow(clippy::unwrap_used)]

use e2e::{Kubectl, Operator, events, get, member_pods, until};
use serde_json::{Value, json};

const VICTIM: &str = "victim";
const KEYS: usize = 20;

fn cluster(name: &str, spec: Value) -> String {
    json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": name}, "spec": spec})
    .to_string()
}

fn with_etcd<T>(endpoint: &str, f: impl AsyncFnOnce(&mut etcd_client::Client) -> T) -> T {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        f(&mut c).await
    })
}

/// What `team-b` would notice of an attack: its keys as read without credentials (which
/// fails once authentication is on), its member IDs, its phase and its condition reasons.
#[derive(Debug, PartialEq)]
struct Seen {
    keys: Vec<(String, String)>,
    members: Vec<u64>,
    phase: Value,
    conditions: Vec<(String, String)>,
}

fn seen(k: &Kubectl, ns: &str, endpoint: &str) -> Seen {
    let (keys, members) = with_etcd(endpoint, async |c| {
        let opts = etcd_client::GetOptions::new().with_prefix();
        let got = c.get("tenant/", Some(opts)).await.unwrap();
        let keys = (got.kvs().iter())
            .map(|kv| {
                (
                    kv.key_str().unwrap().to_string(),
                    kv.value_str().unwrap().to_string(),
                )
            })
            .collect();
        let mut members: Vec<u64> = (c.member_list().await.unwrap().members().iter())
            .map(|m| m.id())
            .collect();
        members.sort();
        (keys, members)
    });
    let status = get(k, ns, &format!("etcdcluster/{VICTIM}"))["status"].clone();
    let mut conditions: Vec<(String, String)> = (status["conditions"].as_array().into_iter())
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or("").to_string(),
                c["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    conditions.sort();
    Seen {
        keys,
        members,
        phase: status["phase"].clone(),
        conditions,
    }
}

/// An EtcdCluster of `ns` that would join `url` with authentication on, as the thief did:
/// refused with `ReferenceRefused` naming the field, in a condition and an Event, and no pod
/// made for it.
fn join_refused(k: &Kubectl, ns: &str, name: &str, url: &str, why: &str) {
    let spec = json!({"size": 1, "version": "3.6.16", "auth": {"enabled": true},
        "bootstrap": {"existing": {"endpoints": [url]}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster(name, spec)));
    let field = "spec.bootstrap.existing.endpoints";
    until(&format!("{name} ({url}) to be refused"), 60, || {
        e2e::degraded_with(
            &get(k, ns, &format!("etcdcluster/{name}")),
            "ReferenceRefused",
            &[field, why],
        )
    });
    let said = events(k, ns, name, "ReferenceRefused");
    assert!(
        said.iter().any(|m| m.contains(field)),
        "no Event names {field}: {said:?}"
    );
    assert!(member_pods(k, ns, name).is_empty(), "{name} got pods");
    k.ok(
        &["delete", "-n", ns, "etcdcluster", name, "--wait=false"],
        None,
    );
}

/// An EtcdBackup of `ns` that would read `url`: failed with the field named.
fn backup_refused(k: &Kubectl, ns: &str, name: &str, url: &str, tls: Option<&str>, why: &str) {
    let mut spec = json!({"etcdEndpoints": [url], "storageType": "S3",
        "s3": {"path": "stolen/victim.db", "awsSecret": "none"}});
    if let Some(secret) = tls {
        spec["clientTLSSecret"] = json!(secret);
    }
    let backup = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": name}, "spec": spec});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup.to_string()));
    until(&format!("backup {name} ({url}) to be refused"), 60, || {
        let s = &get(k, ns, &format!("etcdbackup/{name}"))["status"];
        let reason = s["reason"].as_str().or(s["Reason"].as_str()).unwrap_or("");
        s["phase"] == "Failed" && reason.contains("spec.etcdEndpoints") && reason.contains(why)
    });
}

#[test]
fn nothing_one_namespace_declares_reaches_another_namespaces_etcd() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let op = k.namespace("tenancy-op");
    let a = k.namespace("team-a");
    let b = k.namespace("team-b");
    let c = k.namespace("team-c");
    let (a, b) = (a.name.as_str(), b.name.as_str());
    let watch = format!("watchNamespaces={{{a},{b},{}}}", c.name);
    let operator = Operator::install(&k, &op.name, &[&watch]);

    k.ok(
        &["apply", "-n", b, "-f", "-"],
        Some(&cluster(VICTIM, json!({"size": 1, "version": "3.6.16"}))),
    );
    // The baseline is a settled cluster: Available and not Degraded, as it must stay.
    until("the victim to be Available", 240, || {
        let c = get(&k, b, &format!("etcdcluster/{VICTIM}"));
        let is = |t: &str, v: &str| {
            (c["status"]["conditions"].as_array().into_iter())
                .flatten()
                .any(|x| x["type"] == t && x["status"] == v)
        };
        c["status"]["phase"] == "Running" && is("Available", "True") && is("Degraded", "False")
    });
    let pod = member_pods(&k, b, VICTIM)[0].clone();
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    let endpoint = format!("http://{pod_ip}:2379");
    with_etcd(&endpoint, async |c| {
        for i in 0..KEYS {
            c.put(format!("tenant/{i:03}"), format!("b{i}"), None)
                .await
                .unwrap();
        }
    });
    let before = seen(&k, b, &endpoint);
    assert_eq!(before.keys.len(), KEYS);
    let service_ip = get(&k, b, &format!("service/{VICTIM}-client"))["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_string();
    let dashed = pod_ip.replace('.', "-");

    // team-a's own aliases for team-b's etcd.
    let alias = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "alias"},
        "spec": {"type": "ExternalName",
            "externalName": format!("{VICTIM}-client.{b}.svc.cluster.local")}});
    let by_hand = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "by-hand"},
        "spec": {"ports": [{"name": "client", "port": 2379}]}});
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "by-hand-1", "labels": {"kubernetes.io/service-name": "by-hand"}},
        "addressType": "IPv4", "ports": [{"name": "client", "port": 2379}],
        "endpoints": [{"addresses": [pod_ip.clone()]}]});
    for m in [&alias, &by_hand, &slice] {
        k.ok(&["apply", "-n", a, "-f", "-"], Some(&m.to_string()));
    }

    let elsewhere = "is not a Service of namespace";
    let joins = [
        (
            "by-name",
            format!("http://{VICTIM}-client.{b}:2379"),
            elsewhere,
        ),
        (
            "by-fqdn",
            format!("http://{VICTIM}-client.{b}.svc.cluster.local:2379"),
            elsewhere,
        ),
        (
            "by-member-name",
            format!(
                "http://{}.{VICTIM}.{b}.svc:2379",
                pod["metadata"]["name"].as_str().unwrap()
            ),
            elsewhere,
        ),
        (
            "by-pod-dns",
            format!("http://{dashed}.{b}.pod.cluster.local:2379"),
            "a pod of namespace",
        ),
        (
            "by-pod-ip",
            endpoint.clone(),
            "is not a pod of this namespace",
        ),
        (
            "by-service-ip",
            format!("http://{service_ip}:2379"),
            "is not a pod of this namespace",
        ),
        (
            "by-external-name",
            "http://alias:2379".to_string(),
            elsewhere,
        ),
        (
            "by-endpointslice",
            "http://by-hand:2379".to_string(),
            "whose endpoint",
        ),
        (
            "by-fragment",
            format!("http://{VICTIM}-client.{b}.svc:2379#@x.{a}"),
            "'#'",
        ),
        (
            "operator-loopback",
            "http://127.0.0.1:8080".to_string(),
            "loopback",
        ),
        (
            "api-server",
            "https://kubernetes.default.svc:443".to_string(),
            elsewhere,
        ),
    ];
    let mut tried = 0;
    for (name, url, why) in &joins {
        join_refused(&k, a, name, url, why);
        tried += 1;
    }

    // A client certificate is no licence to leave the namespace: the rule once skipped itself
    // when clientTLSSecret was set.
    k.ok(
        &[
            "create",
            "secret",
            "generic",
            "client-tls",
            "-n",
            a,
            "--from-literal=etcd-client.crt=x",
            "--from-literal=etcd-client.key=x",
            "--from-literal=etcd-client-ca.crt=x",
        ],
        None,
    );
    let backups = [
        (
            "b-fqdn",
            format!("http://{VICTIM}-client.{b}.svc.cluster.local:2379"),
            None,
            elsewhere,
        ),
        (
            "b-tls",
            format!("http://{VICTIM}-client.{b}.svc:2379"),
            Some("client-tls"),
            elsewhere,
        ),
        ("b-alias", "http://alias:2379".to_string(), None, elsewhere),
        (
            "b-pod-ip",
            endpoint.clone(),
            Some("client-tls"),
            "is not a pod of this namespace",
        ),
        (
            "b-fragment",
            format!("http://{VICTIM}-client.{b}:2379#@x.{a}"),
            None,
            "'#'",
        ),
    ];
    for (name, url, tls, why) in &backups {
        backup_refused(&k, a, name, url, *tls, why);
        tried += 1;
    }

    let after = seen(&k, b, &endpoint);
    assert_eq!(after, before, "team-b's etcd changed");
    assert_eq!(operator.restarts(), 0, "the operator restarted");
    println!(
        "tenancy: {tried} attempts from {a} against {b}, the operator and the API server \
         refused; {b}: {} keys, {} member, phase {}, authentication off, as before",
        after.keys.len(),
        after.members.len(),
        after.phase
    );
}
