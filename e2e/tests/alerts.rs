//! The chart's alerts and dashboard against a real Prometheus on the local cluster: the
//! operator installed by the chart in its own namespace (as most users run it) watching the
//! clusters' namespace; Prometheus scraping the operator and the members exactly as
//! prometheus-operator would from the chart's ServiceMonitor and PodMonitor (rendered by
//! `helm template`), and evaluating the chart's PrometheusRule. `EtcdQuorumAtRisk` fires while
//! one member of three is frozen and resolves once it is back; `EtcdBackupFailed` fires for
//! the cluster whose one backup went to an unreachable store, not for the one whose backups
//! succeed; every query of the dashboard returns data. The rules' `for` durations are cut to
//! a few seconds here: what is shown is that the expressions match the real series and labels;
//! the durations themselves are unit-tested by promtool (`make chart-test`).

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::backups::{aws_secret, manifest, s3_spec, store_host, until_status};
use e2e::prometheus::{Prometheus, scrape_configs};
use e2e::stores::Moto;
use e2e::{Kubectl, Operator, healthy_at_size, helm, pod_names, repo_root, until};
use serde_json::{Value, json};

const BUCKET: &str = "alerts";

/// The chart rendered with its monitors, rules and dashboard on, as installed in `op_ns`
/// watching `ns`: every object, as JSON.
fn rendered_chart(op_ns: &str, ns: &str) -> Vec<Value> {
    let chart = repo_root().join("charts/etcd-operator");
    let watch = format!("watchNamespaces={{{ns}}}");
    let text = helm(&[
        "template",
        e2e::RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        op_ns,
        "--set",
        &watch,
        "--set",
        "alerts.enabled=true",
        "--set",
        "dashboards.enabled=true",
    ]);
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|o| !o.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the rendered chart"))
}

/// The PrometheusRule's groups as a rule file, each `for` cut to 5 s.
fn rules(objects: &[Value]) -> String {
    let mut spec = find(objects, "PrometheusRule")["spec"].clone();
    for group in spec["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            if rule.get("for").is_some() {
                rule["for"] = json!("5s");
            }
        }
    }
    spec.to_string()
}

/// Every query of the dashboard, with its variables for the clusters of `ns`.
fn dashboard_queries(objects: &[Value], ns: &str) -> Vec<(String, String)> {
    let maps = objects.iter().filter(|o| o["kind"] == "ConfigMap");
    let board = maps
        .filter_map(|m| m["data"]["etcd-operator.json"].as_str())
        .next()
        .expect("the dashboard's ConfigMap");
    let board: Value = serde_json::from_str(board).unwrap();
    let mut out = Vec::new();
    for panel in board["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$namespace", ns)
                .replace("$cluster", ".*")
                .replace("$__rate_interval", "1m");
            out.push((panel["title"].as_str().unwrap().to_string(), expr));
        }
    }
    assert!(out.len() > 10, "{out:?}");
    out
}

