//! The automatic CA's rotation, one step per action: each step changes the Secrets the members
//! run on, and the roll it causes finishes before the planner asks for the next.

use super::{Acting, Error, Outcome};
use crate::api::EtcdCluster;
use crate::tls;

/// Takes the rotation's next step; its message names the step, for the Event and the status.
pub(super) async fn rotate_ca(pass: &Acting<'_>, cluster: &EtcdCluster) -> Result<Outcome, Error> {
    let now = time::OffsetDateTime::now_utc();
    let step = tls::advance(&pass.handles.secrets, cluster, pass.tls, now).await?;
    Ok(Outcome::Done(step))
}
