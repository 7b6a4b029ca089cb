//! Members that fail while their pods keep running, on the real local cluster: a member whose
//! etcd crash-loops is replaced after the bound the chart sets, and a member whose container
//! merely restarts does not make the cluster Failed. These need the node's processes (the
//! local cluster runs on this host), so they find a member's etcd by its host name.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::{Kubectl, Operator, condition, etcd_pid, get, healthy_at_size, pod_names, until};
use serde_json::Value;

/// Seconds since an RFC 3339 time (the node's clock is this host's).
fn seconds_since(time: &str) -> i64 {
    let epoch = |args: &[&str]| -> i64 {
        let out = std::process::Command::new("date")
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    epoch(&["-u", "+%s"]) - epoch(&["-u", "-d", time, "+%s"])
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {pid}");
}

fn events(k: &Kubectl, ns: &str) -> Vec<Value> {
    get(k, ns, "events")["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn has_event(k: &Kubectl, ns: &str, reason: &str) -> bool {
    events(k, ns).iter().any(|e| e["reason"] == reason)
}

fn apply_cluster(k: &Kubectl, ns: &str, name: &str, size: usize) {
    let c = serde_json::json!({"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "metadata": {"name": name},
        "spec": {"size": size, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
}

#[test]
fn a_crash_looping_member_is_replaced_after_the_bound() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("stuck");
    let ns = ns.name.as_str();
    let _operator = Operator::install(&k, ns, &["members.replaceUnhealthyAfter=15"]);
    apply_cluster(&k, ns, "stuck", 3);
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "stuck", 3)
    });

    // Corrupt one member's write-ahead log and kill its etcd: the container restarts into
    // the same data, etcd refuses the log, and the pod crash-loops while it stays Running.
    let victim = pod_names(&k, ns, "stuck")[2].clone();
    let pid = etcd_pid(&victim).expect("the victim's etcd runs on this host");
    let wal_dir = format!("/proc/{pid}/root/var/etcd/data/member/wal");
    let mut corrupted = 0;
    for entry in std::fs::read_dir(&wal_dir).expect("the member's WAL directory") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wal") {
            std::fs::write(&path, vec![0xa5u8; 64 * 1024]).unwrap();
            corrupted += 1;
        }
    }
    assert!(corrupted > 0, "no WAL file in {wal_dir}");
    kill(pid);

    until("the member to be reported unhealthy", 60, || {
        let c = get(&k, ns, "etcdcluster/stuck");
        c["status"]["members"]["unready"]
            .as_array()
            .is_some_and(|u| u.iter().any(|m| m == victim.as_str()))
    });
    // Still there while the bound runs (the pod is running or restarting, never deleted).
    assert!(pod_names(&k, ns, "stuck").contains(&victim));
    let took = until("the crash-looping member to be replaced", 240, || {
        !pod_names(&k, ns, "stuck").contains(&victim) && healthy_at_size(&k, ns, "stuck", 3)
    });
    eprintln!("crash-looping member replaced and the cluster healthy again after {took:?}");
    assert!(has_event(&k, ns, "MemberReplaced"), "{:?}", events(&k, ns));
}

#[test]
fn a_restarting_single_member_does_not_fail_the_cluster() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("restart");
    let ns = ns.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    apply_cluster(&k, ns, "solo", 1);
    until("1 healthy member", 240, || {
        healthy_at_size(&k, ns, "solo", 1)
    });
    let pod = pod_names(&k, ns, "solo")[0].clone();
    // A member older than the operator's startup grace for new pods (60 s), so that only the
    // grace for silent members can keep the phase.
    let created = get(&k, ns, &format!("pod/{pod}"))["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_string();
    let wait = 65 - seconds_since(&created);
    if wait > 0 {
        std::thread::sleep(std::time::Duration::from_secs(wait.unsigned_abs()));
    }

    // etcd is killed; the kubelet restarts the container on the same data within seconds.
    kill(etcd_pid(&pod).expect("the member's etcd runs on this host"));
    let mut phases = Vec::new();
    let mut unavailable = 0;
    until("the restarted member to serve again", 120, || {
        let c = get(&k, ns, "etcdcluster/solo");
        phases.push(c["status"]["phase"].as_str().unwrap_or("").to_string());
        unavailable += usize::from(condition(&c, "Available") == "False");
        let restarted =
            get(&k, ns, &format!("pod/{pod}"))["status"]["containerStatuses"][0]["restartCount"]
                .as_u64()
                .unwrap_or(0)
                >= 1;
        restarted && healthy_at_size(&k, ns, "solo", 1)
    });
    eprintln!("looks while unavailable: {unavailable} of {}", phases.len());
    assert!(
        phases.iter().all(|p| p != "Failed"),
        "the phase went to Failed during a restart: {phases:?}"
    );
    assert!(!has_event(&k, ns, "QuorumLost"), "{:?}", events(&k, ns));
    assert_eq!(pod_names(&k, ns, "solo"), [pod], "the member was replaced");
}
