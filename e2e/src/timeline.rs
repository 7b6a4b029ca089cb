//! A timeline of one operation, for finding where its time goes: every change of a pod of the
//! namespace (created, scheduled, initialised, started, Ready, deleted, gone) and of its
//! EtcdClusters' `readyMembers`, as a watch delivers it, merged with what the operator logged
//! about the namespace, each at its offset from the start.

use std::io::BufRead;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::Kubectl;

type Entries = Arc<Mutex<Vec<(Duration, String)>>>;

/// Watches started by [`Timeline::start`]; [`Timeline::finish`] ends them.
pub struct Timeline {
    start: Instant,
    wall: SystemTime,
    ns: String,
    entries: Entries,
    watches: Vec<Child>,
}

impl Timeline {
    /// Starts watching the pods and EtcdClusters of `ns`; the offsets count from now.
    pub fn start(k: &Kubectl, ns: &str) -> Self {
        let entries: Entries = Arc::default();
        let (start, wall) = (Instant::now(), SystemTime::now());
        let mut watches = vec![];
        for (kind, describe) in [
            ("pods", describe_pod as fn(&Value) -> String),
            ("etcdclusters", describe_cluster),
        ] {
            let mut child = k.spawn(&[
                "get",
                kind,
                "-n",
                ns,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ]);
            let stdout = child.stdout.take().unwrap();
            let entries = entries.clone();
            std::thread::spawn(move || record(stdout, start, describe, &entries));
            watches.push(child);
        }
        Timeline {
            start,
            wall,
            ns: ns.into(),
            entries,
            watches,
        }
    }

    /// Ends the watches and returns the timeline, with the lines of the operator's log
    /// `operator_log` about the namespace since the start, in order of offset.
    pub fn finish(mut self, operator_log: Option<&Path>) -> Vec<(Duration, String)> {
        std::thread::sleep(Duration::from_millis(200));
        for w in &mut self.watches {
            let _ = w.kill();
            let _ = w.wait();
        }
        let mut all = self.entries.lock().unwrap().clone();
        if let Some(log) = operator_log {
            all.extend(log_lines(log, self.wall, &self.ns));
        }
        all.sort_by_key(|(at, _)| *at);
        all
    }

    /// The offset of now from the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Prints a timeline, one line per entry: `+12.345 s  what`.
pub fn print_timeline(title: &str, entries: &[(Duration, String)]) {
    println!("\n{title}\n");
    for (at, what) in entries {
        println!("  +{:>7.3} s  {what}", at.as_secs_f64());
    }
}

/// Records each change of the watched objects whose description differs from the last one of
/// the same object.
fn record(
    stdout: std::process::ChildStdout,
    start: Instant,
    describe: fn(&Value) -> String,
    entries: &Entries,
) {
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    let events =
        serde_json::Deserializer::from_reader(std::io::BufReader::new(stdout)).into_iter::<Value>();
    for event in events {
        let Ok(event) = event else { return };
        let at = start.elapsed();
        let object = &event["object"];
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let kind = object["kind"].as_str().unwrap_or("?");
        let what = if event["type"] == "DELETED" {
            "gone".to_string()
        } else {
            describe(object)
        };
        if last.get(&name) != Some(&what) {
            last.insert(name.clone(), what.clone());
            entries
                .lock()
                .unwrap()
                .push((at, format!("{kind} {name}: {what}")));
        }
    }
}

/// `Pending, scheduled, initialised, etcd started, Ready` and the like.
fn describe_pod(p: &Value) -> String {
    let mut parts = vec![p["status"]["phase"].as_str().unwrap_or("?").to_string()];
    if p["metadata"]["deletionTimestamp"].is_string() {
        parts.push("deleting".into());
    }
    for c in p["status"]["conditions"].as_array().into_iter().flatten() {
        if c["status"] == "True" {
            parts.push(c["type"].as_str().unwrap_or("?").to_string());
        }
    }
    for c in p["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = c["name"].as_str().unwrap_or("?");
        if c["state"]["running"].is_object() {
            parts.push(format!("{name} running"));
        } else if c["state"]["terminated"].is_object() {
            parts.push(format!("{name} terminated"));
        }
    }
    parts.join(", ")
}

/// `readyMembers 2, phase Running, members …`.
fn describe_cluster(c: &Value) -> String {
    let s = &c["status"];
    format!(
        "phase {}, readyMembers {}, members {}",
        s["phase"].as_str().unwrap_or("-"),
        s["readyMembers"],
        s["members"]["ready"]
    )
}

/// The operator's log lines about namespace `ns` since `wall`, at their offsets: the log's
/// lines start with an RFC 3339 time.
fn log_lines(log: &Path, wall: SystemTime, ns: &str) -> Vec<(Duration, String)> {
    let Ok(f) = std::fs::File::open(log) else {
        return vec![];
    };
    let needle = format!("namespace={ns}");
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains(&needle))
        .filter_map(|l| {
            let (stamp, rest) = l.split_once(' ')?;
            let at =
                time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
                    .ok()?;
            let at = SystemTime::from(at).duration_since(wall).ok()?;
            Some((at, format!("operator:{}", rest.trim_start())))
        })
        .collect()
}
