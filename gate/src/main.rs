//! `etcd-gate`: the first process of a new member's etcd container.
//!
//! The operator creates a member's pod before it adds the member, so that the pod's DNS record
//! exists by the time anything looks the name up (see `Gate` in the operator's
//! `cluster::resources`). The pod's init container copies this binary into a shared volume
//! (`etcd-gate install`); the etcd container then runs `etcd-gate wait ... -- etcd ...`, which
//! polls the other members' member list by pod IP and, once the new member's peer URL is
//! listed together with every other peer URL of its `--initial-cluster` (several members may
//! be started at once, and etcd refuses to start unless the membership it finds is exactly its
//! `--initial-cluster`), replaces itself with etcd (`execve`, so etcd is still the container's PID 1).
//! Doing the wait in the etcd container rather than in an init container saves the kubelet's
//! pause between an init container's exit and the next container's start (up to a second,
//! its PLEG relist period) on every member added.
//!
//! It asks the peer port (`GET /members`), which every member serves from its own copy of the
//! membership, in etcd 3.4 to 3.6. With peer TLS it presents the member's own peer certificate,
//! which every member has, so the gate needs no client certificate of the cluster.
//!
//! `etcd-gate restore ... -- etcd ...` is the first process of a restore's seed member: it
//! fetches the snapshot from the operator and restores it before etcd starts (`restore.rs`).
//!
//! It must run in any etcd image (no libc, no shell), so it is linked statically and uses
//! only std, serde_json, libc, sha2 and rustls. It speaks HTTP/1.0.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

mod http;
mod replay;
mod restore;

const USAGE: &str = "\
etcd-gate install DEST
    copy this binary to DEST (mode 0755)
etcd-gate wait --peer-url URL --endpoints PEER[,PEER...] --data-dir DIR [--tls-dir DIR] [--poll-ms N] -- PROGRAM [ARG...]
    run PROGRAM once the member with peer URL is in the member list that some member's
    peer port serves (and, when PROGRAM's arguments include --initial-cluster=..., the list
    holds exactly the peer URLs it names), or at once when DIR already holds a member's data. PEER is
    http://IP:port, or with --tls-dir (peer.crt, peer.key, peer-ca.crt) HOST=https://IP:port,
    the member's certificate checked against HOST";

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

/// A member's peer port, and with TLS the name its certificate must carry.
#[derive(Debug, PartialEq)]
struct Peer {
    addr: SocketAddr,
    tls_name: Option<String>,
}

#[derive(Debug, PartialEq)]
struct Wait {
    peer_url: String,
    endpoints: Vec<Peer>,
    data_dir: PathBuf,
    tls_dir: Option<PathBuf>,
    poll: Duration,
    program: String,
    program_args: Vec<String>,
    /// The peer URLs the member list must hold, exactly: those of `--initial-cluster`.
    expected: Option<std::collections::BTreeSet<String>>,
}

fn parse_wait(args: &[String]) -> Result<Wait, String> {
    let (opts, command) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => return Err(format!("wait needs `-- PROGRAM`\nusage:\n{USAGE}")),
    };
    let (mut peer_url, mut endpoints, mut data_dir, mut poll_ms) = (None, None, None, 100u64);
    let mut tls_dir = None;
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
            "--tls-dir" => tls_dir = Some(PathBuf::from(value)),
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
        .map(peer)
        .collect::<Result<Vec<_>, _>>()?;
    if endpoints.is_empty() {
        return Err("--endpoints names no endpoint".into());
    }
    if tls_dir.is_none()
        && let Some(p) = endpoints.iter().find(|p| p.tls_name.is_some())
    {
        return Err(format!("endpoint {}: https needs --tls-dir", p.addr));
    }
    let (program, program_args) = command.split_first().ok_or("nothing to run after `--`")?;
    let peer_url = peer_url.ok_or("--peer-url is required")?;
    let expected = program_args
        .iter()
        .find_map(|a| a.strip_prefix("--initial-cluster="))
        .map(|ic| {
            ic.split(',')
                .filter_map(|entry| Some(entry.split_once('=')?.1.to_string()))
                .chain([peer_url.clone()])
                .collect()
        });
    Ok(Wait {
        expected,
        peer_url,
        endpoints,
        data_dir: data_dir.ok_or("--data-dir is required")?,
        tls_dir,
        poll: Duration::from_millis(poll_ms),
        program: program.clone(),
        program_args: program_args.to_vec(),
    })
}

