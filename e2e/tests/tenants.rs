//! Tenant control planes on one etcd, the proof: two kube-apiservers (the local cluster's own
//! v1.34.4 binary, as host processes) store their objects in one 3-member EtcdCluster with TLS
//! and authentication on, tenant A under `/tenant-a` as etcd user `tenant-a` (the client
//! certificate `TLS.auto` issued it), tenant B likewise. Through each API server namespaces,
//! ConfigMaps and a Deployment are created and listed; A's certificate is refused on B's prefix
//! and on the root. While a client of each API server creates and lists objects, a member pod
//! is deleted, then the cluster is upgraded 3.5 -> 3.6: every object an API server
//! acknowledged is there afterwards, and the longest window in which a tenant's calls failed
//! is printed.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::{Kubectl, Operator, get, healthy_at_size, patch_spec, until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

const CLUSTER: &str = "tenants";
const TENANTS: [&str; 2] = ["tenant-a", "tenant-b"];

/// Forwards 127.0.0.1:PORT to `target` (the client Service), one upstream connection per
/// connection: the API servers reach etcd by a name its server certificate carries
/// (127.0.0.1), and the Service picks a serving member for each new connection.
fn forward(target: String, stop: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let Ok(down) = conn else { continue };
            let Ok(up) =
                TcpStream::connect_timeout(&target.parse().unwrap(), Duration::from_secs(2))
            else {
                continue;
            };
            for (mut from, mut to) in [
                (down.try_clone().unwrap(), up.try_clone().unwrap()),
                (up, down),
            ] {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 || to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    let _ = from.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    port
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One tenant's kube-apiserver, stopped (by its PID) when dropped.
struct Tenant {
    name: &'static str,
    dir: PathBuf,
    child: Child,
}

impl Drop for Tenant {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Tenant {
    fn start(k: &Kubectl, ns: &str, name: &'static str, etcd_port: u16) -> Tenant {
        let dir = std::env::temp_dir().join(format!("e2e-{ns}-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The certificate TLS.auto issued to the tenant's user (CN tenant-x).
        let secret = get(k, ns, &format!("secret/{CLUSTER}-user-{name}-tls"));
        for key in ["tls.crt", "tls.key", "ca.crt"] {
            let b64 = secret["data"][key].as_str().unwrap();
            std::fs::write(dir.join(key), e2e::unbase64(b64).unwrap()).unwrap();
        }
        let sa = etcd_operator::pki::Ca::new(
            "sa",
            time::OffsetDateTime::now_utc(),
            Duration::from_secs(86_400),
        )
        .unwrap();
        std::fs::write(dir.join("sa.key"), &sa.0.key).unwrap();
        // The API server takes the public key from a certificate as well.
        std::fs::write(dir.join("sa.pub"), &sa.0.cert).unwrap();
        std::fs::write(
            dir.join("tokens.csv"),
            "admin-token,admin,1,\"system:masters\"\n",
        )
        .unwrap();
        let port = free_port();
        let bin = Command::new(e2e::repo_root().join("hack/build-k8s.sh"))
            .arg("kube-apiserver")
            .output()
            .unwrap();
        let bin =
            PathBuf::from(String::from_utf8(bin.stdout).unwrap().trim()).join("kube-apiserver");
        let f = |n: &str| dir.join(n).display().to_string();
        let log = std::fs::File::create(dir.join("apiserver.log")).unwrap();
        let child = Command::new(bin)
            .args([
                format!("--etcd-servers=https://127.0.0.1:{etcd_port}"),
                format!("--etcd-cafile={}", f("ca.crt")),
                format!("--etcd-certfile={}", f("tls.crt")),
                format!("--etcd-keyfile={}", f("tls.key")),
                format!("--etcd-prefix=/{name}"),
                // Compaction is root's: the tenant's API server leaves it to the operator.
                "--etcd-compaction-interval=0".into(),
                format!("--secure-port={port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--cert-dir={}", f("serving")),
                format!("--token-auth-file={}", f("tokens.csv")),
                "--authorization-mode=AlwaysAllow".into(),
                format!("--service-account-key-file={}", f("sa.pub")),
                format!("--service-account-signing-key-file={}", f("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--enable-priority-and-fairness=false".into(),
                "--profiling=false".into(),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let kubeconfig = json!({"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": format!("https://127.0.0.1:{port}"),
                "insecure-skip-tls-verify": true}}],
            "users": [{"name": "admin", "user": {"token": "admin-token"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
            "current-context": name});
        std::fs::write(dir.join("kubeconfig"), kubeconfig.to_string()).unwrap();
        Tenant { name, dir, child }
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        let mut c = Command::new(std::env::var("KUBECTL").unwrap_or("kubectl".into()))
            .arg(format!(
                "--kubeconfig={}",
                self.dir.join("kubeconfig").display()
            ))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = stdin {
            c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        drop(c.stdin.take());
        c.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "{} kubectl {args:?}: {}\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr),
            self.log_tail()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("apiserver.log")).unwrap_or_default();
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    }

    fn ready(&self) -> bool {
        self.kubectl(&["get", "--raw", "/readyz"], None)
            .status
            .success()
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
}

/// A client of the API server that `kubeconfig` names, on the caller's runtime (its connection
/// pool lives there).
async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// What a tenant's client saw: the ConfigMaps acknowledged, and the longest time its calls
/// failed without a break (from the first failure to the next success).
#[derive(Debug, Default)]
struct Load {
    acked: Vec<String>,
    failures: u64,
    longest_window: Duration,
    last_error: String,
}

/// Creates ConfigMap load-N in namespace `load`, and lists them every tenth, until stopped.
fn load(
    kubeconfig: PathBuf,
    stop: Arc<AtomicBool>,
    windows: Arc<std::sync::Mutex<Vec<Duration>>>,
) -> std::thread::JoinHandle<Load> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let api: Api<ConfigMap> = Api::namespaced(client(&kubeconfig).await, "load");
            let mut l = Load::default();
            let mut failing_since: Option<Instant> = None;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("load-{n}");
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name},
                    "data": {"n": n.to_string()}}))
                .unwrap();
                let call = async {
                    api.create(&PostParams::default(), &cm).await.map(drop)?;
                    if n.is_multiple_of(10) {
                        api.list(&ListParams::default().limit(5)).await.map(drop)?;
                    }
                    Ok::<_, kube::Error>(())
                };
                match tokio::time::timeout(Duration::from_secs(10), call).await {
                    Ok(Ok(())) => {
                        l.acked.push(name);
                        if let Some(since) = failing_since.take() {
                            l.longest_window = l.longest_window.max(since.elapsed());
                            windows.lock().unwrap().push(since.elapsed());
                        }
                        n += 1;
                    }
                    Ok(Err(e)) if e.to_string().contains("AlreadyExists") => {
                        // Created by an attempt whose answer was lost: acknowledged now.
                        l.acked.push(name);
                        n += 1;
                    }
                    other => {
                        l.failures += 1;
                        l.last_error = match other {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer within 10 s".into(),
                        };
                        failing_since.get_or_insert_with(Instant::now);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if let Some(since) = failing_since {
                l.longest_window = l.longest_window.max(since.elapsed());
            }
            l
        })
    })
}

fn cluster_spec(version: &str) -> Value {
    let roles: Vec<Value> = TENANTS
        .iter()
        .map(|t| {
            json!({"name": t, "permissions": [
            {"type": "readwrite", "key": format!("/{t}/"), "prefix": true}]})
        })
        .collect();
    let users: Vec<Value> = TENANTS
        .iter()
        .map(|t| json!({"name": t, "roles": [t]}))
        .collect();
    json!({"size": 3, "version": version, "TLS": {"auto": {}},
        "auth": {"enabled": true, "roles": roles, "users": users}})
}

/// A's certificate: its own prefix only.
fn tenant_a_confined(tenant: &Tenant, etcd_port: u16) {
    let read = |key: &str| std::fs::read(tenant.dir.join(key)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(read("ca.crt")))
            .identity(etcd_client::Identity::from_pem(
                read("tls.crt"),
                read("tls.key"),
            ))
            .domain_name("127.0.0.1");
        let options = etcd_client::ConnectOptions::new()
            .with_tls(tls)
            .with_timeout(Duration::from_secs(5));
        let url = format!("https://127.0.0.1:{etcd_port}");
        let mut c = etcd_client::Client::connect([url], Some(options))
            .await
            .unwrap();
        let own = c
            .get(
                "/tenant-a/",
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap();
        assert!(own.count() > 0, "tenant A's objects are under /tenant-a/");
        for (what, key, options) in [
            (
                "B's prefix",
                "/tenant-b/",
                etcd_client::GetOptions::new().with_prefix(),
            ),
            (
                "the root",
                "",
                etcd_client::GetOptions::new().with_all_keys(),
            ),
        ] {
            let e = c
                .get(key, Some(options.with_keys_only()))
                .await
                .unwrap_err();
            assert!(e.to_string().contains("permission denied"), "{what}: {e}");
        }
        let e = c.put("/tenant-b/x", "v", None).await.unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{e}");
    });
}

#[test]
fn two_tenant_api_servers_share_one_etcd_each_confined_to_its_prefix() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("tenants");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&e2e::backups::manifest(
            "EtcdCluster",
            CLUSTER,
            cluster_spec("3.5.35"),
        )),
    );
    until("3 healthy members", 300, || {
        healthy_at_size(&k, ns, CLUSTER, 3)
    });
    until("the tenants' users and their certificates", 60, || {
        let c = get(&k, ns, &format!("etcdcluster/{CLUSTER}"));
        c["status"]["auth"]["enabled"] == true
            && TENANTS.iter().all(|t| {
                k.run(
                    &["get", "-n", ns, &format!("secret/{CLUSTER}-user-{t}-tls")],
                    None,
                )
                .status
                .success()
            })
    });
    let svc = get(&k, ns, &format!("service/{CLUSTER}-client"));
    let target = format!("{}:2379", svc["spec"]["clusterIP"].as_str().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let etcd_port = forward(target, stop.clone());
    let tenants: Vec<Tenant> = TENANTS
        .iter()
        .map(|t| Tenant::start(&k, ns, t, etcd_port))
        .collect();
    for t in &tenants {
        let started = Instant::now();
        while !t.ready() {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{}'s API server not ready after 120 s:\n{}",
                t.name,
                t.log_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    // Objects through each API server, each tenant seeing its own only.
    for t in &tenants {
        t.ok(&["create", "namespace", "app"], None);
        t.ok(&["create", "namespace", "load"], None);
        t.ok(
            &[
                "create",
                "configmap",
                &format!("of-{}", t.name),
                "-n",
                "app",
                "--from-literal=k=v",
            ],
            None,
        );
        t.ok(
            &[
                "create",
                "deployment",
                "web",
                "-n",
                "app",
                "--image=example.invalid/web:1",
            ],
            None,
        );
    }
    for t in &tenants {
        let cms = t.ok(&["get", "configmaps", "-n", "app", "-o", "name"], None);
        assert!(cms.contains(&format!("configmap/of-{}", t.name)), "{cms}");
        for other in TENANTS.iter().filter(|o| **o != t.name) {
            assert!(
                !cms.contains(&format!("of-{other}")),
                "{} sees {other}'s: {cms}",
                t.name
            );
        }
        let deployments = t.ok(&["get", "deployments", "-n", "app", "-o", "name"], None);
        assert!(deployments.contains("deployment.apps/web"), "{deployments}");
    }
    tenant_a_confined(&tenants[0], etcd_port);

    // A member pod deleted, then an upgrade, under each tenant's load.
    let windows = Arc::new(std::sync::Mutex::new(Vec::new()));
    let load_stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = tenants
        .iter()
        .map(|t| load(t.kubeconfig(), load_stop.clone(), windows.clone()))
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let victim = e2e::pod_names(&k, ns, CLUSTER)[0].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim], None);
    until("the member replaced", 300, || {
        healthy_at_size(&k, ns, CLUSTER, 3) && !e2e::pod_names(&k, ns, CLUSTER).contains(&victim)
    });
    std::thread::sleep(Duration::from_secs(3));
    let replacement = windows.lock().unwrap().drain(..).max().unwrap_or_default();
    patch_spec(&k, ns, CLUSTER, json!({"version": "3.6.16"}));
    until("3 healthy members on 3.6", 420, || {
        healthy_at_size(&k, ns, CLUSTER, 3)
            && get(&k, ns, &format!("etcdcluster/{CLUSTER}"))["status"]["currentVersion"]
                == "3.6.16"
    });
    std::thread::sleep(Duration::from_secs(3));
    load_stop.store(true, Ordering::Relaxed);
    let loads: Vec<Load> = loads.into_iter().map(|h| h.join().unwrap()).collect();
    let upgrade = windows
        .lock()
        .unwrap()
        .iter()
        .copied()
        .max()
        .unwrap_or_default();

    let mut lost = 0;
    for (t, l) in tenants.iter().zip(&loads) {
        let listed = t.ok(&["get", "configmaps", "-n", "load", "-o", "name"], None);
        let missing: Vec<&String> = l
            .acked
            .iter()
            .filter(|n| !listed.contains(&format!("configmap/{n}\n")))
            .collect();
        println!(
            "{}: {} objects acknowledged, {} missing, {} failed calls (last: {})",
            t.name,
            l.acked.len(),
            missing.len(),
            l.failures,
            l.last_error
        );
        lost += missing.len();
        // A client that never got an answer shows nothing: it must have worked throughout.
        assert!(l.acked.len() > 100, "{}: {l:?}", t.name);
    }
    println!(
        "| tenant API call failures during a member replacement: longest window | {replacement:.2?} | < 5 s |"
    );
    println!(
        "| tenant API call failures during an upgrade 3.5 -> 3.6: longest window | {upgrade:.2?} | < 5 s |"
    );
    println!("| objects lost across the scenario | {lost} | 0 |");
    assert_eq!(lost, 0);
    assert!(replacement < Duration::from_secs(5), "{replacement:?}");
    assert!(upgrade < Duration::from_secs(5), "{upgrade:?}");
    stop.store(true, Ordering::Relaxed);
    drop(tenants);
}
