//! `kubectl etcd restore`: an EtcdRestore of a backup (an EtcdBackup by name, or a path in the
//! store of the cluster's newest succeeded EtcdBackup) into the cluster, after the user
//! confirmed by typing the cluster's name (or `--yes`), waited for with a line per step. The
//! operator verifies the snapshot and keeps what it replaces; this command only asks for it.

use std::io::{BufRead, IsTerminal as _, Write};
use std::time::Duration;

use anyhow::{Context as _, bail};
use etcd_operator::api::{
    EtcdBackup, EtcdCluster, EtcdRestore, EtcdRestoreSpec, RestorePhase, RestoreTo, StorageSection,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::explain;
use crate::follow::{Step, follow, line};

#[derive(clap::Args)]
pub struct Args {
    /// The EtcdCluster to restore into (its members are replaced; the object is kept).
    name: String,
    /// An EtcdBackup of the namespace (its last snapshot), or a path `<bucket>/<key>` in the
    /// store of the cluster's newest succeeded EtcdBackup.
    #[arg(long)]
    from: String,
    /// Restore to this revision of the backed-up cluster: `--from` then names an EtcdBackup
    /// with `backupPolicy.continuous`, whose archive holds the changes after its snapshots.
    #[arg(long, conflicts_with = "to_time")]
    to_revision: Option<i64>,
    /// Restore to this moment, RFC 3339 (`2026-11-27T10:15:00Z`), as `--to-revision`.
    #[arg(long)]
    to_time: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Create the EtcdRestore and return without waiting for it.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for the restore to complete or fail.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
}

pub async fn run(client: Client, ns: &str, args: Args) -> anyhow::Result<()> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    clusters
        .get(&args.name)
        .await
        .map_err(|e| explain(e, "get", &format!("EtcdCluster {}", args.name), ns))?;
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), ns);
    let all = backups
        .list(&ListParams::default())
        .await
        .map_err(|e| explain(e, "list", "etcdbackups", ns))?
        .items;
    let to = match (args.to_revision, &args.to_time) {
        (None, None) => None,
        (revision, time) => Some(RestoreTo {
            revision,
            time: time.clone(),
        }),
    };
    let (spec, what) = match to {
        None => spec_of(&args.name, &args.from, &all)?,
        Some(to) => point_spec_of(&args.name, &args.from, &all, to)?,
    };
    if !args.yes && !confirmed(ns, &args.name, &what)? {
        bail!("not confirmed: nothing was changed");
    }
    let at = Timestamp::now().strftime("%Y%m%d-%H%M%S").to_string();
    let name = format!("{}-restore-{at}", args.name);
    let mut restore = EtcdRestore::new(&name, spec);
    restore.metadata = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(ns.to_string()),
        labels: Some(
            [(
                "app.kubernetes.io/created-by".to_string(),
                "kubectl-etcd".to_string(),
            )]
            .into(),
        ),
        ..ObjectMeta::default()
    };
    let restores: Api<EtcdRestore> = Api::namespaced(client, ns);
    restores
        .create(&PostParams::default(), &restore)
        .await
        .map_err(|e| explain(e, "create", &format!("EtcdRestore {name}"), ns))?;
    println!(
        "created EtcdRestore {name}: {what} into EtcdCluster {}",
        args.name
    );
    if args.no_wait {
        return Ok(());
    }
    wait(&restores, &name, ns, Duration::from_secs(args.timeout)).await
}

