//! Pure builders of the objects the operator owns for a cluster: the headless and the client
//! Service, and member pods. Labels and selectors are made here and nowhere else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodAntiAffinity, PodSecurityContext,
    PodSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext,
    Service, ServicePort, ServiceSpec, TCPSocketAction, TopologySpreadConstraint, Volume,
    VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::members::{DATA_DIR, PEER_TLS_DIR, SERVER_TLS_DIR};
use super::version::Version;
use crate::api::{AutoCompactionMode, EtcdCluster, PodPolicy};
use crate::kube::names::{CLIENT_PORT, METRICS_PORT, PEER_PORT, labels, meta, secrets, selector};

/// Secrets the spec names, with the field that names each: the Secrets behind
/// `spec.pod.etcdEnv[].valueFrom.secretKeyRef` (the TLS Secrets are checked, contents and all,
/// by [`crate::tls::prepare`]). A member pod that needs a missing Secret never starts, so they
/// are checked before anything is created.
pub fn referenced_secrets(spec: &crate::api::EtcdClusterSpec) -> Vec<(String, String)> {
    let mut refs = Vec::new();
    for (i, env) in spec.pod.iter().flat_map(|p| p.etcd_env.iter()).enumerate() {
        let secret = env
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref());
        if let Some(r) = secret.filter(|r| r.optional != Some(true)) {
            refs.push((
                format!("spec.pod.etcdEnv[{i}].valueFrom.secretKeyRef.name"),
                r.name.clone(),
            ));
        }
    }
    refs
}

