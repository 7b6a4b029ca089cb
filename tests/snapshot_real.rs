//! Snapshots of real etcd 3.4, 3.5 and 3.6 streamed into object storage (the object_store
//! crate's local file system store, which completes a multipart upload by renaming it into
//! place): the object is byte for byte what etcd sent, its hash is checked, etcd's own tool
//! reads it; a corrupted or cut stream leaves nothing under the final name.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use etcd_operator::store::snapshot::{self, Error, hex};
use futures::StreamExt;
use object_store::PutMultipartOptions;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use support::{EtcdProcess, etcd_binary};

const TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT: Duration = Duration::from_secs(5);
const KEYS: usize = 2000;

/// etcd's snapshot tool for `minor`: `etcdutl` (3.5 and later) or 3.4's `etcdctl`, with
/// `args` and `file` appended; panics with its stderr unless it succeeds. Returns stdout.
fn snapshot_tool(minor: &str, args: &[&str], file: &std::path::Path) -> Vec<u8> {
    let dir = etcd_binary(minor).parent().unwrap().to_path_buf();
    let mut cmd = if minor == "3.4" {
        let mut c = Command::new(dir.join("etcdctl"));
        c.env("ETCDCTL_API", "3");
        c
    } else {
        Command::new(dir.join("etcdutl"))
    };
    let out = cmd
        .arg("snapshot")
        .arg(args[0])
        .arg(file)
        .args(&args[1..])
        .output()
        .expect("running etcd's snapshot tool");
    assert!(
        out.status.success(),
        "snapshot {}: {}",
        args[0],
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `snapshot status` as JSON.
fn snapshot_status(minor: &str, file: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&snapshot_tool(minor, &["status", "--write-out=json"], file)).unwrap()
}

/// `snapshot restore`: it refuses a file whose appended hash does not match.
fn restore(minor: &str, file: &std::path::Path, data_dir: &std::path::Path) {
    let data_dir = format!("--data-dir={}", data_dir.display());
    snapshot_tool(minor, &["restore", &data_dir], file);
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

async fn scenario(minor: &str) {
    let binary = etcd_binary(minor);
    let token = format!("snap-{minor}-{}", std::process::id());
    let mut m = EtcdProcess::plan("m0");
    let cluster = m.initial_cluster_entry();
    m.start(&binary, &cluster, "new", &token);

    let mut client = etcd_client::Client::connect([m.client_url.as_str()], None)
        .await
        .unwrap();
    for i in 0..KEYS {
        client
            .put(format!("key-{i:05}"), vec![b'x'; 512], None)
            .await
            .unwrap();
    }

    let root: PathBuf = std::env::temp_dir().join(format!(
        "etcd-operator-snapshots-{minor}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(root.join("backups")).unwrap();
    let store = LocalFileSystem::new_with_prefix(&root).unwrap();

    let saved = snapshot::save(
        &m.endpoint(),
        &store,
        &Path::from("backups/one.db"),
        PutMultipartOptions::default(),
        TIMEOUT,
        CONNECT,
    )
    .await
    .unwrap();
    let file = root.join("backups/one.db");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len() as u64, saved.verified.size);
    assert_eq!(
        bytes.len() % 512,
        32,
        "a bbolt file plus etcd's 32-byte hash"
    );
    assert_eq!(
        saved.verified.sha256,
        hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes).as_ref())
    );
    assert_eq!(saved.verified.etcd_sha256, hex(&bytes[bytes.len() - 32..]));
    assert!(
        saved.version.starts_with(&format!("{minor}.")),
        "{}",
        saved.version
    );
    assert!(
        saved.revision > i64::try_from(KEYS).unwrap(),
        "{}",
        saved.revision
    );

    // The size announced before the body (what a restore's seed is sent as Content-Length)
    // is the whole stream's, etcd's appended hash included.
    let mut etcd = etcd_operator::etcd::Etcd::connect_streaming(&m.endpoint(), CONNECT)
        .await
        .unwrap();
    let (size, body) = etcd.snapshot_sized().await.unwrap();
    let streamed: Vec<u8> = body
        .map(|chunk| chunk.unwrap())
        .collect::<Vec<_>>()
        .await
        .concat();
    assert_eq!(
        size,
        streamed.len() as u64,
        "announced size against what came"
    );
    assert_eq!(streamed.len() % 512, 32);

    // Stored compressed: the object is a zstd frame, smaller, hashed as stored; decompressed
    // it is a snapshot etcd's own tool restores, and its hash is the snapshot's.
    let mut etcd = etcd_operator::etcd::Etcd::connect_streaming(&m.endpoint(), CONNECT)
        .await
        .unwrap();
    let zst = snapshot::upload_compressed(
        etcd.snapshot().await.unwrap(),
        &store,
        &Path::from("zst/one.db.zst"),
        PutMultipartOptions::default(),
        TIMEOUT,
        Some(3),
    )
    .await
    .unwrap();
    let stored = std::fs::read(root.join("zst/one.db.zst")).unwrap();
    assert_eq!(stored[..4], etcd_operator::store::compress::ZSTD_MAGIC);
    assert_eq!(zst.size, stored.len() as u64);
    assert_eq!(
        zst.sha256,
        hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &stored).as_ref())
    );
    let mut unpack = etcd_operator::store::compress::Unpack::default();
    let mut unpacked = Vec::new();
    unpack
        .push_each(&stored, |piece| unpacked.extend_from_slice(piece))
        .unwrap();
    unpacked.extend(unpack.finish());
    assert_eq!(zst.snapshot_size, unpacked.len() as u64);
    assert_eq!(
        zst.snapshot_sha256,
        hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &unpacked).as_ref())
    );
    eprintln!(
        "etcd {minor}: a {} byte snapshot stored as {} bytes with zstd level 3",
        unpacked.len(),
        stored.len()
    );
    assert!(stored.len() < unpacked.len());
    let unpacked_file = root.join("zst/unpacked.db");
    std::fs::write(&unpacked_file, &unpacked).unwrap();
    restore(minor, &unpacked_file, &root.join("restored-from-zst"));

    // etcd's own tool reads it and sees every key.
    let status = snapshot_status(minor, &file);
    assert!(
        status["revision"].as_i64().unwrap() >= saved.revision,
        "{status}"
    );
    assert!(
        status["totalKey"].as_u64().unwrap() >= KEYS as u64,
        "{status}"
    );
    restore(minor, &file, &root.join("restored"));
    assert!(root.join("restored/member").is_dir());
    eprintln!(
        "etcd {minor}: {} bytes, revision {}, sha256 {}",
        saved.verified.size, saved.revision, saved.verified.sha256
    );

    // The same bytes with one flipped, then cut short: refused, and nothing is left under the
    // final name (nor a part file beside it).
    let chunks = |data: Vec<u8>| {
        futures::stream::iter(
            data.chunks(32 * 1024)
                .map(|c| Ok(c.to_vec()))
                .collect::<Vec<_>>(),
        )
        .boxed()
    };
    let refused = |stream, name: &'static str| {
        let store = &store;
        async move {
            snapshot::upload(
                stream,
                store,
                &Path::from(format!("backups/{name}")),
                PutMultipartOptions::default(),
                TIMEOUT,
            )
            .await
            .unwrap_err()
        }
    };
    let mut corrupted = bytes.clone();
    corrupted[4096] ^= 0xff;
    let err = refused(chunks(corrupted), "corrupted.db").await;
    assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    let err = refused(chunks(bytes[..bytes.len() / 2].to_vec()), "cut.db").await;
    assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    assert_eq!(names_in(&root.join("backups")), ["one.db"]);

    // A stream that breaks half-way (etcd's error) is aborted the same way.
    let broken = futures::stream::iter(vec![
        Ok(bytes[..65536].to_vec()),
        Err(etcd_operator::etcd::Error::Malformed(
            "Snapshot", "the rest",
        )),
    ])
    .boxed();
    let err = refused(broken, "broken.db").await;
    assert!(matches!(err, Error::Etcd(_)), "{err}");
    assert_eq!(names_in(&root.join("backups")), ["one.db"]);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_of_etcd_3_4() {
    scenario("3.4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_of_etcd_3_5() {
    scenario("3.5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_of_etcd_3_6() {
    scenario("3.6").await;
}
