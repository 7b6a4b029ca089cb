//! The Services every member's address depends on, and the PodDisruptionBudget.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::EtcdCluster;
use crate::kube::names::{CLIENT_PORT, PEER_PORT, meta, selector};

pub(super) fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

/// The headless Service `<cluster>` that gives members their DNS names before they are ready.
pub fn headless_service(cluster: &EtcdCluster) -> Service {
    let name = cluster.name_any();
    Service {
        metadata: meta(cluster, &name, "peer"),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(&name)),
            ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The client Service `<cluster>-client`.
pub fn client_service(cluster: &EtcdCluster) -> Service {
    let name = cluster.name_any();
    Service {
        metadata: meta(cluster, &format!("{name}-client"), "client"),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector(&name)),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The PodDisruptionBudget `<cluster>`: a drain or any other eviction may take members only
/// while a quorum stays up: of `spec.size`, or of the `pods` the members have now when there
/// are more (`minAvailable` = n/2 + 1). A roll that adds first, a spread or a scale-down runs
/// with a voter more than the size for a while, and a budget of the size alone then let a
/// drain take two of four voters (2 of 4 is no quorum: found by the chaos run). Members that
/// are not ready may always be evicted: they count towards no quorum, and a crash-looping
/// member must not block a node's drain. `None` below two members, where there is no quorum to
/// keep and a budget would only block every drain. The operator's own pod deletions are not
/// evictions.
pub fn disruption_budget(cluster: &EtcdCluster, pods: usize) -> Option<PodDisruptionBudget> {
    let size = cluster.spec.size;
    if size < 2 {
        return None;
    }
    let members = i32::try_from(pods).unwrap_or(i32::MAX).max(size);
    let name = cluster.name_any();
    Some(PodDisruptionBudget {
        metadata: meta(cluster, &name, "disruption-budget"),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(members / 2 + 1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(&name)),
                ..LabelSelector::default()
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}
