//! The restore hand-off pending on a cluster, checked against its source before anyone acts on
//! it or serves its snapshot (the rules are [`crate::api::handoff`]'s).

use kube::Api;

use crate::api::{EtcdCluster, EtcdRestore, RestoreHandoff, handoff};

/// A hand-off whose source vouches for it.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The hand-off.
    pub handoff: RestoreHandoff,
    /// Its EtcdRestore, as read to verify it (none for a recovery from a member).
    pub restore: Option<EtcdRestore>,
}

/// The hand-off pending on `cluster` (read with its managedFields): `None` when there is none,
/// else the verified hand-off or why it may not be acted on (a malformed annotation included).
pub async fn pending(
    restores: &Api<EtcdRestore>,
    cluster: &EtcdCluster,
) -> kube::Result<Option<Result<Verified, String>>> {
    let handoff = match cluster.pending_restore() {
        None => return Ok(None),
        Some(Err(message)) => return Ok(Some(Err(message))),
        Some(Ok(h)) => h,
    };
    let restore = if handoff.member.is_empty() {
        restores.get_opt(&handoff.name).await?
    } else {
        None
    };
    Ok(Some(
        match handoff::refusal(cluster, &handoff, restore.as_ref()) {
            None => Ok(Verified { handoff, restore }),
            Some(why) => Err(why),
        },
    ))
}
