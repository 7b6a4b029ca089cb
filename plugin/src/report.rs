//! `kubectl etcd report`: one tarball for a bug report: the EtcdCluster, its pods, Services,
//! claims, disruption budget, the namespace's EtcdBackups, EtcdRestores and Events, every
//! member's log (and its previous container's), and the operator's logs; Secrets only by name
//! and key, their values redacted. What the user may not read is listed in `errors.txt`
//! instead of failing the report.

use etcd_operator::api::{EtcdBackup, EtcdCluster, EtcdRestore};
use etcd_operator::kube::names::CLUSTER_LABEL;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The operator's pods, as the chart labels them.
const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

#[derive(clap::Args)]
pub struct Args {
    /// The EtcdCluster.
    name: String,
    /// Where to write the tarball; `<name>-report-<UTC time>.tar` by default.
    #[arg(long, short = 'f')]
    file: Option<String>,
    /// The operator's namespace (its logs); by default the cluster's, then every namespace
    /// the user may list pods in.
    #[arg(long)]
    operator_namespace: Option<String>,
}

/// The files of the tarball, gathered.
#[derive(Default)]
struct Files {
    files: Vec<(String, Vec<u8>)>,
    errors: Vec<String>,
}

impl Files {
    fn yaml<T: Serialize>(&mut self, name: &str, value: &T) {
        match serde_saphyr::to_string(value) {
            Ok(text) => self.files.push((name.into(), text.into_bytes())),
            Err(e) => self.errors.push(format!("{name}: {e}")),
        }
    }
}

pub async fn run(client: Client, ns: &str, args: Args) -> anyhow::Result<()> {
    let name = args.name.as_str();
    let mut out = Files::default();
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let cluster = clusters
        .get(name)
        .await
        .map_err(|e| crate::explain(e, "get", &format!("EtcdCluster {name}"), ns))?;
    out.yaml("etcdcluster.yaml", &cluster);
    let members = format!("{CLUSTER_LABEL}={name}");
    let pods: Vec<Pod> = list(&client, ns, &members, "pods", &mut out).await;
    out.yaml("pods.yaml", &pods);
    let services: Vec<Service> = list(&client, ns, &members, "services", &mut out).await;
    out.yaml("services.yaml", &services);
    let claims: Vec<PersistentVolumeClaim> =
        list(&client, ns, &members, "persistentvolumeclaims", &mut out).await;
    out.yaml("persistentvolumeclaims.yaml", &claims);
    let budgets: Vec<PodDisruptionBudget> =
        list(&client, ns, &members, "poddisruptionbudgets", &mut out).await;
    out.yaml("poddisruptionbudgets.yaml", &budgets);
    let backups: Vec<EtcdBackup> = list(&client, ns, "", "etcdbackups", &mut out).await;
    out.yaml("etcdbackups.yaml", &backups);
    let restores: Vec<EtcdRestore> = list(&client, ns, "", "etcdrestores", &mut out).await;
    out.yaml("etcdrestores.yaml", &restores);
    let events: Vec<Event> = list(&client, ns, "", "events", &mut out).await;
    out.yaml("events.yaml", &events);
    let secrets: Vec<Secret> = list(&client, ns, "", "secrets", &mut out).await;
    out.yaml("secrets-redacted.yaml", &redacted(&secrets));
    for pod in &pods {
        logs(&client, ns, &pod.name_any(), "etcd", &mut out).await;
    }
    operator_logs(&client, ns, args.operator_namespace.as_deref(), &mut out).await;
    if !out.errors.is_empty() {
        let text = out.errors.join("\n") + "\n";
        out.files.push(("errors.txt".into(), text.into_bytes()));
    }
    let file = args.file.clone().unwrap_or_else(|| {
        let at = k8s_openapi::jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S");
        format!("{name}-report-{at}.tar")
    });
    let prefix = format!("{name}-report");
    let tar = tarball(&prefix, &out.files);
    std::fs::write(&file, tar).map_err(|e| anyhow::anyhow!("writing {file}: {e}"))?;
    println!(
        "wrote {file}: {} files{}",
        out.files.len(),
        if out.errors.is_empty() {
            String::new()
        } else {
            format!(", {} things not readable (errors.txt)", out.errors.len())
        }
    );
    Ok(())
}

/// The objects of a kind in the namespace (with `labels`, when not empty); what cannot be read
/// is noted, not fatal.
async fn list<K>(client: &Client, ns: &str, labels: &str, what: &str, out: &mut Files) -> Vec<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let mut params = ListParams::default();
    if !labels.is_empty() {
        params = params.labels(labels);
    }
    match api.list(&params).await {
        Ok(list) => list.items,
        Err(e) => {
            out.errors.push(format!("list {what} in {ns}: {e}"));
            Vec::new()
        }
    }
}

