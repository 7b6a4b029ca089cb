//! `etcd-gate restore`: the seed member of a restore gets its data before etcd starts.
//!
//! It fetches the snapshot from the operator (never from object storage: etcd pods hold no
//! cloud credentials), checks its sha256 before using a byte of it, runs the image's own
//! `etcdutl snapshot restore` (`etcdctl snapshot restore` in 3.4 images, which have no
//! etcdutl) into a directory beside the data directory, renames it into place, and then
//! becomes etcd. A container restarted at any point starts over cleanly: a data directory
//! appears only whole (by rename), and once it is there etcd starts at once.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::http::{Server, request, url};
use super::{exit_on_termination, log};

pub const USAGE: &str = "\
etcd-gate restore --url https://IP:port/PATH --server-ca BASE64
        (--token T | --token-file F) --sha256 [HEX] --data-dir DIR --name NAME
        --initial-cluster NAME=URL --initial-advertise-peer-urls URL --initial-cluster-token T
        [--bump-revision N] [--changes-url https://IP:port/PATH] [--root-password-file F]
        -- PROGRAM [ARG...]
    fetch the snapshot at URL over TLS, the server's certificate for IP signed by the CA whose
    DER BASE64 is (http://: plain, with no --server-ca), with Authorization: Bearer T (or the token in file F, read when it
    is needed: a restarted seed that holds its data needs none), check its sha256 (if given: etcd's own
    trailing hash is checked by the restore tool either way), restore it into DIR
    with the etcdutl (or etcdctl) beside PROGRAM, then run PROGRAM; at once if DIR holds data.
    With --changes-url, the archived changes served there (after the restored revision) are
    applied to the restored data by PROGRAM on loopback ports before it is put in place.
    With --root-password-file (when F exists), root's password in the restored data is set to
    F's contents the same way, whatever it was where the snapshot was taken";

/// How long the fetch is tried before the gate gives up (the container restarts).
const FETCH_DEADLINE: Duration = Duration::from_secs(1800);
/// Between two attempts.
const RETRY_EVERY: Duration = Duration::from_secs(2);
/// A read that makes no progress for this long fails the attempt.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, PartialEq)]
pub struct Restore {
    server: Server,
    path: String,
    token: Token,
    sha256: String,
    data_dir: PathBuf,
    name: String,
    initial_cluster: String,
    peer_urls: String,
    cluster_token: String,
    bump_revision: u64,
    /// A point-in-time restore's archived changes: where the operator serves them.
    changes: Option<(Server, String)>,
    /// The cluster's root password, set in the restored data (the file may be absent).
    root_password_file: Option<PathBuf>,
    program: String,
    program_args: Vec<String>,
}

/// The bearer token: given, or in a file (a Secret mounted into the seed, so that it is not in
/// the pod's spec for whoever may read pods).
#[derive(Debug, PartialEq)]
enum Token {
    Value(String),
    File(PathBuf),
}

impl Token {
    fn read(&self) -> Result<String, String> {
        match self {
            Token::Value(v) => Ok(v.clone()),
            Token::File(f) => std::fs::read_to_string(f)
                .map(|t| t.trim().to_string())
                .map_err(|e| format!("reading the token from {}: {e}", f.display())),
        }
    }
}

pub fn parse(args: &[String]) -> Result<Restore, String> {
    let (opts, command) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => return Err(format!("restore needs `-- PROGRAM`\nusage:\n{USAGE}")),
    };
    let mut values = std::collections::BTreeMap::new();
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (
                opt.clone(),
                it.next()
                    .ok_or_else(|| format!("{opt} needs a value"))?
                    .clone(),
            ),
        };
        const KNOWN: [&str; 14] = [
            "--url",
            "--server-ca",
            "--token",
            "--token-file",
            "--sha256",
            "--data-dir",
            "--name",
            "--initial-cluster",
            "--initial-advertise-peer-urls",
            "--initial-cluster-token",
            "--bump-revision",
            "--changes-url",
            "--root-password-file",
            "--poll-ms",
        ];
        if !KNOWN.contains(&key.as_str()) {
            return Err(format!("unknown option {key}\nusage:\n{USAGE}"));
        }
        values.insert(key, value);
    }
    let ca = values.remove("--server-ca");
    let mut take = |k: &str| values.remove(k).ok_or_else(|| format!("{k} is required"));
    let (server, path) = url("--url", &take("--url")?, ca.as_deref())?;
    // Empty for a snapshot served straight from a member's etcd (a recovery from lost
    // quorum): no hash is known before it is read, and it ends with etcd's own sha256 of
    // itself, which `snapshot restore` checks.
    let sha256 = take("--sha256")?.to_ascii_lowercase();
    if !sha256.is_empty() && (sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(format!("--sha256 {sha256}: not a sha256 in hex"));
    }
    let bump_revision = match values.remove("--bump-revision") {
        Some(v) => v
            .parse()
            .map_err(|_| format!("--bump-revision {v}: not a number"))?,
        None => 0,
    };
    let root_password_file = values.remove("--root-password-file").map(PathBuf::from);
    let changes = match values.remove("--changes-url") {
        Some(u) => Some(url("--changes-url", &u, ca.as_deref())?),
        None => None,
    };
    let token = match (values.remove("--token"), values.remove("--token-file")) {
        (Some(v), None) => Token::Value(v),
        (None, Some(f)) => Token::File(PathBuf::from(f)),
        _ => return Err("give one of --token and --token-file".into()),
    };
    let mut take = |k: &str| values.remove(k).ok_or_else(|| format!("{k} is required"));
    let (program, program_args) = command.split_first().ok_or("nothing to run after `--`")?;
    Ok(Restore {
        server,
        path,
        token,
        sha256,
        data_dir: PathBuf::from(take("--data-dir")?),
        name: take("--name")?,
        initial_cluster: take("--initial-cluster")?,
        peer_urls: take("--initial-advertise-peer-urls")?,
        cluster_token: take("--initial-cluster-token")?,
        bump_revision,
        changes,
        root_password_file,
        program: program.clone(),
        program_args: program_args.to_vec(),
    })
}

