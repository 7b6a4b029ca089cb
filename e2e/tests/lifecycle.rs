//! Day-2 changes on the real local cluster: rolling upgrades 3.4 → 3.5 → 3.6 while a client
//! writes through the client Service (with and without volumes), an upgrade to an image that
//! never starts, and a pod-policy change rolled one member at a time.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::{
    Keys, Kubectl, Operator, RollView, Volumes, Writer, client_endpoint, event_count, events, get,
    healthy_at_size, holds_for, keys_under, member_pods, patch_spec, pod_names, until, write_once,
};
use serde_json::{Value, json};

fn cluster(size: usize, version: &str, pod: Option<Value>) -> String {
    let mut spec = json!({"size": size, "version": version});
    if let Some(pod) = pod {
        spec["pod"] = pod;
    }
    json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": spec})
    .to_string()
}

/// Waits until every member runs `version`, checking at every look that the cluster stays
/// Available and that the leader is rolled last: a leader that runs the new version while
/// more than one member does not would have been rolled, or have lost leadership, too early.
/// Returns the members that ran the old version at the last look that had any (the one rolled
/// last) and the leaders seen, in order.
fn roll_to(k: &Kubectl, ns: &str, version: &str, secs: u64) -> (BTreeSet<String>, Vec<String>) {
    let mut last_old = BTreeSet::new();
    let mut leaders: Vec<String> = Vec::new();
    until(&format!("every member on {version}"), secs, || {
        let view = RollView::of(k, ns, "example");
        assert!(
            view.available,
            "the cluster left Available mid-roll: {view:?}"
        );
        let old = view.not_on(version);
        if let Some((leader, leader_version)) = view.leader() {
            if leaders.last().map(String::as_str) != Some(leader) {
                leaders.push(leader.to_string());
            }
            assert!(
                leader_version != version || old.len() <= 1,
                "the leader runs {version} while {old:?} do not: {view:?}"
            );
        }
        if !old.is_empty() {
            last_old = old.clone();
        }
        old.is_empty() && healthy_at_size(k, ns, "example", 3)
    });
    (last_old, leaders)
}

fn upgrade_under_writes(prefix: &str, persistent: bool) {
    let k = Kubectl::from_env();
    k.apply_crds();
    // Restarts in place need no volume beyond the members' own.
    let volumes = persistent.then(|| Volumes::create(&k, prefix, 3));
    let namespace = k.namespace(prefix);
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let pod = volumes
        .as_ref()
        .map(|v| json!({"persistentVolumeClaimSpec": v.claim_spec()}));
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&cluster(3, "3.4.23", pod)),
    );
    until("3 healthy members on 3.4", 300, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let before = RollView::of(&k, ns, "example").ids();
    let pods_before = pod_uids(&k, ns);
    let endpoint = client_endpoint(&k, ns, "example");
    // Right after Available the first write must succeed; the writer's later reconnects are
    // for the rolls.
    write_once(&endpoint, u64::MAX).expect("the first write after Available");
    let writer = Writer::start_with(&endpoint, Duration::from_secs(900), Keys::Unique);

    for (from, to) in [("3.4.23", "3.5.35"), ("3.5.35", "3.6.16")] {
        let first_leader = RollView::of(&k, ns, "example")
            .leader()
            .map(|(name, _)| name.to_string())
            .expect("a leader before the upgrade");
        patch_spec(&k, ns, "example", json!({"version": to}));
        until("status to report the upgrade", 60, || {
            let c = get(&k, ns, "etcdcluster/example");
            c["status"]["targetVersion"] == to
                && c["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Progressing" && c["reason"] == "Upgrading")
        });
        let (last_old, leaders) = roll_to(&k, ns, to, 600);
        eprintln!("{from} -> {to}: leaders {leaders:?}, last rolled {last_old:?}");
        assert_eq!(
            last_old,
            BTreeSet::from([first_leader.clone()]),
            "the leader {first_leader} was not rolled last"
        );
        assert!(leaders.len() >= 2, "leadership never moved: {leaders:?}");
        let c = get(&k, ns, "etcdcluster/example");
        assert_eq!(c["status"]["currentVersion"], to, "{c}");
        assert_eq!(c["status"]["targetVersion"], Value::Null, "{c}");
    }
    let tally = writer.report();
    eprintln!(
        "writes: {} acknowledged, {} failed, longest stall {:?}",
        tally.writes, tally.errors, tally.longest_stall
    );
    assert!(tally.writes > 100, "the client wrote too little: {tally:?}");
    let keys = keys_under(&endpoint, "e2e-writer/").expect("reading the keys back");
    let lost: Vec<u64> = tally
        .acked
        .iter()
        .copied()
        .filter(|n| !keys.contains(&format!("e2e-writer/{n}")))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    let after = RollView::of(&k, ns, "example").ids();
    let rolled = event_count(&k, ns, "example", "MemberRolled");
    assert_eq!(
        rolled,
        6,
        "one Event per member and step: {:?}",
        events(&k, ns, "example", "MemberRolled")
    );
    assert_eq!(event_count(&k, ns, "example", "LeaderMoved"), 2);
    if persistent {
        // Restarted on their volumes: the same members, no membership change; and, only the
        // image having changed, in the same pods (the etcd container restarted once a step).
        assert_eq!(after, before);
        assert_eq!(pod_uids(&k, ns), pods_before, "a pod was made anew");
        for pod in member_pods(&k, ns, "example") {
            let restarts = pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == "etcd")
                .and_then(|c| c["restartCount"].as_u64());
            assert_eq!(restarts, Some(2), "{}", pod["metadata"]["name"]);
        }
        assert!(
            event_count(&k, ns, "example", "MemberAdded") <= 2,
            "bootstrap only"
        );
        assert!(events(&k, ns, "example", "MemberRemoved").is_empty());
    } else {
        let old: BTreeSet<&String> = before.iter().map(|m| &m.0).collect();
        assert!(
            after.iter().all(|m| !old.contains(&m.0)),
            "{before:?} -> {after:?}"
        );
    }
}

