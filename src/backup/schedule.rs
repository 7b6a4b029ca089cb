//! Scheduled backups: what one run of a CronJob (`etcd-operator backup create`) creates, and
//! which of its schedule's EtcdBackups it deletes. Pure but for [`run`].
//!
//! - A CronJob names each Job `<cronjob>-<minutes since the epoch of the scheduled time>`;
//!   the EtcdBackup takes that name, so a Job run twice for one tick, or its pod retried,
//!   finds the backup it made and makes no second one.
//! - The backup writes `<prefix>_<tick as 2006-01-02-15:04:05>` (one object per tick), is
//!   labelled with the schedule, and carries the schedule's snapshot retention for the
//!   controller, which alone holds storage credentials (see
//!   [`super::controller`]): after a success it keeps the schedule's newest M objects, by the
//!   tick parsed from their names.
//! - `--keep N` deletes the schedule's oldest EtcdBackup objects beyond N (by tick), never the
//!   one just made. Deleting an EtcdBackup never deletes its snapshot.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::info;

use crate::api::{
    AbsSource, BackupCompression, BackupPolicy, CompressionAlgorithm, EtcdBackup, EtcdBackupSpec,
    GcsSource, S3Encryption, S3EncryptionMode, S3Source, SCHEDULE_KEEP_ANNOTATION, SCHEDULE_LABEL,
    SCHEDULE_PREFIX_ANNOTATION, StorageType,
};
use crate::store::naming;

/// One run of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Namespace of the cluster and of the EtcdBackups.
    pub namespace: String,
    /// The schedule's name (a label on its EtcdBackups).
    pub schedule: String,
    /// The EtcdCluster to back up.
    pub cluster: String,
    /// S3, ABS or GCS.
    pub storage_type: StorageType,
    /// `<bucket or container>/<key prefix>` of the schedule's snapshots.
    pub path_prefix: String,
    /// The storage Secret, in the coreos format of the storage type.
    pub secret: Option<String>,
    /// S3 only: an S3-compatible server.
    pub endpoint: Option<String>,
    /// S3 only: bucket in the path.
    pub force_path_style: bool,
    /// Bounds the snapshot; 0 means 60 s.
    pub timeout_in_second: i64,
    /// EtcdBackup objects of this schedule to keep (0: all).
    pub keep: usize,
    /// Stored snapshots of this schedule to keep (0: all).
    pub keep_snapshots: usize,
    /// The Job's name, when run by a CronJob.
    pub job: Option<String>,
    /// How each snapshot is compressed (the EtcdBackup's `compression`).
    pub compression: Option<BackupCompression>,
    /// S3 only: how S3 encrypts each snapshot (the EtcdBackup's `s3.encryption`).
    pub encryption: Option<S3Encryption>,
}

/// The flags of compression: `--compression zstd`, `--compression-level` (1 to 19) only with it.
pub fn compression_of(
    algorithm: Option<&str>,
    level: Option<i32>,
) -> Result<Option<BackupCompression>, Error> {
    let Some(algorithm) = algorithm.filter(|a| !a.is_empty()) else {
        return match level {
            Some(_) => Err(Error::Invalid(
                "--compression-level needs --compression zstd".into(),
            )),
            None => Ok(None),
        };
    };
    if algorithm != "zstd" {
        return Err(Error::Invalid(format!(
            "--compression {algorithm:?}: zstd is the only algorithm"
        )));
    }
    if let Some(l) = level.filter(|l| !(1..=19).contains(l)) {
        return Err(Error::Invalid(format!(
            "--compression-level {l}: zstd's levels are 1 (fastest) to 19 (smallest)"
        )));
    }
    Ok(Some(BackupCompression {
        algorithm: CompressionAlgorithm::Zstd,
        level,
    }))
}

