//! Scheduled backups end to end, every minute, into moto on the local cluster's bridge: one
//! schedule from the chart's `backupSchedules` (keep 2 EtcdBackups and 2 snapshots) and one
//! from `examples/backup-cronjob.yaml` applied without the chart. Each run of either leaves an
//! EtcdBackup that Succeeded and an object in storage; a Job started by hand for a tick that
//! already ran makes no second backup; the chart's schedule keeps exactly 2 of each after 3
//! runs.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use e2e::backups::{aws_secret, store_host};
use e2e::stores::Moto;
use e2e::{Kubectl, Operator, get, healthy_at_size, repo_root, until};
use serde_json::{Value, json};

const BUCKET: &str = "etcd-backups";

/// The EtcdBackups of `schedule`: (name, phase, path).
fn backups(k: &Kubectl, ns: &str, schedule: &str) -> Vec<(String, String, String)> {
    let list = k.ok(
        &[
            "get",
            "etcdbackups",
            "-n",
            ns,
            "-l",
            &format!("etcd.database.coreos.com/schedule={schedule}"),
            "-o",
            "json",
        ],
        None,
    );
    let list: Value = serde_json::from_str(&list).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            (
                b["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                b["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                b["status"]["path"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn cronjobs_from_the_chart_and_the_example_make_one_backup_per_tick_and_keep_their_history() {
    let k = Kubectl::from_env();
    k.apply_crds();
    let moto = Moto::start(&store_host());
    moto.create_bucket(BUCKET);
    let namespace = k.namespace("scheduled");
    let ns = namespace.name.as_str();
    aws_secret(&k, ns);
    let endpoint = format!("backupSchedules[0].endpoint={}", moto.url);
    // The schedule only once the cluster serves: a tick while it bootstraps would find no
    // healthy member, and its backup would fail (then be retried) as it should.
    let _plain = Operator::install(&k, ns, &[]);
    let cluster = json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "example"}, "spec": {"size": 1, "version": "3.6.16"}});
    k.ok(&["apply", "-n", ns, "-f", "-"], Some(&cluster.to_string()));
    until("1 healthy member", 120, || {
        healthy_at_size(&k, ns, "example", 1)
    });
    let _operator = Operator::install(
        &k,
        ns,
        &[
            "backupSchedules[0].name=minutely",
            "backupSchedules[0].schedule=* * * * *",
            "backupSchedules[0].cluster=example",
            "backupSchedules[0].pathPrefix=etcd-backups/chart/minutely",
            "backupSchedules[0].secret=aws",
            &endpoint,
            "backupSchedules[0].forcePathStyle=true",
            "backupSchedules[0].keep=2",
            "backupSchedules[0].keepSnapshots=2",
            "backupSchedules[0].compression.level=5",
            "backupSchedules[0].s3Encryption.mode=SSE-S3",
        ],
    );

    // The example, as a user without Helm would edit it: namespace, schedule, endpoint, image.
    let example = std::fs::read_to_string(repo_root().join("examples/backup-cronjob.yaml"))
        .unwrap()
        .replace("namespace: default", &format!("namespace: {ns}"))
        .replace("\"0 3 * * *\"", "\"* * * * *\"")
        .replace("http://minio.example.svc:9000", &moto.url)
        .replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Never");
    k.ok(&["apply", "-f", "-"], Some(&example));

    // Three runs of the chart's schedule (its EtcdBackups come and go: keep 2), two of the
    // example's; every one Succeeded with its own object.
    let mut chart_runs = BTreeSet::new();
    until(
        "3 runs of the chart's schedule, 2 of the example's",
        330,
        || {
            for (name, phase, path) in backups(&k, ns, "minutely") {
                assert_ne!(phase, "Failed", "{name}: {path}");
                if phase == "Succeeded" {
                    chart_runs.insert(name);
                }
            }
            let example_done = backups(&k, ns, "example-nightly")
                .iter()
                .filter(|(_, phase, _)| phase == "Succeeded")
                .count();
            chart_runs.len() >= 3 && example_done >= 2
        },
    );
    // The chart schedule's compression and encryption reach its backups and their objects:
    // zstd frames that moto stored encrypted.
    let (name, _, path) = backups(&k, ns, "minutely")
        .into_iter()
        .find(|(_, phase, _)| phase == "Succeeded")
        .unwrap();
    let spec = &get(&k, ns, &format!("etcdbackup/{name}"))["spec"];
    assert_eq!(
        spec["compression"],
        json!({"algorithm": "zstd", "level": 5})
    );
    assert_eq!(spec["s3"]["encryption"]["mode"], "SSE-S3");
    let key = path.strip_prefix(&format!("{BUCKET}/")).unwrap();
    assert_eq!(
        moto.header(BUCKET, key, "x-amz-server-side-encryption")
            .as_deref(),
        Some("AES256"),
        "{path}"
    );
    let head = moto.curl(&["-r", "0-3"], &format!("/{BUCKET}/{key}"));
    assert_eq!(head, [0x28, 0xb5, 0x2f, 0xfd], "{path}: not a zstd frame");

    // A later tick's backup may still be running (no path yet): judge the finished ones.
    let example_runs: Vec<_> = backups(&k, ns, "example-nightly")
        .into_iter()
        .filter(|(_, phase, _)| phase == "Succeeded")
        .collect();
    for (name, _, path) in &example_runs {
        let key = path.strip_prefix(&format!("{BUCKET}/")).unwrap();
        assert!(key.starts_with("example/nightly_"), "{name}: {path}");
        assert_eq!(moto.keys(BUCKET, key).len(), 1, "{name}: {path}");
    }

    // History: 2 EtcdBackups and 2 snapshots of the chart's schedule remain.
    until("the chart's schedule to keep 2 of each", 60, || {
        backups(&k, ns, "minutely").len() == 2 && moto.keys(BUCKET, "chart/minutely_").len() == 2
    });

    // A Job started by hand for a tick that already ran finds its backup and makes none.
    let (done, _, done_path) = example_runs[0].clone();
    let before = get(&k, ns, &format!("etcdbackup/{done}"))["metadata"]["uid"].clone();
    let again = format!("{done}-again");
    k.ok(
        &[
            "create",
            "job",
            &again,
            "--from=cronjob/etcd-backup-example",
            "-n",
            ns,
        ],
        None,
    );
    k.ok(
        &[
            "wait",
            "-n",
            ns,
            &format!("job/{again}"),
            "--for=condition=Complete",
            "--timeout=120s",
        ],
        None,
    );
    let logs = k.ok(&["logs", "-n", ns, &format!("job/{again}")], None);
    assert!(logs.contains("exists already"), "{logs}");
    assert_eq!(
        get(&k, ns, &format!("etcdbackup/{done}"))["metadata"]["uid"],
        before,
        "the backup of that tick was made again"
    );
    let key = done_path.strip_prefix(&format!("{BUCKET}/")).unwrap();
    assert_eq!(moto.keys(BUCKET, key).len(), 1);
    eprintln!(
        "chart schedule runs: {chart_runs:?}; example runs: {:?}",
        example_runs.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
}
