//! Real object-store servers for the snapshot tests: moto (S3, PyPI `moto[server]`) and Azurite
//! (Azure Blob, npm), both installed by hack/deps.sh. Each listens on the host it is given
//! (127.0.0.1 for the unit tier, the local cluster's bridge for e2e, so that pods reach it) on
//! a free port, and is killed on drop. Shared by tests/ and e2e/tests/ (included by path).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port(host: &str) -> u16 {
    std::net::TcpListener::bind((host, 0))
        .unwrap_or_else(|e| panic!("binding {host}: {e} (is the local cluster up?)"))
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `child` listens on `host:port`. A connection whose two ends are the same address
/// does not count: polling a port of the ephemeral range before the server binds it can make the
/// kernel pick that very port as the source, and the socket then connects to itself (TCP
/// simultaneous open). CI met that once: moto "started", and the first request was refused.
fn wait_for(name: &str, child: &mut Child, log: &Path, host: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(stream) = std::net::TcpStream::connect((host, port))
            && stream.local_addr().ok() != stream.peer_addr().ok()
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let out = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{name} exited ({status}) before it listened on {host}:{port}:\n{out}");
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not listen on {host}:{port} in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A file for a server's output, so that a server that fails says why.
fn log_file(name: &str, port: u16) -> (PathBuf, Stdio, Stdio) {
    let path = std::env::temp_dir().join(format!("{name}-{}-{port}.log", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let err = file.try_clone().unwrap();
    (path, Stdio::from(file), Stdio::from(err))
}

/// Runs `cmd`, a server that will listen on `host:port`, its output to a log file, and waits
/// until it listens; `what` names it when it cannot start (and how to get it).
fn serve(name: &str, mut cmd: Command, host: &str, port: u16, what: &str) -> (Child, PathBuf) {
    let (log, out, err) = log_file(name, port);
    let mut child = cmd
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    wait_for(name, &mut child, &log, host, port);
    (child, log)
}

/// `curl` signed with `test`/`test` for the S3 server at `base`, with extra `args`; the
/// response body.
pub fn s3_curl(base: &str, args: &[&str], path: &str) -> Vec<u8> {
    let out = Command::new("curl")
        // versitygw refuses a request without the payload's hash header; curl signs this one.
        .args([
            "-sf",
            "-H",
            "Expect:",
            "-H",
            "x-amz-content-sha256: UNSIGNED-PAYLOAD",
        ])
        .args(["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "test:test"])
        .args(args)
        .arg(format!("{base}{path}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl {args:?} {path}: {out:?}");
    out.stdout
}

/// moto's S3 server. It takes any key; the tests sign with `test`/`test`.
pub struct Moto {
    child: Child,
    log: PathBuf,
    /// `http://host:port`.
    pub url: String,
}

impl Moto {
    pub fn start(host: &str) -> Self {
        let port = free_port(host);
        // As a module of the Python that has it, so no console-script shim needs refreshing.
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "moto.server", "-H", host, "-p", &port.to_string()]);
        let what = "python3 -m moto.server (PyPI moto[server]; hack/deps.sh installs it)";
        let (child, log) = serve("moto", cmd, host, port, what);
        Moto {
            child,
            log,
            url: format!("http://{host}:{port}"),
        }
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `curl` signed for moto, with extra `args`; the response body.
    pub fn curl(&self, args: &[&str], path: &str) -> Vec<u8> {
        s3_curl(&self.url, args, path)
    }

    pub fn create_bucket(&self, bucket: &str) {
        self.curl(&["-X", "PUT"], &format!("/{bucket}"));
    }

    /// Keys under `prefix` in `bucket`.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let xml = self.curl(&[], &format!("/{bucket}?list-type=2&prefix={prefix}"));
        String::from_utf8_lossy(&xml)
            .split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_string()))
            .collect()
    }

    /// The `x-amz-meta-<name>` of an object.
    pub fn metadata(&self, bucket: &str, key: &str, name: &str) -> Option<String> {
        self.header(bucket, key, &format!("x-amz-meta-{name}"))
    }

    /// A header of an object's HEAD response.
    pub fn header(&self, bucket: &str, key: &str, name: &str) -> Option<String> {
        let headers = self.curl(&["-I"], &format!("/{bucket}/{key}"));
        String::from_utf8_lossy(&headers).lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// versitygw: an S3 gateway on a directory (`github.com/versity/versitygw`, built by
/// `hack/build-tools.sh versitygw`), the fastest S3 server measured here (by the operator's
/// client, a 1 GiB object: about 300 MiB/s in, 1.8 GiB/s out, where s3s-fs took 130 to 175 MiB/s
/// and served 170); the backup benchmark's store. Signed with `test`/`test`, like moto.
pub struct Versitygw {
    child: Child,
    log: PathBuf,
    root: PathBuf,
    /// `http://host:port`.
    pub url: String,
}

impl Versitygw {
    pub fn start(host: &str) -> Self {
        // Included by the root crate's tests and by e2e's: the repository is the manifest's
        // directory or its parent.
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let repo = if manifest.join("hack/build-tools.sh").exists() {
            manifest
        } else {
            manifest.join("..")
        };
        let out = Command::new(repo.join("hack/build-tools.sh"))
            .arg("versitygw")
            .output()
            .expect("hack/build-tools.sh versitygw");
        assert!(out.status.success(), "building versitygw: {out:?}");
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("versitygw");
        let port = free_port(host);
        let root = std::env::temp_dir().join(format!("versitygw-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let mut cmd = Command::new(&bin);
        cmd.args(["--access", "test", "--secret", "test", "--quiet"])
            .args(["--port", &format!("{host}:{port}")])
            .arg("posix")
            // ETags from its CRC64 rather than an MD5 of every byte: the benchmark measures the
            // operator, not the store's hashing on the 2 cores they share (backups never read
            // ETags; integrity is the sha256 and etcd's own hash).
            .arg("--data-integrity-etag")
            .arg(&root);
        let (child, log) = serve("versitygw", cmd, host, port, &bin.display().to_string());
        Versitygw {
            child,
            log,
            root,
            url: format!("http://{host}:{port}"),
        }
    }

    /// Where the objects are: `<root>/<bucket>/<key>`.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn create_bucket(&self, bucket: &str) {
        s3_curl(&self.url, &["-X", "PUT"], &format!("/{bucket}"));
    }
}

impl Drop for Versitygw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Azurite's Blob server, with its well-known development account.
pub struct Azurite {
    child: Child,
    log: PathBuf,
    data: PathBuf,
    /// `http://host:port/devstoreaccount1`, the account's endpoint.
    pub url: String,
}

/// Azurite's development account and key (public, documented by Microsoft).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn azurite_modules() -> PathBuf {
    let cache = std::env::var("ETCD_OPERATOR_CACHE")
        .unwrap_or_else(|_| format!("{}/.cache/etcd-operator", std::env::var("HOME").unwrap()));
    Path::new(&cache).join("azurite/node_modules")
}

impl Azurite {
    pub fn start(host: &str) -> Self {
        let port = free_port(host);
        let data = std::env::temp_dir().join(format!("azurite-{}-{port}", std::process::id()));
        let mut cmd = Command::new(azurite_modules().join(".bin/azurite-blob"));
        cmd.args(["--blobHost", host, "--blobPort", &port.to_string()])
            .arg("--location")
            .arg(&data)
            .args(["--skipApiVersionCheck", "--disableTelemetry", "--silent"]);
        let what = "azurite-blob (npm azurite; hack/deps.sh installs it)";
        let (child, log) = serve("azurite", cmd, host, port, what);
        Azurite {
            child,
            log,
            data,
            url: format!("http://{host}:{port}/{AZURITE_ACCOUNT}"),
        }
    }

    /// hack/azurite-client.cjs (Azure's own JS client) with `args`; its output.
    fn client(&self, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .find(|d| d.join("hack/azurite-client.cjs").is_file())
            .expect("hack/azurite-client.cjs")
            .join("hack/azurite-client.cjs");
        let out = Command::new("node")
            .arg(script)
            .args(args)
            .env("AZURITE_URL", &self.url)
            .env("NODE_PATH", azurite_modules())
            .output()
            .unwrap();
        assert!(out.status.success(), "azurite-client {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn create_container(&self, container: &str) {
        self.client(&["container", container]);
    }

    /// Blob names under `prefix` in `container`.
    pub fn blobs(&self, container: &str, prefix: &str) -> Vec<String> {
        self.client(&["list", container, prefix])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Downloads a blob into `file`; its size and metadata as Azure reports them.
    pub fn get(&self, container: &str, blob: &str, file: &Path) -> serde_json::Value {
        let out = self.client(&["get", container, blob, file.to_str().unwrap()]);
        serde_json::from_str(out.trim()).unwrap()
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
