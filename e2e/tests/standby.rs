//! Standby clusters, switchover and failover end to end (issue 53), with the operator
//! installed by the chart and the archive in moto's S3 on the local cluster's bridge.
//!
//! `a_standby_follows_and_a_switchover_loses_nothing` (in `make test`): a primary of 3 members
//! under writes by a user with read-write on `app/`, archived continuously (flushed each
//! second); a standby of it bootstrapped from the archive and following it (its lag printed,
//! measured by keys written to the primary and read back from the standby); the writer refused
//! by the standby's etcd; a switchover (the primary demoted by annotation, the standby promoted
//! by removing `spec.standby`) under writes: every acknowledged write is on the new primary,
//! and the longest time the writer could not write is printed; the old primary then follows the
//! new one.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test with the
// error in its message.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::backups::{manifest, s3_spec, setup_with, until_status};
use e2e::{Kubectl, get, until};
use etcd_client::{Client, ConnectOptions, GetOptions};
use serde_json::{Value, json};

const BUCKET: &str = "standby";
const WRITERS: usize = 8;
/// Across two clusters (`make standby`), nothing else running: towards the 1,000 writes/s of
/// the lag target.
const WRITERS_ACROSS: usize = 16;

fn spec(size: usize) -> Value {
    json!({"size": size, "version": "3.6.16", "auth": {"enabled": true,
        "roles": [{"name": "app", "permissions": [
            {"type": "readwrite", "key": "app/", "prefix": true}]}],
        "users": [{"name": "writer", "roles": ["app"],
            "passwordSecret": {"name": "writer-etcd", "key": "password"}}]}})
}

fn source(moto: &e2e::stores::Moto, path: &str) -> Value {
    json!({"backupStorageType": "S3", "s3": s3_spec(moto, BUCKET, path, "aws")})
}

fn service(k: &Kubectl, ns: &str, cluster: &str) -> String {
    let svc = get(k, ns, &format!("service/{cluster}-client"));
    format!("{}:2379", svc["spec"]["clusterIP"].as_str().unwrap())
}

async fn writer_client(endpoint: &str) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_user("writer", "writer-password")
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(3));
    Client::connect([endpoint], Some(options)).await
}

/// What the writers saw: each acknowledged key with its value, how many writes failed, and the
/// longest time no write was acknowledged.
#[derive(Default, Debug)]
struct Tally {
    acked: Vec<(String, String)>,
    /// When each was acknowledged.
    acked_at: Vec<Instant>,
    /// The same, in Unix milliseconds (to set against the standby's status times).
    acked_ms: Vec<i64>,
    failed: u64,
    longest: Duration,
    last_error: String,
}

/// `WRITERS` writers putting `app/w<i>/<n>` as user writer to the first of `targets` that
/// takes writes: after a refusal a writer tries the next, as a client pointed at the new
/// primary would.
struct Writers {
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    started: Instant,
}

impl Writers {
    fn start(targets: Vec<String>) -> Self {
        Self::start_n(WRITERS, targets)
    }

    fn start_n(writers: usize, targets: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let last_ack = Arc::new(Mutex::new(Instant::now()));
        let current = Arc::new(AtomicUsize::new(0));
        let threads = (0..writers)
            .map(|i| {
                let (stop, tally, targets) = (stop.clone(), tally.clone(), targets.clone());
                let (last_ack, current) = (last_ack.clone(), current.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Runtime::new().unwrap();
                    rt.block_on(async move {
                        let mut c: Option<(usize, Client)> = None;
                        let mut n = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            let raw = current.load(Ordering::Relaxed);
                            let at = raw % targets.len();
                            if c.as_ref().is_none_or(|(t, _)| *t != at) {
                                match writer_client(&targets[at]).await {
                                    Ok(x) => c = Some((at, x)),
                                    Err(e) => {
                                        failed(&tally, &e);
                                        current.fetch_add(1, Ordering::Relaxed);
                                        tokio::time::sleep(Duration::from_millis(100)).await;
                                        continue;
                                    }
                                }
                            }
                            let (key, value) = (format!("app/w{i}/{n}"), format!("v{n}"));
                            let put = c.as_mut().unwrap().1.put(key.clone(), value.clone(), None);
                            match put.await {
                                Ok(_) => {
                                    let now = Instant::now();
                                    let mut last = last_ack.lock().unwrap();
                                    let mut t = tally.lock().unwrap();
                                    t.longest = t.longest.max(now - *last);
                                    *last = now;
                                    t.acked.push((key, value));
                                    t.acked_at.push(now);
                                    t.acked_ms.push(unix_ms());
                                }
                                Err(e) => {
                                    failed(&tally, &e);
                                    c = None;
                                    // Refused here: the next target, unless another writer
                                    // moved on already.
                                    let _ = current.compare_exchange(
                                        raw,
                                        raw + 1,
                                        Ordering::Relaxed,
                                        Ordering::Relaxed,
                                    );
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                }
                            }
                            n += 1;
                        }
                    })
                })
            })
            .collect();
        Writers {
            stop,
            tally,
            threads,
            started: Instant::now(),
        }
    }

    fn rate(&self) -> f64 {
        self.tally.lock().unwrap().acked.len() as f64 / self.started.elapsed().as_secs_f64()
    }

    fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.tally.lock().unwrap())
    }
}

