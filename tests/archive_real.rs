//! Continuous archiving and point-in-time restores on real etcd (issue 29), below the operator:
//! the operator's archiver follows a real etcd into a real store (a directory, through
//! object_store's local filesystem) while a client puts, overwrites, deletes and writes
//! transactions; it is stopped and started again half-way (no gap, no duplicate); the archive is
//! planned into restores to the last revision, a revision in the middle and a moment in the
//! middle, each served (snapshot and changes) as the operator serves them to the static
//! `etcd-gate restore --changes-url` the image ships, which restores, replays and becomes etcd:
//! each restored key space is exactly etcd's own `get --rev` at that point. A cut answer is
//! refused and asked for again (its first transaction applied twice, harmlessly); a corrupt
//! chunk is refused before anything is restored; a watch from compacted revisions reports the
//! gap; a cluster lost while changes wait for their flush leaves them stored.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnOp};
use etcd_operator::api::{ArchiveStatus, ContinuousArchive};
use etcd_operator::backup::archive;
use etcd_operator::store::{chunk, naming, pitr, snapshot};
use k8s_openapi::jiff::Timestamp;
use object_store::PutMultipartOptions;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use support::{EtcdProcess, TOKEN, TokenServer, etcd_binary, gate_binary};
use tokio::sync::{oneshot, watch};

const KEY: &str = "backups/c";
const BUMP: u64 = 1_000_000;

type KeySpace = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every key and value `url` serves at `revision` (0: now), and the revision of the answer.
async fn key_space(url: &str, revision: i64) -> (KeySpace, i64) {
    let mut c = Client::connect([url], None).await.unwrap();
    let mut options = GetOptions::new().with_all_keys();
    if revision > 0 {
        options = options.with_revision(revision);
    }
    let got = c.get(vec![0u8], Some(options)).await.unwrap();
    let kvs = got
        .kvs()
        .iter()
        .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
        .collect();
    (kvs, got.header().unwrap().revision())
}

/// Puts, overwrites, deletes and multi-key transactions on 40 keys: `n` writes.
async fn write(c: &mut Client, round: usize, n: usize) {
    for i in 0..n {
        let k = format!("k{:02}", (i * 7 + round) % 40);
        match i % 5 {
            0 | 1 => {
                c.put(k, format!("r{round}-{i}"), None).await.unwrap();
            }
            2 => {
                c.delete(k, None).await.unwrap();
            }
            3 => {
                let other = format!("k{:02}", (i * 3 + round) % 40);
                let mut ops = vec![TxnOp::put(k.clone(), format!("t{round}-{i}"), None)];
                if other != k {
                    ops.push(TxnOp::delete(other, None));
                }
                c.txn(Txn::new().and_then(ops)).await.unwrap();
            }
            _ => {
                c.put(k, vec![b'x'; 300 + i % 200], None).await.unwrap();
            }
        }
    }
}

/// Serves `/restores/ns/c/snapshot` (the file) and `/restores/ns/c/changes?after=R` (what
/// the operator serves, from the store) to requests bearing the token. The first changes
/// answer is cut after its first line when `cut_first` is set.
struct Server {
    url: String,
    changes_served: Arc<AtomicUsize>,
    _server: TokenServer,
}

impl Server {
    fn start(
        file: PathBuf,
        store: Arc<LocalFileSystem>,
        snapshot_revision: i64,
        target: i64,
        cut_first: bool,
    ) -> Self {
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        let runtime = tokio::runtime::Handle::current();
        let server = TokenServer::start(move |path| {
            if path.ends_with("/snapshot") {
                return std::fs::read(&file).ok();
            }
            let after: i64 = path.split_once("?after=")?.1.parse().ok()?;
            let lines = runtime
                .block_on(pitr::changes(
                    store.as_ref(),
                    KEY,
                    snapshot_revision,
                    after,
                    target,
                ))
                .unwrap();
            let first = count.fetch_add(1, Ordering::Relaxed) == 0;
            let lines = if cut_first && first {
                lines[..1].to_vec()
            } else {
                lines
            };
            Some((lines.join("\n") + "\n").into_bytes())
        });
        Server {
            url: server.base.clone(),
            changes_served: served,
            _server: server,
        }
    }
}

