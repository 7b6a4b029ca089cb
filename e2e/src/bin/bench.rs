//! `make bench`: the EtcdCluster controller's figures on the cluster KUBECONFIG names, printed
//! as a table with the floor beside each: the time the same cluster takes to start one etcd pod
//! directly (median of three). Not a test: nothing here passes or fails on time. Last, the
//! operator's reconcile passes and CPU time over a minute idle and over a minute with one client
//! writing serially to a fresh 3-member cluster, which should cost the operator nothing extra.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

#[path = "bench/archive.rs"]
mod archive;
#[path = "bench/timelines.rs"]
mod timelines;

use e2e::{
    CLK_TCK, Kubectl, OperatorProcess, Writer, all_ready, client_endpoint, cluster_healthy,
    cpu_ticks, get, healthy_at_size, member_pods, names_of, pod_names, put_value, rss_kib, until,
    until_every, write_once,
};
use futures::StreamExt;
use serde_json::json;

use e2e::stores::Moto;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn apply_cluster(k: &Kubectl, ns: &str, name: &str, size: usize) {
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": name}, "spec": {"size": size, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
}

/// Apply to Available for 3 members with `TLS.auto` (the operator makes the CA and the
/// certificates first), beside the same without TLS.
fn tls_rows(k: &Kubectl, ns: &str) -> Vec<(String, String, &'static str)> {
    let mut rows = Vec::new();
    for (name, tls) in [("plain-3", None), ("auto-tls-3", Some(json!({"auto": {}})))] {
        let mut c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdCluster", "metadata": {"name": name},
            "spec": {"size": 3, "version": "3.6.16"}});
        if let Some(tls) = tls {
            c["spec"]["TLS"] = tls;
        }
        let start = Instant::now();
        k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
        until(&format!("{name} Available"), 600, || {
            healthy_at_size(k, ns, name, 3)
        });
        rows.push((
            format!(
                "apply to Available, size 3, {}",
                if name == "plain-3" {
                    "plain"
                } else {
                    "auto TLS"
                }
            ),
            secs(start.elapsed()),
            "< 10 s",
        ));
    }
    rows
}

/// NOSPACE on a 3-member etcd 3.6 cluster with a 256 MiB quota, filled through the client
/// Service by overwriting one key with 1 MiB values: from etcd's first refusal to the first
/// write served again (the operator's look, a compaction, three defragmentations, the
/// disarm), three times.
fn space_rows(k: &Kubectl, ns: &str) -> Vec<(String, String, &'static str)> {
    let quota: i64 = 256 << 20;
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "metadata": {"name": "space"},
        "spec": {"size": 3, "version": "3.6.16",
                 "maintenance": {"quotaBackendBytes": quota}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
    until("space Available", 600, || {
        healthy_at_size(k, ns, "space", 3)
    });
    let endpoint = client_endpoint(k, ns, "space");
    let value = vec![b'x'; 1 << 20];
    let mut runs = Vec::new();
    for round in 0..3u64 {
        let mut refused = None;
        for _ in 0..2000 {
            match put_value(&endpoint, "bench/fill", &value) {
                Ok(()) => {}
                Err(e) if e.contains("database space exceeded") => {
                    refused = Some(Instant::now());
                    break;
                }
                Err(e) => eprintln!("fill: {e}"),
            }
        }
        let refused = refused.expect("etcd refused a write for lack of space");
        until("writes served again", 300, || {
            write_once(&endpoint, 1_000_000 + round).is_ok()
        });
        runs.push(refused.elapsed());
    }
    let all: Vec<String> = runs
        .iter()
        .map(|d| format!("{:.1}", d.as_secs_f64()))
        .collect();
    vec![(
        "NOSPACE raised (256 MiB quota) → writes served again".into(),
        format!("{} ({})", secs(median(runs)), all.join(", ")),
        "< 30 s",
    )]
}

/// Lost quorum recovered without a human: a 3-member etcd 3.6 cluster with
/// `recovery: {quorumLoss: ForceNewCluster, after: 0s}` under the chart-installed operator
/// (its seed fetches the survivor's snapshot from the operator's pod), two member pods deleted
/// at once; from the deletion to the first write served by the rebuilt cluster, and to healthy
/// at full size. Three clusters, the median with every run beside it.
fn recovery_rows(k: &Kubectl) -> Vec<(String, String, &'static str)> {
    let namespace = k.namespace("bench-recovery");
    let ns = namespace.name.as_str();
    let _operator = e2e::Operator::install(k, ns, &[]);
    let (mut served, mut whole) = (Vec::new(), Vec::new());
    for i in 0..3u64 {
        let name = format!("recover-{i}");
        let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdCluster", "metadata": {"name": name},
            "spec": {"size": 3, "version": "3.6.16",
                     "recovery": {"quorumLoss": "ForceNewCluster", "after": "0s"}}});
        k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
        until(&format!("{name} healthy"), 600, || {
            healthy_at_size(k, ns, &name, 3)
        });
        let endpoint = client_endpoint(k, ns, &name);
        for key in 0..50 {
            write_once(&endpoint, key).unwrap();
        }
        // Settled, as users' clusters are.
        std::thread::sleep(Duration::from_secs(5));
        let before = e2e::put_cluster_id(&endpoint, "probe", Duration::from_secs(5)).unwrap();
        let pods = pod_names(k, ns, &name);
        let lost = Instant::now();
        e2e::force_delete_pods(k, ns, &pods[1..]);
        // Served again: by the rebuilt cluster (another cluster ID); the deleted pods'
        // containers may still take writes for the old one for a moment.
        until("writes served by the rebuilt cluster", 300, || {
            e2e::put_cluster_id(&endpoint, "probe", Duration::from_secs(2))
                .is_ok_and(|id| id != before)
        });
        served.push(lost.elapsed());
        until(&format!("{name} back at 3"), 600, || {
            healthy_at_size(k, ns, &name, 3)
        });
        whole.push(lost.elapsed());
    }
    let show = |runs: &[Duration]| {
        let all: Vec<String> = runs
            .iter()
            .map(|d| format!("{:.1}", d.as_secs_f64()))
            .collect();
        format!("{} ({})", secs(median(runs.to_vec())), all.join(", "))
    };
    vec![
        (
            "quorum lost (2 of 3 pods gone), ForceNewCluster after 0s → writes served again".into(),
            show(&served),
            "< 15 s",
        ),
        (
            "quorum lost (2 of 3 pods gone) → back at full size and healthy".into(),
            show(&whole),
            "< 25 s",
        ),
    ]
}