fn failed(tally: &Mutex<Tally>, e: &etcd_client::Error) {
    let mut t = tally.lock().unwrap();
    t.failed += 1;
    t.last_error = e.to_string();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// Every key under `app/` with its value, read as the writer at `endpoint`.
fn app_keys(endpoint: &str) -> std::collections::BTreeMap<String, String> {
    runtime().block_on(async {
        let mut c = writer_client(endpoint).await.unwrap();
        let got = c
            .get("app/", Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        got.kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap().to_string(),
                    kv.value_str().unwrap().to_string(),
                )
            })
            .collect()
    })
}

/// How long a key written to `primary` takes to be read back from `standby`, `n` times.
fn lags(primary: &str, standby: &str, n: usize) -> Result<Vec<Duration>, String> {
    let tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    runtime().block_on(async {
        let mut p = writer_client(primary).await.unwrap();
        let mut s = writer_client(standby).await.unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            let key = format!("app/probe/{tag}/{i}");
            p.put(key.clone(), "probe", None).await.unwrap();
            let written = Instant::now();
            // A read the standby refuses is not a key that has not arrived: the last refusal
            // is part of the failure (issue 64: tokens revoked under a client looked like a
            // lost write).
            let mut refused = None;
            loop {
                match s.get(key.clone(), None).await {
                    Ok(g) if !g.kvs().is_empty() => break,
                    Ok(_) => {}
                    Err(e) => refused = Some(e.to_string()),
                }
                if written.elapsed() > Duration::from_secs(60) {
                    let why =
                        refused.map_or(String::new(), |e| format!(" (last read refused: {e})"));
                    return Err(format!("{key} never reached the standby{why}"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            out.push(written.elapsed());
        }
        Ok(out)
    })
}

fn unix_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// When each key under `app/` was first seen on `standby`, from a watch as user writer
/// (Unix milliseconds), until dropped.
struct Sightings {
    seen: Arc<Mutex<std::collections::HashMap<String, i64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// When the watch was in place: keys acknowledged after it are all seen through it.
    since_ms: i64,
}

impl Sightings {
    fn start(standby: &str) -> Self {
        let seen: Arc<Mutex<std::collections::HashMap<String, i64>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let thread = {
            let (seen, stop, standby) = (seen.clone(), stop.clone(), standby.to_string());
            std::thread::spawn(move || {
                runtime().block_on(async move {
                    let mut c = writer_client(&standby).await.unwrap();
                    let options = etcd_client::WatchOptions::new().with_prefix();
                    let mut watch = c.watch("app/", Some(options)).await.unwrap();
                    ready_tx.send(unix_ms()).unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        let next =
                            tokio::time::timeout(Duration::from_millis(200), watch.message());
                        let Ok(message) = next.await else { continue };
                        let resp = message.unwrap().expect("the standby's watch ended");
                        let at = unix_ms();
                        let mut seen = seen.lock().unwrap();
                        for kv in resp.events().iter().filter_map(|e| e.kv()) {
                            seen.entry(kv.key_str().unwrap().to_string()).or_insert(at);
                        }
                    }
                })
            })
        };
        let since_ms = ready.recv_timeout(Duration::from_secs(30)).unwrap();
        Sightings {
            seen,
            stop,
            thread: Some(thread),
            since_ms,
        }
    }

    fn stop(mut self) -> std::collections::HashMap<String, i64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// `(lagMeasuredAt in Unix ms, lagMilliseconds)` of the standby's status every 250 ms for
/// `secs`, each distinct measurement once; and whether `Following` stayed True throughout.
fn lag_reports(k: &Kubectl, ns: &str, cluster: &str, secs: u64) -> (Vec<(i64, i64)>, bool) {
    let started = Instant::now();
    let mut reports: Vec<(i64, i64)> = Vec::new();
    let mut following = true;
    while started.elapsed() < Duration::from_secs(secs) {
        let status = get(k, ns, &format!("etcdcluster/{cluster}"))["status"].clone();
        let s = &status["standby"];
        let at = s["lagMeasuredAt"].as_str().and_then(|t| {
            t.parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond())
        });
        if let (Some(at), Some(lag)) = (at, s["lagMilliseconds"].as_i64())
            && reports.last() != Some(&(at, lag))
        {
            reports.push((at, lag));
        }
        let condition = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Following")
            .cloned()
            .unwrap_or_default();
        following &= condition["status"] == "True";
        std::thread::sleep(Duration::from_millis(250));
    }
    (reports, following)
}

/// The flush interval of the test's archives (a change not stored yet is not known to the
/// standby) and the archiver's delay in storing a due chunk (its 100 ms tick, the write);
/// how late after a report's time the rest of its round and the test's own watch may show a
/// key on a loaded machine.
const FLUSH_MS: i64 = 1_000 + 500;
const WATCH_SLACK_MS: i64 = 1_500;

/// Issue 64: every key the writers had acknowledged (after the watch was in place) reached
/// the standby, and none later than the lag reported then allows: for each report (measured
/// at `t`, lag `L`), every key acknowledged before `t - L - flush` was seen on the standby by
/// `t` (and the watch's slack).
fn check_every_key_within_the_reported_lag(
    acked: &[(String, String)],
    acked_ms: &[i64],
    seen: &std::collections::HashMap<String, i64>,
    since_ms: i64,
    until_ms: i64,
    reports: &[(i64, i64)],
) {
    let keys: Vec<(&str, i64)> = acked
        .iter()
        .zip(acked_ms)
        .map(|((k, _), at)| (k.as_str(), *at))
        .filter(|(_, at)| *at > since_ms && *at < until_ms)
        .collect();
    let missing: Vec<_> = keys
        .iter()
        .filter(|(k, _)| !seen.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged keys never reached the standby: {:?}",
        missing.len(),
        keys.len(),
        &missing[..missing.len().min(5)]
    );
    let late: Vec<_> = keys
        .iter()
        .filter_map(|(k, at)| {
            let first = seen[*k];
            reports
                .iter()
                .find(|(t, lag)| *at < t - lag - FLUSH_MS && first > t + WATCH_SLACK_MS)
                .map(|(t, lag)| (*k, *at, first, *t, *lag))
        })
        .collect();
    let worst = keys.iter().map(|(k, at)| seen[*k] - at).max().unwrap_or(0);
    eprintln!(
        "every key checked: {} keys, worst {worst} ms from acknowledgement to the standby, {} lag reports (max {} ms)",
        keys.len(),
        reports.len(),
        reports.iter().map(|r| r.1).max().unwrap_or(0)
    );
    assert!(
        late.is_empty(),
        "{} keys reached the standby later than the lag it reported allowed (key, acknowledged, seen, measured at, lag): {:?}",
        late.len(),
        &late[..late.len().min(5)]
    );
}

fn standby_status(k: &Kubectl, ns: &str, cluster: &str) -> Value {
    get(k, ns, &format!("etcdcluster/{cluster}"))["status"]["standby"].clone()
}

fn archive(k: &Kubectl, ns: &str, name: &str, cluster: &str, moto: &e2e::stores::Moto, path: &str) {
    let backup = manifest(
        "EtcdBackup",
        name,
        json!({"clusterName": cluster, "storageType": "S3",
            "s3": s3_spec(moto, BUCKET, path, "aws"),
            "backupPolicy": {"backupIntervalInSecond": 3600,
                "continuous": {"flushInterval": "1s"}}}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&backup));
    until_status(k, ns, &format!("etcdbackup/{name}"), 120, |s| {
        s["succeeded"] == true && s["archive"]["lastRevision"].as_i64().is_some()
    });
}

fn writer_secret() -> String {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "writer-etcd"},
        "stringData": {"password": "writer-password"}})
    .to_string()
}

