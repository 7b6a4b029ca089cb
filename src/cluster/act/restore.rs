//! A restore's seed: a new cluster's one member, whose gate restores the snapshot first.

use kube::ResourceExt;

use super::pods::{Claim, create_pod, delete_pod};
use super::{Acting, Error, Outcome};
use crate::api::EtcdCluster;
use crate::cluster::members;
use crate::cluster::members::ClusterState;
use crate::cluster::resources::{Gate, SeedRestore};
use crate::cluster::version::Version;
use crate::kube::names::addressing;

/// Whether the etcdutl of `version` has `--bump-revision` and `--mark-compacted` (3.5.10 and
/// later).
pub fn bumps_revision(version: &str) -> bool {
    Version::parse(version) >= Version::new(3, 5, 10)
}

/// The seed of a restore: a new cluster's only member, whose gate fetches and restores the
/// snapshot before etcd starts.
pub(super) async fn restore_seed(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
) -> Result<Outcome, Error> {
    let handoff = match cluster.pending_restore() {
        Some(Ok(h)) => h,
        _ => return Ok(Outcome::Retry("the restore is no longer asked for".into())),
    };
    let (Some(image), Some(url), Some(server)) = (
        &pass.handles.gate_image,
        pass.handles.snapshot_url_of(cluster),
        &pass.handles.snapshot,
    ) else {
        return Ok(Outcome::Retry(
            "no gate image or snapshot URL to make the seed with".into(),
        ));
    };
    let addr = addressing(cluster);
    let name = members::new_member_name(&cluster.name_any());
    let ic = addr.initial_cluster([name.as_str()]);
    // A new cluster token: nothing of the replaced cluster may ever talk to this one.
    let cluster_token = handoff.uid.clone();
    let args = members::etcd_args(
        &addr,
        &name,
        &ic,
        &ClusterState::New {
            token: cluster_token.clone(),
        },
    );
    let token_secret = crate::kube::restore_token::secret_name(&cluster.name_any());
    let gate = Gate {
        image: image.clone(),
        endpoints: vec![],
        peer_tls: addr.peer_tls,
        peer_url: addr.peer_url(&name),
        peers: vec![],
        restore: Some(SeedRestore {
            uid: handoff.uid.clone(),
            url: url.clone(),
            server_ca: server.ca.clone(),
            token_secret,
            sha256: handoff.sha256.clone(),
            name: name.clone(),
            initial_cluster: ic,
            cluster_token,
            bump_revision: if bumps_revision(cluster.spec.version()) {
                handoff.bump_revision
            } else {
                0
            },
            changes_url: handoff
                .to_revision
                .and_then(|_| Some(format!("{}/changes", url.strip_suffix("/snapshot")?))),
            root_secret: crate::access::wanted(cluster)
                .then(|| crate::kube::names::root_secret(&cluster.name_any())),
        }),
    };
    create_pod(pass, cluster, &name, args, Some(&gate), Claim::New).await?;
    crate::crash::point("after-restore-seed");
    let from = if handoff.member.is_empty() {
        format!("EtcdRestore {}'s snapshot", handoff.name)
    } else {
        format!("a snapshot of member {}", handoff.member)
    };
    Ok(Outcome::Done(Some(format!(
        "created seed member {name}, which restores {from}"
    ))))
}

/// The seed serves: the token it fetched the snapshot with is no longer needed, and goes (the
/// snapshot is served only while the restore is pending, so a token left by a failed delete
/// opens nothing; the Secret also goes with the cluster).
pub(super) async fn restore_done(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    seed: &str,
) -> Result<Outcome, Error> {
    let client = pass.handles.clusters.clone().into_client();
    let ns = cluster.namespace().unwrap_or_default();
    if let Err(e) = crate::kube::restore_token::revoke(&client, &ns, &cluster.name_any()).await {
        tracing::warn!("deleting the restore token's Secret: {e}");
    }
    Ok(Outcome::Done(Some(format!(
        "seed member {seed} serves the restored data; the cluster grows back to its size"
    ))))
}

/// A recovery whose source went before the seed had its data: the seed (which has nothing)
/// goes, then the hand-off, so that the next pass decides the loss again.
pub(super) async fn withdraw_restore(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    seed: Option<&str>,
    reason: &str,
) -> Result<Outcome, Error> {
    if let Some(seed) = seed {
        delete_pod(pass, seed, true).await?;
    }
    let patch =
        serde_json::json!({"metadata": {"annotations": {crate::api::RESTORE_ANNOTATION: null}}});
    pass.handles
        .clusters
        .patch(
            &cluster.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|source| Error::Recover {
            what: "withdrawing the recovery's hand-off".into(),
            source,
        })?;
    Ok(Outcome::Done(Some(reason.to_string())))
}