/// Scheduled defragmentation of a 3-member etcd 3.6 cluster whose members hold 1 GiB files
/// (1,024 keys of 1 MiB, a quarter deleted and compacted away): a schedule of every minute, a
/// client writing through the Service throughout; its longest write stall beside the longest
/// member's defragmentation as etcd took it (the floor: a stall shorter than it means the
/// leader was not the one defragmenting).
fn defrag_rows(k: &Kubectl) -> Vec<Row> {
    let namespace = k.namespace("bench-defrag");
    let ns = namespace.name.as_str();
    let _operator = e2e::Operator::install(k, ns, &[]);
    apply_cluster(k, ns, "defrag", 3);
    until("defrag healthy", 600, || {
        healthy_at_size(k, ns, "defrag", 3)
    });
    let endpoint = client_endpoint(k, ns, "defrag");
    fill(&endpoint, 1024);
    for i in (0..1024).step_by(4) {
        e2e::delete_under(&endpoint, &format!("bench/{i:05}")).unwrap();
    }
    e2e::compact(&endpoint);
    let writer = Writer::start(&endpoint, Duration::from_secs(600));
    e2e::patch_spec(
        k,
        ns,
        "defrag",
        json!({"maintenance": {"defrag": {"schedule": "* * * * *"}}}),
    );
    let records = || get(k, ns, "etcdcluster/defrag")["status"]["defragmentations"].clone();
    until("every member defragmented", 600, || {
        records().as_array().is_some_and(|r| r.len() == 3)
    });
    let tally = writer.report();
    let done = records();
    let (mut longest, mut before, mut after) = (0, 0, 0);
    for d in done.as_array().unwrap() {
        longest = longest.max(d["milliseconds"].as_i64().unwrap());
        before = before.max(d["sizeBefore"].as_i64().unwrap());
        after = after.max(d["sizeAfter"].as_i64().unwrap());
    }
    vec![(
        format!(
            "scheduled defragmentation, 3 members of {} MiB ({} MiB after): longest client \
             write stall",
            before >> 20,
            after >> 20
        ),
        format!(
            "{} ms ({} writes, {} failed)",
            tally.longest_stall.as_millis(),
            tally.writes,
            tally.errors
        ),
        format!("{longest} ms (the longest member's defragmentation, as etcd took it)"),
        "printed".into(),
    )]
}

