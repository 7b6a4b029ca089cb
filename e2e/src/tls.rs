//! Clients of a cluster served over TLS, with the identity in a client Secret of either layout
//! (coreos's `etcd-client.*`, or `kubernetes.io/tls` as cert-manager writes it): etcdctl in a
//! pod, and a writer that counts what etcd acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use etcd_operator::pki::{self, Ca, Layout, Role};
use serde_json::{Value, json};

use crate::{Kubectl, get, until};

/// Applies Secret `name` with `data` (text values) in `ns`.
fn secret(k: &Kubectl, ns: &str, name: &str, data: &BTreeMap<&str, String>) {
    let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "stringData": data});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&s.to_string()));
}

fn layout_data(layout: Layout, pair: &pki::Pair, ca: &Ca) -> BTreeMap<&'static str, String> {
    BTreeMap::from(layout.entries(pair, &ca.0.cert))
}

/// The three Secrets of `examples/cluster-tls.yaml` (`etcd-peer-tls`, `etcd-server-tls`,
/// `etcd-client-tls`), as the coreos TLS guide has users make them, for cluster `cluster`; the
/// member certificates name `member_names` (a wildcard for the members).
pub fn coreos_secrets(k: &Kubectl, ns: &str, cluster: &str, member_names: &[String]) -> Ca {
    let ca = Ca::new("test", time::OffsetDateTime::now_utc(), 10 * DAY).unwrap();
    let mut server_names = member_names.to_vec();
    server_names.extend([
        format!("{cluster}-client.{ns}.svc"),
        "localhost".to_string(),
    ]);
    let peer = ca
        .issue(
            Role::Peer,
            "peer",
            member_names,
            time::OffsetDateTime::now_utc(),
            DAY,
        )
        .unwrap();
    let server = ca
        .issue(
            Role::Server,
            "server",
            &server_names,
            time::OffsetDateTime::now_utc(),
            DAY,
        )
        .unwrap();
    let client = ca
        .issue(
            Role::Client,
            "client",
            &[],
            time::OffsetDateTime::now_utc(),
            DAY,
        )
        .unwrap();
    secret(k, ns, "etcd-peer-tls", &layout_data(pki::PEER, &peer, &ca));
    secret(
        k,
        ns,
        "etcd-server-tls",
        &layout_data(pki::SERVER, &server, &ca),
    );
    secret(
        k,
        ns,
        "etcd-client-tls",
        &layout_data(pki::CLIENT, &client, &ca),
    );
    ca
}

const DAY: Duration = Duration::from_secs(86_400);

/// The layout of client Secret `name`.
fn client_layout(k: &Kubectl, ns: &str, name: &str) -> Layout {
    let s = get(k, ns, &format!("secret/{name}"));
    pki::layout_of(
        |key| s["data"][key].as_str().map(|v| v.as_bytes().to_vec()),
        pki::CLIENT,
    )
}

/// Runs `etcdctl endpoint health --cluster` in a pod of the etcd image with client Secret
/// `client_secret` mounted, against the client Service of `cluster`; returns its JSON answer.
pub fn etcdctl_health(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    client_secret: &str,
    pod: &str,
) -> Value {
    let l = client_layout(k, ns, client_secret);
    let spec = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "etcdctl", "image": "quay.io/coreos/etcd:v3.6.16",
                "imagePullPolicy": "IfNotPresent",
                "command": ["/usr/local/bin/etcdctl",
                    format!("--endpoints=https://{cluster}-client.{ns}.svc:2379"),
                    format!("--cacert=/tls/{}", l.ca), format!("--cert=/tls/{}", l.cert),
                    format!("--key=/tls/{}", l.key), "endpoint", "health", "--cluster",
                    "--write-out=json"],
                "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}]}],
            "volumes": [{"name": "tls", "secret": {"secretName": client_secret}}]}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&spec.to_string()));
    until("etcdctl to finish", 120, || {
        let phase = get(k, ns, &format!("pod/{pod}"))["status"]["phase"].clone();
        phase == "Succeeded" || phase == "Failed"
    });
    let logs = k.ok(&["logs", "-n", ns, pod], None);
    let phase = get(k, ns, &format!("pod/{pod}"))["status"]["phase"].clone();
    assert_eq!(phase, "Succeeded", "etcdctl failed: {logs}");
    serde_json::from_str(logs.trim()).unwrap_or_else(|e| panic!("{e}: {logs}"))
}

/// Whether `health` (see [`etcdctl_health`]) lists `n` healthy endpoints.
pub fn all_healthy(health: &Value, n: usize) -> bool {
    health
        .as_array()
        .is_some_and(|a| a.len() == n && a.iter().all(|h| h["health"] == true))
}

/// A client writing unique keys through the client Service over TLS, as an application would;
/// on an error it connects again with the client Secret as it is then (a rotation replaces
/// it).
pub struct TlsWriter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(Vec<u64>, u64, Duration)>>,
}

/// A client of the cluster's Service by its ClusterIP, its certificate checked against the
/// Service's name, with the identity in Secret `secret` as it is now.
pub async fn tls_client(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    secret: &str,
) -> Result<Client, String> {
    let (url, options) = tls_options(k, ns, cluster, secret);
    Client::connect([url], Some(options))
        .await
        .map_err(|e| e.to_string())
}

