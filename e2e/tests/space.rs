//! NOSPACE on the local cluster: a 3-member cluster with a 16 MiB backend quota is filled
//! through its client Service until etcd refuses writes for lack of space. Filled with history
//! (one key overwritten), the operator compacts, defragments and disarms without a human, and
//! writes are served again; filled with live data (distinct keys), it says the quota is too
//! small instead of looping, and reclaims once the keys are deleted. Nothing acknowledged before
//! is lost. Scheduled defragmentation (and etcd's auto-compaction flags) on the same kind of
//! cluster: every member defragmented one at a time under a writer, the reclaimed bytes in the
//! status, the longest write stall printed.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use e2e::{
    Keys, Kubectl, Operator, Writer, assert_acked_present, client_endpoint, compact, condition,
    delete_under, event_count, events, get, healthy_at_size, patch_spec, pod_names, put_value,
    until, write_once,
};
use serde_json::json;

const QUOTA: i64 = 16 * 1024 * 1024;

/// Overwrites `key` with 512 KiB values until etcd refuses a write for lack of space; returns
/// when it did.
fn fill(endpoint: &str, key: &str) -> Instant {
    let value = vec![b'x'; 512 * 1024];
    for i in 0..400 {
        match put_value(endpoint, key, &value) {
            Ok(()) => {}
            Err(e) if e.contains("database space exceeded") => return Instant::now(),
            // A put that failed otherwise (a busy node) is tried again with the next key.
            Err(e) => eprintln!("put {i}: {e}"),
        }
    }
    panic!("etcd never refused a write with a {QUOTA}-byte quota");
}

fn served_again(endpoint: &str, key: u64, within: u64) {
    until("writes served again", within, || {
        write_once(endpoint, key).is_ok()
    });
}

#[test]
fn nospace_is_reclaimed_without_a_human_and_a_quota_too_small_is_said_so() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("space");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"},
        "spec": {"size": 3, "version": "3.6.16",
                 "maintenance": {"quotaBackendBytes": QUOTA}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let pods = get(&k, ns, "pods");
    let pod = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["metadata"]["labels"]["etcd_cluster"] == "example")
        .cloned()
        .unwrap();
    let args = pod["spec"]["containers"][0]["command"].to_string()
        + &pod["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains(&format!("--quota-backend-bytes={QUOTA}")),
        "the members run with the quota: {args}"
    );
    let endpoint = client_endpoint(&k, ns, "example");
    let tally = Writer::until_acked(&endpoint, 20, Duration::from_secs(60), Keys::Unique);
    assert_eq!(tally.errors, 0, "writes failed: {}", tally.last_error);
    let acked = tally.acked;
    assert!(acked.len() >= 20, "too few writes in 60 s: {}", acked.len());

    // History: one key overwritten until the quota is reached. Compaction frees it all.
    let refused = fill(&endpoint, "space/history");
    served_again(&endpoint, 1_000_001, 120);
    let took = refused.elapsed();
    println!(
        "NOSPACE raised → writes served again: {:.1} s (target < 30 s)",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(30),
        "writes were served again only {:.1} s after NOSPACE",
        took.as_secs_f64()
    );
    until("the reclaim reported", 30, || {
        event_count(&k, ns, "example", "SpaceReclaimed") >= 1
    });
    let reclaimed = events(&k, ns, "example", "SpaceReclaimed");
    assert!(
        reclaimed
            .iter()
            .any(|m| m.contains("compacted") && m.contains("defragmented")),
        "{reclaimed:?}"
    );
    until("Available again", 60, || {
        condition(&get(&k, ns, "etcdcluster/example"), "Available") == "True"
    });
    assert_acked_present(&endpoint, &acked);

    // Live data: distinct keys, written on through refusals (the operator reclaims what
    // history there is and disarms while the data leaves a tenth of the quota), until the data
    // itself does not fit: then the alarm stays, and the status says why rather than a loop of
    // disarms.
    let exceeded = || {
        let c = get(&k, ns, "etcdcluster/example");
        let degraded = c["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Degraded")
            .cloned()
            .unwrap_or_default();
        degraded["reason"] == "QuotaExceeded"
            && condition(&c, "Available") == "False"
            && c["status"]["phase"] == "Running"
    };
    let value = vec![b'y'; 512 * 1024];
    let start = Instant::now();
    let mut i = 0;
    while !exceeded() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the quota never reported too small"
        );
        match put_value(&endpoint, &format!("space/live/{i}"), &value) {
            Ok(()) => i += 1,
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
    assert!(event_count(&k, ns, "example", "QuotaExceeded") >= 1);
    assert!(write_once(&endpoint, 1_000_002).is_err());
    // The user deletes what does not fit (deletes are served under NOSPACE): reclaimed.
    delete_under(&endpoint, "space/live/").unwrap();
    served_again(&endpoint, 1_000_003, 60);
    until("Available again", 60, || {
        condition(&get(&k, ns, "etcdcluster/example"), "Available") == "True"
    });
    assert_acked_present(&endpoint, &acked);
}