/// The restore's spec and what it restores, in words. Pure.
pub fn spec_of(
    cluster: &str,
    from: &str,
    backups: &[EtcdBackup],
) -> anyhow::Result<(EtcdRestoreSpec, String)> {
    if let Some(b) = backups.iter().find(|b| b.name_any() == from) {
        let status = b.status.clone().unwrap_or_default();
        if status.path.is_empty() || !status.succeeded {
            bail!("EtcdBackup {from} has no succeeded snapshot to restore");
        }
        let what = format!(
            "EtcdBackup {from}'s snapshot {} (revision {}, taken {})",
            status.path,
            status.etcd_revision.unwrap_or_default(),
            status.last_success_date.unwrap_or_default()
        );
        let spec = EtcdRestoreSpec::of(StorageSection::from(&b.spec), &status.path, cluster);
        return Ok((spec, what));
    }
    if etcd_operator::store::storage::split_path(from).is_none() {
        bail!("--from {from:?}: neither an EtcdBackup of this namespace nor <bucket>/<key>");
    }
    let store = crate::backup::newest_succeeded(backups, cluster).with_context(|| {
        format!(
            "--from {from}: no succeeded EtcdBackup of EtcdCluster {cluster} to take the \
                 store's settings from; write an EtcdRestore yourself"
        )
    })?;
    let spec = EtcdRestoreSpec::of(StorageSection::from(&store.spec), from, cluster);
    Ok((
        spec,
        format!("{from} (in the store of EtcdBackup {})", store.name_any()),
    ))
}

/// A restore to a point: the spec names the archiving EtcdBackup `from`'s path (its snapshots
/// and its chunks) and the point. Pure.
pub fn point_spec_of(
    cluster: &str,
    from: &str,
    backups: &[EtcdBackup],
    to: RestoreTo,
) -> anyhow::Result<(EtcdRestoreSpec, String)> {
    let b = backups
        .iter()
        .find(|b| b.name_any() == from)
        .with_context(|| {
            format!(
                "--from {from}: a restore to a revision or a time names an EtcdBackup of this \
                 namespace with backupPolicy.continuous"
            )
        })?;
    if b.spec.continuous().is_none() {
        bail!(
            "EtcdBackup {from} does not archive changes (spec.backupPolicy.continuous on a \
             periodic backup): it can restore its snapshots only (leave out --to-revision and \
             --to-time)"
        );
    }
    let path = StorageSection::from(&b.spec)
        .path()
        .map(String::from)
        .with_context(|| format!("EtcdBackup {from} names no storage path"))?;
    let point = match (&to.revision, &to.time) {
        (Some(r), _) => format!("revision {r}"),
        (None, Some(t)) => t.clone(),
        (None, None) => bail!("give --to-revision or --to-time"),
    };
    let mut spec = EtcdRestoreSpec::of(StorageSection::from(&b.spec), &path, cluster);
    spec.restore_to = Some(to);
    Ok((
        spec,
        format!("EtcdBackup {from}'s archive ({path}) at {point}"),
    ))
}

/// Asks the user to type the cluster's name.
fn confirmed(ns: &str, cluster: &str, what: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("standard input is not a terminal, so nothing can be confirmed: pass --yes");
    }
    confirm(
        std::io::stdin().lock(),
        std::io::stdout(),
        ns,
        cluster,
        what,
    )
}

/// The prompt, answered from `input`: only the cluster's own name goes on.
fn confirm(
    mut input: impl BufRead,
    mut out: impl Write,
    ns: &str,
    cluster: &str,
    what: &str,
) -> anyhow::Result<bool> {
    write!(
        out,
        "This replaces every member of EtcdCluster {ns}/{cluster} with {what}.\n\
         What the cluster holds now is kept as a safety snapshot beside it.\n\
         Type the cluster's name to go on: "
    )?;
    out.flush()?;
    let mut line = String::new();
    input.read_line(&mut line)?;
    Ok(line.trim() == cluster)
}

