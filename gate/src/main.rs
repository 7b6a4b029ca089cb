//! `etcd-gate`: the first process of a new member's etcd container.
//!
//! The operator creates a member's pod before it adds the member, so that the pod's DNS record
//! exists by the time anything looks the name up (see `Gate` in the operator's
//! `cluster::resources`). The pod's init container copies this binary into a shared volume
//! (`etcd-gate install`); the etcd container then runs `etcd-gate wait ... -- etcd ...`, which
//! polls the other members' member list by pod IP and, once the new member's peer URL is
//! listed, replaces itself with etcd (`execve`, so etcd is still the container's PID 1).
//! Doing the wait in the etcd container rather than in an init container saves the kubelet's
//! pause between an init container's exit and the next container's start (up to a second,
//! its PLEG relist period) on every member added.
//!
//! `etcd-gate restore ... -- etcd ...` is the first process of a restore's seed member: it
//! fetches the snapshot from the operator and restores it before etcd starts (`restore.rs`).
//!
//! It must run in any etcd image (no libc, no shell), so it is linked statically and uses
//! only std, serde_json, libc and sha2. It speaks HTTP/1.0 to etcd's JSON gateway
//! (`POST /v3/cluster/member/list`), present in etcd 3.4 to 3.6.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

mod restore;

const USAGE: &str = "\
etcd-gate install DEST
    copy this binary to DEST (mode 0755)
etcd-gate wait --peer-url URL --endpoints URL[,URL...] --data-dir DIR [--poll-ms N] -- PROGRAM [ARG...]
    run PROGRAM once the member with peer URL is in the member list that some endpoint
    (http://IP:port) serves, or at once when DIR already holds a member's data";

/// How long one member-list request may take.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Between two "still waiting" lines.
const REPORT_EVERY: Duration = Duration::from_secs(10);
/// A member list larger than this is not etcd's.
const MAX_RESPONSE: u64 = 1 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("install") => install(&args[1..]),
        Some("wait") => parse_wait(&args[1..]).and_then(|w| w.run()),
        Some("restore") => restore::parse(&args[1..]).and_then(|r| r.run()),
        _ => Err(format!("usage:\n{USAGE}\n{}", restore::USAGE)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcd-gate: {e}");
            ExitCode::from(2)
        }
    }
}

fn install(args: &[String]) -> Result<(), String> {
    let [dest] = args else {
        return Err(format!("install takes one path\nusage:\n{USAGE}"));
    };
    let me = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    // Copied beside the destination and renamed, so a restarted init container never leaves
    // a half-written binary for etcd's container to run.
    let tmp = format!("{dest}.tmp");
    std::fs::copy(&me, &tmp).map_err(|e| format!("copying {} to {tmp}: {e}", me.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("making {tmp} executable: {e}"))?;
    std::fs::rename(&tmp, dest).map_err(|e| format!("renaming {tmp} to {dest}: {e}"))?;
    Ok(())
}

#[derive(Debug, PartialEq)]
struct Wait {
    peer_url: String,
    endpoints: Vec<SocketAddr>,
    data_dir: PathBuf,
    poll: Duration,
    program: String,
    program_args: Vec<String>,
}

fn parse_wait(args: &[String]) -> Result<Wait, String> {
    let (opts, command) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => return Err(format!("wait needs `-- PROGRAM`\nusage:\n{USAGE}")),
    };
    let (mut peer_url, mut endpoints, mut data_dir, mut poll_ms) = (None, None, None, 100u64);
    let mut it = opts.iter();
    while let Some(opt) = it.next() {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, v.to_string()),
            None => (
                opt.as_str(),
                it.next()
                    .ok_or_else(|| format!("{opt} needs a value"))?
                    .clone(),
            ),
        };
        match key {
            "--peer-url" => peer_url = Some(value),
            "--endpoints" => endpoints = Some(value),
            "--data-dir" => data_dir = Some(PathBuf::from(value)),
            "--poll-ms" => {
                poll_ms = value
                    .parse()
                    .map_err(|_| format!("--poll-ms {value}: not a number of milliseconds"))?
            }
            other => return Err(format!("unknown option {other}\nusage:\n{USAGE}")),
        }
    }
    let endpoints = endpoints
        .ok_or("--endpoints is required")?
        .split(',')
        .filter(|e| !e.is_empty())
        .map(endpoint)
        .collect::<Result<Vec<_>, _>>()?;
    if endpoints.is_empty() {
        return Err("--endpoints names no endpoint".into());
    }
    let (program, program_args) = command.split_first().ok_or("nothing to run after `--`")?;
    Ok(Wait {
        peer_url: peer_url.ok_or("--peer-url is required")?,
        endpoints,
        data_dir: data_dir.ok_or("--data-dir is required")?,
        poll: Duration::from_millis(poll_ms),
        program: program.clone(),
        program_args: program_args.to_vec(),
    })
}

