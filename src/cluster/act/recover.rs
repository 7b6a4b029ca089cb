//! Recovery from lost quorum, handed to the restore path: from a surviving member, as a
//! restore (handed over on the cluster's restore annotation) whose seed fetches that member's
//! snapshot; from a backup, as an EtcdRestore of it, which the restore controller carries out.
//! Either way the approval annotation is removed in the same write, so one approval recovers
//! once.

use kube::ResourceExt;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};

use super::{Acting, Error, Outcome};
use crate::api::EtcdCluster;
use crate::api::{
    EtcdRestore, EtcdRestoreSpec, RECOVER_ANNOTATION, RESTORE_ANNOTATION, RestoreHandoff,
    StorageSection,
};
use crate::cluster::handles::Handles;

/// Hands the cluster's task a restore from member `name`: the seed fetches the member's
/// snapshot through this operator, which streams it from the member's etcd; the member's pod
/// is kept until the seed serves.
pub(super) async fn recover_from_member(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    name: &str,
    uid: &str,
    revision_before: Option<i64>,
) -> Result<Outcome, Error> {
    let client = pass.handles.clusters.clone().into_client();
    let token_sha256 = crate::kube::restore_token::issue(&client, cluster)
        .await
        .map_err(|source| Error::Recover {
            what: "the restore token's Secret".into(),
            source,
        })?;
    let handoff = RestoreHandoff {
        name: crate::kube::names::recovery_name(&cluster.name_any(), uid),
        uid: uid.to_string(),
        token_sha256,
        sha256: String::new(),
        bump_revision: crate::api::handoff::bump_for(revision_before),
        pre_restore_path: String::new(),
        member: name.to_string(),
        ..RestoreHandoff::default()
    };
    let value = serde_json::to_string(&handoff).unwrap_or_default();
    annotate(pass.handles, cluster, Some(value)).await?;
    crate::crash::point("after-recovery-handoff");
    Ok(Outcome::Done(Some(format!(
        "quorum is lost: rebuilding the cluster from member {name}, whose snapshot a new seed \
         restores (revision raised by {}); {name} is kept until the seed serves",
        handoff.bump_revision
    ))))
}

/// Makes an EtcdRestore of EtcdBackup `backup`'s newest snapshot into this cluster.
pub(super) async fn recover_from_backup(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    backup: &str,
    uid: &str,
) -> Result<Outcome, Error> {
    let api = |source| Error::Recover {
        what: format!("EtcdBackup {backup}"),
        source,
    };
    let found = pass.handles.backups.get(backup).await.map_err(api)?;
    let Some(path) = found
        .status
        .as_ref()
        .map(|s| s.path.clone())
        .filter(|p| !p.is_empty())
    else {
        return Ok(Outcome::Retry(format!(
            "EtcdBackup {backup} names no snapshot to restore"
        )));
    };
    let section = StorageSection::from(&found.spec);
    let what = format!("EtcdBackup {backup} ({path})");
    make_restore(pass, cluster, section, &path, uid, &what).await
}

/// Makes an EtcdRestore of the object at `path` in the store `spec.recovery.backups` names
/// (found there as the newest backup by its name) into this cluster.
pub(super) async fn recover_from_store(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    path: &str,
    uid: &str,
) -> Result<Outcome, Error> {
    let Some(store) = cluster.spec.recovery_store() else {
        return Ok(Outcome::Retry(
            "spec.recovery.backups is no longer set".into(),
        ));
    };
    let section = StorageSection::from(store);
    let what = format!("{path}, the newest backup in spec.recovery.backups");
    make_restore(pass, cluster, section, path, uid, &what).await
}

/// Creates the recovery's EtcdRestore (again, harmlessly, after a restart) and removes the
/// approval.
async fn make_restore(
    pass: &Acting<'_>,
    cluster: &EtcdCluster,
    section: StorageSection<'_>,
    path: &str,
    uid: &str,
    what: &str,
) -> Result<Outcome, Error> {
    let name = crate::kube::names::recovery_name(&cluster.name_any(), uid);
    let restore = restore_of(section, path, &cluster.name_any(), &name);
    match pass
        .handles
        .restores
        .create(&PostParams::default(), &restore)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => {
            return Err(Error::Recover {
                what: format!("EtcdRestore {name}"),
                source,
            });
        }
    }
    annotate(pass.handles, cluster, None).await?;
    Ok(Outcome::Done(Some(format!(
        "quorum is lost and no member's data is used: restoring {what} through EtcdRestore \
         {name}"
    ))))
}

/// An EtcdRestore of the snapshot at `path` in the store `section` names, into `cluster`.
fn restore_of(section: StorageSection<'_>, path: &str, cluster: &str, name: &str) -> EtcdRestore {
    let mut restore = EtcdRestore::new(name, EtcdRestoreSpec::of(section, path, cluster));
    restore.metadata = ObjectMeta {
        name: Some(name.to_string()),
        labels: Some([(RECOVERY_LABEL.to_string(), cluster.to_string())].into()),
        ..ObjectMeta::default()
    };
    restore
}

/// Labels the EtcdRestores a recovery makes, with the cluster's name.
pub const RECOVERY_LABEL: &str = "etcd.database.coreos.com/recovery-of";

/// Removes a recovery's approval that has nothing to act on (quorum is back).
pub async fn withdraw_approval(handles: &Handles, cluster: &EtcdCluster) -> Result<(), Error> {
    annotate(handles, cluster, None).await
}

/// Sets (or, with `None`, leaves) the restore handoff and removes the approval, in one write.
async fn annotate(
    handles: &Handles,
    cluster: &EtcdCluster,
    handoff: Option<String>,
) -> Result<(), Error> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(RECOVER_ANNOTATION.into(), serde_json::Value::Null);
    if let Some(h) = handoff {
        annotations.insert(RESTORE_ANNOTATION.into(), h.into());
    }
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    // The task acts on a recovery's hand-off only when this field manager wrote it.
    let params = PatchParams {
        field_manager: Some(crate::api::handoff::RECOVERY_MANAGER.into()),
        ..PatchParams::default()
    };
    handles
        .clusters
        .patch(&cluster.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Recover {
            what: format!("EtcdCluster {}", cluster.name_any()),
            source,
        })?;
    Ok(())
}
