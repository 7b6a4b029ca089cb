//! A real Prometheus (built by `hack/build-tools.sh prometheus` from the Go module that pins
//! promtool's release) on this machine, scraping the local cluster as prometheus-operator would
//! from the chart's ServiceMonitor and PodMonitor, and evaluating the chart's alerting rules.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::metrics::http_get;
use crate::operator::free_port;
use crate::repo_root;

/// A Prometheus process, stopped (by its PID) and its data removed when dropped.
pub struct Prometheus {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus with `config` (prometheus.yml as JSON, which is YAML) and `rules` (a
    /// rule file, written beside it as `rules.yaml`; the config's `rule_files` may name it).
    pub fn start(name: &str, config: &Value, rules: &str) -> Self {
        let bin = Command::new(repo_root().join("hack/build-tools.sh"))
            .arg("prometheus")
            .output()
            .expect("hack/build-tools.sh prometheus");
        assert!(
            bin.status.success(),
            "hack/build-tools.sh prometheus: {}",
            String::from_utf8_lossy(&bin.stderr)
        );
        let bin = PathBuf::from(String::from_utf8_lossy(&bin.stdout).trim()).join("prometheus");
        let dir = std::env::temp_dir().join(format!("e2e-prometheus-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rules.yaml"), rules).unwrap();
        std::fs::write(dir.join("prometheus.yml"), config.to_string()).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(&bin)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let p = Prometheus { child, addr, dir };
        let start = Instant::now();
        while http_get(&p.addr, "/-/ready").is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "Prometheus not ready in 60 s:\n{}",
                p.log_tail()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        p
    }

    /// The last 40 lines of its log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn api(&self, path: &str) -> Value {
        let body =
            http_get(&self.addr, path).unwrap_or_else(|e| panic!("{e}\n{}", self.log_tail()));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{path}: {body}");
        v["data"].clone()
    }

