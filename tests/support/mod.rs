//! Real etcd processes on 127.0.0.1 for tests of the etcd layer.
//!
//! The binaries come from `ETCD_BINARIES`, a comma-separated list of `<minor>=<path to etcd>`
//! (`make unit` sets it: Debian's 3.4 and the 3.5 and 3.6 that hack/build-tools.sh builds).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_operator::etcd::{Access, ClientTls, Endpoint};
use etcd_operator::pki::{self, Ca, Role};

/// Path of the etcd binary for `minor` ("3.4", "3.5", "3.6"). Panics with instructions when the
/// environment does not name one: a test of the etcd layer must not pass without etcd.
pub fn etcd_binary(minor: &str) -> PathBuf {
    let list = std::env::var("ETCD_BINARIES").unwrap_or_else(|_| {
        panic!(
            "ETCD_BINARIES is not set; run `make unit`, or set it to e.g. \
             3.4=/usr/bin/etcd,3.5=$(hack/build-tools.sh etcd-3.5)/etcd,3.6=$(hack/build-tools.sh etcd-3.6)/etcd"
        )
    });
    let path = list
        .split(',')
        .find_map(|e| {
            e.split_once('=')
                .filter(|(v, _)| *v == minor)
                .map(|(_, p)| p)
        })
        .unwrap_or_else(|| panic!("ETCD_BINARIES has no entry for {minor}: {list}"));
    assert!(
        Path::new(path).is_file(),
        "{path} (etcd {minor}) does not exist"
    );
    PathBuf::from(path)
}

/// Path of the statically linked `etcd-gate` that the operator image ships (`hack/gate.sh`
/// builds it; `make unit` sets `ETCD_GATE`).
pub fn gate_binary() -> PathBuf {
    let path = std::env::var("ETCD_GATE").unwrap_or_else(|_| {
        panic!("ETCD_GATE is not set; run `make unit`, or set it to the path hack/gate.sh prints")
    });
    assert!(
        Path::new(&path).is_file(),
        "{path} (etcd-gate) does not exist"
    );
    PathBuf::from(path)
}