fn port(name: &str, port: i32) -> ServicePort {
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

/// Annotation of every member pod: the hash of the pod template it was made from (see
/// [`template_hash`]). A member whose pod carries another is rolled.
pub const TEMPLATE_HASH_ANNOTATION: &str = "etcd.database.coreos.com/pod-template-hash";

/// The hash of what a member pod is made from and can be changed by a roll: the image and the
/// pod policy, whether members keep their data on volumes, and the backend quota. Left out: the claim's own spec
/// (an existing claim cannot take a new one; new members get it), and `ClusterDomain`, which
/// names the members' peer URLs in etcd's member list and so is not a pod property. Hashed
/// from the spec rather than from the built pod, so that an operator upgrade that changes
/// how pods are built does not roll every cluster it runs.
pub fn template_hash(cluster: &EtcdCluster, tls_revision: &str) -> String {
    let mut policy = cluster.spec.pod.clone().unwrap_or_default();
    let persistent = policy.persistent_volume_claim_spec.take().is_some();
    policy.cluster_domain = None;
    let mut inputs = serde_json::json!({
        "image": cluster.spec.image(),
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

/// Probes that fit the version: etcd 3.6 has `/livez` and `/readyz`; 3.5 only `/health`,
/// which fails while there is no leader, so it only gates readiness and liveness is a TCP
/// check (a member must not be restarted because its peers are down). 3.4's `/health` is a v2
/// quorum read that goes through raft: every probe would leave a v2 entry in the log, and etcd
/// 3.6 refuses to apply those (it panics with "detected disallowed v2 WAL"), so a cluster born
/// on 3.4 could not reach 3.6 before a snapshot had compacted them away (100,000 entries by
/// default). On 3.4, readiness is a TCP check of the client port.
fn probes(version: &str) -> (Probe, Probe, Probe) {
    let http = |path: &str| HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::Int(METRICS_PORT),
        ..HTTPGetAction::default()
    };
    let line = Version::parse(version).minor_line();
    let modern = line >= (3, 6);
    let liveness = Probe {
        http_get: modern.then(|| http("/livez")),
        tcp_socket: (!modern).then(|| TCPSocketAction {
            port: IntOrString::Int(METRICS_PORT),
            ..TCPSocketAction::default()
        }),
        initial_delay_seconds: Some(10),
        period_seconds: Some(10),
        timeout_seconds: Some(5),
        failure_threshold: Some(6),
        ..Probe::default()
    };
    let readiness = Probe {
        // 3.5's `/health` fails while a NOSPACE alarm is raised, which would take every member
        // out of the Service while reads are still served; 3.6's `/readyz` does not count it.
        http_get: (line >= (3, 5)).then(|| {
            http(if modern {
                "/readyz"
            } else {
                "/health?exclude=NOSPACE"
            })
        }),
        tcp_socket: (line < (3, 5)).then(|| TCPSocketAction {
            port: IntOrString::Int(CLIENT_PORT),
            ..TCPSocketAction::default()
        }),
        // Every second: the client Service sends clients to a member only once its pod is
        // Ready, and the cluster is Available only then. Three misses take it out again.
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(3),
        ..Probe::default()
    };
    // Until etcd first answers, only this one counts: a member held back by the gate until it
    // is added, a seed fetching and restoring a large snapshot, or etcd replaying a long WAL is
    // not killed by the liveness probe (which alone gave 70 s). Readiness is not probed before
    // it succeeds, so it is asked every second (a 5 s period kept a serving member unready for
    // up to 5 s), with as many failures allowed as keep the budget at 15 minutes.
    let startup = Probe {
        initial_delay_seconds: None,
        period_seconds: Some(STARTUP_PROBE_PERIOD),
        failure_threshold: Some(STARTUP_PROBE_FAILURES),
        ..liveness.clone()
    };
    (liveness, readiness, startup)
}

/// The startup probe's period in seconds.
const STARTUP_PROBE_PERIOD: i32 = 1;
/// Startup probe failures allowed, every [`STARTUP_PROBE_PERIOD`]: 15 minutes.
const STARTUP_PROBE_FAILURES: i32 = 900;

/// The user id member pods run as when the pod policy sets no security context (the
/// distroless "nonroot" user; etcd needs no root, only its data volume).
const MEMBER_UID: i64 = 65532;

/// The hardening every member's containers get, as the `restricted` Pod Security Standard
/// asks: no privilege escalation, no capabilities, a read-only root (etcd writes only its data
/// volume, the gate only its own).
fn hardened() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// The pod security context when the pod policy sets none: non-root, the data volume group-
/// owned by the member's user, the runtime's default seccomp profile.
fn default_pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(MEMBER_UID),
        run_as_group: Some(MEMBER_UID),
        fs_group: Some(MEMBER_UID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// Requests when the pod policy sets no resources (documented in the README): enough for a
/// small cluster to be scheduled honestly; no limits, so etcd is never OOM-killed by default.
fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("100m".into())),
            ("memory".into(), Quantity("128Mi".into())),
        ])),
        ..ResourceRequirements::default()
    }
}

/// Annotation of a pod created ahead of its member: the other members its `--initial-cluster`
/// names, comma-separated, so the planner can tell whether etcd would still accept it.
pub const JOIN_PEERS_ANNOTATION: &str = "etcd.database.coreos.com/join-peers";

/// Holds a new member's etcd back until the member has been added.
///
/// The operator creates the pod first and adds the member only once the pod's address is in
/// the headless Service's EndpointSlice, because any lookup of the member's name before then
/// (by etcd in the new pod, or by the leader dialing the new peer) is cached as NXDOMAIN by
/// cluster DNS for its negative TTL (5 to 30 s), and every addition would wait that long.
/// An init container copies `etcd-gate` from the operator's image into a volume; the etcd
/// container runs it, and it becomes etcd once the member is listed (the `gate` crate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    /// The operator's own image, which holds the statically linked `etcd-gate`.
    pub image: String,
    /// Peer URLs of the current members, by pod IP (no DNS needed; see
    /// [`crate::kube::names::Addressing::gate_endpoint`]).
    pub endpoints: Vec<String>,
    /// Peers speak TLS: the gate asks them with the member's own peer certificate.
    pub peer_tls: bool,
    /// The new member's peer URL, which appears in the member list once it is added.
    pub peer_url: String,
    /// The other members its `--initial-cluster` names.
    pub peers: Vec<String>,
    /// For the seed of a restore: instead of waiting to be added, the gate fetches the
    /// snapshot and restores it into the data directory before etcd starts.
    pub restore: Option<SeedRestore>,
}

