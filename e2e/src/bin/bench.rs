//! `make bench`: the EtcdCluster controller's figures on the cluster KUBECONFIG names, printed
//! as a table with the floor beside each: the time the same cluster takes to start one etcd pod
//! directly (median of three). Not a test: nothing here passes or fails on time. Last, the
//! operator's reconcile passes and CPU time over a minute idle and over a minute with one client
//! writing serially to a fresh 3-member cluster, which should cost the operator nothing extra.

use std::time::{Duration, Instant};

use e2e::{
    CLK_TCK, Kubectl, OperatorProcess, Writer, cpu_ticks, healthy_at_size, pod_names, until,
};
use serde_json::json;

const IMAGE: &str = "quay.io/coreos/etcd:v3.6.16";

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// One bare etcd pod, from create to Ready.
fn floor(k: &Kubectl, ns: &str, i: usize) -> Duration {
    let name = format!("floor-{i}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "etcd", "image": IMAGE, "imagePullPolicy": "Never",
          "command": ["/usr/local/bin/etcd"],
          "args": ["--data-dir=/tmp/data", "--listen-client-urls=http://0.0.0.0:2379",
                   "--advertise-client-urls=http://127.0.0.1:2379",
                   "--listen-metrics-urls=http://0.0.0.0:2381"],
          "readinessProbe": {"httpGet": {"path": "/readyz", "port": 2381}, "periodSeconds": 2}}]}});
    let start = Instant::now();
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&pod.to_string()));
    k.ok(
        &[
            "wait",
            "-n",
            ns,
            &format!("pod/{name}"),
            "--for=condition=Ready",
            "--timeout=120s",
        ],
        None,
    );
    let took = start.elapsed();
    k.ok(
        &["delete", "-n", ns, &format!("pod/{name}"), "--wait=false"],
        None,
    );
    took
}

fn apply_cluster(k: &Kubectl, ns: &str, name: &str, size: usize) {
    let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": name}, "spec": {"size": size, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
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

fn main() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let ns = k.namespace("bench");
    let ns = ns.name.as_str();
    let operator = OperatorProcess::start(ns);

    let floor = median((0..3).map(|i| floor(&k, ns, i)).collect());
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

    println!("| measure | value | floor: one etcd pod started directly | target |");
    println!("| --- | --- | --- | --- |");
    for (m, v, t) in rows {
        // Durations only ("12.3 s"; not "40 ms" nor counts).
        let f = if v.ends_with(" s") {
            secs(floor)
        } else {
            "-".into()
        };
        println!("| {m} | {v} | {f} | {t} |");
    }
}
