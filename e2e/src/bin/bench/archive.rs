//! Issue 29's rows (`BENCH_ONLY=archive`): continuous archiving of a 1-member cluster into the
//! fast S3 server (versitygw) while clients write small values at a steady 5,000 writes per
//! second, then a restore to the last revision (100,000 writes after the full snapshot) beside
//! the restore of that snapshot alone.

use std::time::{Duration, Instant};

use e2e::{Kubectl, OperatorProcess, healthy_at_size, until};
use serde_json::{Value, json};

use super::{Row, apply_cluster, rss_kib, secs};

/// Writes per second asked for, and in all.
const RATE: u64 = 5_000;
const WRITES: u64 = 100_000;
/// Concurrent writers, and the connections they share.
const WRITERS: u64 = 64;
const CONNECTIONS: u64 = 8;

/// [`WRITES`] puts of 100-byte values on 10,000 keys, paced to [`RATE`] a second, by the chaos
/// module's load (`eo-chaos load`, Go clientv3 over several connections: the Rust client of an
/// earlier version, one connection in this process, topped out near 3,000 puts a second here
/// while etcd took more): the revision of the last and the rate reached.
fn load(endpoint: &str) -> (i64, f64) {
    let (rate, writes, writers, conns) = (
        RATE.to_string(),
        WRITES.to_string(),
        WRITERS.to_string(),
        CONNECTIONS.to_string(),
    );
    let out = std::process::Command::new("go")
        .args(["run", "./cmd/eo-chaos", "load", "--endpoints", endpoint])
        .args(["--rate", &rate, "--writes", &writes, "--clients", &writers])
        .args([
            "--connections",
            &conns,
            "--keys",
            "10000",
            "--value-bytes",
            "100",
        ])
        .current_dir(e2e::repo_root().join("chaos"))
        .output()
        .expect("go run ./cmd/eo-chaos load");
    assert!(
        out.status.success(),
        "eo-chaos load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("eo-chaos load's result");
    (
        r["last_revision"].as_i64().unwrap(),
        r["rate"].as_f64().unwrap(),
    )
}

/// `etcd_operator_archive_revision` of the `arch` cluster.
fn archived(operator: &OperatorProcess) -> i64 {
    operator
        .scrape()
        .lines()
        .filter(|l| l.starts_with("etcd_operator_archive_revision{") && l.contains("name=\"arch\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

fn backup_status(k: &Kubectl, ns: &str) -> Value {
    e2e::get(k, ns, "etcdbackup/arch")["status"].clone()
}

/// An EtcdRestore of `arch` from `s3`, applied and waited for to Completed: how long it took.
fn restore(k: &Kubectl, ns: &str, name: &str, s3: Value, to: Option<Value>) -> Duration {
    let mut spec = json!({"etcdCluster": {"name": "arch"}, "backupStorageType": "S3", "s3": s3});
    if let Some(to) = to {
        spec["restoreTo"] = to;
    }
    let restore = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": name}, "spec": spec});
    let start = Instant::now();
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&restore.to_string()));
    until(&format!("EtcdRestore {name} Completed"), 900, || {
        let s = e2e::get(k, ns, &format!("etcdrestore/{name}"))["status"].clone();
        assert_ne!(s["phase"], "Failed", "{s}");
        s["phase"] == "Completed"
    });
    start.elapsed()
}

/// The recovery point: one client writes as fast as it goes through the member while its etcd
/// is killed (SIGKILL, the member's only copy gone at once); the acknowledged writes the
/// archive lacks, and how long before the loss the oldest of them was acknowledged.
fn recovery_point(k: &Kubectl, ns: &str, chunks: &std::path::Path) -> Row {
    let endpoint = format!("http://{}:2379", e2e::member_ip(k, ns, "arch"));
    let pod = e2e::pod_names(k, ns, "arch")[0].clone();
    let pid = e2e::etcd_pid(&pod).expect("the member's etcd process on this host");
    // After the restores the archive resumes from a new full snapshot (the restored revision
    // is past a compaction): wait until it archives this cluster's writes.
    e2e::put_value(&endpoint, "rp/start", b"1").unwrap();
    let first = e2e::revision(&endpoint);
    until("archiving the restored cluster", 180, || {
        backup_status(k, ns)["archive"]["lastRevision"].as_i64() >= Some(first)
    });
    let writer = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut c = etcd_client::Client::connect([endpoint.as_str()], None)
                .await
                .unwrap();
            let mut acked = Vec::new();
            for i in 0.. {
                let put = c.put(format!("rp/{i:07}"), vec![b'r'; 100], None);
                match tokio::time::timeout(Duration::from_secs(2), put).await {
                    Ok(Ok(r)) => acked.push((r.header().unwrap().revision(), Instant::now())),
                    _ => break,
                }
            }
            acked
        })
    });
    std::thread::sleep(Duration::from_secs(5));
    let lost_at = Instant::now();
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    let acked = writer.join().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let archived = std::fs::read_dir(chunks)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().to_string();
            name.split_once('-')?.1.parse::<i64>().ok()
        })
        .max()
        .unwrap_or(0);
    let missing: Vec<_> = acked.iter().filter(|(r, _)| *r > archived).collect();
    let oldest = missing
        .iter()
        .map(|(_, at)| lost_at.saturating_duration_since(*at))
        .max()
        .unwrap_or_default();
    (
        format!(
            "recovery point: the member's etcd killed while one client writes ({} writes acknowledged), flushInterval 1s: acknowledged writes the archive lacks",
            acked.len()
        ),
        format!(
            "{} (the oldest acknowledged {} ms before the loss)",
            missing.len(),
            oldest.as_millis()
        ),
        "-".into(),
        "only those of the last flush interval (<= 1 s here, <= 5 s by default)".into(),
    )
}