/// A seed restored through the gate from `server`, with its changes replayed.
fn spawn_restored(name: &str, binary: &Path, server: &Server, sha256: &str) -> EtcdProcess {
    let mut m = EtcdProcess::plan(name);
    let ic = m.initial_cluster_entry();
    let gate = vec![
        gate_binary().display().to_string(),
        "restore".into(),
        format!("--url={}/snapshot", server.url),
        format!("--changes-url={}/changes", server.url),
        format!("--token={TOKEN}"),
        format!("--sha256={sha256}"),
        format!("--data-dir={}", m.data_dir().display()),
        format!("--name={}", m.name),
        format!("--initial-cluster={ic}"),
        format!("--initial-advertise-peer-urls={}", m.peer_url),
        "--initial-cluster-token=restored".into(),
        format!("--bump-revision={BUMP}"),
        "--".into(),
    ];
    m.spawn(&gate, binary, &ic, "new", "restored");
    m
}

/// The archiver on `source` from where the store's archive ends, until the returned sender is
/// used (or dropped).
fn start_archiver(
    source: &EtcdProcess,
    store: Arc<LocalFileSystem>,
    status: Arc<watch::Sender<ArchiveStatus>>,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<archive::Outcome>,
) {
    let (stop, stopped) = oneshot::channel::<()>();
    let endpoint = source.endpoint();
    let handle = tokio::spawn(async move {
        let after = archive::start_after(store.as_ref(), KEY, &status)
            .await
            .unwrap()
            .expect("a full snapshot to start from");
        let settings = ContinuousArchive {
            flush_interval: Some("1s".into()),
            max_chunk_bytes: Some("64Ki".into()),
        };
        archive::archive(
            &endpoint,
            store.as_ref(),
            KEY,
            &settings,
            after,
            &status,
            async {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap()
    });
    (stop, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_restored_to_any_revision_or_moment_its_archive_holds() {
    let binary = etcd_binary("3.6");
    let mut source = EtcdProcess::plan("archived");
    let ic = source.initial_cluster_entry();
    source.start(&binary, &ic, "new", "archived");
    let mut c = Client::connect([source.client_url.as_str()], None)
        .await
        .unwrap();
    write(&mut c, 0, 100).await;

    // A full snapshot named as a periodic backup names it, at the revision before it.
    let dir = std::env::temp_dir().join(format!("archive-real-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(LocalFileSystem::new_with_prefix(&dir).unwrap());
    let (_, snap_rev) = key_space(&source.client_url, 0).await;
    let snap_name = naming::periodic_name(KEY, snap_rev, Timestamp::now());
    let saved = snapshot::save(
        &source.endpoint(),
        store.as_ref(),
        &ObjectPath::from(snap_name.as_str()),
        PutMultipartOptions::default(),
        Duration::from_secs(60),
        Duration::from_secs(5),
    )
    .await
    .unwrap();

    // Archiving, with writes during and after the snapshot, stopped and started once.
    let status = Arc::new(watch::channel(ArchiveStatus::default()).0);
    let (stop, handle) = start_archiver(&source, store.clone(), status.clone());
    write(&mut c, 1, 300).await;
    let (middle, middle_rev) = key_space(&source.client_url, 0).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let middle_time = Timestamp::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    write(&mut c, 2, 300).await;
    stop.send(()).unwrap();
    assert_eq!(handle.await.unwrap(), archive::Outcome::Stopped);
    let first_part = status.borrow().last_revision.unwrap();
    let (stop, handle) = start_archiver(&source, store.clone(), status.clone());
    write(&mut c, 3, 300).await;
    let (last, last_rev) = key_space(&source.client_url, 0).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.send(()).unwrap();
    assert_eq!(handle.await.unwrap(), archive::Outcome::Stopped);
    let st = status.borrow().clone();
    eprintln!("archive: {st:?}, snapshot at {snap_rev}, stopped once at {first_part}");
    assert_eq!(st.last_revision, Some(last_rev));
    // No gap and no duplicate: each chunk starts right after the one before.
    let ranges = pitr::chunk_ranges(store.as_ref(), KEY).await.unwrap();
    assert_eq!(ranges.first().unwrap().0, snap_rev + 1, "{ranges:?}");
    assert_eq!(ranges.last().unwrap().1, last_rev, "{ranges:?}");
    for w in ranges.windows(2) {
        assert_eq!(w[1].0, w[0].1 + 1, "{ranges:?}");
    }
    assert!(
        ranges.iter().any(|r| r.1 == first_part),
        "a chunk ends where archiving stopped: {ranges:?}"
    );

    // Restores to the last revision, a revision in the middle, a moment in the middle.
    let plan = pitr::plan(store.as_ref(), KEY, pitr::Point::Time(middle_time))
        .await
        .unwrap();
    assert_eq!(
        plan.target, middle_rev,
        "the moment falls after the middle writes"
    );
    let cases = [
        ("last", pitr::Point::Revision(last_rev), last),
        ("middle", pitr::Point::Revision(middle_rev), middle.clone()),
        ("moment", pitr::Point::Time(middle_time), middle),
    ];
    for (i, (name, point, expected)) in cases.into_iter().enumerate() {
        let plan = pitr::plan(store.as_ref(), KEY, point).await.unwrap();
        assert_eq!(plan.object.as_ref(), snap_name);
        assert_eq!(plan.archived, last_rev);
        assert_eq!(plan.highest, last_rev);
        let (etcd_view, _) = key_space(&source.client_url, plan.target).await;
        assert_eq!(etcd_view, expected, "etcd's own view at {}", plan.target);
        let server = Server::start(
            dir.join(&snap_name),
            store.clone(),
            plan.snapshot_revision,
            plan.target,
            i == 0,
        );
        let seed = spawn_restored(
            &format!("pitr-{name}"),
            &binary,
            &server,
            &saved.verified.sha256,
        );
        seed.wait_listening(Duration::from_secs(120));
        let (restored, revision) = key_space(&seed.client_url, 0).await;
        eprintln!(
            "{name}: {point} -> revision {} restored at {revision}, {} keys",
            plan.target,
            restored.len()
        );
        assert!(restored == expected, "{name}: {}", seed.log());
        assert!(
            revision > last_rev,
            "the revision passes every one the old cluster handed out"
        );
        if i == 0 {
            assert!(
                server.changes_served.load(Ordering::Relaxed) >= 2,
                "the cut answer was asked for again: {}",
                seed.log()
            );
        }
    }

    // A corrupt chunk is refused before anything is restored.
    let (from, to) = ranges[ranges.len() / 2];
    let file = dir.join(chunk::name(KEY, from, to));
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len() / 2;
    bytes[n] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let refused = pitr::plan(store.as_ref(), KEY, pitr::Point::Revision(last_rev)).await;
    assert!(
        matches!(
            refused,
            Err(pitr::Error::Chunk(chunk::ChunkError::Corrupt { .. }))
        ),
        "{refused:?}"
    );

    // A watch from revisions etcd compacted reports the gap instead of archiving past it.
    c.compact(last_rev, None).await.unwrap();
    let gap_status = watch::channel(ArchiveStatus::default()).0;
    let outcome = archive::archive(
        &source.endpoint(),
        store.as_ref(),
        "backups/other",
        &ContinuousArchive::default(),
        snap_rev,
        &gap_status,
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome,
        archive::Outcome::Compacted {
            from: snap_rev + 1,
            to: last_rev - 1
        }
    );

    // The cluster lost while changes wait for their flush: what was received is stored as the
    // watch breaks, so the archive lacks only what etcd had not yet sent.
    let cut_status = Arc::new(watch::channel(ArchiveStatus::default()).0);
    let endpoint = source.endpoint();
    let (cut_store, cut_tx) = (store.clone(), cut_status.clone());
    let cut = tokio::spawn(async move {
        let slow = ContinuousArchive {
            flush_interval: Some("10m".into()),
            max_chunk_bytes: None,
        };
        archive::archive(
            &endpoint,
            cut_store.as_ref(),
            "backups/cut",
            &slow,
            last_rev,
            &cut_tx,
            std::future::pending(),
        )
        .await
    });
    write(&mut c, 4, 50).await;
    let (_, final_rev) = key_space(&source.client_url, 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    source.stop();
    let ended = tokio::time::timeout(Duration::from_secs(30), cut).await;
    assert!(
        matches!(ended, Ok(Ok(Err(_)))),
        "the archiver ends on the lost cluster: {ended:?}"
    );
    let kept = pitr::chunk_ranges(store.as_ref(), "backups/cut")
        .await
        .unwrap();
    assert_eq!(
        kept,
        vec![(last_rev + 1, final_rev)],
        "stored as the watch broke"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