/// The floor of a wake on claims: a bare etcd 3.6 opening a copy of member `claim`'s data on
/// this host until its peer listener answers `/version` (its write-ahead log replayed and its
/// database opened: etcd serves peers only then). Its peers are not there, so it never serves
/// clients (which waits for the member to publish itself through a quorum). The claim is the
/// local-path directory its volume names; read while the cluster sleeps.
fn etcd_start_floor(k: &Kubectl, ns: &str, claim: &str) -> Duration {
    let volume = get(k, ns, &format!("pvc/{claim}"))["spec"]["volumeName"]
        .as_str()
        .unwrap()
        .to_string();
    // Cluster-scoped: kubectl ignores the namespace.
    let pv = get(k, ns, &format!("pv/{volume}"));
    let path = (pv["spec"]["hostPath"]["path"].as_str())
        .or(pv["spec"]["local"]["path"].as_str())
        .unwrap()
        .to_string();
    let find = std::process::Command::new("find")
        .args([&path, "-maxdepth", "4", "-type", "d", "-name", "member"])
        .output()
        .unwrap();
    let member = String::from_utf8_lossy(&find.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    let data = std::path::Path::new(&member).parent().unwrap();
    let copy = std::env::temp_dir().join(format!("bench-wake-{ns}"));
    let _ = std::fs::remove_dir_all(&copy);
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(data)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success(), "copying {data:?}");
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let start = Instant::now();
    let mut etcd = std::process::Command::new(format!("{}/etcd", etcd_tools()))
        .arg("--data-dir")
        .arg(&copy)
        .args(["--listen-client-urls", &client_url])
        // As the members ran: their log holds additions of several learners at once, which
        // etcd's default limit of 1 refuses on replay (and then panics).
        .arg(format!(
            "{}{}",
            etcd_operator::cluster::members::MAX_LEARNERS_FLAG,
            etcd_operator::cluster::members::MAX_LEARNERS
        ))
        .args([
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
        ])
        .args([
            "--initial-advertise-peer-urls",
            &peer_url,
            "--log-level",
            "error",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let peer_addr = format!("127.0.0.1:{peer}");
    until_every(
        "the bare etcd serving peers",
        300,
        Duration::from_millis(50),
        || e2e::http_get(&peer_addr, "/version").is_ok(),
    );
    let took = start.elapsed();
    let _ = etcd.kill();
    let _ = etcd.wait();
    let _ = std::fs::remove_dir_all(&copy);
    took
}

/// Hibernation of a 3-member etcd 3.6 cluster on claims whose members hold 1 GiB files (1,024
/// keys of 1 MiB; issue 52's row): `spec.hibernation` with a store (versitygw) until
/// `Hibernated` (the final snapshot taken and verified, every pod gone), then awake until
/// Available again as the same members on their claims. The floor: twice apply to Available
/// of an empty 3-member cluster, measured here, and in place of a restore's floor (waking on
/// claims restores nothing) a bare etcd opening one member's data ([`etcd_start_floor`]).
fn hibernation_rows(k: &Kubectl) -> Vec<Row> {
    let namespace = k.namespace("bench-hibernation");
    let ns = namespace.name.as_str();
    let _operator = e2e::Operator::install(k, ns, &[]);
    let start = Instant::now();
    apply_cluster(k, ns, "empty", 3);
    until("empty Available", 600, || {
        healthy_at_size(k, ns, "empty", 3)
    });
    let empty = start.elapsed();
    k.ok(
        &["delete", "etcdcluster", "-n", ns, "empty", "--wait=false"],
        None,
    );
    let store = e2e::stores::Versitygw::start(&e2e::backups::store_host());
    store.create_bucket("sleep");
    e2e::backups::aws_secret(k, ns);
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "sleepy"}, "spec": {"size": 3, "version": "3.6.16",
            "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "4Gi"}}}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
    until("sleepy healthy", 600, || {
        healthy_at_size(k, ns, "sleepy", 3)
    });
    fill(&client_endpoint(k, ns, "sleepy"), 1024);
    let hibernation = json!({"enabled": true, "store": {"backupStorageType": "S3",
        "s3": {"path": "sleep/bench", "awsSecret": "aws", "endpoint": store.url,
            "forcePathStyle": true}}});
    let start = Instant::now();
    e2e::patch_spec(k, ns, "sleepy", json!({"hibernation": hibernation}));
    until("sleepy Hibernated", 900, || {
        get(k, ns, "etcdcluster/sleepy")["status"]["phase"] == "Hibernated"
            && pod_names(k, ns, "sleepy").is_empty()
    });
    let asleep = start.elapsed();
    let claims = k.ok(&["get", "pvc", "-n", ns, "-o", "name"], None);
    let claim = claims
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("persistentvolumeclaim/");
    let opening = etcd_start_floor(k, ns, claim);
    let start = Instant::now();
    e2e::patch_spec(k, ns, "sleepy", json!({"hibernation": {"enabled": false}}));
    until("sleepy Available again", 900, || {
        healthy_at_size(k, ns, "sleepy", 3)
    });
    let awake = start.elapsed();
    vec![
        (
            "hibernate 3 members on claims holding 1 GiB each (final snapshot to S3 verified, \
             pods gone)"
                .into(),
            secs(asleep),
            "-".into(),
            "printed".into(),
        ),
        (
            "wake them to Available (the same members on their claims)".into(),
            secs(awake),
            format!(
                "{} (2 × apply to Available of an empty 3-member cluster, {}, + a bare etcd \
                 opening one member's data until it serves, {})",
                secs(2 * empty + opening),
                secs(empty),
                secs(opening)
            ),
            "≤ the floor".into(),
        ),
    ]
}

/// Apply to Available for 3 and 5 members on etcd 3.6, and a member pod deleted to healthy at
/// full size: three runs each, the median with every run beside it.
fn speed_rows(k: &Kubectl, ns: &str) -> Vec<(String, String, &'static str)> {
    let show = |runs: &[Duration]| {
        let all: Vec<String> = runs
            .iter()
            .map(|d| format!("{:.1}", d.as_secs_f64()))
            .collect();
        format!("{} ({})", secs(median(runs.to_vec())), all.join(", "))
    };
    let mut rows = Vec::new();
    for (size, target) in [(3, "< 5 s"), (5, "< 8 s")] {
        let mut runs = Vec::new();
        let mut heals = Vec::new();
        for i in 0..3 {
            let name = format!("speed-{size}-{i}");
            let start = Instant::now();
            apply_cluster(k, ns, &name, size);
            until(&format!("{name} Available"), 600, || {
                healthy_at_size(k, ns, &name, size)
            });
            runs.push(start.elapsed());
            if size == 3 {
                // A settled cluster, as users' are: etcd refuses to remove a member that still
                // answers until the others have been connected for 5 s (its strict reconfig
                // check, `HealthInterval`), so a pod deleted sooner waits for its etcd to stop.
                std::thread::sleep(Duration::from_secs(6));
                let victim = pod_names(k, ns, &name)[1].clone();
                let start = Instant::now();
                k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
                // Healed when clients see it: every pod Ready and `readyMembers` at full size
                // (which counts only members the client Service publishes). Two requests a
                // look, every 50 ms, so that the look itself adds little to the figure.
                until_every("recovery", 600, Duration::from_millis(50), || {
                    let pods = member_pods(k, ns, &name);
                    let names = names_of(&pods);
                    let c = get(k, ns, &format!("etcdcluster/{name}"));
                    !names.contains(&victim)
                        && cluster_healthy(&c, size, &names)
                        && all_ready(&pods, size)
                });
                heals.push(start.elapsed());
            }
            k.ok(
                &["delete", "etcdcluster", "-n", ns, &name, "--wait=false"],
                None,
            );
        }
        rows.push((
            format!("apply to Available, {size} members (etcd 3.6)"),
            show(&runs),
            target,
        ));
        if !heals.is_empty() {
            rows.push((
                "member pod deleted to 3 pods Ready and readyMembers 3".into(),
                show(&heals),
                "< 4 s",
            ));
        }
    }
    rows.push(network_programming());
    rows
}

/// kube-proxy's own figure (`kubeproxy_network_programming_duration_seconds`, from the change
/// of a Service or its endpoints to the rules that carry it, on this node) over every change
/// since it started: the mean, and the share programmed within a second.
fn network_programming() -> (String, String, &'static str) {
    let metrics = std::process::Command::new("curl")
        .args(["-s", "--max-time", "5", "http://127.0.0.1:10249/metrics"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let name = "kubeproxy_network_programming_duration_seconds";
    let value = |suffix: &str| e2e::series(&metrics, &format!("{name}{suffix}"));
    let shown = match (
        value("_sum{ip_family=\"IPv4\"}"),
        value("_count{ip_family=\"IPv4\"}"),
        value("_bucket{ip_family=\"IPv4\",le=\"1\"}"),
    ) {
        (Some(sum), Some(count), Some(one)) if count > 0.0 => format!(
            "mean {:.2} s over {count:.0} changes; {:.0}% within 1 s",
            sum / count,
            100.0 * one / count
        ),
        _ => "not available (kube-proxy metrics on 127.0.0.1:10249)".into(),
    };
    (
        "kube-proxy network programming (this node, since it started)".into(),
        shown,
        "near 1 s",
    )
}

/// How long the idle and the loaded figures are measured.
const WINDOW: Duration = Duration::from_secs(60);

/// What the operator did while `during` ran.
struct Activity {
    passes: f64,
    cpu_ticks: u64,
    elapsed: Duration,
}

impl Activity {
    fn passes_per_minute(&self) -> f64 {
        self.passes * 60.0 / self.elapsed.as_secs_f64()
    }

    fn cpu_ms_per_minute(&self) -> f64 {
        let ms = (self.cpu_ticks * 1000 / CLK_TCK) as f64;
        ms * 60.0 / self.elapsed.as_secs_f64()
    }
}

fn activity(operator: &OperatorProcess, during: impl FnOnce()) -> Activity {
    let pid = operator.pid();
    let (passes, ticks, start) = (operator.reconciles(), cpu_ticks(pid), Instant::now());
    during();
    Activity {
        passes: operator.reconciles() - passes,
        cpu_ticks: cpu_ticks(pid) - ticks,
        elapsed: start.elapsed(),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Peak RSS of `pid`, sampled every 20 ms while `during` runs.
fn peak_rss_kib(pid: u32, during: impl FnOnce()) -> u64 {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    during();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap()
}

/// Fills the single member at `endpoint` with `mib` keys of 1 MiB each, four writers at once.
fn fill(endpoint: &str, mib: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let writers = (0..4).map(|w| {
            let mut kv = client.kv_client();
            async move {
                for i in (w..mib).step_by(4) {
                    // Distinct values, so that nothing along the way can shrink them.
                    // The low byte is the point; i is below `mib`, a few thousand.
                    #[allow(clippy::cast_possible_truncation)]
                    let value: Vec<u8> = (0..1 << 20).map(|j: u32| (j ^ i as u32) as u8).collect();
                    kv.put(format!("bench/{i:05}"), value, None).await.unwrap();
                }
            }
        });
        futures::future::join_all(writers).await;
    });
}

fn mib_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / took.as_secs_f64()
}

/// The etcd 3.6 tools' directory (etcd, etcdctl, etcdutl).
fn etcd_tools() -> String {
    String::from_utf8_lossy(
        &std::process::Command::new(e2e::repo_root().join("hack/build-tools.sh"))
            .arg("etcd-3.6")
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string()
}

/// `etcdctl snapshot save` of the member at `endpoint` into a file, best of two: the floor of
/// a backup. Returns the time and etcdctl's own CPU seconds (user and system) in that run; the
/// file is kept for the intake and restore floors.
fn etcdctl_floor(endpoint: &str, file: &std::path::Path) -> (Duration, f64) {
    let mut best = (Duration::MAX, 0.0);
    for _ in 0..2 {
        let _ = std::fs::remove_file(file);
        let start = Instant::now();
        // bash's `times` prints the CPU time of the shell's children (here etcdctl alone) on its
        // second line.
        let out = std::process::Command::new("bash")
            .args([
                "-c",
                r#""$1" --endpoints "$2" snapshot save "$3" >/dev/null && times"#,
                "etcdctl-floor",
            ])
            .arg(format!("{}/etcdctl", etcd_tools()))
            .arg(endpoint)
            .arg(file)
            .output()
            .unwrap();
        let took = start.elapsed();
        assert!(out.status.success(), "etcdctl snapshot save: {out:?}");
        let times = String::from_utf8_lossy(&out.stdout);
        let children = times.lines().nth(1).unwrap_or_default();
        let cpu: f64 = children.split_whitespace().map(bash_seconds).sum();
        if took < best.0 {
            best = (took, cpu);
        }
    }
    best
}

/// `1m2.345s` (bash's `times`) in seconds.
fn bash_seconds(t: &str) -> f64 {
    let t = t.trim_end_matches('s');
    let (m, s) = t.split_once('m').unwrap_or(("0", t));
    m.parse::<f64>().unwrap_or(0.0) * 60.0 + s.parse::<f64>().unwrap_or(0.0)
}

/// The S3 store at `url`, bucket `bench`, signed with `test`/`test`.
fn bench_s3(url: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("bench")
        .with_endpoint(url)
        .with_allow_http(true)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        // As the operator's client (store::storage::s3): bodies not hashed into signatures.
        .with_unsigned_payload(true)
        .build()
        .unwrap()
}

/// The store's own multipart intake of `file` through the operator's upload code (the same
/// client and part sizes, no etcd): the ceiling of a backup into it. Best of two.
fn intake(url: &str, file: &std::path::Path) -> Duration {
    use etcd_operator::store::snapshot;
    use object_store::PutMultipartOptions;
    use object_store::path::Path;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let s3 = bench_s3(url);
        let mut best = Duration::MAX;
        for i in 0..2 {
            let f = tokio::fs::File::open(file).await.unwrap();
            let chunks = tokio_util::io::ReaderStream::with_capacity(f, 64 << 10)
                .map(|c| Ok(c.unwrap().to_vec()));
            let start = Instant::now();
            snapshot::upload(
                Box::pin(chunks),
                &s3,
                &Path::from(format!("intake-{i}.db")),
                PutMultipartOptions::default(),
                Duration::from_secs(600),
            )
            .await
            .unwrap();
            best = best.min(start.elapsed());
        }
        best
    })
}

/// The operator's snapshot code alone (etcd stream, both hashes, multipart writer) into a
/// local file store, best of two.
fn pipeline(endpoint: &str) -> Duration {
    use etcd_operator::store::snapshot;
    use object_store::PutMultipartOptions;
    use object_store::path::Path;
    let dir = std::env::temp_dir().join(format!("bench-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let best = rt.block_on(async {
        let local = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
        let mut best = Duration::MAX;
        for _ in 0..2 {
            let start = Instant::now();
            snapshot::save(
                &etcd_operator::etcd::Endpoint::plain(endpoint),
                &local,
                &Path::from("pipeline.db"),
                PutMultipartOptions::default(),
                Duration::from_secs(600),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
            best = best.min(start.elapsed());
        }
        best
    });
    let _ = std::fs::remove_dir_all(&dir);
    best
}

/// One EtcdBackup of `cluster` to `url` (`bench/<name>.db`), waited out; the status.
fn backup_once(
    k: &Kubectl,
    ns: &str,
    cluster: &str,
    name: &str,
    url: &str,
    extra: serde_json::Value,
) -> (Duration, serde_json::Value) {
    let mut spec = json!({"clusterName": cluster, "storageType": "S3",
        "backupPolicy": {"timeoutInSecond": 600},
        "s3": {"path": format!("bench/{name}.db"), "awsSecret": "aws",
               "endpoint": url, "forcePathStyle": true}});
    if let Some(extra) = extra.as_object() {
        for (key, value) in extra {
            spec[key] = value.clone();
        }
    }
    let backup = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": name}, "spec": spec});
    let start = Instant::now();
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup.to_string()));
    let mut status = json!(null);
    until(&format!("EtcdBackup {name}"), 600, || {
        let s = e2e::get(k, ns, &format!("etcdbackup/{name}"))["status"].clone();
        assert_ne!(s["phase"], "Failed", "{s}");
        let done = s["succeeded"] == true;
        status = s;
        done
    });
    (start.elapsed(), status)
}

/// The machine's CPU time so far, busy and in all, in ticks (the first line of `/proc/stat`;
/// idle and iowait are not busy).
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().next().unwrap();
    let times: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().unwrap())
        .collect();
    let all: u64 = times.iter().sum();
    (all - times[3] - times[4], all)
}

