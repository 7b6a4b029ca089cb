//! Each EtcdCluster's NetworkPolicy on the local cluster, which enforces NetworkPolicy
//! (kube-network-policies on every node, started by hack/cluster.sh): a pod outside the allowed
//! set cannot reach a member's peer port, nor its client port once clients are listed, while
//! the cluster bootstraps, heals and serves its listed clients with the policy on. Reachability
//! is tried from pods of the operator's image (`etcd-operator reach HOST:PORT`).

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::{Kubectl, Operator, get, healthy_at_size, patch_spec, pod_names, until};
use serde_json::{Value, json};

/// Runs a pod of the operator's image labelled `labels` that tries to open `address`; whether
/// it could.
fn reaches(k: &Kubectl, ns: &str, name: &str, labels: Value, address: &str) -> bool {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "reach",
            "image": e2e::image(), "imagePullPolicy": "Never",
            "command": ["/usr/local/bin/etcd-operator"],
            "args": ["reach", address, "--timeout", "3"]}]}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&pod.to_string()));
    let mut phase = String::new();
    until(&format!("pod {name} to end"), 90, || {
        phase = get(k, ns, &format!("pod/{name}"))["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        phase == "Succeeded" || phase == "Failed"
    });
    k.ok(&["delete", "pod", name, "-n", ns, "--wait=false"], None);
    eprintln!("{name} -> {address}: {phase}");
    phase == "Succeeded"
}

fn member_ip(k: &Kubectl, ns: &str) -> String {
    let pod = pod_names(k, ns, "example")[0].clone();
    get(k, ns, &format!("pod/{pod}"))["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn members_are_closed_to_pods_the_policy_does_not_allow() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("netpol");
    let ns = namespace.name.as_str();
    let _operator = Operator::install(&k, ns, &[]);
    let client = json!({"podSelector": {"matchLabels": {"role": "client"}}});
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": {"size": 3, "version": "3.6.16",
            "networkPolicy": {"clients": [client]}}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members under the policy", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });
    let policy = get(&k, ns, "networkpolicy/example");
    assert_eq!(
        policy["metadata"]["ownerReferences"][0]["kind"],
        "EtcdCluster"
    );

    let ip = member_ip(&k, ns);
    let listed = json!({"role": "client"});
    let stranger = json!({"role": "stranger"});
    assert!(reaches(
        &k,
        ns,
        "client-2379",
        listed.clone(),
        &format!("{ip}:2379")
    ));
    assert!(!reaches(
        &k,
        ns,
        "stranger-2379",
        stranger.clone(),
        &format!("{ip}:2379")
    ));
    assert!(!reaches(
        &k,
        ns,
        "client-2380",
        listed.clone(),
        &format!("{ip}:2380")
    ));
    assert!(!reaches(
        &k,
        ns,
        "stranger-2380",
        stranger.clone(),
        &format!("{ip}:2380")
    ));

    // The cluster heals with the policy on: a deleted member is replaced.
    let victim = pod_names(&k, ns, "example")[0].clone();
    k.ok(&["delete", "pod", "-n", ns, &victim, "--wait=false"], None);
    until("the member to be replaced under the policy", 240, || {
        !pod_names(&k, ns, "example").contains(&victim) && healthy_at_size(&k, ns, "example", 3)
    });

    // No clients listed: the client port is open to anyone again, the peer port is not.
    patch_spec(&k, ns, "example", json!({"networkPolicy": {"clients": []}}));
    until("the policy to open the client port", 60, || {
        let p = get(&k, ns, "networkpolicy/example");
        p["spec"]["ingress"].as_array().is_some_and(|rules| {
            rules
                .iter()
                .any(|r| r["ports"][0]["port"] == 2379 && r["from"].is_null())
        })
    });
    let ip = member_ip(&k, ns);
    assert!(reaches(
        &k,
        ns,
        "open-2379",
        stranger.clone(),
        &format!("{ip}:2379")
    ));
    assert!(!reaches(
        &k,
        ns,
        "open-2380",
        stranger,
        &format!("{ip}:2380")
    ));

    // Opted out: the policy goes.
    patch_spec(
        &k,
        ns,
        "example",
        json!({"networkPolicy": {"enabled": false}}),
    );
    until("the policy to be deleted", 60, || {
        k.run(&["get", "networkpolicy/example", "-n", ns], None)
            .status
            .code()
            != Some(0)
    });
}
