//! `kubectl etcd status`: what the EtcdCluster's status, its member pods, its nodes, its
//! newest backup and its Events say, gathered into one report and printed for people or
//! scripts. Reading nodes (for zones) is optional: a user without that right sees no zone.

use std::collections::BTreeMap;

use etcd_operator::api::{
    BackupPhase, Condition, EtcdBackup, EtcdCluster, MemberRole, find_condition,
};
use etcd_operator::kube::names::CLUSTER_LABEL;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use crate::{Output, explain};

/// Events shown.
const EVENTS: usize = 10;

/// What `status` prints: in text, or whole as JSON or YAML.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub reason: String,
    pub available: bool,
    pub size: i32,
    pub desired_size: i32,
    pub ready_members: i32,
    pub version: String,
    pub conditions: Vec<Condition>,
    pub leader: Option<String>,
    pub members: Vec<MemberRow>,
    pub last_backup: Option<BackupRow>,
    /// The continuous archive, where one runs.
    pub archive: Option<ArchiveRow>,
    pub events: Vec<EventRow>,
}

/// A cluster's continuous archive (an EtcdBackup with `backupPolicy.continuous`).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveRow {
    pub backup: String,
    /// The earliest revision a restore can reach.
    pub first_revision: Option<i64>,
    /// The newest change stored.
    pub last_revision: Option<i64>,
    pub last_time: Option<String>,
    /// How long the oldest change received and not yet stored had waited.
    pub lag_milliseconds: Option<i64>,
    pub message: String,
}

/// One member.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    pub name: String,
    pub id: String,
    pub role: String,
    pub version: String,
    pub healthy: bool,
    pub raft_index: Option<i64>,
    /// How far its raft index is behind the leader's.
    pub lag: Option<i64>,
    pub db_size: Option<i64>,
    /// Bytes in use: what a defragmentation would shrink the database to.
    pub db_size_in_use: Option<i64>,
    /// Alarms raised for the member (`NOSPACE`, `CORRUPT`).
    pub alarms: Vec<String>,
    pub pod_ready: bool,
    pub node: String,
    pub zone: String,
}

/// The newest succeeded backup of the cluster.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupRow {
    pub name: String,
    pub path: String,
    pub at: String,
    pub age_seconds: i64,
    pub revision: Option<i64>,
    pub size: Option<i64>,
}

/// One Event on the cluster.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    pub at: String,
    pub type_: String,
    pub reason: String,
    pub message: String,
}

pub async fn run(client: Client, ns: &str, name: &str, output: Output) -> anyhow::Result<()> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let cluster = clusters
        .get(name)
        .await
        .map_err(|e| explain(e, "get", &format!("EtcdCluster {name}"), ns))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={name}")))
        .await
        .map_err(|e| explain(e, "list", "pods", ns))?
        .items;
    let zones = zones(&client).await;
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), ns);
    let backups = backups
        .list(&ListParams::default())
        .await
        .map_err(|e| explain(e, "list", "etcdbackups", ns))?
        .items;
    let events: Api<Event> = Api::namespaced(client, ns);
    let events = events
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=EtcdCluster,involvedObject.name={name}"
        )))
        .await
        .map_err(|e| explain(e, "list", "events", ns))?
        .items;
    let report = report(&cluster, &pods, &zones, &backups, &events, Timestamp::now());
    print!("{}", render(&report, output)?);
    Ok(())
}

/// The report as `output` asks: the table for people, or every field for scripts.
pub fn render(report: &Report, output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Text => text(report),
        Output::Json => serde_json::to_string_pretty(report)? + "\n",
        Output::Yaml => serde_saphyr::to_string(report)?,
    })
}

/// Each node's zone; empty when nodes may not be read.
async fn zones(client: &Client) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(list) = nodes.list(&ListParams::default()).await else {
        return BTreeMap::new();
    };
    list.items
        .iter()
        .filter_map(|n| {
            let zone = n.labels().get("topology.kubernetes.io/zone")?;
            Some((n.name_any(), zone.clone()))
        })
        .collect()
}