/// moto, a namespace with the operator, and in it the 3-member cluster `primary` (access
/// control, the writer's Secret) archived continuously to `etcd/primary`, flushed each second.
fn archived_primary<'k>(
    k: &'k Kubectl,
    prefix: &str,
) -> (e2e::stores::Moto, e2e::Namespace<'k>, e2e::Operator<'k>) {
    let (moto, namespace, operator) =
        setup_with(k, prefix, BUCKET, "primary", spec(3), &[writer_secret()]);
    let ns = namespace.name.as_str();
    archive(k, ns, "primary-archive", "primary", &moto, "etcd/primary");
    (moto, namespace, operator)
}

#[test]
fn a_standby_follows_and_a_switchover_loses_nothing() {
    let k = Kubectl::from_env();
    let (moto, namespace, operator) = archived_primary(&k, "standby");
    let ns = namespace.name.as_str();
    let primary = service(&k, ns, "primary");
    let writers = Writers::start(vec![primary.clone()]);

    // The standby: bootstrapped from the archive while the writers write, then following.
    let mut standby_spec = spec(1);
    standby_spec["standby"] = json!({"source": source(&moto, "etcd/primary")});
    let started = Instant::now();
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&e2e::manifest("EtcdCluster", "standby", &standby_spec)),
    );
    until("the standby to follow", 240, || {
        standby_status(&k, ns, "standby")["phase"] == "Standby"
    });
    eprintln!(
        "standby following {:.1} s after apply",
        started.elapsed().as_secs_f64()
    );
    let standby = service(&k, ns, "standby");
    let lag = lags(&primary, &standby, 5).unwrap_or_else(|e| {
        panic!(
            "{e}: standby {}; archive {}",
            standby_status(&k, ns, "standby"),
            get(&k, ns, "etcdbackup/primary-archive")["status"]["archive"]
        )
    });
    eprintln!(
        "standby lag at {:.0} writes/s: {:?} (max {:.2} s; floor: the archive's flush interval, 1 s)",
        writers.rate(),
        lag,
        lag.iter().max().unwrap().as_secs_f64()
    );
    // Loose here, beside the rest of the suite on 2 cores: the targets (5 s, 10 s) are held by
    // the two-cluster scenario (`make standby`).
    assert!(lag.iter().all(|l| *l < Duration::from_secs(10)), "{lag:?}");
    let refused = runtime().block_on(async {
        let mut c = writer_client(&standby).await.unwrap();
        c.put("app/on-standby", "x", None)
            .await
            .unwrap_err()
            .to_string()
    });
    assert!(refused.contains("permission denied"), "{refused}");

    // Every key, not a sample: 15 s of writes watched on the standby beside its reports.
    let sightings = Sightings::start(&standby);
    let (reports, following) = lag_reports(&k, ns, "standby", 15);
    let until_ms = unix_ms();
    {
        let acked = writers.tally.lock().unwrap().acked.len();
        until("every key acknowledged so far on the standby", 60, || {
            let seen = sightings.seen.lock().unwrap();
            let t = writers.tally.lock().unwrap();
            (0..acked)
                .all(|i| t.acked_ms[i] <= sightings.since_ms || seen.contains_key(&t.acked[i].0))
        });
    }
    let since_ms = sightings.since_ms;
    let seen = sightings.stop();
    {
        let t = writers.tally.lock().unwrap();
        check_every_key_within_the_reported_lag(
            &t.acked,
            &t.acked_ms,
            &seen,
            since_ms,
            until_ms,
            &reports,
        );
    }
    assert!(
        following,
        "Following was not True throughout: {}",
        standby_status(&k, ns, "standby")
    );

    // Switchover under writes: the primary demoted, then the standby promoted.
    let writers_before = writers;
    let writers = {
        let t = writers_before.stop();
        let mut carry = Writers::start(vec![primary.clone(), standby.clone()]);
        carry.tally.lock().unwrap().acked = t.acked;
        carry.tally.lock().unwrap().acked_ms = t.acked_ms;
        carry.started = Instant::now();
        carry
    };
    std::thread::sleep(Duration::from_secs(2));
    let switch = Instant::now();
    k.ok(
        &[
            "annotate",
            "-n",
            ns,
            "etcdcluster/primary",
            "etcd.database.coreos.com/demote=switchover",
        ],
        None,
    );
    until("the primary to be demoted", 60, || {
        standby_status(&k, ns, "primary")["phase"] == "Demoted"
    });
    let demoted = standby_status(&k, ns, "primary")["demotedRevision"]
        .as_i64()
        .unwrap();
    k.ok(
        &[
            "patch",
            "-n",
            ns,
            "etcdcluster/standby",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/standby"}]"#,
        ],
        None,
    );
    until("the standby to be promoted", 60, || {
        standby_status(&k, ns, "standby")["phase"] == "Promoted"
    });
    let promoted = standby_status(&k, ns, "standby");
    eprintln!(
        "switchover in {:.1} s: demoted at {demoted}, promoted {promoted}",
        switch.elapsed().as_secs_f64()
    );
    assert_eq!(promoted["promotion"], "Switchover", "{promoted}");
    assert_eq!(
        promoted["promotedRevision"].as_i64(),
        Some(demoted),
        "{promoted}"
    );
    let acked = writers.tally.lock().unwrap().acked.len();
    let waited = Instant::now();
    while writers.tally.lock().unwrap().acked.len() <= acked + 100 {
        let t = writers.tally.lock().unwrap();
        if waited.elapsed() > Duration::from_secs(30) {
            let log: Vec<String> = operator
                .logs()
                .lines()
                .filter(|l| l.contains("access control") || l.contains("standby"))
                .map(String::from)
                .collect();
            let root = get(&k, ns, "secret/standby-etcd-root")["data"]["password"]
                .as_str()
                .map(|b| String::from_utf8(e2e::unbase64(b).unwrap()).unwrap())
                .unwrap_or_default();
            let (role, put) = runtime().block_on(async {
                let options = ConnectOptions::new().with_user("root", root);
                let mut c = Client::connect([standby.as_str()], Some(options))
                    .await
                    .unwrap();
                let role = format!(
                    "{:?}",
                    c.role_get("app").await.map(|r| r.permissions().to_vec())
                );
                let mut w = writer_client(&standby).await.unwrap();
                (
                    role,
                    format!("{:?}", w.put("app/direct", "x", None).await.map(|_| ())),
                )
            });
            let log: Vec<String> = log
                .into_iter()
                .filter(|l| {
                    l.contains("access control")
                        || l.contains("name=standby}: etcd_operator::cluster::standby")
                })
                .collect();
            panic!(
                "no writes to the new primary in 30 s: {} failed, last error {}; role app on \
                 the new primary {role}, a put there {put}; the new \
                 primary's status: {}; the operator's log: {log:#?}",
                t.failed,
                t.last_error,
                get(&k, ns, "etcdcluster/standby")["status"]["standby"]
            );
        }
        drop(t);
        std::thread::sleep(Duration::from_millis(200));
    }
    let tally = writers.stop();
    let on_new = app_keys(&standby);
    let lost: Vec<_> = tally
        .acked
        .iter()
        .filter(|(key, v)| on_new.get(key) != Some(v))
        .collect();
    eprintln!(
        "switchover: {} acknowledged writes, {} lost, {} failed, longest without an acknowledged write {:.2} s (last error: {})",
        tally.acked.len(),
        lost.len(),
        tally.failed,
        tally.longest.as_secs_f64(),
        tally.last_error
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged writes missing: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        tally.longest < Duration::from_secs(20),
        "longest {:?}",
        tally.longest
    );

    // The old primary follows the new one: its data replaced from the new primary's archive.
    archive(&k, ns, "standby-archive", "standby", &moto, "etcd/standby");
    let follow = json!({"metadata": {"annotations": {"etcd.database.coreos.com/demote": null}},
        "spec": {"standby": {"source": source(&moto, "etcd/standby")}}});
    k.ok(
        &[
            "patch",
            "-n",
            ns,
            "etcdcluster/primary",
            "--type=merge",
            "-p",
            &follow.to_string(),
        ],
        None,
    );
    until("the old primary to follow the new one", 240, || {
        standby_status(&k, ns, "primary")["phase"] == "Standby"
    });
    let back = lags(&standby, &primary, 3).unwrap();
    eprintln!("the old primary follows the new one: lag {back:?}");
}