/// Prints each new phase and message until the restore completes (Ok) or fails (Err).
async fn wait(
    api: &Api<EtcdRestore>,
    name: &str,
    ns: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    follow(&format!("EtcdRestore {name}"), timeout, || async {
        let s = api
            .get(name)
            .await
            .map_err(|e| explain(e, "get", &format!("EtcdRestore {name}"), ns))?
            .status
            .unwrap_or_default();
        let message = s
            .conditions
            .first()
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let now = line(s.phase.map(|p| format!("{p:?}")), &message);
        let step = match s.phase {
            Some(RestorePhase::Completed) => Step::Done(format!(
                "completed: restored revision {}; the cluster as it was is at {}",
                s.restored_revision.unwrap_or_default(),
                if s.pre_restore_path.is_empty() {
                    "(nothing to keep)"
                } else {
                    &s.pre_restore_path
                }
            )),
            Some(RestorePhase::Failed) => Step::Failed(s.reason),
            _ => Step::Going,
        };
        Ok((now, step))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_prompt_goes_on_only_when_the_cluster_s_name_is_typed() {
        let ask = |typed: &str| {
            let mut shown = Vec::new();
            let go = confirm(
                typed.as_bytes(),
                &mut shown,
                "ns",
                "example",
                "backup nightly",
            );
            (go.unwrap(), String::from_utf8(shown).unwrap())
        };
        let (go, shown) = ask("example\n");
        assert!(go);
        assert!(
            shown.contains("EtcdCluster ns/example with backup nightly"),
            "{shown}"
        );
        assert!(ask("  example  \n").0);
        for typed in ["", "\n", "y\n", "yes\n", "examples\n", "ns/example\n"] {
            assert!(!ask(typed).0, "{typed:?} went on");
        }
    }

    #[test]
    fn a_restore_names_a_backup_or_a_path_in_the_newest_backup_s_store() {
        let backup: EtcdBackup = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
            "metadata": {"name": "nightly"},
            "spec": {"clusterName": "example", "storageType": "S3",
                "s3": {"path": "bucket/etcd/nightly", "awsSecret": "aws",
                    "endpoint": "http://minio:9000"}},
            "status": {"succeeded": true, "lastSuccessDate": "2026-11-26T03:00:05Z",
                "path": "bucket/etcd/nightly_v9_2026-11-26-03:00:00",
                "etcdRevision": 9}
        }))
        .unwrap();
        let (spec, what) = spec_of("example", "nightly", std::slice::from_ref(&backup)).unwrap();
        let s3 = spec.s3.unwrap();
        assert_eq!(s3.path, "bucket/etcd/nightly_v9_2026-11-26-03:00:00");
        assert_eq!(s3.endpoint.as_deref(), Some("http://minio:9000"));
        assert_eq!(spec.etcd_cluster.name, "example");
        assert!(what.contains("revision 9"), "{what}");

        let (spec, _) = spec_of("example", "bucket/old.db", std::slice::from_ref(&backup)).unwrap();
        let s3 = spec.s3.unwrap();
        assert_eq!(
            (s3.path.as_str(), s3.aws_secret.as_deref()),
            ("bucket/old.db", Some("aws"))
        );

        let e = spec_of("example", "nope", &[backup])
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither an EtcdBackup"), "{e}");
        let e = spec_of("example", "bucket/x.db", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no succeeded EtcdBackup"), "{e}");
    }

    #[test]
    fn a_restore_to_a_point_names_an_archiving_backup_s_path_and_the_point() {
        let backup = |continuous: bool| -> EtcdBackup {
            let mut policy = json!({"backupIntervalInSecond": 3600});
            if continuous {
                policy["continuous"] = json!({"flushInterval": "5s"});
            }
            serde_json::from_value(json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
                "metadata": {"name": "archived"},
                "spec": {"clusterName": "example", "storageType": "S3",
                    "s3": {"path": "bucket/etcd/example", "awsSecret": "aws"},
                    "backupPolicy": policy}
            }))
            .unwrap()
        };
        let to = RestoreTo {
            revision: Some(1234),
            time: None,
        };
        let (spec, what) =
            point_spec_of("example", "archived", &[backup(true)], to.clone()).unwrap();
        assert_eq!(spec.s3.as_ref().unwrap().path, "bucket/etcd/example");
        assert_eq!(spec.restore_to, Some(to.clone()));
        assert!(what.contains("revision 1234"), "{what}");
        let refused = point_spec_of("example", "archived", &[backup(false)], to.clone());
        assert!(
            refused
                .unwrap_err()
                .to_string()
                .contains("does not archive changes"),
            "a backup without an archive is named"
        );
        assert!(point_spec_of("example", "other", &[backup(true)], to).is_err());
    }
}