fn value_of(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// Freezes (SIGSTOP) or thaws (SIGCONT) the etcd of member pod `pod` (on this host).
fn signal_member(pod: &str, sig: &str) {
    let pid = e2e::etcd_pid(pod).unwrap_or_else(|| panic!("{pod}'s etcd on this host"));
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

#[test]
fn the_charts_alerts_fire_and_resolve_and_its_dashboard_has_data_in_a_real_prometheus() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let op_namespace = k.namespace("alerts-op");
    let namespace = k.namespace("alerts");
    let (op_ns, ns) = (op_namespace.name.as_str(), namespace.name.as_str());
    let moto = Moto::start(&store_host());
    moto.create_bucket(BUCKET);
    aws_secret(&k, ns);
    let watch = format!("watchNamespaces={{{ns}}}");
    let _operator = Operator::install(&k, op_ns, &[&watch]);
    for (name, size) in [("main", 3), ("lonely", 1)] {
        let c = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": name}, "spec": {"size": size, "version": "3.6.16"}});
        k.ok(&["apply", "-n", ns, "-f", "-"], Some(&c.to_string()));
    }
    until("both clusters healthy", 240, || {
        healthy_at_size(&k, ns, "main", 3) && healthy_at_size(&k, ns, "lonely", 1)
    });
    let periodic = manifest(
        "EtcdBackup",
        "main-periodic",
        json!({"clusterName": "main", "storageType": "S3",
            "backupPolicy": {"backupIntervalInSecond": 30},
            "s3": s3_spec(&moto, BUCKET, "main/periodic", "aws")}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&periodic));
    until_status(&k, ns, "etcdbackup/main-periodic", 120, |s| {
        s["lastSuccessDate"].is_string()
    });

    let objects = rendered_chart(op_ns, ns);
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let config = json!({
        "global": {"evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": scrape_configs(&objects, std::path::Path::new(&kubeconfig), "2s"),
    });
    let prom = Prometheus::start(ns, &config, &rules(&objects));
    // Every operator replica and the 4 members, scraped.
    until("the operator and the 4 members scraped", 120, || {
        let targets = prom.targets();
        let up = |job: &str| {
            targets
                .iter()
                .filter(|t| t["labels"]["job"].as_str().is_some_and(|j| j.contains(job)))
                .filter(|t| t["health"] == "up")
                .count()
        };
        up("etcd-operator-metrics") >= 1 && up("etcd-operator-members") == 4
    });
    // The operator's series keep the cluster's namespace (the ServiceMonitor's honorLabels).
    until(
        "the operator's series of main, in the clusters' namespace",
        60,
        || {
            let q =
                format!("etcd_operator_cluster_members_ready{{namespace=\"{ns}\",name=\"main\"}}");
            prom.query(&q).first().is_some_and(|s| value_of(s) == 3.0)
        },
    );
    let firing = |name: &str, cluster: &str| {
        prom.alert_state(name, &[("namespace", ns), ("name", cluster)])
            .is_some_and(|s| s == "firing")
    };

    // One backup of lonely into a store nobody listens on: it fails, and the alert fires for
    // lonely alone (main's backups succeed).
    let unreachable = manifest(
        "EtcdBackup",
        "lonely-once",
        json!({"clusterName": "lonely", "storageType": "S3",
            "s3": {"path": format!("{BUCKET}/lonely"), "awsSecret": "aws",
                "endpoint": "http://127.0.0.1:1", "forcePathStyle": true}}),
    );
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&unreachable));
    until_status(&k, ns, "etcdbackup/lonely-once", 180, |s| {
        s["phase"] == "Failed"
    });
    until("EtcdBackupFailed firing for lonely", 90, || {
        firing("EtcdBackupFailed", "lonely")
    });
    assert!(!firing("EtcdBackupFailed", "main"), "{:?}", prom.alerts());

    // Every query of the dashboard answers with data.
    let empty: Vec<_> = dashboard_queries(&objects, ns)
        .into_iter()
        .filter(|(_, expr)| prom.query(expr).is_empty())
        .collect();
    assert!(
        empty.is_empty(),
        "dashboard queries without data: {empty:#?}"
    );

    // One member of main frozen: exactly a majority left, the alert fires; thawed, it resolves.
    assert!(
        prom.alert_state("EtcdQuorumAtRisk", &[("name", "main")])
            .is_none()
    );
    let victim = pod_names(&k, ns, "main")[0].clone();
    signal_member(&victim, "-STOP");
    let fired = std::panic::catch_unwind(|| {
        until("EtcdQuorumAtRisk firing for main", 120, || {
            firing("EtcdQuorumAtRisk", "main")
        })
    });
    signal_member(&victim, "-CONT");
    if let Err(e) = fired {
        panic!("{e:?}; alerts: {:?}", prom.alerts());
    }
    until("EtcdQuorumAtRisk resolved", 180, || {
        prom.alert_state("EtcdQuorumAtRisk", &[("name", "main")])
            .is_none()
    });
    assert!(
        prom.alert_state("EtcdOperatorNotLeading", &[]).is_none(),
        "{:?}",
        prom.alerts()
    );
}
