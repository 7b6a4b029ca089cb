//! etcd-gate in a member pod: the container that installs it, the command it wraps etcd in,
//! and a restore seed's fetch.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ResourceRequirements, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::hardening::{MEMBER_UID, hardened};
use crate::cluster::members::{DATA_DIR, PEER_TLS_DIR};

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
    /// The cluster's root Secret, when it keeps one: its password is set in the restored
    /// data, which may carry another cluster's.
    pub root_secret: Option<String>,
}

/// Where the root Secret is mounted in a seed's etcd container.
pub(super) const ROOT_DIR: &str = "/etc/etcd-root";
pub(super) const ROOT_VOLUME: &str = "etcd-root";

/// Where the restore token's Secret is mounted in a seed's etcd container.
pub(super) const TOKEN_DIR: &str = "/etc/etcd-restore";
pub(super) const TOKEN_VOLUME: &str = "restore-token";

/// Where the gate's volume is mounted, in both containers.
pub(super) const GATE_DIR: &str = "/gate";
pub(super) const GATE_VOLUME: &str = "etcd-gate";
/// Where etcd is in the official images, and so in any image a cluster names.
pub(super) const ETCD_BINARY: &str = "/usr/local/bin/etcd";

pub(super) fn gate_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: GATE_VOLUME.into(),
        mount_path: GATE_DIR.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The etcd container's command through the gate; etcd's own arguments follow unchanged.
pub(super) fn gated_command(gate: &Gate) -> Vec<String> {
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
        if r.root_secret.is_some() {
            command.push(format!(
                "--root-password-file={ROOT_DIR}/{}",
                crate::kube::names::ROOT_PASSWORD_KEY
            ));
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

pub(super) fn install_gate_container(gate: &Gate) -> Container {
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

/// The cluster's root Secret, mounted into a seed's etcd container. Optional: without it the
/// gate leaves root's password as the snapshot has it.
pub(super) fn root_volume(secret: &str) -> (Volume, VolumeMount) {
    optional_secret_volume(ROOT_VOLUME, secret, ROOT_DIR)
}

/// A restore seed's token Secret, mounted. Optional: the Secret goes once the seed serves, and
/// a restarted seed, which holds its data by then, needs no token.
pub(super) fn token_volume(secret: &str) -> (Volume, VolumeMount) {
    optional_secret_volume(TOKEN_VOLUME, secret, TOKEN_DIR)
}

fn optional_secret_volume(volume: &str, secret: &str, dir: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: volume.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                optional: Some(true),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: volume.into(),
            mount_path: dir.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}
