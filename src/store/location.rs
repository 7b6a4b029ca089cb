//! Where a snapshot is: a storage section (an EtcdBackup's or an EtcdRestore's) read with its
//! Secret through the API server, for the backup and the restore controllers alike.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::error::Error as BackupError;
use super::storage::{
    Error, SecretData, Target, abs, ambient_allowed, gcs, no_ambient, s3, secret_of,
};
use crate::api::{AbsSource, GcsSource, S3Source, StorageType};

/// The named Secret's data as text, or why not.
async fn secret_data(
    client: &Client,
    ns: &str,
    field: &'static str,
    name: &str,
) -> Result<SecretData, BackupError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|source| BackupError::Kube {
            what: format!("Secret {name}"),
            source,
        })?
        .ok_or_else(|| BackupError::SecretNotFound {
            field,
            name: name.into(),
        })?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .chain(secret.string_data.unwrap_or_default())
        .collect())
}

/// Where a snapshot is (an EtcdBackup's or an EtcdRestore's storage section).
pub struct Storage<'a> {
    /// `storageType` (EtcdBackup) or `backupStorageType` (EtcdRestore).
    pub kind: StorageType,
    /// The S3 section.
    pub s3: Option<&'a S3Source>,
    /// The ABS section.
    pub abs: Option<&'a AbsSource>,
    /// The GCS section.
    pub gcs: Option<&'a GcsSource>,
}

impl<'a> From<&'a crate::api::EtcdBackupSpec> for Storage<'a> {
    fn from(spec: &'a crate::api::EtcdBackupSpec) -> Self {
        Storage {
            kind: spec.storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
        }
    }
}

impl<'a> From<&'a crate::api::EtcdRestoreSpec> for Storage<'a> {
    fn from(spec: &'a crate::api::EtcdRestoreSpec) -> Self {
        Storage {
            kind: spec.backup_storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
        }
    }
}

impl<'a> From<&'a crate::api::RecoveryStore> for Storage<'a> {
    fn from(spec: &'a crate::api::RecoveryStore) -> Self {
        Storage {
            kind: spec.backup_storage_type,
            s3: spec.s3.as_ref(),
            abs: spec.abs.as_ref(),
            gcs: spec.gcs.as_ref(),
        }
    }
}

/// A backup found in a store by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its coreos-style path, `<bucket or container>/<key>`.
    pub path: String,
    /// The time in its name (UTC).
    pub at: k8s_openapi::jiff::civil::DateTime,
    /// The revision in its name; 0 for a scheduled backup's, whose name has none.
    pub revision: i64,
}

/// The newest backup whose name starts with the storage section's path (a prefix), by
/// [`naming::newest`](super::naming::newest); `None` when there is none.
pub async fn newest_stored(
    client: &Client,
    ns: &str,
    spec: Storage<'_>,
) -> Result<Option<Stored>, BackupError> {
    use futures::StreamExt;
    let (target, path) = target(client, ns, spec).await?;
    let key = target.location.to_string();
    let dir = key
        .rsplit_once('/')
        .map(|(dir, _)| object_store::path::Path::from(dir));
    let mut names = Vec::new();
    let mut listing = target.store.list(dir.as_ref());
    while let Some(item) = listing.next().await {
        let meta = item.map_err(|source| BackupError::List {
            url: target.url.clone(),
            source,
        })?;
        names.push(meta.location.to_string());
    }
    let bucket = path.split_once('/').map(|(b, _)| b).unwrap_or_default();
    Ok(
        super::naming::newest(&key, &names).map(|(name, at, revision)| Stored {
            path: format!("{bucket}/{name}"),
            at,
            revision,
        }),
    )
}

/// The store and object location a storage section names, with its coreos-style path.
pub async fn target(
    client: &Client,
    ns: &str,
    spec: Storage<'_>,
) -> Result<(Target, String), BackupError> {
    let secret = secret_of(spec.kind, spec.s3, spec.abs, spec.gcs);
    let data = match &secret {
        Some((field, name)) => Some(secret_data(client, ns, field, name).await?),
        None if ambient_allowed(ns) => None,
        None => match spec.kind {
            StorageType::S3 => return Err(no_ambient("s3.awsSecret", ns).into()),
            StorageType::Gcs => return Err(no_ambient("gcs.gcpSecret", ns).into()),
            _ => None,
        },
    };
    let missing = |section: &str| {
        Error::Spec(format!(
            "the storage type is {:?} but spec.{section} is not set",
            spec.kind
        ))
    };
    let (target, path) = match spec.kind {
        StorageType::S3 => {
            let source = spec.s3.ok_or_else(|| missing("s3"))?;
            (s3(source, data.as_ref())?, source.path.clone())
        }
        StorageType::Abs => {
            let source = spec.abs.ok_or_else(|| missing("abs"))?;
            let data = data.unwrap_or_default();
            (abs(source, &data)?, source.path.clone())
        }
        StorageType::Gcs => {
            let source = spec.gcs.ok_or_else(|| missing("gcs"))?;
            (gcs(source, data.as_ref())?, source.path.clone())
        }
        StorageType::Oss => {
            return Err(BackupError::Unsupported(
                "OSS storage is not implemented by this operator".into(),
            ));
        }
    };
    Ok((target, path))
}