/// The report, from what was read. Pure.
pub fn report(
    cluster: &EtcdCluster,
    pods: &[Pod],
    zones: &BTreeMap<String, String>,
    backups: &[EtcdBackup],
    events: &[Event],
    now: Timestamp,
) -> Report {
    let status = cluster.status.clone().unwrap_or_default();
    let leader = status
        .member_statuses
        .iter()
        .find(|m| m.role == Some(MemberRole::Leader));
    let leader_index = leader.and_then(|m| m.raft_index);
    let members = status
        .member_statuses
        .iter()
        .map(|m| {
            let pod = pods.iter().find(|p| p.name_any() == m.name);
            let node = pod
                .and_then(|p| p.spec.as_ref()?.node_name.clone())
                .unwrap_or_default();
            MemberRow {
                name: m.name.clone(),
                id: m.id.clone(),
                role: m
                    .role
                    .and_then(|r| serde_json::to_value(r).ok())
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                version: m.version.clone(),
                healthy: m.healthy,
                raft_index: m.raft_index,
                lag: leader_index.zip(m.raft_index).map(|(l, i)| (l - i).max(0)),
                db_size: m.db_size,
                db_size_in_use: m.db_size_in_use,
                alarms: m.alarms.clone(),
                pod_ready: pod.is_some_and(pod_ready),
                zone: zones.get(&node).cloned().unwrap_or_default(),
                node,
            }
        })
        .collect();
    Report {
        namespace: cluster.namespace().unwrap_or_default(),
        name: cluster.name_any(),
        phase: status.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
        reason: status.reason.clone(),
        available: find_condition(
            &status.conditions,
            etcd_operator::api::ConditionType::Available,
        )
        .is_some_and(|c| c.is_true()),
        size: status.size,
        desired_size: cluster.spec.size,
        ready_members: status.ready_members.unwrap_or_default(),
        version: status.current_version.clone(),
        leader: leader.map(|m| m.name.clone()),
        conditions: status.conditions.clone(),
        members,
        last_backup: last_backup(&cluster.name_any(), backups, now),
        archive: archive_of(&cluster.name_any(), backups),
        events: recent(events),
    }
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The newest succeeded backup whose `clusterName` is the cluster.
fn last_backup(cluster: &str, backups: &[EtcdBackup], now: Timestamp) -> Option<BackupRow> {
    backups
        .iter()
        .filter(|b| b.spec.cluster_name.as_deref() == Some(cluster))
        .filter_map(|b| {
            let s = b.status.as_ref()?;
            let at: Timestamp = s.last_success_date.as_deref()?.parse().ok()?;
            (s.succeeded || s.phase == Some(BackupPhase::Succeeded)).then(|| BackupRow {
                name: b.name_any(),
                path: s.path.clone(),
                at: at.to_string(),
                age_seconds: now.as_second() - at.as_second(),
                revision: s.etcd_revision,
                size: s.size,
            })
        })
        .min_by_key(|b| b.age_seconds)
}

/// The archive of the cluster's archiving backup, if one runs.
fn archive_of(cluster: &str, backups: &[EtcdBackup]) -> Option<ArchiveRow> {
    backups
        .iter()
        .filter(|b| b.spec.cluster_name.as_deref() == Some(cluster))
        .filter(|b| b.spec.continuous().is_some())
        .find_map(|b| {
            let a = b.status.as_ref()?.archive.clone()?;
            Some(ArchiveRow {
                backup: b.name_any(),
                first_revision: a.first_revision,
                last_revision: a.last_revision,
                last_time: a.last_time,
                lag_milliseconds: a.lag_milliseconds,
                message: a.message,
            })
        })
}

/// The newest Events, oldest first.
fn recent(events: &[Event]) -> Vec<EventRow> {
    let mut rows: Vec<(Timestamp, EventRow)> = events
        .iter()
        .map(|e| {
            let at = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or_default();
            let row = EventRow {
                at: at.to_string(),
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                message: e.message.clone().unwrap_or_default(),
            };
            (at, row)
        })
        .collect();
    rows.sort_by_key(|(at, _)| *at);
    let skip = rows.len().saturating_sub(EVENTS);
    rows.into_iter().skip(skip).map(|(_, r)| r).collect()
}

/// Bytes as people read them.
fn bytes(n: Option<i64>) -> String {
    match n {
        None => "-".into(),
        Some(n) if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        Some(n) if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        Some(n) if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        Some(n) => format!("{n} B"),
    }
}

fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Columns padded to their widest cell.
fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str("  ");
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The report for people. Pure.
pub fn text(r: &Report) -> String {
    let mut out = format!(
        "EtcdCluster {}/{}: {}{}, {} of {} members ready, version {}\n",
        r.namespace,
        r.name,
        if r.phase.is_empty() {
            "(no status yet)"
        } else {
            &r.phase
        },
        if r.available {
            ", Available"
        } else {
            ", not Available"
        },
        r.ready_members,
        r.desired_size,
        if r.version.is_empty() {
            "-"
        } else {
            &r.version
        },
    );
    if !r.reason.is_empty() {
        out.push_str(&format!("Reason: {}\n", r.reason));
    }
    out.push_str("Conditions:\n");
    let mut rows = vec![vec![
        "TYPE".into(),
        "STATUS".into(),
        "REASON".into(),
        "MESSAGE".into(),
    ]];
    rows.extend(r.conditions.iter().map(|c| {
        vec![
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
        ]
    }));
    out.push_str(&table(&rows));
    out.push_str(&format!(
        "Leader: {}\nMembers:\n",
        r.leader.as_deref().unwrap_or("none")
    ));
    out.push_str(&members_table(&r.members));
    out.push_str(&match &r.last_backup {
        Some(b) => format!(
            "Last backup: {} ({}), {} ago, revision {}, {}\n",
            b.name,
            b.path,
            age(b.age_seconds),
            b.revision.map_or("-".into(), |v| v.to_string()),
            bytes(b.size)
        ),
        None => "Last backup: none succeeded\n".into(),
    });
    if let Some(a) = &r.archive {
        let or_dash = |v: Option<i64>| v.map_or("-".into(), |v| v.to_string());
        out.push_str(&format!(
            "Archive: {}, revisions {} to {} (newest change {}), lag {} ms{}\n",
            a.backup,
            or_dash(a.first_revision),
            or_dash(a.last_revision),
            a.last_time.as_deref().unwrap_or("-"),
            or_dash(a.lag_milliseconds),
            if a.message.is_empty() {
                String::new()
            } else {
                format!(" ({})", a.message)
            }
        ));
    }
    out.push_str("Events:\n");
    let mut rows = vec![vec![
        "AT".into(),
        "TYPE".into(),
        "REASON".into(),
        "MESSAGE".into(),
    ]];
    rows.extend(r.events.iter().map(|e| {
        vec![
            e.at.clone(),
            e.type_.clone(),
            e.reason.clone(),
            e.message.clone(),
        ]
    }));
    out.push_str(&table(&rows));
    out
}

fn members_table(members: &[MemberRow]) -> String {
    let mut rows = vec![
        [
            "NAME",
            "ROLE",
            "VERSION",
            "HEALTHY",
            "RAFT INDEX",
            "LAG",
            "DB SIZE",
            "IN USE",
            "ALARMS",
            "POD READY",
            "NODE",
            "ZONE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(members.iter().map(|m| {
        vec![
            m.name.clone(),
            m.role.clone(),
            m.version.clone(),
            m.healthy.to_string(),
            m.raft_index.map_or("-".into(), |v| v.to_string()),
            m.lag.map_or("-".into(), |v| v.to_string()),
            bytes(m.db_size),
            bytes(m.db_size_in_use),
            if m.alarms.is_empty() {
                "-".into()
            } else {
                m.alarms.join(",")
            },
            m.pod_ready.to_string(),
            m.node.clone(),
            m.zone.clone(),
        ]
    }));
    table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_report_joins_status_pods_nodes_backups_and_events() {
        let cluster: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "example", "namespace": "ns"},
            "spec": {"size": 3},
            "status": {"phase": "Running", "size": 2, "readyMembers": 2, "currentVersion": "3.6.16",
                "conditions": [{"type": "Available", "status": "True", "reason": "Quorate", "message": "ok"}],
                "memberStatuses": [
                    {"name": "example-a", "id": "1", "role": "leader", "version": "3.6.16",
                     "healthy": true, "raftIndex": 120, "dbSize": 2_097_152},
                    {"name": "example-b", "id": "2", "role": "follower", "version": "3.6.16",
                     "healthy": true, "raftIndex": 117, "dbSize": 2_097_152,
                     "dbSizeInUse": 1_048_576, "alarms": ["NOSPACE"]}]}
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "example-a"}, "spec": {"nodeName": "n1", "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let backup: EtcdBackup = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
            "metadata": {"name": "nightly"},
            "spec": {"clusterName": "example", "storageType": "S3", "s3": {"path": "b/k"},
                "backupPolicy": {"backupIntervalInSecond": 3600, "continuous": {}}},
            "status": {"succeeded": true, "lastSuccessDate": "2026-11-26T10:00:00Z",
                "path": "b/k", "etcdRevision": 99, "size": 4096,
                "archive": {"firstRevision": 99, "lastRevision": 180, "lagMilliseconds": 40,
                    "lastTime": "2026-11-26T10:04:59Z", "chunks": 3, "bytes": 900}}
        }))
        .unwrap();
        let zones = BTreeMap::from([("n1".to_string(), "z1".to_string())]);
        let now: Timestamp = "2026-11-26T10:05:00Z".parse().unwrap();
        // Twelve Events, listed out of order: the newest ten are shown, oldest first.
        let events: Vec<Event> = [3, 11, 0, 7, 1, 9, 2, 10, 4, 8, 5, 6]
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("e{i}")},
                    "involvedObject": {"kind": "EtcdCluster", "name": "example"},
                    "type": if i == 11 { "Warning" } else { "Normal" },
                    "reason": format!("Reason{i}"),
                    "message": format!("message {i}"),
                    "lastTimestamp": format!("2026-11-26T10:00:{i:02}Z"),
                }))
                .unwrap()
            })
            .to_vec();
        let r = report(&cluster, &[pod], &zones, &[backup], &events, now);
        let reasons: Vec<&str> = r.events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            reasons,
            (2..12).map(|i| format!("Reason{i}")).collect::<Vec<_>>()
        );
        assert!(r.available);
        assert_eq!(r.leader.as_deref(), Some("example-a"));
        assert_eq!(r.members[1].lag, Some(3));
        assert!(r.members[0].pod_ready && !r.members[1].pod_ready);
        assert_eq!(
            (r.members[0].node.as_str(), r.members[0].zone.as_str()),
            ("n1", "z1")
        );
        let b = r.last_backup.as_ref().unwrap();
        assert_eq!((b.age_seconds, b.revision), (300, Some(99)));
        let shown = text(&r);
        assert!(
            shown.contains("Running, Available, 2 of 3 members ready"),
            "{shown}"
        );
        assert!(
            shown.contains("Last backup: nightly (b/k), 5m ago, revision 99, 4.0 KiB"),
            "{shown}"
        );
        assert!(
            shown.contains("example-b  follower  3.6.16   true     117         3"),
            "{shown}"
        );
        let b_row = shown
            .lines()
            .find(|l| l.trim_start().starts_with("example-b"))
            .unwrap();
        assert!(
            b_row.contains("2.0 MiB") && b_row.contains("1.0 MiB") && b_row.contains("NOSPACE"),
            "{shown}"
        );
        // -o json and -o yaml: the same fields, read back as a script would.
        let json: serde_json::Value =
            serde_json::from_str(&render(&r, Output::Json).unwrap()).unwrap();
        let yaml: serde_json::Value =
            serde_saphyr::from_str(&render(&r, Output::Yaml).unwrap()).unwrap();
        for doc in [&json, &yaml] {
            assert_eq!(doc["name"], "example", "{doc}");
            assert_eq!(doc["available"], true, "{doc}");
            assert_eq!(doc["leader"], "example-a", "{doc}");
            assert_eq!(doc["members"][1]["lag"], 3, "{doc}");
            assert_eq!(doc["members"][1]["dbSizeInUse"], 1_048_576, "{doc}");
            assert_eq!(doc["members"][1]["alarms"], json!(["NOSPACE"]), "{doc}");
            assert_eq!(doc["members"][0]["zone"], "z1", "{doc}");
            assert_eq!(doc["lastBackup"]["revision"], 99, "{doc}");
        }
        assert_eq!(render(&r, Output::Text).unwrap(), shown);
        assert_eq!(json["events"][9]["type"], "Warning", "{json}");
        assert_eq!(json["events"][9]["message"], "message 11", "{json}");
        let last = shown.lines().last().unwrap();
        assert!(
            last.contains("Warning") && last.contains("Reason11") && last.contains("message 11"),
            "{shown}"
        );
        assert!(
            !shown.contains("Reason1 ") && !shown.contains("Reason0 "),
            "{shown}"
        );
        assert!(
            shown.contains(
                "Archive: nightly, revisions 99 to 180 (newest change 2026-11-26T10:04:59Z), lag 40 ms"
            ),
            "{shown}"
        );
    }
}