/// `http://IP:port`, or `HOST=https://IP:port`.
fn peer(entry: &str) -> Result<Peer, String> {
    match entry.split_once('=') {
        Some((host, url)) => {
            let rest = url
                .strip_prefix("https://")
                .ok_or_else(|| format!("endpoint {entry}: HOST= goes with https://IP:port"))?;
            Ok(Peer {
                addr: endpoint(&format!("http://{rest}"))?,
                tls_name: Some(host.to_string()),
            })
        }
        None if entry.starts_with("https://") => Err(format!(
            "endpoint {entry}: https needs the name its certificate carries, as HOST=https://IP:port"
        )),
        None => Ok(Peer {
            addr: endpoint(entry)?,
            tls_name: None,
        }),
    }
}

/// `http://IP:port` as a socket address. Names are refused on purpose: looking up a member's
/// name early is what the gate exists to avoid.
fn endpoint(url: &str) -> Result<SocketAddr, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("endpoint {url}: only http://IP:port (or HOST=https://IP:port) is supported")
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
            let tls = match &self.tls_dir {
                Some(dir) => Some(tls_config(dir)?),
                None => None,
            };
            self.await_membership(tls.as_ref());
        }
        let err = Command::new(&self.program).args(&self.program_args).exec();
        Err(format!("running {}: {err}", self.program))
    }

    /// Polls until the member is listed. There is no deadline: the operator deletes a pod
    /// whose member is not added in time.
    fn await_membership(&self, tls: Option<&Arc<rustls::ClientConfig>>) {
        let started = Instant::now();
        let mut next_report = started;
        loop {
            let answer = is_member(&self.endpoints, &self.peer_url, self.expected.as_ref(), tls);
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

// The one place the gate needs unsafe code: std has no way to install a signal handler.
#[allow(unsafe_code)]
extern "C" fn on_termination(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(143) }
}

/// As a container's PID 1 the process gets no default action for SIGTERM, so without a handler
/// a waiting pod would take its whole grace period to delete. `execve` resets the handler, so
/// etcd keeps its own.
#[allow(unsafe_code)] // see on_termination
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

/// The client side of peer TLS from the member's own peer Secret: its CA bundle to check
/// peers by, its certificate to show them.
fn tls_config(dir: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let file = |name: &str| dir.join(name);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(file("peer-ca.crt"))
        .map_err(|e| format!("reading {}: {e}", file("peer-ca.crt").display()))?
    {
        let cert = cert.map_err(|e| format!("reading {}: {e}", file("peer-ca.crt").display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", file("peer-ca.crt").display()))?;
    }
    let chain = CertificateDer::pem_file_iter(file("peer.crt"))
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading {}: {e}", file("peer.crt").display()))?;
    let key = PrivateKeyDer::from_pem_file(file("peer.key"))
        .map_err(|e| format!("reading {}: {e}", file("peer.key").display()))?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .map_err(|e| format!("{}: {e}", file("peer.crt").display()))?;
    Ok(Arc::new(config))
}

/// Whether the first member that answers lists `peer_url` (and, when given, exactly the peer
/// URLs `expected`).
fn is_member(
    endpoints: &[Peer],
    peer_url: &str,
    expected: Option<&std::collections::BTreeSet<String>>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<bool, String> {
    let mut errors = Vec::new();
    for ep in endpoints {
        match member_list(ep, tls).and_then(|body| members(&body)) {
            Ok(listed) => return Ok(complete(&listed, peer_url, expected)),
            Err(e) => errors.push(format!("{}: {e}", ep.addr)),
        }
    }
    Err(errors.join("; "))
}

/// The body of a member's answer to `GET /members` on its peer port. HTTP/1.0, so the answer
/// is never chunked and ends when etcd closes the connection.
fn member_list(ep: &Peer, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<String, String> {
    let err = |e: std::io::Error| e.to_string();
    let conn = TcpStream::connect_timeout(&ep.addr, TIMEOUT).map_err(err)?;
    conn.set_read_timeout(Some(TIMEOUT)).map_err(err)?;
    conn.set_write_timeout(Some(TIMEOUT)).map_err(err)?;
    let request = format!("GET /members HTTP/1.0\r\nHost: {}\r\n\r\n", ep.addr);
    let mut raw = Vec::new();
    match (&ep.tls_name, tls) {
        (Some(name), Some(config)) => {
            let name = ServerName::try_from(name.clone()).map_err(|e| format!("{name}: {e}"))?;
            let session =
                rustls::ClientConnection::new(config.clone(), name).map_err(|e| e.to_string())?;
            let mut stream = rustls::StreamOwned::new(session, conn);
            stream.write_all(request.as_bytes()).map_err(err)?;
            read_answer(&mut stream, &mut raw)?;
        }
        _ => {
            let mut conn = conn;
            conn.write_all(request.as_bytes()).map_err(err)?;
            read_answer(&mut conn, &mut raw)?;
        }
    }
    response_body(&raw)
}

/// Reads one HTTP answer into `raw`: up to its Content-Length when it has one, else to the end
/// of the connection. Not waiting for the close matters over TLS: etcd's peer listener ends a
/// TLS connection late (or without close_notify), which would cost a read timeout per ask.
fn read_answer(r: &mut impl Read, raw: &mut Vec<u8>) -> Result<(), String> {
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| raw.len() >= end + 4 + n) {
                return Ok(());
            }
        }
        if raw.len() as u64 > MAX_RESPONSE {
            return Err("an answer larger than a member list".into());
        }
        match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A TLS peer that closes without close_notify has still sent the whole answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
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

/// Whether the member list lets this member start: it lists `peer_url` and, when given,
/// exactly the peer URLs `expected`; and every member whose peer URL sorts before `peer_url`
/// has started (it has a name). etcd, starting with `--initial-cluster-state=existing`, asks
/// its peers for the membership in the order of their sorted peer URLs and waits seconds on
/// one that accepts the connection but does not answer yet: a member of the same batch that
/// is starting too. Started in that order, each new member finds the peers before it serving
/// and the ones after it not listening (refused at once).
fn complete(
    listed: &[Listed],
    peer_url: &str,
    expected: Option<&std::collections::BTreeSet<String>>,
) -> bool {
    let urls: std::collections::BTreeSet<String> =
        listed.iter().flat_map(|m| m.urls.iter().cloned()).collect();
    urls.contains(peer_url)
        && expected.is_none_or(|e| urls == *e)
        && listed
            .iter()
            .filter(|m| m.urls.iter().any(|u| u.as_str() < peer_url))
            .all(|m| m.started)
}

/// One member of a member-list answer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Listed {
    /// It has started: it published its name.
    started: bool,
    /// Its peer URLs.
    urls: Vec<String>,
}

/// The members of a member-list answer.
fn members(body: &str) -> Result<Vec<Listed>, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not a member list: {e}"))?;
    let members = v.as_array().ok_or("a member list that is not a list")?;
    Ok(members
        .iter()
        .map(|m| Listed {
            started: m
                .get("name")
                .and_then(|n| n.as_str())
                .is_some_and(|n| !n.is_empty()),
            urls: m
                .get("peerURLs")
                .and_then(|u| u.as_array())
                .into_iter()
                .flatten()
                .filter_map(|u| u.as_str().map(String::from))
                .collect(),
        })
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
            "--peer-url=http://m2.c.ns.svc:2380 --endpoints http://10.0.0.5:2380,http://[fd00::1]:2380 \
             --data-dir=/var/etcd/data -- /usr/local/bin/etcd --name=m2",
        ))
        .unwrap();
        assert_eq!(w.peer_url, "http://m2.c.ns.svc:2380");
        let plain = |a: &str| Peer {
            addr: a.parse().unwrap(),
            tls_name: None,
        };
        assert_eq!(
            w.endpoints,
            vec![plain("10.0.0.5:2380"), plain("[fd00::1]:2380")]
        );
        assert_eq!(w.data_dir, Path::new("/var/etcd/data"));
        assert_eq!(w.tls_dir, None);
        assert_eq!(w.poll, Duration::from_millis(100));
        assert_eq!(w.program, "/usr/local/bin/etcd");
        assert_eq!(w.program_args, vec!["--name=m2"]);
    }

    #[test]
    fn a_member_started_in_a_batch_waits_for_its_whole_initial_cluster() {
        let w = parse_wait(&args(
            "--peer-url=http://m2:2380 --endpoints http://10.0.0.5:2380 --data-dir=/d -- etcd \
             --initial-cluster=m1=http://m1:2380,m2=http://m2:2380,m3=http://m3:2380",
        ))
        .unwrap();
        let member = |url: &str, started: bool| Listed {
            started,
            urls: vec![url.to_string()],
        };
        let own = "http://m2:2380";
        let expected = w.expected.as_ref();
        let m1 = member("http://m1:2380", true);
        // Added, but m3 is not yet: etcd would refuse to start ("member count is unequal").
        assert!(!complete(&[m1.clone(), member(own, false)], own, expected));
        let all = [
            m1.clone(),
            member(own, false),
            member("http://m3:2380", false),
        ];
        assert!(complete(&all, own, expected));
        // m3 waits for m2, which sorts before it, to start first.
        assert!(!complete(&all, "http://m3:2380", None));
        let later = [
            m1.clone(),
            member(own, true),
            member("http://m3:2380", false),
        ];
        assert!(complete(&later, "http://m3:2380", None));
        // Without --initial-cluster: its own URL listed is enough.
        let alone = parse_wait(&args(
            "--peer-url=http://m2:2380 --endpoints http://10.0.0.5:2380 --data-dir=/d -- etcd",
        ))
        .unwrap();
        assert!(alone.expected.is_none());
        assert!(complete(&[m1.clone(), member(own, false)], own, None));
        assert!(!complete(&[m1], own, None));
    }

    #[test]
    fn parses_a_wait_command_over_tls() {
        let w = parse_wait(&args(
            "--peer-url=https://m2.c.ns.svc:2380 --endpoints m1.c.ns.svc=https://10.0.0.5:2380 \
             --data-dir=/var/etcd/data --tls-dir=/etc/etcdtls/member/peer-tls -- etcd",
        ))
        .unwrap();
        assert_eq!(
            w.endpoints,
            vec![Peer {
                addr: "10.0.0.5:2380".parse().unwrap(),
                tls_name: Some("m1.c.ns.svc".into()),
            }]
        );
        assert_eq!(
            w.tls_dir.as_deref(),
            Some(Path::new("/etc/etcdtls/member/peer-tls"))
        );
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
                "--peer-url=u --endpoints=https://10.0.0.5:2380 --data-dir=d -- etcd",
                "HOST=https://IP:port",
            ),
            (
                "--peer-url=u --endpoints=m1=https://10.0.0.5:2380 --data-dir=d -- etcd",
                "https needs --tls-dir",
            ),
            (
                "--peer-url=u --endpoints=m1=http://10.0.0.5:2380 --tls-dir=t --data-dir=d -- etcd",
                "HOST= goes with https",
            ),
            (
                "--peer-url=u --endpoints=ftp://10.0.0.5:2380 --data-dir=d -- etcd",
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

    // As etcd 3.4.23, 3.5.35 and 3.6.16 answer on the peer port (captured from each).
    const ANSWER: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\
        X-Etcd-Cluster-Id: 48276a8f75b6a87\r\nContent-Length: 198\r\n\r\n\
        [{\"id\":3319814642761637952,\"peerURLs\":[\"http://127.0.0.1:23800\"],\"name\":\"default\",\
        \"clientURLs\":[\"http://127.0.0.1:23799\"]},\
        {\"id\":4983906108875318790,\"peerURLs\":[\"http://m2:2380\"],\"isLearner\":true}]\n";

    #[test]
    fn reads_the_members_of_a_member_list() {
        let body = response_body(ANSWER).unwrap();
        assert_eq!(
            members(&body).unwrap(),
            vec![
                Listed {
                    started: true,
                    urls: vec!["http://127.0.0.1:23800".into()]
                },
                Listed {
                    started: false,
                    urls: vec!["http://m2:2380".into()]
                },
            ]
        );
    }

    #[test]
    fn an_answer_is_read_up_to_its_length_without_waiting_for_the_close() {
        // A reader that would block after the answer, as a connection the server keeps open.
        struct Open<'a>(&'a [u8]);
        impl Read for Open<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                let n = buf.len().min(self.0.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut raw = Vec::new();
        read_answer(&mut Open(ANSWER), &mut raw).unwrap();
        assert_eq!(raw, ANSWER);
        let mut raw = Vec::new();
        assert!(read_answer(&mut Open(&ANSWER[..ANSWER.len() - 1]), &mut raw).is_err());
    }

    #[test]
    fn an_error_answer_is_not_a_member_list() {
        let raw = b"HTTP/1.0 503 Service Unavailable\r\n\r\n{\"error\":\"etcdserver: no leader\"}";
        let err = response_body(raw).unwrap_err();
        assert!(err.contains("503") && err.contains("no leader"), "{err}");
        assert!(response_body(b"HTTP/1.0 200 OK\r\n").is_err());
        assert!(members("{\"members\":[]}").is_err());
        assert!(members("<html>").is_err());
    }
}
