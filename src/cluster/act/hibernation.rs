//! Hibernation's acts: the final snapshot (an EtcdBackup the backup controller takes, checked
//! like any other), and every member pod deleted at once.

use kube::api::PostParams;

use super::pods::delete_pod;
use super::{Acting, Error, Outcome};
use crate::api::EtcdCluster;
use crate::cluster::hibernation::{backup_of, revision};
use crate::cluster::observe::Observed;

/// Makes the EtcdBackup of the final snapshot at the members' newest revision.
pub(super) async fn take_final_snapshot(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    obs: &Observed,
) -> Result<Outcome, Error> {
    let store = cluster.spec.hibernating().and_then(|h| h.store.as_ref());
    let (Some(store), Some(at)) = (store, revision(obs)) else {
        return Ok(Outcome::Retry(
            "no store, or no member answered with its revision".into(),
        ));
    };
    let backup = backup_of(cluster, store, at);
    let name = backup.metadata.name.clone().unwrap_or_default();
    match pass
        .handles
        .backups
        .create(&PostParams::default(), &backup)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(Outcome::Done(None)),
        Err(source) => {
            return Err(Error::FinalSnapshot { name, source });
        }
    }
    Ok(Outcome::Done(Some(format!(
        "hibernating: EtcdBackup {name} takes the final snapshot (revision {at}); the member \
         pods are deleted once it is stored and verified"
    ))))
}

/// Deletes every member pod; the members stay in etcd's member list (and on their claims).
pub(super) async fn hibernate(pass: &Acting<'_>, pods: &[String]) -> Result<Outcome, Error> {
    for name in pods {
        delete_pod(pass, name, false).await?;
    }
    Ok(Outcome::Done(Some(format!(
        "hibernating: deleted the member pods {}",
        pods.join(", ")
    ))))
}