/// The Service's URL and the options of a client with the identity in Secret `secret` now
/// (read with kubectl: a writer keeps them, and reads them again only when they stop working).
fn tls_options(k: &Kubectl, ns: &str, cluster: &str, secret: &str) -> (String, ConnectOptions) {
    options_for(k, ns, &Reach::Service(cluster.into()), secret)
}

/// Where a TLS client connects.
#[derive(Clone, Debug)]
pub enum Reach {
    /// The client Service of this cluster, by its ClusterIP.
    Service(String),
    /// `url`, whose certificate names `domain`.
    At { url: String, domain: String },
}

fn options_for(k: &Kubectl, ns: &str, reach: &Reach, secret: &str) -> (String, ConnectOptions) {
    let (url, domain) = match reach {
        Reach::Service(cluster) => {
            let ip = get(k, ns, &format!("service/{cluster}-client"))["spec"]["clusterIP"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (
                format!("https://{ip}:2379"),
                format!("{cluster}-client.{ns}.svc"),
            )
        }
        Reach::At { url, domain } => (url.clone(), domain.clone()),
    };
    let s = get(k, ns, &format!("secret/{secret}"));
    let field = |key: &str| -> Vec<u8> {
        let b64 = s["data"][key].as_str().unwrap_or_default();
        crate::unbase64(b64).unwrap_or_default()
    };
    let l = pki::layout_of(|k| Some(field(k)), pki::CLIENT);
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(field(l.ca)))
        .identity(Identity::from_pem(field(l.cert), field(l.key)))
        .domain_name(domain);
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5));
    (url, options)
}

/// One put of `e2e-tls/ping` through `reach`, with the identity in Secret `secret`.
pub fn put_once(k: &Kubectl, ns: &str, reach: &Reach, secret: &str) -> Result<(), String> {
    let (url, options) = options_for(k, ns, reach, secret);
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut c = Client::connect([url], Some(options))
            .await
            .map_err(|e| e.to_string())?;
        c.put("e2e-tls/ping", "1", None)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// Asserts that every write in `acked` (keys `e2e-tls/N`, as [`TlsWriter`] writes them) is in
/// `cluster`, read over TLS with the identity in Secret `secret` as a client does: again after
/// a refused connection (every node's proxy follows the last member replacement a moment late).
pub fn assert_written(k: &Kubectl, ns: &str, cluster: &str, secret: &str, acked: &[u64]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut last = String::new();
    for _ in 0..30 {
        let read = rt.block_on(async {
            let mut c = tls_client(k, ns, cluster, secret).await?;
            let options = etcd_client::GetOptions::new()
                .with_prefix()
                .with_keys_only();
            let resp = c
                .get("e2e-tls/", Some(options))
                .await
                .map_err(|e| e.to_string())?;
            Ok::<std::collections::BTreeSet<u64>, String>(
                resp.kvs()
                    .iter()
                    .filter_map(|kv| kv.key_str().ok()?.strip_prefix("e2e-tls/")?.parse().ok())
                    .collect(),
            )
        });
        match read {
            Ok(present) => {
                let lost: Vec<&u64> = acked.iter().filter(|n| !present.contains(n)).collect();
                assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
                return;
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("no read through the client Service of {cluster}: {last}")
}

impl TlsWriter {
    /// Starts writing keys `e2e-tls/N` to `cluster` with the identity in Secret `secret`.
    pub fn start(ns: &str, cluster: &str, secret: &str) -> Self {
        TlsWriter::start_at(ns, Reach::Service(cluster.into()), secret, 0)
    }

    /// Starts writing keys `e2e-tls/N`, N from `base` on, through `reach` with the identity in
    /// Secret `secret`.
    pub fn start_at(ns: &str, reach: Reach, secret: &str, base: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ns, secret) = (ns.to_string(), secret.to_string());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let k = Kubectl::from_env();
                let (mut acked, mut errors, mut n) = (Vec::new(), 0u64, base);
                let (mut longest, mut last) = (Duration::ZERO, Instant::now());
                let mut client = None;
                // The identity as last read, and whether it failed since: a failure right after
                // connecting with it reads it again (a rotation replaced it).
                let (mut kept, mut fresh) = (None, false);
                while !flag.load(Ordering::Relaxed) {
                    if client.is_none() {
                        if kept.is_none() || fresh {
                            kept = Some(options_for(&k, &ns, &reach, &secret));
                        }
                        let (url, options) = kept.clone().unwrap();
                        client = Client::connect([url], Some(options)).await.ok();
                        fresh = true;
                        if client.is_none() {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    }
                    let c = client.as_mut().unwrap();
                    match c.put(format!("e2e-tls/{n}"), format!("v{n}"), None).await {
                        Ok(_) => {
                            fresh = false;
                            acked.push(n);
                            longest = longest.max(last.elapsed());
                            last = Instant::now();
                        }
                        Err(e) => {
                            errors += 1;
                            eprintln!("tls writer: {e}");
                            client = None;
                        }
                    }
                    n += 1;
                }
                (acked, errors, longest)
            })
        });
        TlsWriter {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; returns the acknowledged writes, the failed ones and the longest stall.
    pub fn finish(&mut self) -> (Vec<u64>, u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default()
    }
}

impl Drop for TlsWriter {
    fn drop(&mut self) {
        self.finish();
    }
}
