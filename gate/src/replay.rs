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
//!
//! The restored data may have etcd's authentication on, with a root password from wherever the
//! snapshot was taken. The loopback etcd signs its tokens (JWT, HS256) with a key the gate
//! makes and holds alone, so the gate mints root's token itself and needs no password: it
//! replays as root, and sets root's password to the cluster's own (`--root-password-file`),
//! so that the operator's root still works on data made elsewhere.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::http::{Answer, Server, body_of, request};
use super::log;

/// Loopback ports of the etcd that takes the replay: free ones (not etcd's usual ones, which
/// stay free), so that seeds sharing a network (tests on one machine) do not collide.
fn free_loopback() -> Result<SocketAddr, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("finding a free loopback port: {e}"))
}
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
/// (its quota), on loopback only, its tokens signed with `key`.
fn start(
    program: &str,
    data_dir: &Path,
    name: &str,
    extra: &[String],
    (key, client): (&Path, SocketAddr),
) -> Result<Child, String> {
    let peer = free_loopback()?;
    let mut command = Command::new(program);
    command
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--name={name}"))
        .arg(format!("--listen-client-urls=http://{client}"))
        .arg(format!("--advertise-client-urls=http://{client}"))
        .arg(format!("--listen-peer-urls=http://{peer}"))
        .arg(format!("--max-txn-ops={MAX_TXN_OPS}"))
        .arg(format!("--max-request-bytes={MAX_REQUEST_BYTES}"))
        .arg(format!(
            "--auth-token=jwt,sign-method=HS256,priv-key={},ttl=60m",
            key.display()
        ))
        .args(extra);
    command
        .spawn()
        .map_err(|e| format!("starting {program} for the replay: {e}"))
}

/// A key of 32 random bytes, hex, in a file only this process may read.
fn make_key(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    let key: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    std::io::Write::write_all(&mut file, key.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(key.into_bytes())
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// root's token, signed with `key`: etcd accepts it as root's for as long as it lives, whatever
/// root's password is. Its auth revision is the largest a token can carry, so that no change
/// of users or roles makes it stale.
fn root_token(key: &[u8]) -> String {
    let header = base64url(br#"{"alg":"HS256","typ":"JWT"}"#);
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        + 3600;
    let claims = base64url(
        format!(r#"{{"exp":{exp},"revision":9007199254740991,"username":"root"}}"#).as_bytes(),
    );
    let signed = format!("{header}.{claims}");
    let tag = aws_lc_rs::hmac::sign(
        &aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key),
        signed.as_bytes(),
    );
    format!("{signed}.{}", base64url(tag.as_ref()))
}

/// The loopback etcd on the restored data, and root's token for it.
struct Loopback {
    server: Server,
    child: Child,
    auth: String,
}

impl Loopback {
    fn post(&self, path: &str, body: &str) -> Result<(u16, String), String> {
        let answer = request(&self.server, "POST", path, &self.auth, body, ANSWER_TIMEOUT)?;
        Ok((answer.code, body_of(answer.body)))
    }
}

/// Sets root's password to `password` when the restored data has a root user (it always has
/// one when etcd's authentication is on there).
fn set_root_password(etcd: &Loopback, password: &str) -> Result<(), String> {
    let body = serde_json::json!({"name": "root", "password": password}).to_string();
    match etcd.post("/v3/auth/user/changepw", &body)? {
        (200, _) => {
            log("set root's password in the restored data to the cluster's own");
            Ok(())
        }
        (_, body) if body.contains("user name not found") => Ok(()),
        (code, body) => Err(format!("setting root's password ({code}): {}", body.trim())),
    }
}

/// The arguments of the member's own command line that the replay's etcd keeps.
pub fn data_args(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with("--quota-backend-bytes="))
        .cloned()
        .collect()
}

/// The revision etcd serves, once it answers.
fn revision(etcd: &mut Loopback) -> Result<i64, String> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = etcd.child.try_wait() {
            return Err(format!(
                "etcd exited ({status}) before it served the replay"
            ));
        }
        if let Ok(Answer {
            code: 200, body, ..
        }) = request(
            &etcd.server,
            "POST",
            "/v3/maintenance/status",
            &etcd.auth,
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
fn apply_once(etcd: &Loopback, from: &Changes<'_>, after: i64) -> Result<String, String> {
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
        let (code, body) = etcd.post("/v3/kv/txn", &line)?;
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

/// Replays the changes `from` (when given) into the restored data in `data_dir` (not yet in
/// place), and sets root's password there to `root_password` (when given); then stops the
/// etcd that took them. `bump` is what the restore tool added to the snapshot's revision.
pub fn replay(
    program: &str,
    program_args: &[String],
    data_dir: &Path,
    name: &str,
    bump: u64,
    from: Option<&Changes<'_>>,
    root_password: Option<&str>,
) -> Result<(), String> {
    let addr = free_loopback()?;
    let key_file = data_dir.with_extension("jwt-key");
    let key = make_key(&key_file)?;
    let child = start(
        program,
        data_dir,
        name,
        &data_args(program_args),
        (&key_file, addr),
    );
    let child = child.inspect_err(|_| {
        let _ = std::fs::remove_file(&key_file);
    })?;
    let mut etcd = Loopback {
        server: Server::plain(addr),
        child,
        auth: format!("Authorization: {}\r\n", root_token(&key)),
    };
    let result = (|| {
        let started = Instant::now();
        // The snapshot's own revision: the changes after it are those it lacks (it may hold a
        // few more than its name says, written while it was taken).
        let after = revision(&mut etcd)? - i64::try_from(bump).unwrap_or(0);
        // etcd has read its key by now.
        let _ = std::fs::remove_file(&key_file);
        if let Some(password) = root_password {
            set_root_password(&etcd, password)?;
        }
        let Some(from) = from else { return Ok(()) };
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
    stop(&mut etcd.child);
    let _ = std::fs::remove_file(&key_file);
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