    /// The instant vector (or scalar) of `expr` now, as the API returns it.
    pub fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(expr)));
        match &data["result"] {
            Value::Array(v) => v.clone(),
            Value::Null => vec![],
            other => vec![other.clone()],
        }
    }

    /// The active targets, each with its `labels`, `health` and `lastError`.
    pub fn targets(&self) -> Vec<Value> {
        self.api("/api/v1/targets?state=active")["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts pending or firing now.
    pub fn alerts(&self) -> Vec<Value> {
        self.api("/api/v1/alerts")["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The state (`pending`, `firing`) of alert `name` whose labels include `labels`; None
    /// while it is inactive.
    pub fn alert_state(&self, name: &str, labels: &[(&str, &str)]) -> Option<String> {
        self.alerts().into_iter().find_map(|a| {
            let matches = a["labels"]["alertname"] == name
                && labels.iter().all(|(k, v)| a["labels"][*k] == *v);
            matches.then(|| a["state"].as_str().unwrap_or_default().to_string())
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986), for a query parameter.
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Kubernetes label name as Prometheus's service discovery spells it in its meta labels.
fn meta_name(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// `keep` relabelings for a label selector's `matchLabels` and `Exists` expressions, over the
/// meta labels of `prefix` (`__meta_kubernetes_pod` or `__meta_kubernetes_service`).
fn selector_keeps(selector: &Value, prefix: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (k, v) in selector["matchLabels"].as_object().into_iter().flatten() {
        out.push(
            json!({"action": "keep", "source_labels": [format!("{prefix}_label_{}", meta_name(k))],
            "regex": v}),
        );
    }
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert_eq!(e["operator"], "Exists", "only Exists is translated: {e}");
        let k = e["key"].as_str().unwrap_or_default();
        out.push(json!({"action": "keep", "source_labels": [format!("{prefix}_labelpresent_{}", meta_name(k))],
            "regex": "true"}));
    }
    out
}

/// The user's relabelings of a monitor's endpoint, in Prometheus's spelling.
fn user_relabelings(endpoint: &Value) -> Vec<Value> {
    endpoint["relabelings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let mut out =
                json!({"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]});
            for (from, to) in [
                ("action", "action"),
                ("regex", "regex"),
                ("replacement", "replacement"),
            ] {
                if !r[from].is_null() {
                    out[to] = r[from].clone();
                }
            }
            out
        })
        .collect()
}

/// The scrape configurations prometheus-operator generates for the ServiceMonitors and
/// PodMonitors among `objects` (rendered manifests), with Kubernetes discovery through
/// `kubeconfig`, scraping every `interval`: the same discovery role, selection, target labels
/// (`namespace`, `service`, `pod`, `container`, `endpoint`, `job`) and `honor_labels` as the
/// operator's, so that what the chart's monitors would give a user is what the rules read.
pub fn scrape_configs(objects: &[Value], kubeconfig: &Path, interval: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for o in objects {
        let (kind, name, ns) = (
            o["kind"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default(),
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
        );
        let (role, prefix, endpoints) = match kind {
            "ServiceMonitor" => (
                "endpointslice",
                "__meta_kubernetes_service",
                &o["spec"]["endpoints"],
            ),
            "PodMonitor" => (
                "pod",
                "__meta_kubernetes_pod",
                &o["spec"]["podMetricsEndpoints"],
            ),
            _ => continue,
        };
        let namespaces: Vec<Value> = match o["spec"]["namespaceSelector"]["matchNames"].as_array() {
            Some(names) => names.clone(),
            None => vec![json!(ns)],
        };
        for (i, ep) in endpoints.as_array().into_iter().flatten().enumerate() {
            let port = ep["port"].as_str().unwrap_or_default();
            let mut relabel = selector_keeps(&o["spec"]["selector"], prefix);
            let port_label = if kind == "PodMonitor" {
                "__meta_kubernetes_pod_container_port_name"
            } else {
                "__meta_kubernetes_endpointslice_port_name"
            };
            relabel.push(json!({"action": "keep", "source_labels": [port_label], "regex": port}));
            let mut targets = vec![
                ("namespace", "__meta_kubernetes_namespace"),
                ("pod", "__meta_kubernetes_pod_name"),
                ("container", "__meta_kubernetes_pod_container_name"),
            ];
            let job = if kind == "ServiceMonitor" {
                targets.push(("service", "__meta_kubernetes_service_name"));
                targets.push(("job", "__meta_kubernetes_service_name"));
                None
            } else {
                Some(format!("{ns}/{name}"))
            };
            for (target, source) in targets {
                relabel.push(json!({"source_labels": [source], "target_label": target}));
            }
            if let Some(job) = job {
                relabel.push(json!({"target_label": "job", "replacement": job}));
            }
            relabel.push(json!({"target_label": "endpoint", "replacement": port}));
            relabel.extend(user_relabelings(ep));
            out.push(json!({
                "job_name": format!("{}/{ns}/{name}/{i}", kind.to_lowercase()),
                "honor_labels": ep["honorLabels"].as_bool().unwrap_or(false),
                "scrape_interval": interval,
                "metrics_path": ep["path"].as_str().unwrap_or("/metrics"),
                "kubernetes_sd_configs": [{"role": role, "kubeconfig_file": kubeconfig,
                    "namespaces": {"names": namespaces}}],
                "relabel_configs": relabel,
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encode_keeps_unreserved_characters_only() {
        assert_eq!(
            url_encode("up{job=~\"a.*\"} > 0"),
            "up%7Bjob%3D~%22a.%2A%22%7D%20%3E%200"
        );
    }

    #[test]
    fn a_pod_monitor_becomes_a_pod_scrape_with_its_selection_labels_and_relabelings() {
        let monitor = json!({"kind": "PodMonitor", "metadata": {"name": "m", "namespace": "op"},
            "spec": {"namespaceSelector": {"matchNames": ["a"]},
                "selector": {"matchLabels": {"app": "etcd"},
                    "matchExpressions": [{"key": "etcd_cluster", "operator": "Exists"}]},
                "podMetricsEndpoints": [{"port": "metrics", "relabelings": [
                    {"sourceLabels": ["__meta_kubernetes_pod_label_etcd_cluster"], "targetLabel": "etcd_cluster"}]}]}});
        let service_monitor = json!({"kind": "ServiceMonitor", "metadata": {"name": "s", "namespace": "op"},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "x"}},
                "endpoints": [{"port": "metrics", "honorLabels": true}]}});
        let got = scrape_configs(
            &[monitor, json!({"kind": "Service"}), service_monitor],
            Path::new("/k"),
            "2s",
        );
        assert_eq!(got.len(), 2);
        let pods = &got[0];
        assert_eq!(pods["kubernetes_sd_configs"][0]["role"], "pod");
        assert_eq!(
            pods["kubernetes_sd_configs"][0]["namespaces"]["names"],
            json!(["a"])
        );
        assert_eq!(pods["honor_labels"], false);
        let relabel = pods["relabel_configs"].as_array().unwrap();
        assert_eq!(
            relabel[0]["source_labels"],
            json!(["__meta_kubernetes_pod_label_app"])
        );
        assert_eq!(
            relabel[1]["source_labels"],
            json!(["__meta_kubernetes_pod_labelpresent_etcd_cluster"])
        );
        assert!(relabel.contains(&json!({"target_label": "job", "replacement": "op/m"})));
        assert_eq!(
            relabel.last().unwrap(),
            &json!({"source_labels": ["__meta_kubernetes_pod_label_etcd_cluster"], "target_label": "etcd_cluster"})
        );
        let service = &got[1];
        assert_eq!(service["kubernetes_sd_configs"][0]["role"], "endpointslice");
        assert_eq!(
            service["kubernetes_sd_configs"][0]["namespaces"]["names"],
            json!(["op"])
        );
        assert_eq!(service["honor_labels"], true);
        assert_eq!(
            service["relabel_configs"][0]["source_labels"],
            json!(["__meta_kubernetes_service_label_app_kubernetes_io_name"])
        );
    }
}