/// What `during` cost in CPU: the share of the machine's cores that were busy, and the seconds
/// used by each of `pids`.
fn cpu_during(pids: &[u32], during: impl FnOnce()) -> (f64, Vec<f64>) {
    let (busy, all) = machine_ticks();
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect();
    during();
    let (busy_after, all_after) = machine_ticks();
    let used = pids
        .iter()
        .zip(before)
        .map(|(&p, t)| (cpu_ticks(p) - t) as f64 / CLK_TCK as f64);
    (
        (busy_after - busy) as f64 / (all_after - all) as f64,
        used.collect(),
    )
}

/// Backups of a 1 GiB database from its one member, into the fast S3 server (versitygw) and into
/// moto, beside the floors: `etcdctl snapshot save` to a local file, and each store's own
/// intake of that file by the same client. Then a zstd backup of Kubernetes-like objects, and
/// the restore of the 1 GiB backup beside `etcdutl snapshot restore` plus one etcd start.
fn backup_rows(k: &Kubectl, ns: &str, operator: &OperatorProcess) -> Vec<Row> {
    const MIB: usize = 1024;
    apply_cluster(k, ns, "big", 1);
    until("big Available", 600, || healthy_at_size(k, ns, "big", 1));
    let endpoint = format!("http://{}:2379", e2e::member_ip(k, ns, "big"));
    fill(&endpoint, MIB);
    let file = std::env::temp_dir().join(format!("bench-{ns}.db"));
    let (floor, etcdctl_cpu) = etcdctl_floor(&endpoint, &file);
    let size = std::fs::metadata(&file).unwrap().len();
    let gib = size as f64 / (1u64 << 30) as f64;
    let floor_rate = mib_per_s(size, floor);
    e2e::backups::aws_secret(k, ns);
    let idle = rss_kib(operator.pid());
    let mut peak = 0;
    let mut rows = vec![];
    let fast = e2e::stores::Versitygw::start("127.0.0.1");
    fast.create_bucket("bench");
    let moto = Moto::start("127.0.0.1");
    moto.create_bucket("bench");
    let etcd = e2e::etcd_pid(&pod_names(k, ns, "big")[0]).expect("big's etcd on this host");
    let stores = [
        ("versitygw", fast.url.as_str(), fast.pid()),
        ("moto", moto.url.as_str(), moto.pid()),
    ];
    for (store, url, store_pid) in stores {
        let store_rate = mib_per_s(size, intake(url, &file));
        let mut saved = 0;
        // The faster of two runs, with its CPU.
        let mut kept: Option<(Duration, (f64, Vec<f64>))> = None;
        for i in 0..2 {
            let mut took = Duration::ZERO;
            let cpu = cpu_during(&[etcd, operator.pid(), store_pid], || {
                peak = peak.max(peak_rss_kib(operator.pid(), || {
                    let (t, s) = backup_once(k, ns, "big", &format!("{store}-{i}"), url, json!({}));
                    took = t;
                    saved = s["size"].as_u64().unwrap();
                }));
            });
            if kept.as_ref().is_none_or(|(best, _)| took < *best) {
                kept = Some((took, cpu));
            }
        }
        let (best, cpu) = kept.unwrap();
        let rate = mib_per_s(saved, best);
        let ceiling = floor_rate.min(store_rate);
        rows.push((
            format!(
                "backup of a {:.2} GiB database to S3 ({store}), ratio to min(etcdctl, the store's intake)",
                saved as f64 / (1u64 << 30) as f64
            ),
            format!("{rate:.0} MiB/s ({}), ratio {:.2}", secs(best), rate / ceiling),
            format!(
                "{ceiling:.0} MiB/s (etcdctl to a local file {floor_rate:.0} MiB/s, {}; {store}'s intake of that file by the same client {store_rate:.0} MiB/s)",
                secs(floor)
            ),
            ">= 0.9".into(),
        ));
        rows.push((
            format!("CPU during that backup to {store} (2 cores)"),
            format!(
                "the machine {:.0}% busy; etcd {:.1} s, the operator {:.1} s, {store} {:.1} s",
                cpu.0 * 100.0,
                cpu.1[0],
                cpu.1[1],
                cpu.1[2]
            ),
            format!("{} of wall time", secs(best)),
            "".into(),
        ));
        if store == "versitygw" {
            let operator_cpu = cpu.1[1];
            rows.push((
                "operator CPU seconds per GiB backed up (versitygw), ratio to `etcdctl snapshot \
                 save`'s own for the same database (same run)"
                    .into(),
                format!(
                    "{:.2} s/GiB, ratio {:.2}",
                    operator_cpu / gib,
                    operator_cpu / etcdctl_cpu
                ),
                format!(
                    "{:.2} s/GiB (etcdctl's user + system time)",
                    etcdctl_cpu / gib
                ),
                "<= 1.2".into(),
            ));
            rows.push((
                "backup to the fast server (versitygw), ratio to `etcdctl snapshot save` outright"
                    .into(),
                format!("ratio {:.2}", rate / floor_rate),
                format!("{floor_rate:.0} MiB/s (etcdctl, as above)"),
                ">= 0.9".into(),
            ));
        }
    }
    let pipeline = pipeline(&endpoint);
    rows.push((
        "the operator's snapshot code alone (etcd stream, both hashes, multipart writer) into a \
         local file store, same member"
            .into(),
        format!(
            "{:.0} MiB/s ({})",
            mib_per_s(size, pipeline),
            secs(pipeline)
        ),
        format!("{floor_rate:.0} MiB/s (etcdctl, as above)"),
        format!("ratio {:.2}", mib_per_s(size, pipeline) / floor_rate),
    ));
    rows.push((
        "operator peak RSS during the backups".into(),
        format!("{:.1} MiB", peak as f64 / 1024.0),
        format!("{:.1} MiB (idle, before it)", idle as f64 / 1024.0),
        "< 64 MiB".into(),
    ));
    rows.push(compression_row(k, ns, fast.url.as_str()));
    rows.extend(restore_rows(k, ns, &fast, &endpoint));
    let _ = std::fs::remove_file(&file);
    rows
}

