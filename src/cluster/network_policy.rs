//! The NetworkPolicy each cluster gets, so that etcd is closed to whom it does not serve in a
//! cluster shared by many teams. Pure.
//!
//! It selects the member pods and allows ingress on their three ports only:
//! - peer (2380): from the cluster's members alone (and, while it joins a cluster running
//!   elsewhere, from that cluster's members: by address when their peer URLs give addresses,
//!   else from anyone);
//! - metrics (2381): from the monitoring namespaces the operator was given, else from anyone
//!   (a policy cannot close it to the kubelet's probes anyway: traffic from a pod's own node is
//!   always allowed);
//! - client (2379): from the members (a new member's gate reads the member list there), the
//!   operator, and `spec.networkPolicy.clients`; with no clients listed, from anyone, so that
//!   clients that worked before keep working.

use std::collections::BTreeMap;

use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::EtcdCluster;
use crate::cluster::external;
use crate::kube::names::{CLIENT_PORT, METRICS_PORT, PEER_PORT, meta, selector};

/// What the operator was told about the network around it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySettings {
    /// Whether clusters get a NetworkPolicy unless their spec says otherwise.
    pub enabled: bool,
    /// The operator's namespace and its pods' labels: it must reach every member's client port.
    /// Without labels (the operator runs outside the cluster) it is not named, and reaches the
    /// members as any other client does.
    pub operator_namespace: String,
    pub operator_labels: BTreeMap<String, String>,
    /// Namespaces from which the metrics port may be scraped; empty: from anyone.
    pub metrics_namespaces: Vec<String>,
}

/// The NetworkPolicy of `cluster`, or `None` when it should have none.
pub fn network_policy(cluster: &EtcdCluster, settings: &PolicySettings) -> Option<NetworkPolicy> {
    let spec = cluster.spec.network_policy.clone().unwrap_or_default();
    if !spec.enabled.unwrap_or(settings.enabled) {
        return None;
    }
    let name = cluster.name_any();
    let members = NetworkPolicyPeer {
        pod_selector: Some(match_labels(selector(&name))),
        ..NetworkPolicyPeer::default()
    };
    let operator = (!settings.operator_labels.is_empty()).then(|| NetworkPolicyPeer {
        namespace_selector: Some(namespaces(std::slice::from_ref(
            &settings.operator_namespace,
        ))),
        pod_selector: Some(match_labels(settings.operator_labels.clone())),
        ..NetworkPolicyPeer::default()
    });
    let clients = (!spec.clients.is_empty()).then(|| {
        let mut from = vec![members.clone()];
        from.extend(operator);
        from.extend(spec.clients.iter().cloned());
        from
    });
    let metrics = (!settings.metrics_namespaces.is_empty()).then(|| {
        vec![NetworkPolicyPeer {
            namespace_selector: Some(namespaces(&settings.metrics_namespaces)),
            ..NetworkPolicyPeer::default()
        }]
    });
    Some(NetworkPolicy {
        metadata: meta(cluster, &name, "network-policy"),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(selector(&name))),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                rule(PEER_PORT, Some(peers(cluster, members))),
                rule(CLIENT_PORT, clients),
                rule(METRICS_PORT, metrics),
            ]),
            ..NetworkPolicySpec::default()
        }),
    })
}

/// Who may reach the peer port: the members, and the external members while the cluster joins
/// them (see [`crate::cluster::external`]). Before the status lists them, or when one is known
/// by name only, anyone may: a policy names addresses, not DNS names.
fn peers(cluster: &EtcdCluster, members: NetworkPolicyPeer) -> Vec<NetworkPolicyPeer> {
    let mut from = vec![members];
    if external::joining(cluster).is_none() {
        return from;
    }
    let listed = (cluster.status.as_ref())
        .and_then(|s| s.migration.as_ref())
        .map(|m| m.external_members.as_slice())
        .unwrap_or_default();
    let blocks: Option<Vec<String>> = listed
        .iter()
        .map(
            |m| match external::url_host(&m.peer_url).parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => Some(format!("{ip}/32")),
                Ok(IpAddr::V6(ip)) => Some(format!("{ip}/128")),
                Err(_) => None,
            },
        )
        .collect();
    let blocks = match blocks {
        Some(b) if !b.is_empty() => b,
        _ => vec!["0.0.0.0/0".into(), "::/0".into()],
    };
    from.extend(blocks.into_iter().map(|cidr| NetworkPolicyPeer {
        ip_block: Some(IPBlock { cidr, except: None }),
        ..NetworkPolicyPeer::default()
    }));
    from
}