/// A port for a test's etcd that nothing takes before etcd binds it: one this process has not
/// handed out before, free now, and below the kernel's ephemeral range (32768 and up), from
/// which outgoing connections take their source ports. A port found by binding port 0 was in
/// that range and could go to a client socket, or again to a parallel test, before etcd bound
/// it: CI met "bind: address already in use" in `membership_over_tls_on_etcd_3_6`.
fn free_port() -> u16 {
    const FIRST: usize = 20_000;
    const SPAN: usize = 10_000;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // Test binaries run one after another, but a stale etcd of an earlier one may linger.
    let base = (std::process::id() as usize).wrapping_mul(397) % SPAN;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < SPAN, "no free test port left");
        let port = u16::try_from(FIRST + (base + n) % SPAN).expect("below 30000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "etcd-operator-test-{}-{}-{name}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The name every test certificate carries (beside 127.0.0.1), which clients check: members
/// are reached by IP, as the operator reaches pods.
pub const TLS_NAME: &str = "localhost";

/// A CA and the certificates of a TLS test cluster, made as `TLS.auto` makes them, in files
/// of the coreos layout (`peer.*`, `server.*`), and the client identity the operator uses.
pub struct TestPki {
    /// Directory of the member files.
    pub dir: PathBuf,
    /// The operator's client identity.
    pub client: Arc<ClientTls>,
    /// The CA.
    pub ca: Ca,
}

impl TestPki {
    pub fn new() -> Arc<TestPki> {
        let now = time::OffsetDateTime::now_utc();
        let day = Duration::from_secs(86_400);
        let ca = Ca::new("test", now, day).unwrap();
        let names = vec![TLS_NAME.to_string(), "127.0.0.1".into()];
        let dir = scratch("pki");
        for (role, layout) in [(Role::Peer, pki::PEER), (Role::Server, pki::SERVER)] {
            let pair = ca.issue(role, TLS_NAME, &names, now, day).unwrap();
            for (file, text) in layout.entries(&pair, &ca.0.cert) {
                std::fs::write(dir.join(file), text).unwrap();
            }
        }
        let client = ca.issue(Role::Client, "operator", &[], now, day).unwrap();
        Arc::new(TestPki {
            dir,
            client: Arc::new(ClientTls {
                ca: ca.0.cert.clone().into_bytes(),
                cert: client.cert.into_bytes(),
                key: client.key.into_bytes(),
            }),
            ca,
        })
    }

    fn flags(&self) -> Vec<String> {
        let f = |name: &str| self.dir.join(name).display().to_string();
        vec![
            "--peer-client-cert-auth=true".into(),
            format!("--peer-trusted-ca-file={}", f("peer-ca.crt")),
            format!("--peer-cert-file={}", f("peer.crt")),
            format!("--peer-key-file={}", f("peer.key")),
            "--client-cert-auth=true".into(),
            format!("--trusted-ca-file={}", f("server-ca.crt")),
            format!("--cert-file={}", f("server.crt")),
            format!("--key-file={}", f("server.key")),
        ]
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One etcd process; killed and its data directory removed on drop.
pub struct EtcdProcess {
    pub name: String,
    pub peer_url: String,
    pub client_url: String,
    /// Peers and clients speak TLS with these certificates.
    pub tls: Option<Arc<TestPki>>,
    /// More flags for etcd (e.g. `--max-learners=6`).
    pub extra: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
}

impl EtcdProcess {
    /// A member description before it starts: ports and URLs are chosen now so that the
    /// `--initial-cluster` of others can name it.
    pub fn plan(name: &str) -> Self {
        Self::plan_with(name, None)
    }

    /// [`EtcdProcess::plan`], with TLS for peers and clients (client certificates required)
    /// when `tls` is given.
    pub fn plan_with(name: &str, tls: Option<Arc<TestPki>>) -> Self {
        let scheme = if tls.is_some() { "https" } else { "http" };
        EtcdProcess {
            name: name.to_string(),
            peer_url: format!("{scheme}://127.0.0.1:{}", free_port()),
            client_url: format!("{scheme}://127.0.0.1:{}", free_port()),
            tls,
            extra: Vec::new(),
            dir: scratch(name),
            child: None,
        }
    }

    /// The client endpoint as the operator reaches it.
    pub fn endpoint(&self) -> Endpoint {
        match &self.tls {
            Some(pki) => Endpoint::new(
                self.client_url.clone(),
                Access::tls(Some(pki.client.clone())),
                Some(TLS_NAME.into()),
            ),
            None => Endpoint::plain(self.client_url.clone()),
        }
    }

    /// Where `etcd-gate` asks this member whether another was added (its peer port), in the
    /// form the operator gives it.
    pub fn gate_endpoint(&self) -> String {
        match &self.tls {
            Some(_) => format!("{TLS_NAME}={}", self.peer_url),
            None => self.peer_url.clone(),
        }
    }

    /// `<name>=<peer URL>` for `--initial-cluster`.
    pub fn initial_cluster_entry(&self) -> String {
        format!("{}={}", self.name, self.peer_url)
    }

    /// Starts etcd with `initial_cluster` and `state` ("new" or "existing") and waits until it
    /// serves its client port.
    pub fn start(&mut self, binary: &Path, initial_cluster: &str, state: &str, token: &str) {
        self.spawn(&[], binary, initial_cluster, state, token);
        self.wait_listening(Duration::from_secs(20));
    }

    /// Starts etcd as [`EtcdProcess::start`] does, through `wrapper` (a program and its
    /// arguments, to which etcd's path and arguments are appended), without waiting.
    pub fn spawn(
        &mut self,
        wrapper: &[String],
        binary: &Path,
        initial_cluster: &str,
        state: &str,
        token: &str,
    ) {
        let log = std::fs::File::create(self.dir.join("etcd.log")).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        let child = cmd
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", self.data_dir().display()))
            .arg(format!("--listen-peer-urls={}", self.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", self.peer_url))
            .arg(format!("--listen-client-urls={}", self.client_url))
            .arg(format!("--advertise-client-urls={}", self.client_url))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg(format!("--initial-cluster-state={state}"))
            .arg(format!("--initial-cluster-token={token}"))
            .args(self.tls.as_ref().map(|t| t.flags()).unwrap_or_default())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        self.child = Some(child);
    }

    /// The data directory etcd is given.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Whether something serves the client port now.
    pub fn listening(&self) -> bool {
        let addr = self.client_url.split_once("://").map_or("", |(_, a)| a);
        std::net::TcpStream::connect(addr).is_ok()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Waits until the client port is served.
    pub fn wait_listening(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.listening() {
            assert!(
                Instant::now() < deadline,
                "{} did not listen: {}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the process (its data stays until drop).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
pub mod stores;

/// The bearer token of [`TokenServer`].
pub const TOKEN: &str = "s3cr3t";

/// Serves what the operator serves a restore's seed: `http://IP:port/restores/ns/c/...`, each
/// request's path (query included) answered by `answer` (200 with its body), and 403 to a
/// request without `Authorization: Bearer` [`TOKEN`] or one `answer` refuses; until dropped.
pub struct TokenServer {
    /// `http://IP:port/restores/ns/c`.
    pub base: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl TokenServer {
    pub fn start(answer: impl Fn(&str) -> Option<Vec<u8>> + Send + 'static) -> Self {
        use std::io::{BufRead, BufReader, Write};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}/restores/ns/c", listener.local_addr().unwrap());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                let mut authorized = false;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                        break;
                    }
                    authorized |= line.trim() == format!("Authorization: Bearer {TOKEN}");
                }
                let path = request.split_whitespace().nth(1).unwrap_or("");
                let mut conn = conn;
                match authorized.then(|| answer(path)).flatten() {
                    Some(body) => {
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        let _ = conn.write_all(head.as_bytes());
                        let _ = conn.write_all(&body);
                    }
                    None => {
                        let _ = conn
                            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\nno\n");
                    }
                }
            }
        });
        TokenServer { base, stop }
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
