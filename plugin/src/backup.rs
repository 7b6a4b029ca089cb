//! `kubectl etcd backup`: an EtcdBackup of the cluster now, with the storage settings of its
//! newest EtcdBackup (so a user who has backups set up needs no flags) or the flags, waited for
//! with a line per step. The operator takes the snapshot, as for any EtcdBackup: the user needs
//! the right to create EtcdBackups, not the storage credentials.

use std::time::Duration;

use anyhow::{Context as _, bail};
use etcd_operator::api::{
    AbsSource, BackupPhase, EtcdBackup, EtcdBackupSpec, EtcdCluster, GcsSource, S3Source,
    SCHEDULE_PREFIX_ANNOTATION, StorageSection, StorageType,
};
use etcd_operator::store::naming;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::explain;
use crate::follow::{Step, follow, line};

/// Labels the EtcdBackups this command makes.
const MADE_BY: &str = "app.kubernetes.io/created-by";

#[derive(clap::Args)]
pub struct Args {
    /// The EtcdCluster.
    name: String,
    /// Where to write, `<bucket>/<key>`; by default `<prefix>_<UTC time>` beside the cluster's
    /// newest succeeded EtcdBackup (its schedule's prefix, or its path).
    #[arg(long)]
    to: Option<String>,
    /// S3, ABS or GCS; by default that of the cluster's newest succeeded EtcdBackup, else S3.
    #[arg(long)]
    storage_type: Option<String>,
    /// The storage Secret, in the coreos format of the storage type.
    #[arg(long)]
    secret: Option<String>,
    /// S3: the endpoint of an S3-compatible server.
    #[arg(long)]
    endpoint: Option<String>,
    /// S3: the bucket in the path, as S3-compatible servers need.
    #[arg(long)]
    force_path_style: bool,
    /// The EtcdBackup's name; by default `<cluster>-backup-<UTC time>`.
    #[arg(long)]
    backup_name: Option<String>,
    /// Create the EtcdBackup and return without waiting for it.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for the backup to succeed or fail.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

pub async fn run(client: Client, ns: &str, args: Args) -> anyhow::Result<()> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    clusters
        .get(&args.name)
        .await
        .map_err(|e| explain(e, "get", &format!("EtcdCluster {}", args.name), ns))?;
    let backups: Api<EtcdBackup> = Api::namespaced(client, ns);
    let all = backups
        .list(&ListParams::default())
        .await
        .map_err(|e| explain(e, "list", "etcdbackups", ns))?
        .items;
    let template = newest_succeeded(&all, &args.name);
    let now = Timestamp::now();
    let backup = backup_of(&args, ns, template, now)?;
    let name = backup.name_any();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .map_err(|e| explain(e, "create", &format!("EtcdBackup {name}"), ns))?;
    println!(
        "created EtcdBackup {name}: {} to {}",
        args.name,
        StorageSection::from(&backup.spec)
            .path()
            .map(String::from)
            .unwrap_or_default()
    );
    if args.no_wait {
        return Ok(());
    }
    wait(&backups, &name, ns, Duration::from_secs(args.timeout)).await
}

/// The cluster's EtcdBackup that succeeded last (by its last success, to the nanosecond; the
/// creation time has seconds only, and two backups made in one second tied): its storage
/// settings have worked, where a failed backup's may be what failed.
pub fn newest_succeeded<'a>(backups: &'a [EtcdBackup], cluster: &str) -> Option<&'a EtcdBackup> {
    backups
        .iter()
        .filter(|b| b.spec.cluster_name.as_deref() == Some(cluster))
        .filter_map(|b| {
            let s = b.status.as_ref().filter(|s| s.succeeded)?;
            let at: Timestamp = s.last_success_date.as_deref()?.parse().ok()?;
            Some((at, b))
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, b)| b)
}

