//! Production settings on the real local cluster: `kubectl scale` through the `/scale`
//! subresource, a PriorityClass and the user's own spread constraints on the member pods, a
//! NodePort client Service reached from this host (outside the cluster's network: a node's
//! address and port), etcd tuning on the members' command lines, and a change to it held
//! outside the maintenance window, then rolled into the members once it opens, under writes
//! through the NodePort, with every acknowledged write kept.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::{
    Keys, Kubectl, Operator, Writer, assert_acked_present, get, healthy_at_size, member_pods,
    patch_spec, until, write_once,
};
use serde_json::{Value, json};

const CLUSTER: &str = "tuned";

/// Deletes the test's PriorityClass (cluster-scoped: the namespace's deletion leaves it).
struct PriorityClass<'a>(&'a Kubectl, String);

impl Drop for PriorityClass<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .run(&["delete", "priorityclass", &self.1, "--wait=false"], None);
    }
}

/// The etcd container's arguments of each member pod.
fn member_args(k: &Kubectl, ns: &str) -> Vec<Vec<String>> {
    member_pods(k, ns, CLUSTER)
        .iter()
        .map(|p| {
            p["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "etcd")
                .and_then(|c| c["args"].as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// `http://<node address>:<node port>` of the cluster's client Service.
fn node_port_endpoint(k: &Kubectl, ns: &str) -> String {
    let svc = get(k, ns, &format!("service/{CLUSTER}-client"));
    assert_eq!(svc["spec"]["type"], "NodePort", "{svc}");
    let port = svc["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    let nodes: Value = serde_json::from_str(&k.ok(&["get", "nodes", "-o", "json"], None)).unwrap();
    let address = nodes["items"][0]["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap()
        .to_string();
    format!("http://{address}:{port}")
}

#[test]
fn scale_priority_spread_node_port_and_tuning_reach_the_members() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("settings");
    let ns = namespace.name.as_str();
    let class = format!("etcd-{ns}");
    k.ok(
        &["apply", "-f", "-"],
        Some(
            &json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": class}, "value": 1000000,
        "description": "e2e: etcd members above ordinary workloads"})
            .to_string(),
        ),
    );
    let _class = PriorityClass(&k, class.clone());
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": CLUSTER}, "spec": {"size": 1, "version": "3.6.16",
            "pod": {"priorityClassName": class, "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                 "whenUnsatisfiable": "DoNotSchedule"}]},
            "clientService": {"type": "NodePort", "labels": {"team": "a"},
                "annotations": {"example.com/exposed": "true"},
                "trafficDistribution": "PreferClose"},
            "tuning": {"heartbeatInterval": 150, "electionTimeout": 1500,
                "snapshotCount": 5000, "maxTxnOps": 256, "logLevel": "warn",
                "extraArgs": ["--experimental-watch-progress-notify-interval=5s"]}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("1 healthy member", 180, || {
        healthy_at_size(&k, ns, CLUSTER, 1)
    });

    // `kubectl scale` goes through the /scale subresource, which reports the members.
    k.ok(
        &[
            "scale",
            "-n",
            ns,
            &format!("etcd/{CLUSTER}"),
            "--replicas=3",
        ],
        None,
    );
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, CLUSTER, 3)
    });
    let scale: Value = serde_json::from_str(&k.ok(
        &[
            "get",
            "-n",
            ns,
            &format!("etcd/{CLUSTER}"),
            "--subresource=scale",
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["replicas"], 3, "{scale}");
    assert_eq!(
        scale["status"]["selector"],
        format!("app=etcd,etcd_cluster={CLUSTER}"),
        "{scale}"
    );

    // The priority class, resolved by the API server, and one member per node (the user's
    // constraint, required).
    let pods = member_pods(&k, ns, CLUSTER);
    let nodes: BTreeSet<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 3, "one member per node: {nodes:?}");
    for p in &pods {
        assert_eq!(p["spec"]["priorityClassName"], class.as_str());
        assert_eq!(p["spec"]["priority"], 1000000);
        let spread = p["spec"]["topologySpreadConstraints"].as_array().unwrap();
        assert_eq!(spread.len(), 1, "the user's constraints only: {spread:?}");
        assert_eq!(spread[0]["whenUnsatisfiable"], "DoNotSchedule");
    }
    for args in member_args(&k, ns) {
        for want in [
            "--heartbeat-interval=150",
            "--election-timeout=1500",
            "--snapshot-count=5000",
            "--max-txn-ops=256",
            "--log-level=warn",
            "--experimental-watch-progress-notify-interval=5s",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
    }

    // The client Service as the template says, reached from this host through a node.
    let svc = get(&k, ns, &format!("service/{CLUSTER}-client"));
    assert_eq!(svc["metadata"]["labels"]["team"], "a", "{svc}");
    assert_eq!(
        svc["metadata"]["annotations"]["example.com/exposed"],
        "true"
    );
    assert_eq!(svc["spec"]["trafficDistribution"], "PreferClose");
    let endpoint = node_port_endpoint(&k, ns);
    until("a write through the NodePort", 60, || {
        write_once(&endpoint, 0).is_ok()
    });

    // Outside the maintenance window a tuning change waits, and the status says until when.
    let hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        % 24;
    let closed = format!("0 {} * * *", (hour + 12) % 24);
    patch_spec(
        &k,
        ns,
        CLUSTER,
        json!({"maintenance": {"window": {"schedule": closed, "duration": "1h"}},
               "tuning": {"heartbeatInterval": 200, "electionTimeout": 2000}}),
    );
    until("the roll held for the maintenance window", 60, || {
        let c = get(&k, ns, &format!("etcd/{CLUSTER}"));
        c["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["type"] == "Progressing"
                    && c["status"] == "False"
                    && c["reason"] == "WaitingForMaintenanceWindow"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("rolling 3 outdated member(s)"))
            })
        })
    });
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        member_args(&k, ns)
            .iter()
            .all(|a| a.iter().any(|f| f == "--heartbeat-interval=150")),
        "a member was rolled outside the window"
    );

    // The window open (every minute for an hour), the change rolls the members one at a time;
    // writes through the NodePort go on.
    let writer = Writer::start_with(&endpoint, Duration::from_secs(300), Keys::Unique);
    patch_spec(
        &k,
        ns,
        CLUSTER,
        json!({"maintenance": {"window": {"schedule": "* * * * *", "duration": "1h"}}}),
    );
    let rolled = until("every member on the new tuning", 300, || {
        let args = member_args(&k, ns);
        args.len() == 3
            && args.iter().all(|a| {
                a.iter().any(|f| f == "--heartbeat-interval=200")
                    && a.iter().any(|f| f == "--election-timeout=2000")
            })
            && healthy_at_size(&k, ns, CLUSTER, 3)
    });
    let tally = writer.report();
    assert!(
        tally.writes > 50,
        "the writer barely wrote: {}",
        tally.writes
    );
    assert_acked_present(&endpoint, &tally.acked);
    println!(
        "| a tuning change rolled into 3 members under writes through a NodePort: writes lost / failed / longest stall / roll | 0 of {} / {} / {:.2?} / {:.1?} | 0 / - / - / - |",
        tally.writes, tally.errors, tally.longest_stall, rolled
    );

    // Without the template the Service is a ClusterIP one again, its extras gone.
    k.ok(
        &[
            "patch",
            "-n",
            ns,
            &format!("etcd/{CLUSTER}"),
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/clientService"}]"#,
        ],
        None,
    );
    until("the client Service back to ClusterIP", 60, || {
        let svc = get(&k, ns, &format!("service/{CLUSTER}-client"));
        svc["spec"]["type"] == "ClusterIP"
            && svc["metadata"]["labels"].get("team").is_none()
            && svc["metadata"]["annotations"]
                .get("example.com/exposed")
                .is_none()
    });
}