#[test]
fn scheduled_defragmentation_reclaims_space_member_by_member_and_says_what_it_cost() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("defrag");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"},
        "spec": {"size": 3, "version": "3.6.16",
                 "maintenance": {"autoCompaction": {"mode": "periodic", "retention": "1h"}}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let pod = get(&k, ns, &format!("pod/{}", pod_names(&k, ns, "example")[0]));
    let args = pod["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--auto-compaction-mode=periodic")
            && args.contains("--auto-compaction-retention=1h"),
        "{args}"
    );
    // 24 MiB of history on one key, compacted away: free pages in every member's file.
    let endpoint = client_endpoint(&k, ns, "example");
    let value = vec![b'z'; 512 * 1024];
    for _ in 0..48 {
        put_value(&endpoint, "defrag/history", &value).unwrap();
    }
    compact(&endpoint);

    // Every minute; a client writes throughout, and its longest wait is the cost.
    let writer = Writer::start_with(&endpoint, Duration::from_secs(300), Keys::Unique);
    patch_spec(
        &k,
        ns,
        "example",
        json!({"maintenance": {"defrag": {"schedule": "* * * * *", "threshold": 1048576}}}),
    );
    let records = || get(&k, ns, "etcdcluster/example")["status"]["defragmentations"].clone();
    until("every member defragmented", 180, || {
        records().as_array().is_some_and(|r| r.len() == 3)
    });
    let tally = writer.report();
    let done = records();
    let mut reclaimed = 0;
    let mut longest_defrag = 0;
    for d in done.as_array().unwrap() {
        let (before, after) = (
            d["sizeBefore"].as_i64().unwrap(),
            d["sizeAfter"].as_i64().unwrap(),
        );
        assert!(after < before, "{d}");
        reclaimed += before - after;
        longest_defrag = longest_defrag.max(d["milliseconds"].as_i64().unwrap());
    }
    println!(
        "scheduled defragmentation of 3 members: {:.1} MiB reclaimed, longest member {} ms \
         (etcd's own defrag time, the floor), longest client write stall {} ms, {} writes, {} failed",
        reclaimed as f64 / 1048576.0,
        longest_defrag,
        tally.longest_stall.as_millis(),
        tally.writes,
        tally.errors
    );
    assert!(event_count(&k, ns, "example", "Defragmented") >= 3);
    // Leadership moves once (before the leader is defragmented): a write in flight at that
    // moment may be dropped by the old leader and time out at the client, as etcd documents
    // for a leader change. Anything more is a fault of the defragmentation.
    assert!(
        tally.errors <= 1,
        "{} writes failed, the last: {}",
        tally.errors,
        tally.last_error
    );
    assert_acked_present(&endpoint, &tally.acked);
}