/// The EtcdBackup to create. Pure.
pub fn backup_of(
    args: &Args,
    ns: &str,
    template: Option<&EtcdBackup>,
    now: Timestamp,
) -> anyhow::Result<EtcdBackup> {
    let kind = match (&args.storage_type, template) {
        (Some(t), _) => serde_json::from_value(serde_json::Value::String(t.clone()))
            .with_context(|| format!("--storage-type {t}: not S3, ABS or GCS"))?,
        (None, Some(t)) => t.spec.storage_type,
        (None, None) => StorageType::S3,
    };
    let same_kind = template.filter(|t| t.spec.storage_type == kind);
    let path = match (&args.to, same_kind) {
        (Some(to), _) => to.clone(),
        (None, Some(t)) => {
            let base = t
                .annotations()
                .get(SCHEDULE_PREFIX_ANNOTATION)
                .cloned()
                .or_else(|| StorageSection::from(&t.spec).path().map(String::from))
                .unwrap_or_default();
            naming::scheduled_name(&base, now)
        }
        (None, None) => bail!(
            "no EtcdBackup of EtcdCluster {} in namespace {ns} to take storage settings \
             from: give --to <bucket>/<key> and --secret (and --endpoint for an \
             S3-compatible server)",
            args.name
        ),
    };
    if etcd_operator::store::storage::split_path(&path).is_none() {
        bail!("--to {path:?}: must be <bucket>/<key>");
    }
    let mut spec = EtcdBackupSpec {
        etcd_endpoints: vec![],
        cluster_name: Some(args.name.clone()),
        storage_type: kind,
        // One snapshot now: a template's interval and retention are its own.
        backup_policy: same_kind
            .and_then(|t| t.spec.backup_policy.clone())
            .map(|p| etcd_operator::api::BackupPolicy {
                timeout_in_second: p.timeout_in_second,
                ..Default::default()
            }),
        s3: None,
        abs: None,
        gcs: None,
        oss: None,
        client_tls_secret: same_kind.and_then(|t| t.spec.client_tls_secret.clone()),
        compression: same_kind.and_then(|t| t.spec.compression.clone()),
    };
    set_storage(&mut spec, args, same_kind, path)?;
    let at = now.strftime("%Y%m%d-%H%M%S").to_string();
    Ok(EtcdBackup {
        metadata: ObjectMeta {
            name: Some(
                args.backup_name
                    .clone()
                    .unwrap_or_else(|| format!("{}-backup-{at}", args.name)),
            ),
            namespace: Some(ns.to_string()),
            labels: Some([(MADE_BY.to_string(), "kubectl-etcd".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The storage section: the template's (same type), the flags over it.
fn set_storage(
    spec: &mut EtcdBackupSpec,
    args: &Args,
    template: Option<&EtcdBackup>,
    path: String,
) -> anyhow::Result<()> {
    let t = template.map(|t| &t.spec);
    match spec.storage_type {
        StorageType::S3 => {
            let base = t.and_then(|t| t.s3.clone());
            spec.s3 = Some(S3Source {
                path,
                aws_secret: args
                    .secret
                    .clone()
                    .or(base.as_ref().and_then(|b| b.aws_secret.clone())),
                endpoint: args
                    .endpoint
                    .clone()
                    .or(base.as_ref().and_then(|b| b.endpoint.clone())),
                force_path_style: (args.force_path_style
                    || base.as_ref().and_then(|b| b.force_path_style) == Some(true))
                .then_some(true),
                encryption: base.and_then(|b| b.encryption),
            });
        }
        StorageType::Abs => {
            let secret = args
                .secret
                .clone()
                .or(t.and_then(|t| t.abs.as_ref()).map(|a| a.abs_secret.clone()));
            spec.abs = Some(AbsSource {
                path,
                abs_secret: secret.context("--secret is required for ABS")?,
            });
        }
        StorageType::Gcs => {
            spec.gcs = Some(GcsSource {
                path,
                gcp_secret: args.secret.clone().or(t
                    .and_then(|t| t.gcs.as_ref())
                    .and_then(|g| g.gcp_secret.clone())),
            });
        }
        StorageType::Oss => bail!("--storage-type OSS is not implemented by etcd-operator"),
    }
    Ok(())
}

/// Prints each new phase and message until the backup succeeds (Ok) or fails (Err).
async fn wait(
    api: &Api<EtcdBackup>,
    name: &str,
    ns: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    follow(&format!("EtcdBackup {name}"), timeout, || async {
        let s = api
            .get(name)
            .await
            .map_err(|e| explain(e, "get", &format!("EtcdBackup {name}"), ns))?
            .status
            .unwrap_or_default();
        let message = s
            .conditions
            .iter()
            .find(|c| c.status == "True")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let now = line(s.phase.map(|p| format!("{p:?}")), &message);
        let step = match s.phase {
            Some(BackupPhase::Succeeded) => Step::Done(format!(
                "succeeded: {} ({} bytes, sha256 {}, revision {})",
                s.path,
                s.size.unwrap_or_default(),
                s.sha256,
                s.etcd_revision.unwrap_or_default()
            )),
            Some(BackupPhase::Failed) => Step::Failed(s.reason),
            _ => Step::Going,
        };
        Ok((now, step))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(flags: &[&str]) -> Args {
        let mut all = vec!["kubectl-etcd", "example"];
        all.extend_from_slice(flags);
        Cli::parse_from(all).args
    }

    #[test]
    fn a_backup_now_takes_the_newest_backup_s_storage_and_the_flags_over_it() {
        let template: EtcdBackup = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
            "metadata": {"name": "nightly-29430060",
                "annotations": {SCHEDULE_PREFIX_ANNOTATION: "bucket/etcd/nightly"}},
            "spec": {"clusterName": "example", "storageType": "S3",
                "backupPolicy": {"timeoutInSecond": 90, "backupIntervalInSecond": 3600},
                "compression": {"algorithm": "zstd"},
                "s3": {"path": "bucket/etcd/nightly_2026-11-26-03:00:00", "awsSecret": "aws",
                    "endpoint": "http://minio:9000", "forcePathStyle": true,
                    "encryption": {"mode": "SSE-S3"}}}
        }))
        .unwrap();
        let now: Timestamp = "2026-11-26T10:05:00Z".parse().unwrap();
        let b = backup_of(&args(&[]), "ns", Some(&template), now).unwrap();
        assert_eq!(b.name_any(), "example-backup-20261126-100500");
        let s3 = b.spec.s3.as_ref().unwrap();
        assert_eq!(s3.path, "bucket/etcd/nightly_2026-11-26-10:05:00");
        assert_eq!(s3.aws_secret.as_deref(), Some("aws"));
        assert!(s3.encryption.is_some() && b.spec.compression.is_some());
        let policy = b.spec.backup_policy.unwrap();
        assert_eq!(
            (policy.timeout_in_second, policy.backup_interval_in_second),
            (Some(90), None)
        );

        let b = backup_of(
            &args(&["--to", "other/key", "--secret", "s"]),
            "ns",
            Some(&template),
            now,
        )
        .unwrap();
        let s3 = b.spec.s3.unwrap();
        assert_eq!(
            (s3.path.as_str(), s3.aws_secret.as_deref()),
            ("other/key", Some("s"))
        );

        // The template is the backup that succeeded last, not the one made last.
        let with = |name: &str, at: &str| {
            let mut b = template.clone();
            b.metadata.name = Some(name.into());
            b.status =
                serde_json::from_value(json!({"succeeded": true, "lastSuccessDate": at})).unwrap();
            b
        };
        let all = [
            with("periodic", "2026-11-26T10:00:09.9Z"),
            with("later-made", "2026-11-26T10:00:09.1Z"),
        ];
        assert_eq!(
            newest_succeeded(&all, "example").unwrap().name_any(),
            "periodic"
        );

        // Nothing to take settings from, and no --to: the error says what to give.
        let e = backup_of(&args(&[]), "ns", None, now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--to <bucket>/<key>"), "{e}");
        let e = backup_of(&args(&["--to", "nokey"]), "ns", None, now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be <bucket>/<key>"), "{e}");
    }
}