/// The member claims of `cluster`: name → (requested storage, capacity), as the API server
/// holds them.
fn claim_sizes(k: &Kubectl, ns: &str, cluster: &str) -> BTreeMap<String, (String, String)> {
    let list: Value = serde_json::from_str(&k.ok(
        &[
            "get",
            "pvc",
            "-n",
            ns,
            "-l",
            &format!("app=etcd,etcd_cluster={cluster}"),
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .map(|c| {
            (
                text(&c["metadata"]["name"]),
                (
                    text(&c["spec"]["resources"]["requests"]["storage"]),
                    text(&c["status"]["capacity"]["storage"]),
                ),
            )
        })
        .collect()
}

/// The UID of each member pod, by name.
fn pod_uids(k: &Kubectl, ns: &str, cluster: &str) -> BTreeMap<String, String> {
    member_pods(k, ns, cluster)
        .iter()
        .map(|p| {
            let m = &p["metadata"];
            (
                m["name"].as_str().unwrap().into(),
                m["uid"].as_str().unwrap().into(),
            )
        })
        .collect()
}

/// A larger storage request on a class that cannot expand (the default, local-path): refused
/// by the API server, reported naming the field, nothing touched; with `onResize: Replace`
/// the members move to new claims of the new size one at a time, under writes, every key kept.
#[test]
fn volume_growth_refused_by_the_class_is_reported_then_replaced_onto_larger_claims() {
    const GROWN: &str = "grown";
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("resize");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let claim =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": GROWN}, "spec": {"size": 3, "version": "3.6.16",
            "pod": {"persistentVolumeClaimSpec": claim}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members", 300, || {
        healthy_at_size(&k, ns, GROWN, 3)
    });
    let endpoint = e2e::client_endpoint(&k, ns, GROWN);
    until("a write through the Service", 60, || {
        write_once(&endpoint, 0).is_ok()
    });
    e2e::put_keys(&endpoint, "kept", 500);
    let before = pod_uids(&k, ns, GROWN);

    let bigger = json!({"pod": {"persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "2Gi"}}}}});
    patch_spec(&k, ns, GROWN, bigger);
    let field = "spec.pod.persistentVolumeClaimSpec.resources.requests.storage";
    until("the refusal reported, naming the field", 60, || {
        let c = get(&k, ns, &format!("etcd/{GROWN}"));
        e2e::degraded_with(&c, "VolumeExpansionRefused", &[field, "onResize: Replace"])
    });
    assert!(
        e2e::events(&k, ns, GROWN, "VolumeExpansionRefused")
            .iter()
            .any(|m| m.contains(field)),
        "a Warning Event naming the field"
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(pod_uids(&k, ns, GROWN), before, "no member touched");
    assert!(
        claim_sizes(&k, ns, GROWN)
            .values()
            .all(|(req, _)| req == "1Gi"),
        "no claim changed: {:?}",
        claim_sizes(&k, ns, GROWN)
    );

    // Replace: members move to new claims of 2Gi, one at a time, each new one added first.
    let writer = Writer::start_with(&endpoint, Duration::from_secs(300), Keys::Unique);
    patch_spec(&k, ns, GROWN, json!({"pod": {"onResize": "Replace"}}));
    let moved = until("every member on a 2Gi claim", 420, || {
        let sizes = claim_sizes(&k, ns, GROWN);
        let uids = pod_uids(&k, ns, GROWN);
        sizes.len() == 3
            && sizes
                .values()
                .all(|(req, cap)| req == "2Gi" && cap == "2Gi")
            && uids.keys().all(|n| !before.contains_key(n))
            && healthy_at_size(&k, ns, GROWN, 3)
    });
    let tally = writer.report();
    assert!(
        tally.writes > 50,
        "the writer barely wrote: {}",
        tally.writes
    );
    assert_acked_present(&endpoint, &tally.acked);
    let kept = e2e::keys_under(&endpoint, "kept-").unwrap();
    assert_eq!(kept.len(), 500, "every key written before");
    until("no longer Degraded", 60, || {
        e2e::condition(&get(&k, ns, &format!("etcd/{GROWN}")), "Degraded") == "False"
    });
    println!(
        "| 3 members moved to larger claims (onResize: Replace, a class that cannot expand) under writes: writes lost / failed / longest stall / time | 0 of {} / {} / {:.2?} / {:.1?} | 0 / - / - / - |",
        tally.writes, tally.errors, tally.longest_stall, moved
    );
}

/// A larger storage request on a class that can expand (the local cluster's `csi-hostdir`: a
/// CSI driver whose volumes grow, with the official external-resizer and the kubelets' own
/// file-system step): each member's claim grows in place, never two at once, no member
/// restarted, writes going on, every key kept.
#[test]
fn volume_growth_expands_each_claim_in_place_one_at_a_time_under_writes() {
    const GROWN: &str = "expanded";
    let k = Kubectl::from_env();
    k.apply_crds();
    assert!(
        k.run(&["get", "storageclass", "csi-hostdir"], None)
            .status
            .success(),
        "the local cluster's expandable StorageClass (hack/cluster.sh deploy_csi_hostdir)"
    );
    let namespace = k.namespace("expand");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let claim = json!({"storageClassName": "csi-hostdir", "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}});
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": GROWN}, "spec": {"size": 3, "version": "3.6.16",
            "pod": {"persistentVolumeClaimSpec": claim}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members", 300, || {
        healthy_at_size(&k, ns, GROWN, 3)
    });
    let endpoint = e2e::client_endpoint(&k, ns, GROWN);
    until("a write through the Service", 60, || {
        write_once(&endpoint, 0).is_ok()
    });
    e2e::put_keys(&endpoint, "kept", 500);
    let before = pod_uids(&k, ns, GROWN);

    // How many claims are growing at once, sampled while the growth runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, ns) = (stop.clone(), ns.to_string());
        std::thread::spawn(move || {
            let k = Kubectl::from_env();
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let growing = claim_sizes(&k, &ns, GROWN)
                    .values()
                    .filter(|(req, cap)| req == "2Gi" && cap != "2Gi")
                    .count();
                most = most.max(growing);
                std::thread::sleep(Duration::from_millis(200));
            }
            most
        })
    };
    let writer = Writer::start_with(&endpoint, Duration::from_secs(300), Keys::Unique);
    let bigger = json!({"pod": {"persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "2Gi"}}}}});
    patch_spec(&k, ns, GROWN, bigger);
    let grown = until("every claim grown to 2Gi", 300, || {
        let sizes = claim_sizes(&k, ns, GROWN);
        sizes.len() == 3
            && sizes
                .values()
                .all(|(req, cap)| req == "2Gi" && cap == "2Gi")
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.join().unwrap();
    let tally = writer.report();
    assert!(most <= 1, "{most} claims grew at once");
    assert_eq!(
        pod_uids(&k, ns, GROWN),
        before,
        "no member restarted or replaced"
    );
    for p in member_pods(&k, ns, GROWN) {
        assert_eq!(
            p["status"]["containerStatuses"][0]["restartCount"], 0,
            "{}",
            p["metadata"]["name"]
        );
    }
    assert!(
        tally.writes > 50,
        "the writer barely wrote: {}",
        tally.writes
    );
    assert_acked_present(&endpoint, &tally.acked);
    assert_eq!(e2e::keys_under(&endpoint, "kept-").unwrap().len(), 500);
    assert_eq!(e2e::event_count(&k, ns, GROWN, "VolumeExpanding"), 3);
    // Each claim annotated with its new size: at rest, no claim is read again.
    until("every claim annotated with its size", 60, || {
        let list: Value = serde_json::from_str(&k.ok(
            &[
                "get",
                "pvc",
                "-n",
                ns,
                "-l",
                &format!("etcd_cluster={GROWN}"),
                "-o",
                "json",
            ],
            None,
        ))
        .unwrap();
        list["items"].as_array().unwrap().iter().all(|c| {
            c["metadata"]["annotations"]["etcd.database.coreos.com/storage"] == "2147483648"
        })
    });
    let c = get(&k, ns, &format!("etcd/{GROWN}"));
    assert_eq!(e2e::condition(&c, "Degraded"), "False", "{}", c["status"]);
    println!(
        "| 3 claims grown in place 1Gi → 2Gi (a CSI class that expands) under writes: writes lost / failed / longest stall / claims at once / time | 0 of {} / {} / {:.2?} / {most} / {:.1?} | 0 / - / - / 1 / - |",
        tally.writes, tally.errors, tally.longest_stall, grown
    );
}
