//! The PodDisruptionBudget of a cluster, on the real local cluster, in a namespace that enforces
//! the `restricted` Pod Security Standard (so the operator's and the members' pods must pass
//! it): a `kubectl drain`-style eviction of two of three members is refused for the second
//! (the first is allowed: a quorum of two stays), the operator replaces the evicted member, and
//! a cluster shrunk to one member has no budget left to block a drain.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use e2e::{
    Kubectl, Operator, enforce_restricted, evict, get, healthy_at_size, patch_spec, pod_names,
    until,
};
use serde_json::json;

#[test]
fn in_a_restricted_namespace_evictions_never_take_a_quorum_and_one_member_has_no_budget() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let namespace = k.namespace("disruption");
    let ns = namespace.name.as_str();
    enforce_restricted(&k, ns);
    let _operator = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": {"size": 3, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("3 healthy members", 240, || {
        healthy_at_size(&k, ns, "example", 3)
    });

    let budget = get(&k, ns, "poddisruptionbudget/example");
    assert_eq!(budget["spec"]["minAvailable"], 2, "{budget}");
    assert_eq!(
        budget["metadata"]["ownerReferences"][0]["kind"], "EtcdCluster",
        "{budget}"
    );
    until("the budget to allow one disruption", 60, || {
        get(&k, ns, "poddisruptionbudget/example")["status"]["disruptionsAllowed"] == 1
    });

    let pods = pod_names(&k, ns, "example");
    let (first, answer) = evict(&k, ns, &pods[0]);
    assert!(first, "the first eviction keeps a quorum: {answer}");
    let (second, answer) = evict(&k, ns, &pods[1]);
    assert!(!second, "a second eviction would leave one of three");
    assert!(answer.contains("disruption budget"), "{answer}");
    until("the evicted member replaced", 240, || {
        !pod_names(&k, ns, "example").contains(&pods[0]) && healthy_at_size(&k, ns, "example", 3)
    });
    assert!(pod_names(&k, ns, "example").contains(&pods[1]));

    // One member: no quorum to keep, so no budget to block a drain.
    patch_spec(&k, ns, "example", json!({"size": 1}));
    until("one member and no budget", 240, || {
        healthy_at_size(&k, ns, "example", 1)
            && !k
                .run(&["get", "poddisruptionbudget/example", "-n", ns], None)
                .status
                .success()
    });
}
