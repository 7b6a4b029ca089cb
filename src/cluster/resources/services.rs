//! The Services every member's address depends on, and the PodDisruptionBudget.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::settings::wire_name;
use crate::api::{ClientService, EtcdCluster};
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

/// The client Service `<cluster>-client`, exposed as `spec.clientService` says. With a
/// template, its annotation [`CLIENT_SERVICE_HASH_ANNOTATION`] carries the template's hash, so
/// that a label, annotation or source range taken out of the template is seen as a change
/// (what the Service holds beyond the template cannot tell).
pub fn client_service(cluster: &EtcdCluster) -> Service {
    let name = cluster.name_any();
    let mut metadata = meta(cluster, &format!("{name}-client"), "client");
    let mut client_port = port("client", CLIENT_PORT);
    let mut spec = ServiceSpec {
        type_: Some("ClusterIP".into()),
        selector: Some(selector(&name)),
        ..ServiceSpec::default()
    };
    if let Some(t) = &cluster.spec.client_service {
        let mut labels = t.labels.clone();
        labels.extend(metadata.labels.take().unwrap_or_default());
        metadata.labels = Some(labels);
        let mut annotations = t.annotations.clone();
        annotations.insert(CLIENT_SERVICE_HASH_ANNOTATION.into(), template_hash(t));
        metadata.annotations = Some(annotations);
        spec.type_ = Some(wire_name(&t.service_type()));
        client_port.node_port = t.node_port;
        spec.load_balancer_source_ranges = (!t.load_balancer_source_ranges.is_empty())
            .then(|| t.load_balancer_source_ranges.clone());
        spec.traffic_distribution = t.traffic_distribution.as_ref().map(wire_name);
    }
    spec.ports = Some(vec![client_port]);
    Service {
        metadata,
        spec: Some(spec),
        ..Service::default()
    }
}

/// Annotation of a client Service made from a `spec.clientService` template: the template's
/// hash.
pub const CLIENT_SERVICE_HASH_ANNOTATION: &str = "etcd.database.coreos.com/client-service-hash";

fn template_hash(t: &ClientService) -> String {
    let text = serde_json::to_string(t).unwrap_or_default();
    crate::api::common::sha256_hex(text.as_bytes())[..16].to_string()
}

/// The client Service's template hash as `svc` carries it, if any.
pub fn client_service_hash(svc: &Service) -> Option<&str> {
    svc.metadata
        .annotations
        .as_ref()?
        .get(CLIENT_SERVICE_HASH_ANNOTATION)
        .map(String::as_str)
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