/// Secrets by name, type and keys, each value replaced by its length.
fn redacted(secrets: &[Secret]) -> Vec<serde_json::Value> {
    secrets
        .iter()
        .map(|s| {
            let keys: serde_json::Map<String, serde_json::Value> = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), format!("<redacted: {} bytes>", v.0.len()).into()))
                .collect();
            serde_json::json!({"name": s.name_any(), "type": s.type_, "data": keys})
        })
        .collect()
}

/// A container's log, and its previous instance's if it restarted.
async fn logs(client: &Client, ns: &str, pod: &str, container: &str, out: &mut Files) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for previous in [false, true] {
        let params = LogParams {
            container: Some(container.into()),
            previous,
            ..LogParams::default()
        };
        let file = format!("logs/{pod}{}.log", if previous { ".previous" } else { "" });
        match api.logs(pod, &params).await {
            Ok(text) => out.files.push((file, text.into_bytes())),
            // A container that never restarted has no previous log: nothing to note.
            Err(_) if previous => {}
            Err(e) => out.errors.push(format!("logs of {pod}: {e}")),
        }
    }
}

/// The operator's logs: in `ns` (the operator's namespace, or the cluster's), else wherever
/// the user may list pods.
async fn operator_logs(client: &Client, cluster_ns: &str, ns: Option<&str>, out: &mut Files) {
    let params = ListParams::default().labels(OPERATOR_SELECTOR);
    let mut found: Vec<Pod> = Vec::new();
    let here: Api<Pod> = Api::namespaced(client.clone(), ns.unwrap_or(cluster_ns));
    if let Ok(list) = here.list(&params).await {
        found = list.items;
    }
    if found.is_empty() && ns.is_none() {
        let all: Api<Pod> = Api::all(client.clone());
        match all.list(&params).await {
            Ok(list) => found = list.items,
            Err(e) => out
                .errors
                .push(format!("operator pods (give --operator-namespace): {e}")),
        }
    }
    for pod in found {
        let pod_ns = pod.namespace().unwrap_or_default();
        logs(client, &pod_ns, &pod.name_any(), "operator", out).await;
    }
}

/// A tar archive (ustar) of `files` under the directory `prefix`.
pub fn tarball(prefix: &str, files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, data) in files {
        let mut header = [0u8; 512];
        let path = format!("{prefix}/{name}");
        let path = &path.as_bytes()[..path.len().min(99)];
        header[..path.len()].copy_from_slice(path);
        let octal = |field: &mut [u8], value: u64| {
            let text = format!("{value:0width$o}", width = field.len() - 1);
            field[..text.len()].copy_from_slice(text.as_bytes());
        };
        octal(&mut header[100..108], 0o644);
        octal(&mut header[108..116], 0);
        octal(&mut header[116..124], 0);
        octal(&mut header[124..136], data.len() as u64);
        let now = k8s_openapi::jiff::Timestamp::now()
            .as_second()
            .unsigned_abs();
        octal(&mut header[136..148], now);
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is computed with its own field as spaces.
        header[148..156].copy_from_slice(b"        ");
        let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        let text = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(text.as_bytes());
        tar.extend_from_slice(&header);
        tar.extend_from_slice(data);
        tar.resize(tar.len().div_ceil(512) * 512, 0);
    }
    tar.resize(tar.len() + 1024, 0);
    tar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tarball_is_read_back_by_tar() {
        let files = vec![
            (
                "etcdcluster.yaml".to_string(),
                b"kind: EtcdCluster\n".to_vec(),
            ),
            ("logs/example-a.log".to_string(), vec![b'x'; 1000]),
        ];
        let dir = std::env::temp_dir().join(format!("kubectl-etcd-tar-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.tar");
        std::fs::write(&file, tarball("example-report", &files)).unwrap();
        let out = std::process::Command::new("tar")
            .arg("-xvf")
            .arg(&file)
            .arg("-C")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read = |f: &str| std::fs::read(dir.join("example-report").join(f)).unwrap();
        assert_eq!(read("etcdcluster.yaml"), b"kind: EtcdCluster\n");
        assert_eq!(read("logs/example-a.log"), vec![b'x'; 1000]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn secrets_are_named_with_their_keys_never_their_values() {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "aws"}, "type": "Opaque",
            "data": {"credentials": "c2VjcmV0"}
        }))
        .unwrap();
        let shown = serde_json::to_string(&redacted(&[secret])).unwrap();
        assert!(
            shown.contains("\"credentials\":\"<redacted: 6 bytes>\""),
            "{shown}"
        );
        assert!(
            !shown.contains("c2VjcmV0") && !shown.contains("secret\""),
            "{shown}"
        );
    }
}