/// Marks a restore's seed with the restore's UID; pods without it are the replaced cluster's.
pub const RESTORE_UID_ANNOTATION: &str = "etcd.database.coreos.com/restore-uid";
/// The URL a restore's seed fetches the snapshot from (so that a new leader knows a seed made
/// by its predecessor, which fetches from an address that may no longer serve).
pub const RESTORE_FROM_ANNOTATION: &str = "etcd.database.coreos.com/restore-from";

/// How a restore's seed gets its data: `etcd-gate restore` fetches the snapshot from the
/// operator (never from object storage: etcd pods hold no cloud credentials), checks its
/// sha256 first, runs the image's `etcdutl snapshot restore` (`etcdctl` for 3.4), then becomes
/// etcd on the restored data. A restarted container finds the data and starts etcd at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedRestore {
    /// The EtcdRestore's UID.
    pub uid: String,
    /// Where the operator serves the snapshot (`https://`).
    pub url: String,
    /// The CA the operator's snapshot server is trusted by (base64 DER): the seed trusts no
    /// other.
    pub server_ca: String,
    /// The Secret holding its bearer token (key [`crate::kube::restore_token::KEY`]), mounted
    /// into the etcd container alone: the pod's spec does not hold it.
    pub token_secret: String,
    /// sha256 the fetched file must have.
    pub sha256: String,
    /// The seed's member name.
    pub name: String,
    /// Its `--initial-cluster` (itself alone).
    pub initial_cluster: String,
    /// The new cluster's `--initial-cluster-token`.
    pub cluster_token: String,
    /// `--bump-revision` (with `--mark-compacted`); 0 for none (etcdutl before 3.5.10).
    pub bump_revision: u64,
    /// For a point-in-time restore: where the operator serves the archived changes the seed
    /// replays onto the snapshot before etcd serves anyone.
    pub changes_url: Option<String>,
}

/// Where the restore token's Secret is mounted in a seed's etcd container.
const TOKEN_DIR: &str = "/etc/etcd-restore";
const TOKEN_VOLUME: &str = "restore-token";

/// Where the gate's volume is mounted, in both containers.
const GATE_DIR: &str = "/gate";
const GATE_VOLUME: &str = "etcd-gate";
/// Where etcd is in the official images, and so in any image a cluster names.
const ETCD_BINARY: &str = "/usr/local/bin/etcd";

fn gate_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: GATE_VOLUME.into(),
        mount_path: GATE_DIR.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The etcd container's command through the gate; etcd's own arguments follow unchanged.
fn gated_command(gate: &Gate) -> Vec<String> {
    if let Some(r) = &gate.restore {
        let mut command = vec![
            format!("{GATE_DIR}/etcd-gate"),
            "restore".into(),
            format!("--url={}", r.url),
            format!("--server-ca={}", r.server_ca),
            format!(
                "--token-file={TOKEN_DIR}/{}",
                crate::kube::restore_token::KEY
            ),
            format!("--sha256={}", r.sha256),
            format!("--data-dir={DATA_DIR}"),
            format!("--name={}", r.name),
            format!("--initial-cluster={}", r.initial_cluster),
            format!("--initial-advertise-peer-urls={}", gate.peer_url),
            format!("--initial-cluster-token={}", r.cluster_token),
        ];
        if r.bump_revision > 0 {
            command.push(format!("--bump-revision={}", r.bump_revision));
        }
        if let Some(url) = &r.changes_url {
            command.push(format!("--changes-url={url}"));
        }
        command.extend(["--".into(), ETCD_BINARY.into()]);
        return command;
    }
    let mut command = vec![
        format!("{GATE_DIR}/etcd-gate"),
        "wait".into(),
        format!("--peer-url={}", gate.peer_url),
        format!("--endpoints={}", gate.endpoints.join(",")),
        format!("--data-dir={DATA_DIR}"),
    ];
    if gate.peer_tls {
        command.push(format!("--tls-dir={PEER_TLS_DIR}"));
    }
    command.extend(["--".into(), ETCD_BINARY.into()]);
    command
}