/// `http://IP:port` as a socket address. Names are refused on purpose: looking up a member's
/// name early is what the gate exists to avoid.
fn endpoint(url: &str) -> Result<SocketAddr, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("endpoint {url}: only http://IP:port is supported (TLS client URLs are not yet)")
    })?;
    rest.trim_end_matches('/')
        .parse()
        .map_err(|_| format!("endpoint {url}: not http://IP:port"))
}

impl Wait {
    fn run(self) -> Result<(), String> {
        exit_on_termination();
        if self.data_dir.join("member").is_dir() {
            // etcd ran here before, so the cluster had added this member; a restart must not
            // depend on reaching the members this pod was created beside, whose addresses may
            // all have changed since (a node reboot).
            log(&format!(
                "{} holds a member's data; starting",
                self.data_dir.display()
            ));
        } else {
            self.await_membership();
        }
        let err = Command::new(&self.program).args(&self.program_args).exec();
        Err(format!("running {}: {err}", self.program))
    }

    /// Polls until the member is listed. There is no deadline: the operator deletes a pod
    /// whose member is not added in time.
    fn await_membership(&self) {
        let started = Instant::now();
        let mut next_report = started;
        loop {
            let answer = is_member(&self.endpoints, &self.peer_url);
            if answer == Ok(true) {
                log(&format!(
                    "{} is a member after {} ms; starting",
                    self.peer_url,
                    started.elapsed().as_millis()
                ));
                return;
            }
            if Instant::now() >= next_report {
                let why = match answer {
                    Ok(_) => "not in the member list yet".to_string(),
                    Err(e) => format!("no member answers ({e})"),
                };
                log(&format!("waiting for {} to be added: {why}", self.peer_url));
                next_report += REPORT_EVERY;
            }
            std::thread::sleep(self.poll);
        }
    }
}

fn log(msg: &str) {
    eprintln!("etcd-gate: {msg}");
}

extern "C" fn on_termination(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(143) }
}