pub fn rows(k: &Kubectl, ns: &str, operator: &OperatorProcess) -> Vec<Row> {
    apply_cluster(k, ns, "arch", 1);
    until("arch Available", 600, || healthy_at_size(k, ns, "arch", 1));
    let endpoint = format!("http://{}:2379", e2e::member_ip(k, ns, "arch"));
    e2e::backups::aws_secret(k, ns);
    let fast = e2e::stores::Versitygw::start("127.0.0.1");
    fast.create_bucket("bench");
    let s3 = |path: &str| json!({"path": path, "awsSecret": "aws", "endpoint": fast.url, "forcePathStyle": true});
    let idle = rss_kib(operator.pid());
    let backup = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "arch"}, "spec": {"clusterName": "arch", "storageType": "S3",
        "s3": s3("bench/arch"), "backupPolicy": {"backupIntervalInSecond": 3600,
            "continuous": {"flushInterval": "1s"}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup.to_string()));
    until("the full snapshot", 300, || {
        backup_status(k, ns)["succeeded"] == true
    });
    let snapshot = backup_status(k, ns);
    let snapshot_revision = snapshot["etcdRevision"].as_i64().unwrap();
    until("archiving to start", 120, || {
        backup_status(k, ns)["archive"]["lastRevision"].as_i64() >= Some(snapshot_revision)
    });
    let base = rss_kib(operator.pid());

    // The load, with the lag and the operator's memory sampled every 100 ms.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let pid = operator.pid();
        let operator = operator.metrics_url();
        std::thread::spawn(move || {
            let (mut max_lag, mut peak) = (0.0f64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::process::Command::new("curl")
                    .args(["-sf", &operator])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                    .unwrap_or_default();
                for l in text.lines().filter(|l| {
                    l.starts_with("etcd_operator_archive_lag_seconds{")
                        && l.contains("name=\"arch\"")
                }) {
                    if let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                        max_lag = max_lag.max(v);
                    }
                }
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            (max_lag, peak)
        })
    };
    let (last, rate) = load(&endpoint);
    let loaded = Instant::now();
    // The operator's metric follows every chunk stored (the status is written every 5 s).
    until("the archive to hold the last write", 300, || {
        archived(operator) >= last
    });
    let caught_up = loaded.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (max_lag, peak) = sampler.join().unwrap();
    let mib = |kib: u64| kib as f64 / 1024.0;

    let object = snapshot["path"]
        .as_str()
        .unwrap()
        .trim_start_matches("bench/")
        .to_string();
    let to_last = restore(
        k,
        ns,
        "to-last",
        s3("bench/arch"),
        Some(json!({"revision": last})),
    );
    let alone = restore(
        k,
        ns,
        "snapshot-alone",
        s3(&format!("bench/{object}")),
        None,
    );
    let point = recovery_point(k, ns, &fast.root().join("bench/arch_chunks"));
    vec![
        point,
        (
            format!(
                "archive lag at {rate:.0} writes/s (asked {RATE}) of 100-byte values, flushInterval 1s: the oldest change received and not yet stored, highest of samples every 100 ms"
            ),
            format!("{max_lag:.2} s"),
            "1 s (the flush interval)".into(),
            "< 2 s".into(),
        ),
        (
            "the archive holding the last of 100,000 writes, after it was acknowledged".into(),
            secs(caught_up),
            "-".into(),
            "".into(),
        ),
        (
            format!(
                "operator RSS added by one archiving cluster at {rate:.0} writes/s (peak less before the load)"
            ),
            format!("{:.1} MiB", mib(peak.saturating_sub(base))),
            format!(
                "{:.1} MiB before the load ({:.1} MiB idle, before the backup)",
                mib(base),
                mib(idle)
            ),
            "< 16 MiB".into(),
        ),
        (
            format!(
                "restore to the revision 100,000 writes after the full snapshot (revision {last}), EtcdRestore applied to Completed (1 member)"
            ),
            secs(to_last),
            format!(
                "{} (restore of that full snapshot alone, the same way)",
                secs(alone)
            ),
            "printed".into(),
        ),
    ]
}