/// `dir` with `suffix` appended to its last component.
fn beside(dir: &Path, suffix: &str) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl Restore {
    pub fn run(self) -> Result<(), String> {
        exit_on_termination();
        if self.data_dir.join("member").is_dir() {
            log(&format!(
                "{} holds restored data; starting",
                self.data_dir.display()
            ));
        } else {
            let file = beside(&self.data_dir, ".snapshot");
            self.fetch(&file)?;
            self.restore(&file)?;
            let _ = std::fs::remove_file(&file);
        }
        let err = Command::new(&self.program).args(&self.program_args).exec();
        Err(format!("running {}: {err}", self.program))
    }

    /// Fetches the snapshot into `file`, tried until it arrives whole with the right hash.
    fn fetch(&self, file: &Path) -> Result<(), String> {
        let started = Instant::now();
        let part = beside(file, ".part");
        loop {
            match self.fetch_once(&part) {
                Ok(size) => {
                    std::fs::rename(&part, file)
                        .map_err(|e| format!("renaming {}: {e}", part.display()))?;
                    log(&format!(
                        "fetched the snapshot ({size} bytes, sha256 {}) in {} ms",
                        if self.sha256.is_empty() {
                            "left to etcd's own hash"
                        } else {
                            self.sha256.as_str()
                        },
                        started.elapsed().as_millis()
                    ));
                    return Ok(());
                }
                Err(e) if started.elapsed() < FETCH_DEADLINE => {
                    log(&format!("fetching the snapshot: {e}; trying again"));
                    std::thread::sleep(RETRY_EVERY);
                }
                Err(e) => return Err(format!("fetching the snapshot: {e}; giving up")),
            }
        }
    }

    /// One attempt: the answer's body into `part`, hashed on the way. Returns its size.
    fn fetch_once(&self, part: &Path) -> Result<u64, String> {
        let err = |e: std::io::Error| e.to_string();
        let token = self.token.read()?;
        let auth = format!("Authorization: Bearer {token}\r\n");
        let answer = request(&self.server, "GET", &self.path, &auth, "", READ_TIMEOUT)?;
        let (length, mut reader) = (answer.length, answer.body);
        if answer.code != 200 {
            let mut body = String::new();
            let _ = reader.take(1024).read_to_string(&mut body);
            return Err(format!("{}: {}", answer.code, body.trim()));
        }
        let mut out =
            std::fs::File::create(part).map_err(|e| format!("creating {}: {e}", part.display()))?;
        let mut hash = Sha256::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = reader.read(&mut buf).map_err(err)?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| format!("writing {}: {e}", part.display()))?;
            size += n as u64;
        }
        out.sync_all().map_err(err)?;
        if let Some(expected) = length
            && expected != size
        {
            return Err(format!("the answer ended after {size} of {expected} bytes"));
        }
        let got: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if !self.sha256.is_empty() && got != self.sha256 {
            return Err(format!(
                "the snapshot has sha256 {got}, not {}; it is not used",
                self.sha256
            ));
        }
        Ok(size)
    }

    /// The image's own restore tool: etcdutl beside etcd, or etcdctl (3.4).
    fn tool(&self) -> (PathBuf, bool) {
        let dir = Path::new(&self.program)
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        let etcdutl = dir.join("etcdutl");
        if etcdutl.is_file() {
            (etcdutl, true)
        } else {
            (dir.join("etcdctl"), false)
        }
    }

    /// Restores `file` into a directory beside the data directory, then renames it into place.
    fn restore(&self, file: &Path) -> Result<(), String> {
        let staging = beside(&self.data_dir, ".restoring");
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .map_err(|e| format!("removing {}: {e}", staging.display()))?;
        }
        let (tool, is_etcdutl) = self.tool();
        let mut command = Command::new(&tool);
        command
            .args(["snapshot", "restore"])
            .arg(file)
            .arg("--data-dir")
            .arg(&staging)
            .args(["--name", &self.name])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.cluster_token])
            .args(["--initial-advertise-peer-urls", &self.peer_urls]);
        let bumped = is_etcdutl && self.bump_revision > 0;
        if bumped {
            command
                .arg(format!("--bump-revision={}", self.bump_revision))
                .arg("--mark-compacted");
        }
        if !is_etcdutl {
            command.env("ETCDCTL_API", "3");
        }
        let out = command
            .output()
            .map_err(|e| format!("running {}: {e}", tool.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} snapshot restore: {}: {}",
                tool.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // The cluster's root password, when it keeps one (access control declared): set in the
        // restored data, which may carry another cluster's.
        let root_password = self
            .root_password_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .filter(|p| !p.is_empty());
        if self.changes.is_some() || root_password.is_some() {
            let token = self.token.read()?;
            let from = self
                .changes
                .as_ref()
                .map(|(server, path)| super::replay::Changes {
                    server,
                    path,
                    token: &token,
                });
            let bump = if bumped { self.bump_revision } else { 0 };
            super::replay::replay(
                &self.program,
                &self.program_args,
                &staging,
                &self.name,
                bump,
                from.as_ref(),
                root_password.as_deref(),
            )?;
        }
        std::fs::rename(&staging, &self.data_dir).map_err(|e| {
            format!(
                "renaming {} to {}: {e}",
                staging.display(),
                self.data_dir.display()
            )
        })?;
        log(&format!(
            "restored the snapshot into {} with {}",
            self.data_dir.display(),
            tool.display()
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_a_restore_command() {
        let sha = "ab".repeat(32);
        let r = parse(&args(&format!(
            "--url=http://10.0.0.9:8080/restores/ns/c/snapshot --token t --sha256={sha} \
             --data-dir=/var/etcd/data --name=c-x --initial-cluster=c-x=http://c-x.c.ns.svc:2380 \
             --initial-advertise-peer-urls=http://c-x.c.ns.svc:2380 --initial-cluster-token=u1 \
             --bump-revision=100 --changes-url=http://10.0.0.9:8080/restores/ns/c/changes \
             -- /usr/local/bin/etcd --name=c-x"
        )))
        .unwrap();
        let plain = Server::plain("10.0.0.9:8080".parse().unwrap());
        assert_eq!(r.server, plain);
        assert_eq!(r.path, "/restores/ns/c/snapshot");
        assert_eq!(r.bump_revision, 100);
        assert_eq!(r.changes, Some((plain, "/restores/ns/c/changes".into())));
        assert_eq!(r.program_args, vec!["--name=c-x"]);
        // A recovery's snapshot comes straight from a member: no hash is known before it is
        // read (etcd's own trailing hash is checked by the restore tool).
        let from_member = parse(&args(
            "--url=http://10.0.0.9:8080/x --token t --sha256= --data-dir=d --name=n \
             --initial-cluster=n=u --initial-advertise-peer-urls=u --initial-cluster-token=k \
             -- etcd",
        ))
        .unwrap();
        assert_eq!(from_member.sha256, "");
        // The token in a file (a mounted Secret), read when the snapshot is fetched.
        let dir = std::env::temp_dir().join(format!("gate-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        let from_file = parse(&args(&format!(
            "--url=http://10.0.0.9:8080/x --token-file={} --sha256= --data-dir=d --name=n              --initial-cluster=n=u --initial-advertise-peer-urls=u --initial-cluster-token=k              -- etcd",
            file.display()
        )))
        .unwrap();
        assert!(from_file.token.read().is_err(), "no file yet");
        std::fs::write(&file, "s3cr3t\n").unwrap();
        assert_eq!(from_file.token.read().unwrap(), "s3cr3t");
        let _ = std::fs::remove_dir_all(&dir);
        for bad in [
            "--url=http://10.0.0.9:8080/x --token t --token-file f --sha256= --data-dir=d              --name=n --initial-cluster=i --initial-advertise-peer-urls=p              --initial-cluster-token=t -- etcd",
            "--url=http://10.0.0.9:8080/x -- etcd",
            &format!("--url=https://h/x --token t --sha256={sha} -- etcd"),
            // https with no CA to check the server by.
            "--url=https://10.0.0.9:8443/x --token t --sha256= --data-dir=d --name=n \
             --initial-cluster=i --initial-advertise-peer-urls=p --initial-cluster-token=t -- etcd",
            "--url=https://10.0.0.9:8443/x --server-ca=bm90IGEgY2VydA== --token t --sha256= \
             --data-dir=d --name=n --initial-cluster=i --initial-advertise-peer-urls=p \
             --initial-cluster-token=t -- etcd",
            "--url=http://10.0.0.9:8080/x --token t --sha256=abc --data-dir=d --name=n \
             --initial-cluster=i --initial-advertise-peer-urls=p --initial-cluster-token=t -- etcd",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