/// A cluster of Kubernetes-like objects (pods as the API server stores them: JSON with names,
/// labels, UIDs, images, timestamps; every one different), backed up with zstd level 3: the
/// ratio of the stored object to the snapshot, and the backup's speed.
fn compression_row(k: &Kubectl, ns: &str, url: &str) -> Row {
    apply_cluster(k, ns, "kube", 1);
    until("kube Available", 600, || healthy_at_size(k, ns, "kube", 1));
    let endpoint = format!("http://{}:2379", e2e::member_ip(k, ns, "kube"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = etcd_client::Client::connect([endpoint.as_str()], None).await.unwrap();
        let writers = (0..4).map(|w| {
            let mut kv = client.kv_client();
            async move {
                for i in (w..40_000).step_by(4) {
                    let uid = uuid::Uuid::new_v4();
                    let pod = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {
                        "name": format!("web-{i:05}-{}", &uid.simple().to_string()[..5]),
                        "namespace": format!("team-{}", i % 37), "uid": uid.to_string(),
                        "resourceVersion": (1_000_000 + i).to_string(),
                        "creationTimestamp": format!("2026-11-{:02}T{:02}:{:02}:{:02}Z", 1 + i % 28, i % 24, i % 60, (i * 7) % 60),
                        "labels": {"app": format!("web-{}", i % 113), "pod-template-hash": format!("{:x}", i * 2_654_435_761_u64 % 0xffff_ffff)},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{}", i % 113), "uid": uuid::Uuid::new_v4().to_string(), "controller": true}]},
                      "spec": {"nodeName": format!("node-{}", i % 50), "containers": [{"name": "app", "image": format!("registry.example/team-{}/web:1.{}.{}", i % 37, i % 9, i % 31),
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}], "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]},
                      "status": {"phase": "Running", "podIP": format!("10.{}.{}.{}", i % 250, (i / 250) % 250, i % 200 + 2), "startTime": "2026-11-20T10:00:00Z"}});
                    kv.put(format!("/registry/pods/team-{}/web-{i:05}", i % 37), pod.to_string(), None).await.unwrap();
                }
            }
        });
        futures::future::join_all(writers).await;
    });
    let (took, s) = backup_once(
        k,
        ns,
        "kube",
        "kube-zstd",
        url,
        json!({"compression": {"algorithm": "zstd", "level": 3}}),
    );
    let (stored, snapshot) = (
        s["size"].as_u64().unwrap(),
        s["snapshotSize"].as_u64().unwrap(),
    );
    (
        format!(
            "zstd level 3 backup of {:.0} MiB of Kubernetes-like objects (40,000 pods as JSON), stored / snapshot",
            snapshot as f64 / (1 << 20) as f64
        ),
        format!(
            "ratio {:.2} ({:.0} MiB stored), {:.0} MiB/s of snapshot ({})",
            stored as f64 / snapshot as f64,
            stored as f64 / (1 << 20) as f64,
            mib_per_s(snapshot, took),
            secs(took)
        ),
        "-".into(),
        "".into(),
    )
}

