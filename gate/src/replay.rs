//! A point-in-time restore's second step (`etcd-gate restore --changes-url URL`): the archived
//! changes after the snapshot, up to the restore's target revision, applied to the restored
//! data before etcd serves anyone.
//!
//! The gate starts the image's etcd on the restored data directory (still the staging one)
//! listening on loopback ports only, so that neither clients nor peers reach it; reads the
//! revision the snapshot restored to (less the bump, which the restore tool added); asks the
//! operator for the changes after exactly that revision (`?after=R`); posts each line of the
//! answer, a ready-made transaction, to etcd's JSON gateway; and stops etcd. The operator
//! serves each key's last change only, so applying a line twice (a retried answer) is harmless,
//! and the answer ends with a line that counts the transactions: a cut answer is never taken
//! for a whole one.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::http::{Answer, Server, body_of, request};
use super::log;

/// Loopback ports of the etcd that takes the replay (not etcd's usual ones, which stay free).
const CLIENT: &str = "127.0.0.1:12379";
const PEER: &str = "127.0.0.1:12380";
/// How long etcd may take to start on the restored data.
const START_DEADLINE: Duration = Duration::from_secs(300);
/// How long the changes are asked for before the gate gives up (the container restarts).
const FETCH_DEADLINE: Duration = Duration::from_secs(900);
const RETRY_EVERY: Duration = Duration::from_secs(2);
/// A transaction may hold this many operations (the operator cuts them to fit).
const MAX_TXN_OPS: u32 = 10_000;
const MAX_REQUEST_BYTES: u32 = 32 << 20;
/// How long one answer may make no progress.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the changes are served, and how to reach the etcd that applies them.
pub struct Changes<'a> {
    pub server: &'a Server,
    pub path: &'a str,
    pub token: &'a str,
}

/// The member's etcd on `data_dir`, with `extra` of its own arguments that concern the data
/// (its quota), on loopback only.
fn start(program: &str, data_dir: &Path, name: &str, extra: &[String]) -> Result<Child, String> {
    let mut command = Command::new(program);
    command
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--name={name}"))
        .arg(format!("--listen-client-urls=http://{CLIENT}"))
        .arg(format!("--advertise-client-urls=http://{CLIENT}"))
        .arg(format!("--listen-peer-urls=http://{PEER}"))
        .arg(format!("--max-txn-ops={MAX_TXN_OPS}"))
        .arg(format!("--max-request-bytes={MAX_REQUEST_BYTES}"))
        .args(extra);
    command
        .spawn()
        .map_err(|e| format!("starting {program} for the replay: {e}"))
}

/// The arguments of the member's own command line that the replay's etcd keeps.
pub fn data_args(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with("--quota-backend-bytes="))
        .cloned()
        .collect()
}

/// The revision etcd serves, once it answers.
fn revision(etcd: &Server, child: &mut Child) -> Result<i64, String> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "etcd exited ({status}) before it served the replay"
            ));
        }
        if let Ok(Answer {
            code: 200, body, ..
        }) = request(
            etcd,
            "POST",
            "/v3/maintenance/status",
            "",
            "{}",
            ANSWER_TIMEOUT,
        ) {
            let body = body_of(body);
            let json: serde_json::Value =
                serde_json::from_str(&body).map_err(|e| format!("status {body:?}: {e}"))?;
            // int64 fields are strings in etcd's JSON.
            return json["header"]["revision"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .ok_or_else(|| format!("no revision in {body}"));
        }
        if started.elapsed() > START_DEADLINE {
            return Err("etcd did not answer on the restored data".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Applies the changes after `after`: each line but the last a transaction, the last
/// `{"end": {"txns": N, ...}}`. Returns the end line.
fn apply_once(etcd: &Server, from: &Changes<'_>, after: i64) -> Result<String, String> {
    let path = format!("{}?after={after}", from.path);
    let auth = format!("Authorization: Bearer {}\r\n", from.token);
    let answer = request(from.server, "GET", &path, &auth, "", ANSWER_TIMEOUT)?;
    if answer.code != 200 {
        return Err(format!("{}: {}", answer.code, body_of(answer.body).trim()));
    }
    let mut applied = 0u64;
    for line in answer.body.lines() {
        let line = line.map_err(|e| format!("reading the changes: {e}"))?;
        if line.starts_with("{\"end\"") {
            let end: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("{line}: {e}"))?;
            let txns = end["end"]["txns"].as_u64();
            if txns != Some(applied) {
                return Err(format!(
                    "applied {applied} transactions, the end says {line}"
                ));
            }
            return Ok(line);
        }
        let answer = request(etcd, "POST", "/v3/kv/txn", "", &line, ANSWER_TIMEOUT)?;
        let (code, body) = (answer.code, body_of(answer.body));
        if code != 200 || !body.contains("\"succeeded\":true") {
            return Err(format!(
                "etcd refused a transaction ({code}): {}",
                body.trim()
            ));
        }
        applied += 1;
    }
    Err(format!(
        "the changes ended after {applied} transactions, without their end"
    ))
}

/// Replays the changes into the restored data in `data_dir` (not yet in place), then stops
/// the etcd that took them. `bump` is what the restore tool added to the snapshot's revision.
pub fn replay(
    program: &str,
    program_args: &[String],
    data_dir: &Path,
    name: &str,
    bump: u64,
    from: &Changes<'_>,
) -> Result<(), String> {
    let etcd: SocketAddr = CLIENT.parse().map_err(|e| format!("{CLIENT}: {e}"))?;
    let etcd = Server::plain(etcd);
    let mut child = start(program, data_dir, name, &data_args(program_args))?;
    let result = (|| {
        let started = Instant::now();
        // The snapshot's own revision: the changes after it are those it lacks (it may hold a
        // few more than its name says, written while it was taken).
        let after = revision(&etcd, &mut child)? - i64::try_from(bump).unwrap_or(0);
        loop {
            match apply_once(&etcd, from, after) {
                Ok(end) => {
                    log(&format!(
                        "replayed the archived changes after revision {after}: {end} in {} ms",
                        started.elapsed().as_millis()
                    ));
                    return Ok(());
                }
                Err(e) if started.elapsed() < FETCH_DEADLINE => {
                    log(&format!("replaying the changes: {e}; trying again"));
                    std::thread::sleep(RETRY_EVERY);
                }
                Err(e) => return Err(format!("replaying the changes: {e}; giving up")),
            }
        }
    })();
    stop(&mut child);
    result
}

/// Stops etcd as it stops in a pod (SIGTERM), killing it if it takes more than 30 s.
#[allow(unsafe_code)]
fn stop(child: &mut Child) {
    let pid = i32::try_from(child.id()).unwrap_or(0);
    // SAFETY: kill(2) on our own child's PID.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replays_etcd_keeps_the_members_quota_and_nothing_else() {
        let args: Vec<String> = [
            "--name=c-x",
            "--quota-backend-bytes=4294967296",
            "--listen-client-urls=http://0.0.0.0:2379",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(data_args(&args), vec!["--quota-backend-bytes=4294967296"]);
    }
}
