//! A member's pod: its template hash, metadata, volumes, etcd container and placement.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EmptyDirVolumeSource, KeyToPath, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource,
    Pod, PodAffinityTerm, PodAntiAffinity, PodSpec, ResourceRequirements, SecretVolumeSource,
    TopologySpreadConstraint, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;

use super::gate::{
    ETCD_BINARY, GATE_VOLUME, Gate, JOIN_PEERS_ANNOTATION, RESTORE_FROM_ANNOTATION,
    RESTORE_UID_ANNOTATION, gate_mount, gated_command, install_gate_container, root_volume,
    token_volume,
};
use super::hardening::{default_pod_security, hardened};
use super::probes::probes;
use crate::api::{AutoCompactionMode, EtcdCluster, PodPolicy};
use crate::cluster::members::{DATA_DIR, PEER_TLS_DIR, SERVER_TLS_DIR};
use crate::kube::names::{CLIENT_PORT, METRICS_PORT, PEER_PORT, labels, meta, secrets, selector};
use crate::pki::{MemberLayouts, PEER, SERVER};
use crate::tls::Material;

/// Annotation of every member pod: the hash of the pod template it was made from (see
/// [`template_hash`]). A member whose pod carries another is rolled.
pub const TEMPLATE_HASH_ANNOTATION: &str = "etcd.database.coreos.com/pod-template-hash";

/// Annotation a member pod gets when the operator changes its etcd image in place: the ID of
/// the etcd container that ran then. While that container still runs, the kubelet is about to
/// stop it, so the pod counts as stopping even though its etcd may still answer.
pub const RESTARTED_CONTAINER_ANNOTATION: &str = "etcd.database.coreos.com/restarted-container";

/// The hash of what a member pod is made from and can be changed by a roll: the image and the
/// pod policy, whether members keep their data on volumes, the backend quota, etcd's compaction
/// and `spec.tuning`. Left out: the claim's own spec (an existing claim is expanded in place
/// or replaced, see [`crate::api::OnResize`]; new members get it), `onResize`, and
/// `ClusterDomain`, which names the members' peer URLs in etcd's member list and so is not a
/// pod property. Hashed
/// from the spec rather than from the built pod, so that an operator upgrade that changes
/// how pods are built does not roll every cluster it runs.
pub fn template_hash(cluster: &EtcdCluster, tls_revision: &str) -> String {
    template_hash_with_image(cluster, tls_revision, &cluster.spec.image())
}

/// [`template_hash`] with `image` in place of the spec's: a pod whose hash is this for its
/// own image differs from the spec's template in nothing but the image.
pub fn template_hash_with_image(cluster: &EtcdCluster, tls_revision: &str, image: &str) -> String {
    let mut policy = cluster.spec.pod.clone().unwrap_or_default();
    let persistent = policy.persistent_volume_claim_spec.take().is_some();
    policy.cluster_domain = None;
    // What a resize does to claims is no property of the pod: setting it rolls nothing.
    policy.on_resize = None;
    let mut inputs = serde_json::json!({
        "image": image,
        "pod": policy,
        "persistent": persistent,
    });
    // Only when set, so that the hash of pods made before the field existed stays what it was.
    if let Some(quota) = cluster
        .spec
        .maintenance
        .as_ref()
        .and_then(|m| m.quota_backend_bytes)
    {
        inputs["quotaBackendBytes"] = serde_json::json!(quota);
    }
    if let Some(c) = cluster
        .spec
        .maintenance
        .as_ref()
        .and_then(|m| m.auto_compaction.as_ref())
    {
        inputs["autoCompaction"] = serde_json::json!(c);
    }
    // The flags, not the fields: an empty `tuning` rolls nothing.
    let tuning =
        (cluster.spec.tuning.as_ref()).map_or_else(Vec::new, |t| t.flags(cluster.spec.version()));
    if !tuning.is_empty() {
        inputs["tuning"] = serde_json::json!(tuning);
    }
    // Only with TLS, so that the hash of a plain cluster's pods stays what it was.
    if !tls_revision.is_empty() {
        inputs["tls"] = serde_json::json!({
            "secrets": secrets(cluster),
            "revision": tls_revision,
        });
    }
    let digest =
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, inputs.to_string().as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The etcd flags the spec asks for beyond a member's identity: the backend quota, etcd's
/// compaction and `spec.tuning` (its `extraArgs` last, so that etcd reports a flag given twice
/// rather than one silently winning).
fn spec_flags(cluster: &EtcdCluster) -> Vec<String> {
    let mut args = Vec::new();
    let maintenance = cluster.spec.maintenance.as_ref();
    if let Some(quota) = maintenance.and_then(|m| m.quota_backend_bytes) {
        args.push(format!("{}{quota}", crate::cluster::members::QUOTA_FLAG));
    }
    if let Some(c) = maintenance.and_then(|m| m.auto_compaction.as_ref()) {
        let mode = match c.mode {
            AutoCompactionMode::Periodic => "periodic",
            AutoCompactionMode::Revision => "revision",
        };
        args.push(format!("--auto-compaction-mode={mode}"));
        args.push(format!("--auto-compaction-retention={}", c.retention));
    }
    if let Some(t) = &cluster.spec.tuning {
        args.extend(t.flags(cluster.spec.version()));
    }
    args
}

/// Requests when the pod policy sets no resources (documented in the README): enough for a
/// small cluster to be scheduled honestly; no limits, so etcd is never OOM-killed by default.
pub(super) fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("100m".into())),
            ("memory".into(), Quantity("128Mi".into())),
        ])),
        ..ResourceRequirements::default()
    }
}

