//! Real etcd processes on 127.0.0.1 for tests of the etcd layer.
//!
//! The binaries come from `ETCD_BINARIES`, a comma-separated list of `<minor>=<path to etcd>`
//! (`make unit` sets it: Debian's 3.4 and the 3.5 and 3.6 that hack/build-tools.sh builds).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// One etcd process; killed and its data directory removed on drop.
pub struct EtcdProcess {
    pub name: String,
    pub peer_url: String,
    pub client_url: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl EtcdProcess {
    /// A member description before it starts: ports and URLs are chosen now so that the
    /// `--initial-cluster` of others can name it.
    pub fn plan(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "etcd-operator-test-{}-{}-{name}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        EtcdProcess {
            name: name.to_string(),
            peer_url: format!("http://127.0.0.1:{}", free_port()),
            client_url: format!("http://127.0.0.1:{}", free_port()),
            dir,
            child: None,
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
        std::net::TcpStream::connect(self.client_url.trim_start_matches("http://")).is_ok()
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