/// The object `key` of the bench bucket at `url` read into `file` by the operator's S3 client:
/// the transfer a restore's seed makes.
fn download(url: &str, key: &str, file: &std::path::Path) {
    use object_store::ObjectStoreExt;
    use tokio::io::AsyncWriteExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let s3 = bench_s3(url);
        let mut body = s3
            .get(&object_store::path::Path::from(key))
            .await
            .unwrap()
            .into_stream();
        let mut out = tokio::fs::File::create(file).await.unwrap();
        while let Some(chunk) = body.next().await {
            out.write_all(&chunk.unwrap()).await.unwrap();
        }
        out.flush().await.unwrap();
    });
}

/// `etcdutl snapshot restore` of `file` into `dir/data`, then one etcd started on it until it
/// answers /health: the two times.
fn etcdutl_and_start(file: &std::path::Path, dir: &std::path::Path) -> (Duration, Duration) {
    let tools = etcd_tools();
    let start = Instant::now();
    let out = std::process::Command::new(format!("{tools}/etcdutl"))
        .args(["snapshot", "restore"])
        .arg(file)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "etcdutl snapshot restore: {out:?}");
    let restored = start.elapsed();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    let mut etcd = std::process::Command::new(format!("{tools}/etcd"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args(["--listen-peer-urls", "http://127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    until("the restored etcd answers", 300, || {
        std::process::Command::new("curl")
            .args(["-sf", &format!("{client}/health")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let started = start.elapsed();
    let _ = etcd.kill();
    let _ = etcd.wait();
    (restored, started)
}

/// The 1 GiB backup restored into the `big` cluster (one member, itself holding 1 GiB), from
/// the EtcdRestore's apply to Completed (Available at its size), beside the floor of a safe
/// restore, each step timed here on the same data: the safety snapshot of the cluster replaced
/// (`etcdctl snapshot save` of it), the transfer from the store (the object read into a file by
/// the same client), `etcdutl snapshot restore` of it and one etcd started on the result.
fn restore_rows(k: &Kubectl, ns: &str, fast: &e2e::stores::Versitygw, endpoint: &str) -> Vec<Row> {
    let dir = std::env::temp_dir().join(format!("bench-restore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (safety, _) = etcdctl_floor(endpoint, &dir.join("safety.db"));
    let fetched = dir.join("fetched.db");
    let start = Instant::now();
    download(&fast.url, "versitygw-0.db", &fetched);
    let transfer = start.elapsed();
    let (restored, started) = etcdutl_and_start(&fetched, &dir);
    let floor = safety + transfer + restored + started;
    let _ = std::fs::remove_dir_all(&dir);

    let restore = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": "big"}, "spec": {"etcdCluster": {"name": "big"},
        "backupStorageType": "S3", "s3": {"path": "bench/versitygw-0.db", "awsSecret": "aws",
        "endpoint": fast.url, "forcePathStyle": true}}});
    let start = Instant::now();
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&restore.to_string()));
    until("EtcdRestore big Completed", 900, || {
        let s = e2e::get(k, ns, "etcdrestore/big")["status"].clone();
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Completed"
    });
    let took = start.elapsed();
    let bare = restored + started;
    vec![
        (
            "restore of the 1 GiB backup (versitygw) into a 1-member cluster holding 1 GiB: \
             EtcdRestore applied to Completed (Available at full size), ratio to the safe floor"
                .into(),
            format!(
                "{}, ratio {:.2}",
                secs(took),
                took.as_secs_f64() / floor.as_secs_f64()
            ),
            format!(
                "{} (safety snapshot {} + transfer {} + `etcdutl snapshot restore` {} + etcd \
                 started to /health {})",
                secs(floor),
                secs(safety),
                secs(transfer),
                secs(restored),
                secs(started)
            ),
            "<= 1.5".into(),
        ),
        (
            "the same restore, ratio to the bare floor (`etcdutl snapshot restore` and one etcd \
             start: nothing kept, nothing fetched)"
                .into(),
            format!("ratio {:.2}", took.as_secs_f64() / bare.as_secs_f64()),
            secs(bare),
            "".into(),
        ),
    ]
}

/// A 3-member cluster upgraded 3.5 -> 3.6 while one client writes serially through the client
/// Service: the time per member (apply of the new version to every member on it, healthy,
/// divided by 3) and the longest a write waited; without volumes (a member with the new image
/// joins before an old one goes) and with them (each member restarted on its claim).
fn upgrade_rows(
    k: &Kubectl,
    ns: &str,
    operator: &OperatorProcess,
) -> Vec<(String, String, &'static str)> {
    let mut rows = Vec::new();
    for persistent in [false, true] {
        let volumes = persistent.then(|| e2e::Volumes::create(k, "bench-upgrade", 3));
        let name = if persistent { "upgrade-pv" } else { "upgrade" };
        let mut spec = json!({"size": 3, "version": "3.5.35"});
        if let Some(v) = &volumes {
            spec["pod"] = json!({"persistentVolumeClaimSpec": v.claim_spec()});
        }
        let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": name}, "spec": spec});
        k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
        until(&format!("{name} Available"), 600, || {
            healthy_at_size(k, ns, name, 3)
        });
        let endpoint = e2e::client_endpoint(k, ns, name);
        e2e::write_once(&endpoint, 0).expect("the first write after Available");
        let writer = Writer::start(&endpoint, Duration::from_secs(900));
        std::thread::sleep(Duration::from_secs(2));
        let title = format!("timeline of the upgrade of {name}");
        let took = timelines::traced(k, ns, operator, &title, || {
            let start = Instant::now();
            e2e::patch_spec(k, ns, name, json!({"version": "3.6.16"}));
            until(&format!("{name} on 3.6.16"), 900, || {
                e2e::RollView::of(k, ns, name).not_on("3.6.16").is_empty()
                    && healthy_at_size(k, ns, name, 3)
            });
            start.elapsed()
        });
        let tally = writer.report();
        // Without volumes each member is added: etcd (strict reconfiguration) refuses an
        // addition until every voter has been connected to the leader for 5 s, so a member
        // cannot be added sooner than 5 s after the one before it started; etcd 3.5 takes one
        // learner at a time. With volumes: the pod's stop, a pod's start, the probes.
        let (how, floor, target) = if persistent {
            ("with volumes, restarted in place", "", "< 4.5 s")
        } else {
            (
                "without volumes, a new member joins first",
                "; etcd's own floor: 5 s between two additions",
                "< 4 s",
            )
        };
        rows.push((
            format!("upgrade 3.5 -> 3.6 of 3 members ({how}{floor}), per member"),
            secs(took / 3),
            target,
        ));
        rows.push((
            format!(
                "longest write stall during it ({how}; one client writing serially through the client Service, {} writes)",
                tally.writes
            ),
            format!("{} ms", tally.longest_stall.as_millis()),
            "",
        ));
        k.ok(
            &[
                "delete",
                "-n",
                ns,
                &format!("etcdcluster/{name}"),
                "--wait=true",
            ],
            None,
        );
    }
    rows
}

fn main() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("bench");
    let ns = ns.name.as_str();
    // Its HTTP servers where pods reach the host, so that a restore's seed fetches from it.
    let free_port = || {
        std::net::TcpListener::bind("0.0.0.0:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (port, snapshot_port) = (free_port(), free_port());
    let operator = OperatorProcess::start_with(
        ns,
        &[
            "--metrics-bind-address",
            &format!("0.0.0.0:{port}"),
            "--snapshot-bind-address",
            &format!("0.0.0.0:{snapshot_port}"),
            "--snapshot-url",
            &format!("https://{}:{snapshot_port}", e2e::backups::store_host()),
        ],
    );

    // `BENCH_ONLY=archive`: continuous archiving and a restore to a revision (issue 29's rows).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("archive") {
        print_table(vec![], Duration::ZERO, archive::rows(&k, ns, &operator));
        return;
    }
    // `BENCH_ONLY=backup`: backups and restores (issue 28's rows).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("backup") {
        print_table(vec![], Duration::ZERO, backup_rows(&k, ns, &operator));
        return;
    }
    let floor = median((0..3).map(|i| e2e::etcd_pod_floor(&k, ns, i)).collect());
    // `BENCH_ONLY=upgrade`: the upgrade rows alone (a few minutes rather than the whole run).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("upgrade") {
        print_table(upgrade_rows(&k, ns, &operator), floor, vec![]);
        return;
    }
    // `BENCH_ONLY=bootstrap`: apply to 3 members ready against a bare pod, with a timeline.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("bootstrap") {
        print_table(vec![], floor, timelines::bootstrap_rows(&k, ns, &operator));
        return;
    }
    // `BENCH_ONLY=speed`: the rows of issue 17's targets, three runs each, the median.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("speed") {
        print_table(speed_rows(&k, ns), floor, vec![]);
        return;
    }
    // `BENCH_ONLY=node-faults`: node faults (issue 25's targets), on 3 or more nodes.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("node-faults") {
        print_table(vec![], floor, node_rows(&k, ns));
        return;
    }
    // `BENCH_ONLY=space`: NOSPACE reclaimed (issue 27's target).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("space") {
        print_table(space_rows(&k, ns), floor, vec![]);
        return;
    }
    // `BENCH_ONLY=recovery`: lost quorum recovered (issue 27's targets).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("recovery") {
        print_table(recovery_rows(&k), floor, vec![]);
        return;
    }
    // `BENCH_ONLY=defrag`: scheduled defragmentation of 1 GiB members (issue 27's row).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("defrag") {
        print_table(vec![], floor, defrag_rows(&k));
        return;
    }
    // `BENCH_ONLY=hibernation`: a 1 GiB cluster put to sleep and woken (issue 52's row).
    if std::env::var("BENCH_ONLY").as_deref() == Ok("hibernation") {
        print_table(vec![], floor, hibernation_rows(&k));
        return;
    }
    // `BENCH_ONLY=tls`: apply to Available with automatic TLS beside plain.
    if std::env::var("BENCH_ONLY").as_deref() == Ok("tls") {
        print_table(tls_rows(&k, ns), floor, vec![]);
        return;
    }
    let mut rows: Vec<(String, String, &str)> = Vec::new();
    for size in [1, 3, 5] {
        let name = format!("size-{size}");
        let start = Instant::now();
        apply_cluster(&k, ns, &name, size);
        until(&format!("{name} Available"), 600, || {
            healthy_at_size(&k, ns, &name, size)
        });
        let target = match size {
            3 => "< 10 s",
            5 => "< 20 s",
            _ => "",
        };
        rows.push((
            format!("apply to Available, size {size}"),
            secs(start.elapsed()),
            target,
        ));
    }

    // Failover on the 3-member cluster.
    let victim = pod_names(&k, ns, "size-3")[0].clone();
    let start = Instant::now();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
    until("recovery", 600, || {
        !pod_names(&k, ns, "size-3").contains(&victim) && healthy_at_size(&k, ns, "size-3", 3)
    });
    rows.push((
        "member pod deleted to healthy at full size".into(),
        secs(start.elapsed()),
        "< 10 s",
    ));

    // Scale-up time per member, 3 -> 5.
    let start = Instant::now();
    k.ok(
        &[
            "patch",
            "etcdcluster/size-3",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"size":5}}"#,
        ],
        None,
    );
    until("3 -> 5", 600, || healthy_at_size(&k, ns, "size-3", 5));
    rows.push((
        "scale-up, per member (3 -> 5)".into(),
        secs(start.elapsed() / 2),
        "",
    ));

    std::thread::sleep(Duration::from_secs(5));
    let rss = rss_kib(operator.pid());
    rows.push((
        "operator RSS, 3 clusters (11 members), idle".into(),
        format!("{:.1} MiB", rss as f64 / 1024.0),
        "< 32 MiB",
    ));

    // Reconcile passes and operator CPU over a minute, idle and with one client writing, on a
    // fresh 3-member cluster. The counter sums over every cluster of the operator: the others
    // are idle by now (at full size, healthy), so a rise under load is the written cluster's.
    apply_cluster(&k, ns, "load", 3);
    until("load Available", 600, || healthy_at_size(&k, ns, "load", 3));
    std::thread::sleep(Duration::from_secs(10));
    let idle = activity(&operator, || std::thread::sleep(WINDOW));
    let endpoint = format!("http://{}:2379", e2e::member_ip(&k, ns, "load"));
    let mut writes = 0;
    let loaded = activity(&operator, || {
        let writer = Writer::start(&endpoint, WINDOW + Duration::from_secs(30));
        std::thread::sleep(WINDOW);
        writes = writer.stop();
    });
    let rate = writes as f64 / loaded.elapsed.as_secs_f64();
    rows.push((
        "reconcile passes per minute, idle (4 clusters, 14 members: the counter sums them all)"
            .into(),
        format!("{:.0}", idle.passes_per_minute()),
        "",
    ));
    rows.push((
        format!(
            "reconcile passes per minute, one client writing serially to the fresh 3-member \
             cluster ({rate:.0} writes/s; the other clusters idle)"
        ),
        format!("{:.0}", loaded.passes_per_minute()),
        "within 2x of idle",
    ));
    rows.push((
        "operator CPU per minute, idle".into(),
        format!("{:.0} ms", idle.cpu_ms_per_minute()),
        "",
    ));
    rows.push((
        format!("operator CPU per minute, one client writing serially ({rate:.0} writes/s)"),
        format!("{:.0} ms", loaded.cpu_ms_per_minute()),
        "within 2x of idle",
    ));

    rows.extend(upgrade_rows(&k, ns, &operator));
    rows.extend(tls_rows(&k, ns));
    let mut more = backup_rows(&k, ns, &operator);
    more.extend(node_rows(&k, ns));

    print_table(rows, floor, more);
}