/// The host reaches a pod of the second local cluster by its IP, not its Services.
fn member_endpoint(k: &Kubectl, ns: &str, cluster: &str) -> String {
    format!("{}:2379", e2e::member_ip(k, ns, cluster))
}

/// `hack/cluster.sh ARGS` on the first local cluster.
fn first_cluster(args: &[&str]) -> std::process::Output {
    std::process::Command::new(e2e::repo_root().join("hack/cluster.sh"))
        .args(args)
        .env("ETCD_OPERATOR_CLUSTER_INDEX", "1")
        .env_remove("ETCD_OPERATOR_CLUSTER_DIR")
        .output()
        .unwrap()
}

/// A standby of `primary` (archived at `path`) applied in the second cluster, waited for until
/// it follows; its endpoint.
fn standby_in(k2: &Kubectl, ns2: &str, name: &str, moto: &e2e::stores::Moto, path: &str) -> String {
    let mut standby_spec = spec(1);
    standby_spec["standby"] = json!({"source": source(moto, path)});
    let started = Instant::now();
    k2.ok(
        &["apply", "-n", ns2, "-f", "-"],
        Some(&e2e::manifest("EtcdCluster", name, &standby_spec)),
    );
    until("the standby to follow", 300, || {
        standby_status(k2, ns2, name)["phase"] == "Standby"
    });
    eprintln!(
        "standby {name} in the second cluster following {:.1} s after apply",
        started.elapsed().as_secs_f64()
    );
    member_endpoint(k2, ns2, name)
}