/// The member pods' names and UIDs.
fn pod_uids(k: &Kubectl, ns: &str) -> BTreeSet<(String, String)> {
    member_pods(k, ns, "example")
        .iter()
        .map(|p| {
            let meta = &p["metadata"];
            (meta["name"].to_string(), meta["uid"].to_string())
        })
        .collect()
}

#[test]
fn three_members_upgrade_3_4_to_3_5_to_3_6_under_writes_leader_last() {
    upgrade_under_writes("upgrade", false);
}

#[test]
fn with_volumes_members_upgrade_in_place_under_writes_leader_last() {
    upgrade_under_writes("upgrade-pv", true);
}

#[test]
fn an_upgrade_to_an_image_that_never_starts_stalls_and_touches_no_other_member() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("upgrade-stall");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&cluster(3, "3.5.35", None)),
    );
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let before = RollView::of(&k, ns, "example").ids();
    let names: Vec<String> = before.iter().map(|m| m.0.clone()).collect();

    // An image nobody can pull.
    patch_spec(
        &k,
        ns,
        "example",
        json!({"version": "3.6.16", "repository": "registry.invalid/etcd"}),
    );
    until("the roll to stall", 240, || {
        let c = get(&k, ns, "etcdcluster/example");
        c["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Degraded" && c["reason"] == "RollStalled")
    });
    let c = get(&k, ns, "etcdcluster/example");
    let progressing = c["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap()
        .clone();
    assert_eq!(progressing["reason"], "Upgrading", "{c}");
    assert!(!events(&k, ns, "example", "RollStalled").is_empty());
    holds_for("the old members untouched", 20, || {
        let view = RollView::of(&k, ns, "example");
        let voters: Vec<(String, String)> = view
            .members
            .iter()
            .filter(|m| m.2 != "learner")
            .map(|m| (m.0.clone(), m.1.clone()))
            .collect();
        let pods = pod_names(&k, ns, "example");
        view.available
            && voters.len() == 3
            && voters.iter().all(|v| before.contains(v))
            && names.iter().all(|n| pods.contains(n))
    });

    // Fixed: the stuck member is outdated in turn and goes first; the roll completes.
    patch_spec(
        &k,
        ns,
        "example",
        json!({"repository": "quay.io/coreos/etcd"}),
    );
    roll_to(&k, ns, "3.6.16", 600);
    let c = get(&k, ns, "etcdcluster/example");
    assert_eq!(e2e::condition(&c, "Degraded"), "False", "{c}");
}

#[test]
fn a_resource_change_is_rolled_one_member_at_a_time() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("roll");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    k.ok(
        &["apply", "-n", ns, "-f", "-"],
        Some(&cluster(3, "3.6.16", None)),
    );
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let before: BTreeSet<String> = pod_names(&k, ns, "example").into_iter().collect();
    patch_spec(
        &k,
        ns,
        "example",
        json!({"pod": {"resources": {"requests": {"cpu": "150m", "memory": "100Mi"}}}}),
    );
    let requests =
        |pod: &Value| pod["spec"]["containers"][0]["resources"]["requests"]["cpu"].clone();
    let mut most_pods = 0;
    let mut saw_rolling = false;
    until("every member on the new requests", 400, || {
        let view = RollView::of(&k, ns, "example");
        assert!(
            view.available,
            "the cluster left Available mid-roll: {view:?}"
        );
        let learners = view.members.iter().filter(|m| m.2 == "learner").count();
        assert!(learners <= 1, "two members joined at once: {view:?}");
        let pods = member_pods(&k, ns, "example");
        let live: Vec<&Value> = pods
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        most_pods = most_pods.max(live.len());
        assert!(live.len() <= 4, "more than one extra member at once");
        let c = get(&k, ns, "etcdcluster/example");
        saw_rolling |= c["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["reason"] == "RollingUpdate");
        live.len() == 3
            && live.iter().all(|p| requests(p) == "150m")
            && healthy_at_size(&k, ns, "example", 3)
    });
    assert!(saw_rolling, "Progressing never said RollingUpdate");
    let after: BTreeSet<String> = pod_names(&k, ns, "example").into_iter().collect();
    assert!(before.is_disjoint(&after), "{before:?} -> {after:?}");
    assert_eq!(event_count(&k, ns, "example", "MemberRolled"), 3);
}
