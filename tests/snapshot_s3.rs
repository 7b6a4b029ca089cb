//! A snapshot of real etcd streamed into a real S3 API (moto's server, PyPI `moto[server]`,
//! on 127.0.0.1) in several multipart parts, through a store built from a coreos-format
//! Secret (`credentials`, `config`) with `endpoint` and `forcePathStyle`: the object is what etcd sent, and a refused stream
//! leaves neither an object nor an unfinished multipart upload behind.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_operator::api::S3Source;
use etcd_operator::backup::snapshot::{self, Error, hex};
use etcd_operator::backup::storage;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMultipartOptions};
use support::{EtcdProcess, etcd_binary};

const BUCKET: &str = "backups";

/// moto's S3 server on a free port; killed on drop.
struct Moto {
    child: Child,
    url: String,
}

impl Moto {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // As a module of the Python that has it, so no console-script shim needs refreshing.
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m moto.server (PyPI moto[server]; `make unit` installs it)");
        let moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// `curl` signed for moto (it takes any key).
    fn curl(&self, method: &str, path: &str) -> String {
        let out = Command::new("curl")
            .args(["-sf", "-X", method, "-H", "Expect:"])
            .args(["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "test:test"])
            .arg(format!("{}{path}", self.url))
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {method} {path}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_streams_into_s3_in_parts_and_a_refused_one_leaves_nothing() {
    let moto = Moto::start();
    moto.curl("PUT", &format!("/{BUCKET}"));
    // Built the way an EtcdBackup's S3 section and its coreos-format Secret are.
    let source = S3Source {
        path: format!("{BUCKET}/cluster/snapshot.db"),
        aws_secret: Some("aws".into()),
        endpoint: Some(moto.url.clone()),
        force_path_style: Some(true),
    };
    let secret: storage::SecretData = [
        (
            "credentials",
            "[default]\naws_access_key_id = test\naws_secret_access_key = test\n",
        ),
        ("config", "[default]\nregion = us-east-1\n"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let target = storage::s3(&source, Some(&secret)).unwrap();
    let store = target.store.as_ref();
    assert_eq!(target.url, format!("s3://{BUCKET}/cluster/snapshot.db"));

    // About 20 MiB of data: three parts of the upload.
    let binary = etcd_binary("3.6");
    let mut m = EtcdProcess::plan("m0");
    let cluster = m.initial_cluster_entry();
    m.start(
        &binary,
        &cluster,
        "new",
        &format!("s3-{}", std::process::id()),
    );
    let mut client = etcd_client::Client::connect([m.client_url.as_str()], None)
        .await
        .unwrap();
    for i in 0..2000 {
        client
            .put(format!("key-{i:05}"), vec![b'x'; 10 * 1024], None)
            .await
            .unwrap();
    }

    let location = target.location.clone();
    let saved = snapshot::save(
        &m.client_url,
        store,
        &location,
        PutMultipartOptions::default(),
        Duration::from_secs(120),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(saved.verified.size > 16 << 20, "{}", saved.verified.size);
    let object = store.get(&location).await.unwrap().bytes().await.unwrap();
    assert_eq!(object.len() as u64, saved.verified.size);
    assert_eq!(
        saved.verified.sha256,
        hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &object).as_ref())
    );

    // The same bytes with one flipped: refused after the parts were sent, and aborted.
    let mut corrupted = object.to_vec();
    corrupted[1 << 20] ^= 0xff;
    let chunks = futures::stream::iter(
        corrupted
            .chunks(32 * 1024)
            .map(|c| Ok(c.to_vec()))
            .collect::<Vec<_>>(),
    )
    .boxed();
    let refused = Path::from("cluster/corrupted.db");
    let err = snapshot::upload(
        chunks,
        store,
        &refused,
        PutMultipartOptions::default(),
        Duration::from_secs(120),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    assert!(matches!(
        store.head(&refused).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let uploads = moto.curl("GET", &format!("/{BUCKET}?uploads"));
    assert!(!uploads.contains("<Upload>"), "{uploads}");
}