type Row = (String, String, String, String);

/// Node faults on a fresh 3-member cluster (the operator runs on this host, so every node may
/// go): a member's node stopped hard, then a member's node drained. None on fewer than 3 nodes.
fn node_rows(k: &Kubectl, ns: &str) -> Vec<Row> {
    use e2e::nodes::{drain, node_death, node_names, node_returns};
    let nodes = node_names(k).len();
    if nodes < 3 {
        eprintln!("node rows skipped: {nodes} node(s), 3 needed");
        return Vec::new();
    }
    let up = std::fs::read_to_string(
        std::path::Path::new(&std::env::var("KUBECONFIG").unwrap_or_default())
            .with_file_name("up.seconds"),
    )
    .map(|s| format!("{} s", s.trim()))
    .unwrap_or_else(|_| "not recorded".into());
    apply_cluster(k, ns, "nodes", 3);
    until("nodes Available", 600, || {
        healthy_at_size(k, ns, "nodes", 3)
    });
    let (death, restart) = node_death(k, ns, "nodes", 3, None);
    node_returns(k, ns, "nodes", restart, &death.member);
    let drained = drain(k, ns, "nodes", 3, None);
    let row =
        |m: &str, v: String, f: &str, t: &str| (m.to_string(), v, f.to_string(), t.to_string());
    vec![
        row(
            &format!("`cluster.sh up`, {nodes} nodes (as this cluster was started)"),
            up,
            "-",
            "< 90 s warm",
        ),
        row(
            &format!(
                "node stopped hard → longest wait of a client writing through the Service \
                 (the member on it led: {})",
                death.was_leader
            ),
            secs(death.writable),
            "1 s (etcd's election timeout, when the leader's node stops)",
            "< 5 s",
        ),
        row(
            "node stopped hard → cluster at full size and healthy, elsewhere (no volumes)",
            secs(death.healed),
            "30 s (the grace, from the node's last heartbeat) + a member's start",
            "< 60 s",
        ),
        row(
            "`kubectl drain` of a member's node → full size elsewhere",
            secs(drained.healed),
            "-",
            "< 30 s",
        ),
        row(
            "acknowledged writes lost (node stop, drain)",
            format!(
                "{} of {}, {} of {}",
                death.lost.len(),
                death.acked,
                drained.lost.len(),
                drained.acked
            ),
            "-",
            "0",
        ),
    ]
}

fn print_table(rows: Vec<(String, String, &str)>, floor: Duration, more: Vec<Row>) {
    println!("| measure | value | floor | target |");
    println!("| --- | --- | --- | --- |");
    for (m, v, t) in rows {
        // The floor of durations ("12.3 s", or "12.3 s (runs)"; not "40 ms" nor counts): one
        // etcd pod started directly.
        let f = if v.split(" (").next().is_some_and(|d| d.ends_with(" s")) {
            format!("{} (one etcd pod started directly)", secs(floor))
        } else {
            "-".into()
        };
        println!("| {m} | {v} | {f} | {t} |");
    }
    for (m, v, f, t) in more {
        println!("| {m} | {v} | {f} | {t} |");
    }
}