/// As a container's PID 1 the process gets no default action for SIGTERM, so without a handler
/// a waiting pod would take its whole grace period to delete. `execve` resets the handler, so
/// etcd keeps its own.
fn exit_on_termination() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only calls an async-signal-safe function.
        unsafe {
            libc::signal(
                sig,
                on_termination as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// Whether the first member that answers lists `peer_url`.
fn is_member(endpoints: &[SocketAddr], peer_url: &str) -> Result<bool, String> {
    let mut errors = Vec::new();
    for ep in endpoints {
        match member_list(*ep).and_then(|body| peer_urls(&body)) {
            Ok(urls) => return Ok(urls.iter().any(|u| u == peer_url)),
            Err(e) => errors.push(format!("{ep}: {e}")),
        }
    }
    Err(errors.join("; "))
}

/// The body of etcd's answer to `POST /v3/cluster/member/list`. HTTP/1.0, so the answer is
/// never chunked and ends when etcd closes the connection.
fn member_list(ep: SocketAddr) -> Result<String, String> {
    let err = |e: std::io::Error| e.to_string();
    let mut conn = TcpStream::connect_timeout(&ep, TIMEOUT).map_err(err)?;
    conn.set_read_timeout(Some(TIMEOUT)).map_err(err)?;
    conn.set_write_timeout(Some(TIMEOUT)).map_err(err)?;
    let request = format!(
        "POST /v3/cluster/member/list HTTP/1.0\r\nHost: {ep}\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    conn.write_all(request.as_bytes()).map_err(err)?;
    let mut raw = Vec::new();
    conn.take(MAX_RESPONSE).read_to_end(&mut raw).map_err(err)?;
    response_body(&raw)
}

fn response_body(raw: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("an incomplete HTTP answer")?;
    let status = head.lines().next().unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(body.to_string()),
        _ => Err(format!("{status}: {}", body.trim())),
    }
}

/// Every peer URL of every member in a member-list answer.
fn peer_urls(body: &str) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not a member list: {e}"))?;
    let members = v
        .get("members")
        .and_then(|m| m.as_array())
        .ok_or("a member list without members")?;
    Ok(members
        .iter()
        .filter_map(|m| m.get("peerURLs")?.as_array())
        .flatten()
        .filter_map(|u| u.as_str().map(String::from))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_a_wait_command() {
        let w = parse_wait(&args(
            "--peer-url=http://m2.c.ns.svc:2380 --endpoints http://10.0.0.5:2379,http://[fd00::1]:2379 \
             --data-dir=/var/etcd/data -- /usr/local/bin/etcd --name=m2",
        ))
        .unwrap();
        assert_eq!(w.peer_url, "http://m2.c.ns.svc:2380");
        assert_eq!(
            w.endpoints,
            vec![
                "10.0.0.5:2379".parse::<SocketAddr>().unwrap(),
                "[fd00::1]:2379".parse().unwrap()
            ]
        );
        assert_eq!(w.data_dir, Path::new("/var/etcd/data"));
        assert_eq!(w.poll, Duration::from_millis(100));
        assert_eq!(w.program, "/usr/local/bin/etcd");
        assert_eq!(w.program_args, vec!["--name=m2"]);
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        let cases = [
            (
                "--peer-url=u --endpoints=http://10.0.0.5:2379 --data-dir=d",
                "-- PROGRAM",
            ),
            (
                "--endpoints=http://10.0.0.5:2379 --data-dir=d -- etcd",
                "--peer-url",
            ),
            ("--peer-url=u --data-dir=d -- etcd", "--endpoints"),
            (
                "--peer-url=u --endpoints=, --data-dir=d -- etcd",
                "no endpoint",
            ),
            (
                "--peer-url=u --endpoints=https://10.0.0.5:2379 --data-dir=d -- etcd",
                "only http",
            ),
            (
                "--peer-url=u --endpoints=http://m1.c.ns.svc:2379 --data-dir=d -- etcd",
                "not http://IP:port",
            ),
            (
                "--peer-url=u --endpoints=http://10.0.0.5:2379 -- etcd",
                "--data-dir",
            ),
            (
                "--peer-url=u --endpoints=http://10.0.0.5:2379 --data-dir=d --",
                "nothing to run",
            ),
            ("--peer-url=u --bogus=1 -- etcd", "unknown option --bogus"),
            ("--peer-url -- etcd", "needs a value"),
        ];
        for (line, want) in cases {
            let err = parse_wait(&args(line)).unwrap_err();
            assert!(err.contains(want), "{line}: {err}");
        }
    }

    // As etcd 3.4.23, 3.5 and 3.6 answer (captured from each).
    const ANSWER: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\
        Grpc-Metadata-Content-Type: application/grpc\r\nContent-Length: 232\r\n\r\n\
        {\"header\":{\"cluster_id\":\"324952591200643719\",\"member_id\":\"3319814642761637952\",\
        \"raft_term\":\"2\"},\"members\":[{\"ID\":\"3319814642761637952\",\"name\":\"default\",\
        \"peerURLs\":[\"http://127.0.0.1:23800\"],\"clientURLs\":[\"http://127.0.0.1:23790\"]},\
        {\"ID\":\"1\",\"peerURLs\":[\"http://m2:2380\"],\"isLearner\":true}]}";

    #[test]
    fn reads_the_peer_urls_of_a_member_list() {
        let body = response_body(ANSWER).unwrap();
        assert_eq!(
            peer_urls(&body).unwrap(),
            vec!["http://127.0.0.1:23800", "http://m2:2380"]
        );
    }

    #[test]
    fn an_error_answer_is_not_a_member_list() {
        let raw = b"HTTP/1.0 503 Service Unavailable\r\n\r\n{\"error\":\"etcdserver: no leader\"}";
        let err = response_body(raw).unwrap_err();
        assert!(err.contains("503") && err.contains("no leader"), "{err}");
        assert!(response_body(b"HTTP/1.0 200 OK\r\n").is_err());
        assert!(peer_urls("{\"header\":{}}").is_err());
        assert!(peer_urls("<html>").is_err());
    }
}