fn rule(port: i32, from: Option<Vec<NetworkPolicyPeer>>) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from,
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(port)),
            protocol: Some("TCP".into()),
            ..NetworkPolicyPort::default()
        }]),
    }
}

fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..LabelSelector::default()
    }
}

/// The namespaces of these names (by the label the API server puts on every namespace).
fn namespaces(names: &[String]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "In".into(),
            values: Some(names.to_vec()),
        }]),
        ..LabelSelector::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterNetworkPolicy, EtcdClusterSpec};

    fn cluster(policy: Option<ClusterNetworkPolicy>) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            "example",
            EtcdClusterSpec {
                size: 3,
                network_policy: policy.map(Box::new),
                ..EtcdClusterSpec::default()
            },
        );
        c.metadata.namespace = Some("team-a".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn settings() -> PolicySettings {
        PolicySettings {
            enabled: true,
            operator_namespace: "etcd-operator".into(),
            operator_labels: [("app.kubernetes.io/name".into(), "etcd-operator".into())].into(),
            metrics_namespaces: vec!["monitoring".into()],
        }
    }

    fn from_of(p: &NetworkPolicy, port: i32) -> Option<serde_json::Value> {
        let rules = p.spec.as_ref()?.ingress.as_ref()?;
        let r = rules.iter().find(|r| {
            r.ports
                .as_ref()
                .is_some_and(|ps| ps.iter().any(|x| x.port == Some(IntOrString::Int(port))))
        })?;
        Some(serde_json::to_value(&r.from).expect("json"))
    }

    #[test]
    fn peers_only_from_members_clients_open_until_listed() {
        let p = network_policy(&cluster(None), &settings()).expect("a policy");
        let members = serde_json::json!([{"podSelector": {"matchLabels":
            {"app": "etcd", "etcd_cluster": "example"}}}]);
        assert_eq!(from_of(&p, 2380), Some(members));
        assert_eq!(
            from_of(&p, 2379),
            Some(serde_json::Value::Null),
            "open to anyone"
        );
        let metrics = from_of(&p, 2381).expect("metrics rule");
        assert_eq!(
            metrics[0]["namespaceSelector"]["matchExpressions"][0]["values"],
            serde_json::json!(["monitoring"])
        );
        assert_eq!(p.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.policy_types.clone()),
            Some(vec!["Ingress".to_string()])
        );
    }

    #[test]
    fn listed_clients_close_the_client_port_to_everyone_else() {
        let client = NetworkPolicyPeer {
            namespace_selector: Some(match_labels([("team".into(), "a".into())].into())),
            ..NetworkPolicyPeer::default()
        };
        let spec = ClusterNetworkPolicy {
            enabled: None,
            clients: vec![client],
        };
        let p = network_policy(&cluster(Some(spec)), &settings()).expect("a policy");
        let from = from_of(&p, 2379).expect("client rule");
        let from = from.as_array().expect("a list");
        assert_eq!(from.len(), 3, "members, the operator, the client: {from:?}");
        assert_eq!(
            from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
            "etcd-operator"
        );
        assert_eq!(from[2]["namespaceSelector"]["matchLabels"]["team"], "a");
    }

    #[test]
    fn the_spec_overrides_the_operators_default() {
        let off = ClusterNetworkPolicy {
            enabled: Some(false),
            clients: vec![],
        };
        assert_eq!(network_policy(&cluster(Some(off)), &settings()), None);
        let on = ClusterNetworkPolicy {
            enabled: Some(true),
            clients: vec![],
        };
        let disabled = PolicySettings {
            enabled: false,
            ..settings()
        };
        assert!(network_policy(&cluster(Some(on)), &disabled).is_some());
        assert_eq!(network_policy(&cluster(None), &disabled), None);
        // Without the operator's labels and monitoring namespaces: no rule names them.
        let bare = PolicySettings {
            operator_labels: BTreeMap::new(),
            metrics_namespaces: vec![],
            ..settings()
        };
        let p = network_policy(&cluster(None), &bare).expect("a policy");
        assert_eq!(from_of(&p, 2381), Some(serde_json::Value::Null));
    }
}