/// The pod of member `member` running `args` (see [`crate::cluster::members::etcd_args`]), with the
/// cluster's pod policy applied; with a `gate`, etcd starts only once the member is added.
pub fn member_pod(
    cluster: &EtcdCluster,
    member: &str,
    mut args: Vec<String>,
    gate: Option<&Gate>,
    tls: &Material,
) -> Pod {
    // Every member of a 3.6 cluster carries the same limit (each checks it as it applies an
    // addition). It is not part of the template hash: clusters made before it are not rolled
    // for it, and keep one learner at a time until their members are replaced.
    if crate::cluster::members::max_learners(cluster.spec.version()) > 1 {
        args.push(format!(
            "{}{}",
            crate::cluster::members::MAX_LEARNERS_FLAG,
            crate::cluster::members::MAX_LEARNERS
        ));
    }
    args.extend(spec_flags(cluster));
    let name = cluster.name_any();
    let spec = &cluster.spec;
    let policy = spec.pod.clone().unwrap_or_default();
    let (volumes, mounts) = member_volumes(cluster, member, &policy, gate, tls.layouts);
    let etcd = etcd_container(cluster, &policy, args, gate, mounts);
    Pod {
        metadata: member_metadata(cluster, member, &policy, gate, &tls.revision),
        spec: Some(PodSpec {
            hostname: Some(member.into()),
            subdomain: Some(name.clone()),
            init_containers: gate.map(|g| vec![install_gate_container(g)]),
            containers: vec![etcd],
            volumes: Some(volumes),
            node_selector: (!policy.node_selector.is_empty()).then(|| policy.node_selector.clone()),
            affinity: affinity(
                &name,
                &policy.affinity,
                policy.anti_affinity.unwrap_or(false),
            ),
            tolerations: (!policy.tolerations.is_empty()).then(|| policy.tolerations.clone()),
            topology_spread_constraints: Some(spread_of(&name, &policy)),
            priority_class_name: policy.priority_class_name.clone(),
            security_context: Some(
                policy
                    .security_context
                    .clone()
                    .unwrap_or_else(default_pod_security),
            ),
            // etcd never calls the Kubernetes API.
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// A member pod's labels and annotations: the policy's, the cluster's, the template hash, and
/// what its gate waits for or restores from.
pub(super) fn member_metadata(
    cluster: &EtcdCluster,
    member: &str,
    policy: &PodPolicy,
    gate: Option<&Gate>,
    tls_revision: &str,
) -> ObjectMeta {
    let mut metadata = meta(cluster, member, "member");
    let mut pod_labels = policy.labels.clone();
    pod_labels.extend(labels(&cluster.name_any(), "member"));
    metadata.labels = Some(pod_labels);
    let mut annotations = policy.annotations.clone();
    annotations.insert(
        TEMPLATE_HASH_ANNOTATION.into(),
        template_hash(cluster, tls_revision),
    );
    match gate {
        Some(Gate {
            restore: Some(r), ..
        }) => {
            annotations.insert(RESTORE_UID_ANNOTATION.into(), r.uid.clone());
            annotations.insert(RESTORE_FROM_ANNOTATION.into(), r.url.clone());
        }
        Some(gate) => {
            annotations.insert(JOIN_PEERS_ANNOTATION.into(), gate.peers.join(","));
        }
        None => {}
    }
    metadata.annotations = Some(annotations);
    metadata
}

/// The data volume (the member's claim, or an emptyDir), the TLS Secrets, and the gate's
/// scratch space; with the etcd container's mounts of them.
pub(super) fn member_volumes(
    cluster: &EtcdCluster,
    member: &str,
    policy: &PodPolicy,
    gate: Option<&Gate>,
    layouts: MemberLayouts,
) -> (Vec<Volume>, Vec<VolumeMount>) {
    let gated = gate.is_some();
    let data = match &policy.persistent_volume_claim_spec {
        Some(_) => Volume {
            name: "etcd-data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: member.into(),
                ..PersistentVolumeClaimVolumeSource::default()
            }),
            ..Volume::default()
        },
        None => Volume {
            name: "etcd-data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    };
    let mut volumes = vec![data];
    let mut mounts = vec![VolumeMount {
        name: "etcd-data".into(),
        mount_path: DATA_DIR.trim_end_matches("/data").into(),
        ..VolumeMount::default()
    }];
    let (tls_volumes, tls_mounts) = tls_volumes(cluster, layouts);
    volumes.extend(tls_volumes);
    mounts.extend(tls_mounts);
    if gated {
        volumes.push(Volume {
            name: GATE_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("16Mi".into())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(gate_mount(true));
    }
    if let Some(r) = gate.and_then(|g| g.restore.as_ref()) {
        let (volume, mount) = token_volume(&r.token_secret);
        volumes.push(volume);
        mounts.push(mount);
        if let Some(secret) = &r.root_secret {
            let (volume, mount) = root_volume(secret);
            volumes.push(volume);
            mounts.push(mount);
        }
    }
    (volumes, mounts)
}

/// The member Secrets' volumes and mounts. etcd's flags name coreos's files: a Secret in
/// another layout (`layouts`) is mapped to them.
fn tls_volumes(cluster: &EtcdCluster, layouts: MemberLayouts) -> (Vec<Volume>, Vec<VolumeMount>) {
    let tls = secrets(cluster);
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    for (secret, vol, dir, (layout, coreos)) in [
        (&tls.peer, "peer-tls", PEER_TLS_DIR, (layouts.peer, PEER)),
        (
            &tls.server,
            "server-tls",
            SERVER_TLS_DIR,
            (layouts.server, SERVER),
        ),
    ] {
        if let Some(secret) = secret {
            let items = (layout != coreos).then(|| {
                [
                    (layout.cert, coreos.cert),
                    (layout.key, coreos.key),
                    (layout.ca, coreos.ca),
                ]
                .into_iter()
                .map(|(key, path)| KeyToPath {
                    key: key.into(),
                    path: path.into(),
                    mode: None,
                })
                .collect()
            });
            volumes.push(Volume {
                name: vol.into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    items,
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            });
            mounts.push(VolumeMount {
                name: vol.into(),
                mount_path: dir.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
    }
    (volumes, mounts)
}

/// The etcd container: the cluster's image, behind the gate when there is one, with its
/// ports, probes and the policy's environment and resources.
pub(super) fn etcd_container(
    cluster: &EtcdCluster,
    policy: &PodPolicy,
    args: Vec<String>,
    gate: Option<&Gate>,
    mounts: Vec<VolumeMount>,
) -> Container {
    let (liveness, readiness, startup) = probes(cluster.spec.version());
    let container_port = |name: &str, port: i32| ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    };
    Container {
        name: "etcd".into(),
        image: Some(cluster.spec.image()),
        command: Some(match gate {
            Some(gate) => gated_command(gate),
            None => vec![ETCD_BINARY.into()],
        }),
        args: Some(args),
        ports: Some(vec![
            container_port("client", CLIENT_PORT),
            container_port("peer", PEER_PORT),
            container_port("metrics", METRICS_PORT),
        ]),
        env: (!policy.etcd_env.is_empty()).then(|| policy.etcd_env.clone()),
        resources: Some(policy.resources.clone().unwrap_or_else(default_resources)),
        volume_mounts: Some(mounts),
        liveness_probe: Some(liveness),
        readiness_probe: Some(readiness),
        startup_probe: Some(startup),
        security_context: Some(hardened()),
        ..Container::default()
    }
}

/// The user's spread constraints (each without a selector counting this cluster's members),
/// else the operator's own ([`spread`]).
fn spread_of(cluster: &str, policy: &PodPolicy) -> Vec<TopologySpreadConstraint> {
    if policy.topology_spread_constraints.is_empty() {
        return spread(cluster);
    }
    let mut own = policy.topology_spread_constraints.clone();
    for c in &mut own {
        c.label_selector.get_or_insert_with(|| LabelSelector {
            match_labels: Some(selector(cluster)),
            ..LabelSelector::default()
        });
    }
    own
}

/// Members spread over zones, then over nodes: with 3 members in 3 zones a zone lost costs
/// one member; with 5, at most two. Preferences only (`ScheduleAnyway`), so that a cluster
/// with fewer zones or nodes than members still runs; `antiAffinity: true` makes the node
/// part required (see [`affinity`]).
pub(super) fn spread(cluster: &str) -> Vec<TopologySpreadConstraint> {
    ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(selector(cluster)),
                ..LabelSelector::default()
            }),
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

/// The user's affinity, plus, for the deprecated `antiAffinity: true`, a required pod
/// anti-affinity on the node's hostname among this cluster's members.
pub(super) fn affinity(cluster: &str, user: &Option<Affinity>, anti: bool) -> Option<Affinity> {
    if !anti {
        // Without any affinity of the user's, members prefer distinct nodes: a node lost then
        // costs one member, not a quorum. Only preferred, so a one-node cluster still runs.
        return user.clone().or_else(|| {
            Some(Affinity {
                pod_anti_affinity: Some(PodAntiAffinity {
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        WeightedPodAffinityTerm {
                            weight: 100,
                            pod_affinity_term: PodAffinityTerm {
                                topology_key: "kubernetes.io/hostname".into(),
                                label_selector: Some(LabelSelector {
                                    match_labels: Some(selector(cluster)),
                                    ..LabelSelector::default()
                                }),
                                ..PodAffinityTerm::default()
                            },
                        },
                    ]),
                    ..PodAntiAffinity::default()
                }),
                ..Affinity::default()
            })
        });
    }
    let mut a = user.clone().unwrap_or_default();
    let mut paa = a.pod_anti_affinity.take().unwrap_or_default();
    paa.required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(PodAffinityTerm {
            topology_key: "kubernetes.io/hostname".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(selector(cluster)),
                ..LabelSelector::default()
            }),
            ..PodAffinityTerm::default()
        });
    a.pod_anti_affinity = Some(PodAntiAffinity { ..paa });
    Some(a)
}

/// Keeps `pod` off `nodes` (a required node affinity, `kubernetes.io/hostname NotIn`): a member
/// added to spread the cluster must not land where the members already crowd. Only ever for
/// clusters without an affinity of the user's (see [`crate::cluster::plan::Target::spread`]).
pub fn keep_off(pod: &mut Pod, nodes: &[String]) {
    if nodes.is_empty() {
        return;
    }
    let term = NodeSelectorTerm {
        match_expressions: Some(vec![NodeSelectorRequirement {
            key: "kubernetes.io/hostname".into(),
            operator: "NotIn".into(),
            values: Some(nodes.to_vec()),
        }]),
        ..NodeSelectorTerm::default()
    };
    let affinity = pod
        .spec
        .get_or_insert_with(PodSpec::default)
        .affinity
        .get_or_insert_with(Affinity::default);
    affinity.node_affinity = Some(NodeAffinity {
        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
            node_selector_terms: vec![term],
        }),
        ..NodeAffinity::default()
    });
}