fn install_gate_container(gate: &Gate) -> Container {
    Container {
        name: "install-gate".into(),
        image: Some(gate.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/usr/local/bin/etcd-gate".into()]),
        args: Some(vec!["install".into(), format!("{GATE_DIR}/etcd-gate")]),
        volume_mounts: Some(vec![gate_mount(false)]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("10m".into())),
                ("memory".into(), Quantity("16Mi".into())),
            ])),
            limits: Some(BTreeMap::from([("memory".into(), Quantity("64Mi".into()))])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(MEMBER_UID),
            run_as_group: Some(MEMBER_UID),
            ..hardened()
        }),
        ..Container::default()
    }
}

/// The pod of member `member` running `args` (see [`super::members::etcd_args`]), with the
/// cluster's pod policy applied; with a `gate`, etcd starts only once the member is added.
pub fn member_pod(
    cluster: &EtcdCluster,
    member: &str,
    mut args: Vec<String>,
    gate: Option<&Gate>,
    tls_revision: &str,
) -> Pod {
    // Every member of a 3.6 cluster carries the same limit (each checks it as it applies an
    // addition). It is not part of the template hash: clusters made before it are not rolled
    // for it, and keep one learner at a time until their members are replaced.
    if super::members::max_learners(cluster.spec.version()) > 1 {
        args.push(format!(
            "{}{}",
            super::members::MAX_LEARNERS_FLAG,
            super::members::MAX_LEARNERS
        ));
    }
    if let Some(quota) = cluster
        .spec
        .maintenance
        .as_ref()
        .and_then(|m| m.quota_backend_bytes)
    {
        args.push(format!("{}{quota}", super::members::QUOTA_FLAG));
    }
    if let Some(c) = cluster
        .spec
        .maintenance
        .as_ref()
        .and_then(|m| m.auto_compaction.as_ref())
    {
        let mode = match c.mode {
            AutoCompactionMode::Periodic => "periodic",
            AutoCompactionMode::Revision => "revision",
        };
        args.push(format!("--auto-compaction-mode={mode}"));
        args.push(format!("--auto-compaction-retention={}", c.retention));
    }
    let name = cluster.name_any();
    let spec = &cluster.spec;
    let policy = spec.pod.clone().unwrap_or_default();
    let (volumes, mounts) = member_volumes(cluster, member, &policy, gate);
    let etcd = etcd_container(cluster, &policy, args, gate, mounts);
    Pod {
        metadata: member_metadata(cluster, member, &policy, gate, tls_revision),
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
            topology_spread_constraints: Some(spread(&name)),
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
fn member_metadata(
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
fn member_volumes(
    cluster: &EtcdCluster,
    member: &str,
    policy: &PodPolicy,
    gate: Option<&Gate>,
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
    let tls = secrets(cluster);
    for (secret, vol, dir) in [
        (&tls.peer, "peer-tls", PEER_TLS_DIR),
        (&tls.server, "server-tls", SERVER_TLS_DIR),
    ] {
        if let Some(secret) = secret {
            volumes.push(Volume {
                name: vol.into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
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
    }
    (volumes, mounts)
}

/// A restore seed's token Secret, mounted. Optional: the Secret goes once the seed serves, and
/// a restarted seed, which holds its data by then, needs no token.
fn token_volume(secret: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: TOKEN_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                optional: Some(true),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: TOKEN_VOLUME.into(),
            mount_path: TOKEN_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// The etcd container: the cluster's image, behind the gate when there is one, with its
/// ports, probes and the policy's environment and resources.
fn etcd_container(
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

/// Members spread over zones, then over nodes: with 3 members in 3 zones a zone lost costs
/// one member; with 5, at most two. Preferences only (`ScheduleAnyway`), so that a cluster
/// with fewer zones or nodes than members still runs; `antiAffinity: true` makes the node
/// part required (see [`affinity`]).
fn spread(cluster: &str) -> Vec<TopologySpreadConstraint> {
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
fn affinity(cluster: &str, user: &Option<Affinity>, anti: bool) -> Option<Affinity> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EtcdClusterSpec, MemberSecret, PodPolicy, StaticTls, TlsPolicy};

    fn cluster(spec: EtcdClusterSpec) -> EtcdCluster {
        let mut c = EtcdCluster::new("example", spec);
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn a_spread_member_is_kept_off_the_crowded_nodes_and_others_are_not() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let mut pod = member_pod(&c, "example-x", vec![], None, "");
        let before = pod.clone();
        keep_off(&mut pod, &[]);
        assert_eq!(pod, before);
        keep_off(&mut pod, &["a".into(), "b".into()]);
        let affinity = pod.spec.unwrap().affinity.unwrap();
        let terms = affinity
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        let expr = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (expr.key.as_str(), expr.operator.as_str()),
            ("kubernetes.io/hostname", "NotIn")
        );
        assert_eq!(expr.values, Some(vec!["a".into(), "b".into()]));
        // The members' own preference for distinct nodes stays.
        assert!(affinity.pod_anti_affinity.is_some());
    }

    #[test]
    fn the_template_hash_of_plain_clusters_is_pinned_and_tls_content_changes_it() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            version: Some("3.6.16".into()),
            ..Default::default()
        });
        // Pinned: a new value would roll every plain cluster when the operator is upgraded.
        assert_eq!(template_hash(&c, ""), "ef26387abf40434d");
        let tls: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "example", "namespace": "prod"},
            "spec": {"size": 3, "version": "3.6.16", "TLS": {"auto": {}}}
        }))
        .unwrap();
        let (a, b) = (template_hash(&tls, "rev-a"), template_hash(&tls, "rev-b"));
        assert_ne!(a, b, "a renewed certificate rolls the members");
        assert_ne!(a, template_hash(&c, ""));
    }

    #[test]
    fn services_select_members_and_are_owned() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let h = headless_service(&c);
        let s = h.spec.as_ref().unwrap();
        assert_eq!(h.metadata.name.as_deref(), Some("example"));
        assert_eq!(s.cluster_ip.as_deref(), Some("None"));
        assert_eq!(s.publish_not_ready_addresses, Some(true));
        assert_eq!(s.selector, Some(selector("example")));
        let ports: Vec<i32> = s.ports.as_ref().unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [2379, 2380]);
        let owner = &h.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("EtcdCluster", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let cs = client_service(&c);
        assert_eq!(cs.metadata.name.as_deref(), Some("example-client"));
        assert_eq!(cs.spec.unwrap().ports.unwrap()[0].port, 2379);
    }

    /// A 3.5 cluster with every pod-policy field set, and static TLS.
    fn with_policy() -> EtcdCluster {
        let policy: PodPolicy = serde_json::from_value(serde_json::json!({
            "labels": {"team": "a"},
            "annotations": {"note": "x"},
            "nodeSelector": {"disk": "ssd"},
            "antiAffinity": true,
            "resources": {"limits": {"memory": "1Gi"}},
            "tolerations": [{"operator": "Exists"}],
            "etcdEnv": [{"name": "ETCD_QUOTA_BACKEND_BYTES", "value": "1"}],
            "persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "1Gi"}}},
            "securityContext": {"runAsUser": 1000}
        }))
        .unwrap();
        cluster(EtcdClusterSpec {
            size: 3,
            version: Some("3.5.21".into()),
            pod: Some(policy),
            tls: Some(TlsPolicy {
                static_: Some(StaticTls {
                    member: Some(MemberSecret {
                        peer_secret: Some("peer".into()),
                        server_secret: Some("server".into()),
                    }),
                    operator_secret: Some("op".into()),
                }),
                auto: None,
            }),
            ..Default::default()
        })
    }

    #[test]
    fn a_member_pod_applies_the_pod_policy() {
        let c = with_policy();
        let pod = member_pod(
            &c,
            "example-bcdfg",
            vec!["--name=example-bcdfg".into()],
            None,
            "",
        );
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "etcd");
        assert_eq!(labels["etcd_cluster"], "example");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "etcd-operator");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["note"], "x");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("example-bcdfg"));
        assert_eq!(spec.subdomain.as_deref(), Some("example"));
        assert_eq!(spec.node_selector.as_ref().unwrap()["disk"], "ssd");
        let anti = spec
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .as_ref()
            .unwrap();
        let term = &anti
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()[0];
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        assert_eq!(
            spec.security_context.as_ref().unwrap().run_as_user,
            Some(1000)
        );
        let etcd = &spec.containers[0];
        assert_eq!(etcd.image.as_deref(), Some("quay.io/coreos/etcd:v3.5.21"));
        assert_eq!(
            etcd.env.as_ref().unwrap()[0].name,
            "ETCD_QUOTA_BACKEND_BYTES"
        );
        let volumes = spec.volumes.as_ref().unwrap();
        let claim = volumes[0].persistent_volume_claim.as_ref().unwrap();
        assert_eq!(claim.claim_name, "example-bcdfg");
        let secrets: Vec<_> = volumes
            .iter()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(secrets, ["peer", "server"]);
        // 3.5 has no /livez: liveness is a TCP check, readiness /health.
        assert!(etcd.liveness_probe.as_ref().unwrap().tcp_socket.is_some());
        let ready = etcd
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/health?exclude=NOSPACE"));
    }

    #[test]
    fn secrets_are_found_with_their_fields() {
        let spec: EtcdClusterSpec = serde_json::from_value(serde_json::json!({
            "size": 1,
            "TLS": {"static": {"member": {"peerSecret": "p"}}},
            "pod": {"etcdEnv": [
                {"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "o", "key": "k", "optional": true}}}
            ]}
        }))
        .unwrap();
        assert_eq!(
            referenced_secrets(&spec),
            [(
                "spec.pod.etcdEnv[1].valueFrom.secretKeyRef.name".to_string(),
                "s".to_string()
            )]
        );
    }

    #[test]
    fn the_disruption_budget_keeps_a_quorum_of_the_size() {
        for (size, min) in [
            (1, None),
            (2, Some(2)),
            (3, Some(2)),
            (5, Some(3)),
            (7, Some(4)),
        ] {
            let c = cluster(EtcdClusterSpec {
                size,
                ..Default::default()
            });
            // More pods than the size (a surge): a quorum of them.
            let surge = disruption_budget(&c, usize::try_from(size + 1).unwrap())
                .and_then(|p| p.spec?.min_available);
            assert_eq!(
                surge,
                min.map(|_| IntOrString::Int((size + 1) / 2 + 1)),
                "size {size}, one more"
            );
            let pdb = disruption_budget(&c, 0);
            assert_eq!(
                pdb.as_ref()
                    .and_then(|p| p.spec.as_ref()?.min_available.clone()),
                min.map(IntOrString::Int),
                "size {size}"
            );
            if let Some(pdb) = pdb {
                let spec = pdb.spec.unwrap();
                assert_eq!(
                    spec.selector.unwrap().match_labels.unwrap(),
                    selector("example")
                );
                assert_eq!(
                    spec.unhealthy_pod_eviction_policy.as_deref(),
                    Some("AlwaysAllow")
                );
                assert!(pdb.metadata.owner_references.is_some());
            }
        }
    }

    #[test]
    fn a_restore_seed_fetches_verifies_and_restores_before_etcd_starts() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let gate = Gate {
            image: "op:v1".into(),
            endpoints: vec![],
            peer_tls: false,
            peer_url: "http://example-s.example.ns.svc:2380".into(),
            peers: vec![],
            restore: Some(SeedRestore {
                uid: "uid-1".into(),
                url: "https://10.0.0.9:8443/ca-0123/restores/ns/example/snapshot".into(),
                server_ca: "MIIB".into(),
                token_secret: "example-restore-token".into(),
                sha256: "ab".repeat(32),
                name: "example-s".into(),
                initial_cluster: "example-s=http://example-s.example.ns.svc:2380".into(),
                cluster_token: "uid-1".into(),
                bump_revision: 1000,
                changes_url: Some(
                    "https://10.0.0.9:8443/ca-0123/restores/ns/example/changes".into(),
                ),
            }),
        };
        let pod = member_pod(
            &c,
            "example-s",
            vec!["--name=example-s".into()],
            Some(&gate),
            "",
        );
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[RESTORE_UID_ANNOTATION], "uid-1");
        assert_eq!(
            annotations[RESTORE_FROM_ANNOTATION],
            "https://10.0.0.9:8443/ca-0123/restores/ns/example/snapshot"
        );
        assert!(!annotations.contains_key(JOIN_PEERS_ANNOTATION));
        let etcd = &pod.spec.as_ref().unwrap().containers[0];
        let command = etcd.command.as_deref().unwrap();
        assert_eq!(&command[..2], ["/gate/etcd-gate", "restore"]);
        for flag in [
            "--server-ca=MIIB",
            "--token-file=/etc/etcd-restore/token",
            "--data-dir=/var/etcd/data",
            "--initial-cluster-token=uid-1",
            "--initial-advertise-peer-urls=http://example-s.example.ns.svc:2380",
            "--bump-revision=1000",
            "--changes-url=https://10.0.0.9:8443/ca-0123/restores/ns/example/changes",
        ] {
            assert!(command.iter().any(|c| c == flag), "{flag} in {command:?}");
        }
        assert_eq!(&command[command.len() - 2..], ["--", "/usr/local/bin/etcd"]);
        // The token is read from its Secret, mounted into etcd's container alone (optional:
        // it goes once the seed serves); the spec does not hold it.
        let spec = pod.spec.as_ref().unwrap();
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "restore-token")
            .unwrap();
        let secret = volume.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("example-restore-token"));
        assert_eq!(secret.optional, Some(true));
        assert!(
            etcd.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "restore-token" && m.mount_path == "/etc/etcd-restore")
        );
        assert!(!command.iter().any(|c| c.starts_with("--token=")));
        // 3.6: every member takes the same learner limit.
        assert_eq!(
            etcd.args.as_deref().unwrap(),
            ["--name=example-s", "--max-learners=6"]
        );
    }

    #[test]
    fn a_gated_pod_waits_for_its_membership_and_names_its_peers() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let gate = Gate {
            image: "op:v1".into(),
            endpoints: vec!["http://10.0.0.1:2380".into(), "http://10.0.0.2:2380".into()],
            peer_tls: false,
            peer_url: "http://example-x.example.ns.svc:2380".into(),
            peers: vec!["example-a".into(), "example-b".into()],
            restore: None,
        };
        let pod = member_pod(&c, "example-x", vec![], Some(&gate), "");
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[JOIN_PEERS_ANNOTATION],
            "example-a,example-b"
        );
        let spec = pod.spec.as_ref().unwrap();
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("op:v1"));
        assert_eq!(
            init.args.as_deref().unwrap(),
            ["install", "/gate/etcd-gate"]
        );
        let etcd = &spec.containers[0];
        assert_eq!(
            etcd.command.as_deref().unwrap(),
            [
                "/gate/etcd-gate",
                "wait",
                "--peer-url=http://example-x.example.ns.svc:2380",
                "--endpoints=http://10.0.0.1:2380,http://10.0.0.2:2380",
                "--data-dir=/var/etcd/data",
                "--",
                "/usr/local/bin/etcd"
            ]
        );
        // Both containers see the gate's volume; only the installer may write it.
        let mount = |c: &Container| {
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.name == "etcd-gate")
                .map(|m| (m.mount_path.clone(), m.read_only))
        };
        assert_eq!(mount(init), Some(("/gate".into(), None)));
        assert_eq!(mount(etcd), Some(("/gate".into(), Some(true))));
        assert!(
            spec.volumes
                .as_ref()
                .unwrap()
                .iter()
                .any(|v| v.name == "etcd-gate" && v.empty_dir.is_some())
        );
        let sc = init.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        let plain = member_pod(&c, "example-x", vec![], None, "").spec.unwrap();
        assert!(plain.init_containers.is_none());
        assert_eq!(
            plain.containers[0].command.as_deref().unwrap(),
            ["/usr/local/bin/etcd"]
        );
    }

    #[test]
    fn etcd_3_4_readiness_never_goes_through_raft() {
        // 3.4's /health is a v2 quorum read in the raft log, which 3.6 refuses to replay.
        let (_, readiness, _) = probes("3.4.23");
        assert!(readiness.http_get.is_none());
        assert_eq!(
            readiness.tcp_socket.unwrap().port,
            IntOrString::Int(CLIENT_PORT)
        );
        let (_, readiness, _) = probes("3.5.35");
        assert_eq!(
            readiness.http_get.unwrap().path.as_deref(),
            Some("/health?exclude=NOSPACE")
        );
    }

    #[test]
    fn etcd_3_6_uses_livez_and_readyz_and_an_empty_dir() {
        let c = cluster(EtcdClusterSpec {
            size: 1,
            version: Some("v3.6.16".into()),
            ..Default::default()
        });
        let pod = member_pod(&c, "example-x", vec![], None, "");
        let spec = pod.spec.unwrap();
        let etcd = &spec.containers[0];
        let live = etcd
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.path.as_deref(), Some("/livez"));
        let ready = etcd
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/readyz"));
        assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
        // The startup probe checks what liveness checks, every second (readiness waits for
        // it), for up to 15 minutes; readiness follows etcd within a second.
        let startup = etcd.startup_probe.as_ref().unwrap();
        assert_eq!(startup.period_seconds, Some(1));
        assert_eq!(
            etcd.readiness_probe.as_ref().unwrap().period_seconds,
            Some(1)
        );
        assert_eq!(
            startup.http_get.as_ref().unwrap().path.as_deref(),
            Some("/livez")
        );
        assert_eq!(
            startup.period_seconds.unwrap() * startup.failure_threshold.unwrap(),
            900
        );
        // Without a pod policy: hardened for the restricted Pod Security Standard, default
        // requests, members preferring distinct nodes.
        let psc = spec.security_context.as_ref().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(65532));
        assert_eq!(
            psc.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        let sc = etcd.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert_eq!(spec.automount_service_account_token, Some(false));
        let requests = etcd.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(requests["memory"], Quantity("128Mi".into()));
        let preferred = spec
            .affinity
            .unwrap()
            .pod_anti_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(
            preferred[0].pod_affinity_term.topology_key,
            "kubernetes.io/hostname"
        );
    }

    #[test]
    fn members_spread_over_zones_then_nodes_by_preference() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let spec = member_pod(&c, "example-x", vec![], None, "").spec.unwrap();
        let spread = spec.topology_spread_constraints.unwrap();
        let keys: Vec<(&str, &str)> = spread
            .iter()
            .map(|c| (c.topology_key.as_str(), c.when_unsatisfiable.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("topology.kubernetes.io/zone", "ScheduleAnyway"),
                ("kubernetes.io/hostname", "ScheduleAnyway")
            ]
        );
        assert_eq!(
            spread[0].label_selector.as_ref().unwrap().match_labels,
            Some(selector("example"))
        );
    }
}