fn promote(k: &Kubectl, ns: &str, name: &str) -> Value {
    k.ok(
        &[
            "patch",
            "-n",
            ns,
            &format!("etcdcluster/{name}"),
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/standby"}]"#,
        ],
        None,
    );
    until("the standby to be promoted", 120, || {
        standby_status(k, ns, name)["phase"] == "Promoted"
    });
    standby_status(k, ns, name)
}

/// `a_standby_follows_and_a_switchover_loses_nothing` across two Kubernetes clusters, then a
/// failover: primaries in the local cluster, standbys in a second one
/// (`ETCD_OPERATOR_CLUSTER_INDEX=2`, its kubeconfig in `E2E_SECOND_KUBECONFIG`), the store on
/// the first one's bridge, which both reach; the standbys read by pod IP (the host reaches the
/// second cluster's pods, not its Services). Run by `make standby`; prints the issue's rows.
#[test]
#[ignore = "needs a second local cluster: make standby"]
fn across_two_clusters_a_standby_follows_switches_over_and_fails_over() {
    let second = std::env::var("E2E_SECOND_KUBECONFIG")
        .expect("E2E_SECOND_KUBECONFIG: the second cluster's kubeconfig (make standby sets it)");
    let k = Kubectl::from_env();
    let k2 = Kubectl::with_kubeconfig(second);
    let (moto, namespace, _operator) = archived_primary(&k, "standby-x");
    let ns = namespace.name.as_str();
    k2.apply_crds();
    let namespace2 = k2.namespace("standby-x");
    let ns2 = namespace2.name.as_str();
    let _operator2 = e2e::Operator::install(&k2, ns2, &[]);
    e2e::backups::aws_secret(&k2, ns2);
    k2.ok(&["apply", "-n", ns2, "-f", "-"], Some(&writer_secret()));
    let primary = service(&k, ns, "primary");

    // Lag, then a switchover, under writes.
    let writers = Writers::start_n(WRITERS_ACROSS, vec![primary.clone()]);
    let standby = standby_in(&k2, ns2, "standby", &moto, "etcd/primary");
    let lag = lags(&primary, &standby, 10).unwrap_or_else(|e| {
        panic!(
            "{e}: standby {}; archive {}",
            standby_status(&k2, ns2, "standby"),
            get(&k, ns, "etcdbackup/primary-archive")["status"]["archive"]
        )
    });
    let rate = writers.rate();
    let worst = lag.iter().max().unwrap().as_secs_f64();
    eprintln!(
        "| standby lag behind the primary at {rate:.0} writes/s | max {worst:.2} s of 10 probes | < 5 s (floor: the flush interval, 1 s) |"
    );
    assert!(worst < 5.0, "{lag:?}");
    let before = writers.stop();
    let writers = Writers::start_n(WRITERS_ACROSS, vec![primary.clone(), standby.clone()]);
    writers.tally.lock().unwrap().acked = before.acked;
    std::thread::sleep(Duration::from_secs(2));
    k.ok(
        &[
            "annotate",
            "-n",
            ns,
            "etcdcluster/primary",
            "etcd.database.coreos.com/demote=switchover",
        ],
        None,
    );
    until("the primary to be demoted", 60, || {
        standby_status(&k, ns, "primary")["phase"] == "Demoted"
    });
    let demoted = standby_status(&k, ns, "primary")["demotedRevision"].as_i64();
    let promoted = promote(&k2, ns2, "standby");
    assert_eq!(promoted["promotion"], "Switchover", "{promoted}");
    assert_eq!(promoted["promotedRevision"].as_i64(), demoted, "{promoted}");
    let acked = writers.tally.lock().unwrap().acked.len();
    until("writes to the new primary", 30, || {
        writers.tally.lock().unwrap().acked.len() > acked + 100
    });
    let tally = writers.stop();
    let on_new = app_keys(&standby);
    let lost = tally
        .acked
        .iter()
        .filter(|(key, v)| on_new.get(key) != Some(v))
        .count();
    eprintln!(
        "| switchover across clusters: acknowledged writes lost / longest failed-write window | {lost} of {} / {:.2} s | 0 / < 10 s |",
        tally.acked.len(),
        tally.longest.as_secs_f64()
    );
    assert_eq!(lost, 0);
    assert!(
        tally.longest < Duration::from_secs(10),
        "{:?}",
        tally.longest
    );
    k.ok(
        &["delete", "-n", ns, "etcdcluster/primary", "--wait=false"],
        None,
    );
    k2.ok(
        &["delete", "-n", ns2, "etcdcluster/standby", "--wait=false"],
        None,
    );

    // Failover: a second pair; the first cluster's nodes stopped hard under writes (the
    // primary, its operator and its archiver with them), the standby promoted at what the
    // archive holds.
    let spec_b = spec(3);
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&e2e::manifest("EtcdCluster", "primary-b", &spec_b)),
    );
    until("primary-b healthy", 240, || {
        e2e::healthy_at_size(&k, ns, "primary-b", 3)
    });
    archive(
        &k,
        ns,
        "primary-b-archive",
        "primary-b",
        &moto,
        "etcd/primary-b",
    );
    let primary_b = service(&k, ns, "primary-b");
    let writers = Writers::start_n(WRITERS_ACROSS, vec![primary_b.clone()]);
    let standby_b = standby_in(&k2, ns2, "standby-b", &moto, "etcd/primary-b");
    std::thread::sleep(Duration::from_secs(5));
    // All three at once, as a lost zone or region goes: their networks are cut first.
    let stop_at = Instant::now();
    let stops: Vec<_> = ["eo-node-1", "eo-node-2", "eo-node-3"]
        .into_iter()
        .map(|node| std::thread::spawn(move || first_cluster(&["node", "stop", node])))
        .collect();
    for s in stops {
        let out = s.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stopped = stop_at.elapsed();
    let tally = writers.stop();
    let promoted = promote(&k2, ns2, "standby-b");
    let on_new = app_keys(&standby_b);
    let lost = tally
        .acked
        .iter()
        .filter(|(key, v)| on_new.get(key) != Some(v))
        .count();
    // The writes a failover may lose: those acknowledged in the last flush interval before
    // the cluster went (the chunk being written then never reached the store).
    let last_interval = tally
        .acked_at
        .iter()
        .filter(|t| **t + Duration::from_secs(1) > stop_at)
        .count();
    eprintln!(
        "| failover: acknowledged writes lost | {lost} of {} ({last_interval} acknowledged in the last flush interval, 1 s, before the first cluster's nodes were cut; they took {:.1} s to stop) | ≤ those of the last flush interval |",
        tally.acked.len(),
        stopped.as_secs_f64()
    );
    eprintln!("promoted by failover: {promoted}");
    assert_eq!(promoted["promotion"], "Failover", "{promoted}");
    for node in ["eo-node-1", "eo-node-2", "eo-node-3"] {
        let _ = first_cluster(&["node", "start", node]);
    }
    assert!(
        lost <= last_interval,
        "{lost} lost, more than the {last_interval} acknowledged in the last flush interval"
    );
}