/// The flags of S3 encryption: `--s3-encryption` (SSE-S3, SSE-KMS, DSSE-KMS or SSE-C), and
/// with a KMS mode `--s3-kms-key-id` and `--s3-bucket-key`, as the schema of `s3.encryption`
/// allows them.
pub fn encryption_of(
    mode: Option<&str>,
    kms_key_id: Option<String>,
    bucket_key: bool,
) -> Result<Option<S3Encryption>, Error> {
    let kms_key_id = kms_key_id.filter(|k| !k.is_empty());
    let Some(mode) = mode.filter(|m| !m.is_empty()) else {
        if kms_key_id.is_some() || bucket_key {
            return Err(Error::Invalid(
                "--s3-kms-key-id and --s3-bucket-key need --s3-encryption SSE-KMS or DSSE-KMS"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let mode: S3EncryptionMode = serde_json::from_value(serde_json::Value::String(mode.into()))
        .map_err(|_| {
            Error::Invalid(format!(
                "--s3-encryption {mode:?}: not SSE-S3, SSE-KMS, DSSE-KMS or SSE-C"
            ))
        })?;
    let kms = matches!(mode, S3EncryptionMode::SseKms | S3EncryptionMode::DsseKms);
    if !kms && (kms_key_id.is_some() || bucket_key) {
        return Err(Error::Invalid(
            "--s3-kms-key-id and --s3-bucket-key are for --s3-encryption SSE-KMS or DSSE-KMS"
                .into(),
        ));
    }
    Ok(Some(S3Encryption {
        mode,
        kms_key_id,
        bucket_key: bucket_key.then_some(true),
    }))
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// The API server.
    #[error("{what}: {source}")]
    Kube {
        /// What was done.
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// Digits of a Job-name suffix that can be a CronJob tick (minutes since the epoch: eight
/// digits from 1990 to 2160).
const TICK_DIGITS: usize = 8;

/// The EtcdBackup's name and the tick of the Job named `job`: `<cronjob>-<minutes>`, and
/// anything a person appended when starting a Job by hand for that tick. `None` when the
/// name carries no tick.
pub fn tick_of(job: &str) -> Option<(String, Timestamp)> {
    let parts: Vec<&str> = job.split('-').collect();
    let at = parts
        .iter()
        .rposition(|p| p.len() >= TICK_DIGITS && p.bytes().all(|b| b.is_ascii_digit()))?;
    if at == 0 {
        return None;
    }
    let minutes: i64 = parts[at].parse().ok()?;
    let tick = Timestamp::from_second(minutes.checked_mul(60)?).ok()?;
    Some((parts[..=at].join("-"), tick))
}

/// The name and tick of this run: the Job's, or, outside a CronJob, the schedule's name and
/// the current minute.
pub fn name_and_tick(req: &Request, now: Timestamp) -> (String, Timestamp) {
    if let Some(found) = req.job.as_deref().and_then(tick_of) {
        return found;
    }
    let minutes = now.as_second().div_euclid(60);
    let tick = Timestamp::from_second(minutes * 60).unwrap_or(now);
    (format!("{}-{minutes}", req.schedule), tick)
}

/// The EtcdBackup of one run.
pub fn backup(req: &Request, name: &str, tick: Timestamp) -> Result<EtcdBackup, Error> {
    if crate::store::storage::split_path(&req.path_prefix).is_none() {
        return Err(Error::Invalid(format!(
            "--path-prefix {:?}: must be <bucket>/<key prefix>",
            req.path_prefix
        )));
    }
    let mut spec = EtcdBackupSpec {
        etcd_endpoints: vec![],
        cluster_name: Some(req.cluster.clone()),
        storage_type: req.storage_type,
        backup_policy: (req.timeout_in_second > 0).then(|| BackupPolicy {
            timeout_in_second: Some(req.timeout_in_second),
            ..BackupPolicy::default()
        }),
        s3: None,
        abs: None,
        gcs: None,
        oss: None,
        client_tls_secret: None,
        compression: req.compression.clone(),
    };
    set_destination(
        &mut spec,
        req,
        naming::scheduled_name(&req.path_prefix, tick),
    )?;
    let mut annotations = BTreeMap::new();
    annotations.insert(SCHEDULE_PREFIX_ANNOTATION.into(), req.path_prefix.clone());
    if req.keep_snapshots > 0 {
        annotations.insert(
            SCHEDULE_KEEP_ANNOTATION.into(),
            req.keep_snapshots.to_string(),
        );
    }
    Ok(EtcdBackup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(req.namespace.clone()),
            labels: Some(BTreeMap::from([(
                SCHEDULE_LABEL.into(),
                req.schedule.clone(),
            )])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The storage section of the run's backup, writing `path`.
fn set_destination(spec: &mut EtcdBackupSpec, req: &Request, path: String) -> Result<(), Error> {
    if req.encryption.is_some() && req.storage_type != StorageType::S3 {
        return Err(Error::Invalid(
            "--s3-encryption is for --storage-type S3 (ABS: the absSecret's \
             storage-encryption-key)"
                .into(),
        ));
    }
    if req
        .encryption
        .as_ref()
        .is_some_and(|e| e.mode == S3EncryptionMode::SseC)
        && req.secret.is_none()
    {
        return Err(Error::Invalid(
            "--s3-encryption SSE-C needs --secret: its sse-customer-key holds the key".into(),
        ));
    }
    match req.storage_type {
        StorageType::S3 => {
            spec.s3 = Some(S3Source {
                path,
                aws_secret: req.secret.clone(),
                endpoint: req.endpoint.clone(),
                force_path_style: req.force_path_style.then_some(true),
                encryption: req.encryption.clone(),
            })
        }
        StorageType::Abs => {
            spec.abs = Some(AbsSource {
                path,
                abs_secret: req
                    .secret
                    .clone()
                    .ok_or_else(|| Error::Invalid("--secret is required for ABS".into()))?,
            })
        }
        StorageType::Gcs => {
            spec.gcs = Some(GcsSource {
                path,
                gcp_secret: req.secret.clone(),
            })
        }
        StorageType::Oss => {
            return Err(Error::Invalid(
                "--storage-type OSS is not implemented by this operator".into(),
            ));
        }
    }
    Ok(())
}

/// Of a schedule's EtcdBackups (by name), those to delete so that the newest `keep` remain,
/// newest by the tick in their names; never `current`. Names without a tick are left alone.
pub fn history_to_delete(names: &[String], current: &str, keep: usize) -> Vec<String> {
    if keep == 0 {
        return Vec::new();
    }
    let mut ticked: Vec<(Timestamp, &String)> = names
        .iter()
        .filter_map(|n| {
            tick_of(n)
                .filter(|(base, _)| base == n)
                .map(|(_, t)| (t, n))
        })
        .collect();
    ticked.sort_by_key(|t| std::cmp::Reverse(t.0));
    ticked
        .into_iter()
        .skip(keep)
        .map(|(_, n)| n.clone())
        .filter(|n| n != current)
        .collect()
}

/// One run: creates this tick's EtcdBackup unless it exists, then applies `--keep`.
pub async fn run(client: Client, req: &Request) -> Result<(), Error> {
    let (name, tick) = name_and_tick(req, Timestamp::now());
    let object = backup(req, &name, tick)?;
    let api: Api<EtcdBackup> = Api::namespaced(client, &req.namespace);
    let kube = |what: String| move |source| Error::Kube { what, source };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => info!(name, tick = %tick, "created the EtcdBackup of this tick"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            info!(
                name,
                "the EtcdBackup of this tick exists already; nothing to do"
            )
        }
        Err(e) => return Err(kube(format!("creating EtcdBackup {name}"))(e)),
    }
    if req.keep > 0 {
        let list = api
            .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={}", req.schedule)))
            .await
            .map_err(kube(format!("listing the EtcdBackups of {}", req.schedule)))?;
        let names: Vec<String> = list
            .items
            .iter()
            .filter_map(|b| b.metadata.name.clone())
            .collect();
        for old in history_to_delete(&names, &name, req.keep) {
            match api.delete(&old, &DeleteParams::default()).await {
                Ok(_) => info!(name = old, keep = req.keep, "deleted an old EtcdBackup"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(kube(format!("deleting EtcdBackup {old}"))(e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            namespace: "ns".into(),
            schedule: "nightly".into(),
            cluster: "example".into(),
            storage_type: StorageType::S3,
            path_prefix: "bucket/etcd/nightly".into(),
            secret: Some("aws".into()),
            endpoint: Some("http://minio:9000".into()),
            force_path_style: true,
            timeout_in_second: 0,
            keep: 2,
            keep_snapshots: 5,
            job: Some("etcd-backup-nightly-29430060".into()),
            compression: None,
            encryption: None,
        }
    }

    #[test]
    fn compression_and_encryption_flags_reach_the_backup_and_bad_ones_are_named() {
        let mut req = request();
        req.compression = compression_of(Some("zstd"), Some(9)).unwrap();
        req.encryption = encryption_of(Some("SSE-KMS"), Some("alias/etcd".into()), true).unwrap();
        let (name, tick) = name_and_tick(&req, Timestamp::now());
        let b = backup(&req, &name, tick).unwrap();
        assert_eq!(b.spec.compression.as_ref().unwrap().level(), 9);
        let e = b.spec.s3.unwrap().encryption.unwrap();
        assert_eq!(e.mode, S3EncryptionMode::SseKms);
        assert_eq!(e.kms_key_id.as_deref(), Some("alias/etcd"));
        assert_eq!(e.bucket_key, Some(true));
        // Nothing asked, nothing set.
        assert_eq!(compression_of(None, None).unwrap(), None);
        assert_eq!(encryption_of(None, None, false).unwrap(), None);

        fn refused<T>(r: Result<T, Error>, flag: &str) {
            let e = r.map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
        refused(compression_of(Some("gzip"), None), "--compression");
        refused(
            compression_of(Some("zstd"), Some(22)),
            "--compression-level 22",
        );
        refused(compression_of(None, Some(3)), "--compression-level");
        refused(encryption_of(Some("AES"), None, false), "--s3-encryption");
        refused(
            encryption_of(Some("SSE-S3"), Some("k".into()), false),
            "--s3-kms-key-id",
        );
        refused(encryption_of(None, None, true), "--s3-bucket-key");
        let mut abs = request();
        abs.storage_type = StorageType::Abs;
        abs.encryption = encryption_of(Some("SSE-S3"), None, false).unwrap();
        refused(backup(&abs, "n", Timestamp::now()), "--storage-type S3");
        let mut ssec = request();
        ssec.secret = None;
        ssec.encryption = encryption_of(Some("SSE-C"), None, false).unwrap();
        refused(backup(&ssec, "n", Timestamp::now()), "--secret");
    }

    #[test]
    fn a_cronjob_tick_names_the_backup_and_its_path() {
        let (name, tick) = tick_of("etcd-backup-nightly-29430060").unwrap();
        assert_eq!(name, "etcd-backup-nightly-29430060");
        assert_eq!(tick.to_string(), "2025-12-15T13:00:00Z");
        // A Job started by hand for that tick names the same backup.
        assert_eq!(
            tick_of("etcd-backup-nightly-29430060-again").unwrap().0,
            name
        );
        for none in ["nightly", "29430060", "backup-1234567", "x-2943006a"] {
            assert_eq!(tick_of(none), None, "{none}");
        }
        let req = request();
        let b = backup(&req, &name, tick).unwrap();
        let s3 = b.spec.s3.as_ref().unwrap();
        assert_eq!(s3.path, "bucket/etcd/nightly_2025-12-15-13:00:00");
        assert_eq!(s3.force_path_style, Some(true));
        assert_eq!(b.spec.cluster_name.as_deref(), Some("example"));
        assert_eq!(
            b.metadata.labels.as_ref().unwrap()[SCHEDULE_LABEL],
            "nightly"
        );
        let a = b.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[SCHEDULE_PREFIX_ANNOTATION], "bucket/etcd/nightly");
        assert_eq!(a[SCHEDULE_KEEP_ANNOTATION], "5");
        // Outside a CronJob: the schedule's name and the current minute.
        let manual = Request { job: None, ..req };
        let now: Timestamp = "2025-12-15T13:00:42Z".parse().unwrap();
        assert_eq!(
            name_and_tick(&manual, now),
            ("nightly-29430060".into(), tick)
        );
    }

    #[test]
    fn history_keeps_the_newest_ticks_and_never_the_current_one() {
        let names: Vec<String> = [
            "s-29430060",
            "s-29430061",
            "s-29430059",
            "s-29430062-again",
            "hand-made",
        ]
        .map(String::from)
        .into();
        assert_eq!(history_to_delete(&names, "s-29430061", 2), ["s-29430059"]);
        assert_eq!(
            history_to_delete(&names, "s-29430059", 1),
            ["s-29430060"],
            "the current one stays even when older"
        );
        assert!(history_to_delete(&names, "s-29430061", 0).is_empty());
    }

    #[test]
    fn bad_flags_are_named() {
        let mut req = request();
        req.path_prefix = "no-bucket".into();
        let tick = Timestamp::UNIX_EPOCH;
        let err = backup(&req, "n", tick).unwrap_err().to_string();
        assert!(err.contains("--path-prefix"), "{err}");
        let req = Request {
            storage_type: StorageType::Abs,
            secret: None,
            ..request()
        };
        assert!(
            backup(&req, "n", tick)
                .unwrap_err()
                .to_string()
                .contains("--secret")
        );
    }
}
