//! A restore's seed path on real etcd 3.4, 3.5 and 3.6: a snapshot taken by the operator's own
//! snapshot code is served over HTTP with a token (as the operator serves it), and the static
//! `etcd-gate restore` the operator image ships fetches it, checks its sha256, restores it with
//! the version's own tool (etcdctl for 3.4, etcdutl with `--bump-revision --mark-compacted`
//! for 3.5.10 and later), and becomes etcd: every key is back, and the revision went up, never
//! back. A snapshot with the wrong hash is never restored.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_operator::store::snapshot;
use object_store::PutMultipartOptions;
use object_store::path::Path as ObjectPath;
use support::{EtcdProcess, TOKEN, TokenServer, etcd_binary, gate_binary};

const KEYS: usize = 200;
const BUMP: u64 = 1_000_000;

/// Serves `file` at any path to requests bearing the token (403 otherwise), like the
/// operator's snapshot endpoint, until dropped.
struct Server {
    url: String,
    _server: TokenServer,
}

impl Server {
    fn start(file: &Path) -> Self {
        let file = file.to_path_buf();
        let server = TokenServer::start(move |_| std::fs::read(&file).ok());
        Server {
            url: format!("{}/snapshot", server.base),
            _server: server,
        }
    }
}

/// The `etcd-gate restore` wrapper for member `m`.
fn gate(m: &EtcdProcess, url: &str, sha256: &str, bump: u64) -> Vec<String> {
    let mut args = vec![
        gate_binary().display().to_string(),
        "restore".into(),
        format!("--url={url}"),
        format!("--token={TOKEN}"),
        format!("--sha256={sha256}"),
        format!("--data-dir={}", m.data_dir().display()),
        format!("--name={}", m.name),
        format!("--initial-cluster={}", m.initial_cluster_entry()),
        format!("--initial-advertise-peer-urls={}", m.peer_url),
        "--initial-cluster-token=restored".into(),
    ];
    if bump > 0 {
        args.push(format!("--bump-revision={bump}"));
    }
    args.push("--".into());
    args
}

/// Puts [`KEYS`] keys `key-NNNN` through `url`; returns the revision they reached.
async fn put_keys(url: &str) -> i64 {
    let mut c = etcd_client::Client::connect([url], None).await.unwrap();
    for i in 0..KEYS {
        c.put(format!("key-{i:04}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    revision_and_keys(url).await.0
}

/// A new one-member cluster `name` whose etcd starts behind `etcd-gate restore`, fetching from
/// `url` the snapshot with `sha256` (empty: etcd's own hash only).
fn spawn_restored(name: &str, binary: &Path, url: &str, sha256: &str, bump: u64) -> EtcdProcess {
    let mut m = EtcdProcess::plan(name);
    let ic = m.initial_cluster_entry();
    m.spawn(&gate(&m, url, sha256, bump), binary, &ic, "new", "restored");
    m
}

async fn revision_and_keys(url: &str) -> (i64, usize) {
    let mut c = etcd_client::Client::connect([url], None).await.unwrap();
    let all = c
        .get(
            "key-",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    (all.header().unwrap().revision(), all.kvs().len())
}

async fn restore_on(minor: &str, bump: u64) {
    let binary = etcd_binary(minor);
    // The source: KEYS keys, then a snapshot through the operator's snapshot code.
    let mut source = EtcdProcess::plan("source");
    let ic = source.initial_cluster_entry();
    source.start(&binary, &ic, "new", &format!("src-{minor}"));
    let revision = put_keys(&source.client_url).await;
    let dir = std::env::temp_dir().join(format!("restore-real-{minor}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let saved = snapshot::save(
        &source.endpoint(),
        &local,
        &ObjectPath::from("snap.db"),
        PutMultipartOptions::default(),
        Duration::from_secs(60),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    source.stop();
    let server = Server::start(&dir.join("snap.db"));

    // A wrong hash: fetched, refused, never restored; the gate keeps trying.
    let mut wrong = spawn_restored("wrong", &binary, &server.url, &"0".repeat(64), bump);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wrong.log().contains("it is not used") {
        assert!(Instant::now() < deadline, "no refusal: {}", wrong.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(wrong.running() && !wrong.listening() && !wrong.data_dir().exists());
    drop(wrong);

    // The right one: restored, and etcd runs on it.
    let mut m = spawn_restored(
        "restored",
        &binary,
        &server.url,
        &saved.verified.sha256,
        bump,
    );
    let ic = m.initial_cluster_entry();
    m.wait_listening(Duration::from_secs(60));
    let (restored, keys) = revision_and_keys(&m.client_url).await;
    eprintln!("etcd {minor}: revision {revision} restored as {restored}, {keys} keys");
    assert_eq!(keys, KEYS, "{}", m.log());
    if bump > 0 {
        assert!(
            restored >= revision + i64::try_from(bump).unwrap(),
            "{revision} -> {restored}"
        );
    } else {
        assert_eq!(restored, revision);
    }
    // A restart starts etcd on the restored data at once, without fetching again.
    drop(server);
    m.stop();
    m.spawn(
        &gate(&m, "http://127.0.0.1:9/gone", &saved.verified.sha256, bump),
        &binary,
        &ic,
        "new",
        "restored",
    );
    m.wait_listening(Duration::from_secs(30));
    assert_eq!(revision_and_keys(&m.client_url).await.1, KEYS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_4_snapshot_is_restored_by_etcdctl() {
    restore_on("3.4", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_5_snapshot_is_restored_with_its_revision_raised() {
    restore_on("3.5", BUMP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_6_snapshot_is_restored_with_its_revision_raised() {
    restore_on("3.6", BUMP).await;
}

/// A recovery from lost quorum on real etcd: a 3-member cluster loses two members; the
/// survivor, without quorum, still answers its status and serves a snapshot (the operator's
/// `snapshot_sized`, whose announced size is what it sends, etcd's hash included); the gate
/// restores it with no sha256 of ours (etcd's own trailing hash checked by the restore tool)
/// into a new one-member cluster: every key the survivor held is back, the revision raised.
async fn recover_on(minor: &str, bump: u64) {
    let binary = etcd_binary(minor);
    let mut members: Vec<EtcdProcess> = ["a", "b", "c"]
        .iter()
        .map(|n| EtcdProcess::plan(&format!("{n}-{minor}")))
        .collect();
    let ic = members
        .iter()
        .map(EtcdProcess::initial_cluster_entry)
        .collect::<Vec<_>>()
        .join(",");
    for m in &mut members {
        m.spawn(&[], &binary, &ic, "new", &format!("lost-{minor}"));
    }
    for m in &members {
        m.wait_listening(Duration::from_secs(30));
    }
    let revision = put_keys(&members[0].client_url).await;
    std::thread::sleep(Duration::from_secs(1));
    members[1].stop();
    members[2].stop();
    let survivor = &members[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let s = etcd_operator::etcd::status(&survivor.endpoint(), Duration::from_secs(2))
            .await
            .unwrap();
        if s.leader == 0 {
            break s;
        }
        assert!(Instant::now() < deadline, "the survivor still has a leader");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.raft_applied_index > 0);

    let mut etcd =
        etcd_operator::etcd::Etcd::connect_streaming(&survivor.endpoint(), Duration::from_secs(5))
            .await
            .unwrap();
    let (size, body) = etcd.snapshot_sized().await.unwrap();
    let bytes: Vec<u8> = futures::StreamExt::collect::<Vec<_>>(body)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect::<Vec<_>>()
        .concat();
    assert_eq!(size, bytes.len() as u64);
    let dir = std::env::temp_dir().join(format!("recover-real-{minor}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("snap.db"), &bytes).unwrap();
    let server = Server::start(&dir.join("snap.db"));

    let seed = spawn_restored(&format!("seed-{minor}"), &binary, &server.url, "", bump);
    seed.wait_listening(Duration::from_secs(60));
    let (restored, keys) = revision_and_keys(&seed.client_url).await;
    eprintln!(
        "etcd {minor}: survivor at revision {revision}, recovered as {restored}, {keys} keys"
    );
    assert_eq!(keys, KEYS, "{}", seed.log());
    assert!(
        restored >= revision + i64::try_from(bump).unwrap(),
        "{revision} -> {restored}"
    );
    // A cut or altered snapshot is refused by the restore tool: etcd's hash guards it.
    let mut bad = bytes.clone();
    bad[4096] ^= 0xff;
    std::fs::write(dir.join("bad.db"), &bad).unwrap();
    let bad_server = Server::start(&dir.join("bad.db"));
    let refused = spawn_restored(&format!("bad-{minor}"), &binary, &bad_server.url, "", bump);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !refused.log().contains("snapshot restore") {
        assert!(Instant::now() < deadline, "no refusal: {}", refused.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!refused.listening() && !refused.data_dir().exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_5_cluster_that_lost_quorum_is_rebuilt_from_its_survivor() {
    recover_on("3.5", BUMP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_6_cluster_that_lost_quorum_is_rebuilt_from_its_survivor() {
    recover_on("3.6", BUMP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_4_cluster_that_lost_quorum_is_rebuilt_from_its_survivor() {
    recover_on("3.4", 0).await;
}

/// Data made elsewhere with etcd's authentication on (its own root password, a tenant with its
/// role): restored with the cluster's root password file, the data keeps its users and roles,
/// and root's password is the cluster's, whatever it was where the snapshot was taken.
async fn foreign_auth_on(minor: &str) {
    use etcd_operator::etcd::{Access, Endpoint, Password};
    use std::sync::Arc;
    let binary = etcd_binary(minor);
    let mut source = EtcdProcess::plan("elsewhere");
    let ic = source.initial_cluster_entry();
    source.start(&binary, &ic, "new", &format!("auth-{minor}"));
    put_keys(&source.client_url).await;
    let mut admin = etcd_client::Client::connect([source.client_url.as_str()], None)
        .await
        .unwrap();
    admin.user_add("root", "theirs", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.role_add("tenant").await.unwrap();
    admin.user_add("tenant", "t", None).await.unwrap();
    admin.user_grant_role("tenant", "tenant").await.unwrap();
    admin.auth_enable().await.unwrap();
    let dir = std::env::temp_dir().join(format!("restore-auth-{minor}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let theirs = Endpoint::new(
        source.client_url.clone(),
        Access {
            root: Some(Arc::new(etcd_operator::etcd::Root::new(Password(
                "theirs".into(),
            )))),
            ..Access::default()
        },
        None,
    );
    let saved = snapshot::save(
        &theirs,
        &local,
        &ObjectPath::from("snap.db"),
        PutMultipartOptions::default(),
        Duration::from_secs(60),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    source.stop();
    let server = Server::start(&dir.join("snap.db"));
    let password_file = dir.join("root-password");
    std::fs::write(&password_file, "ours").unwrap();
    let mut m = EtcdProcess::plan("here");
    let ic = m.initial_cluster_entry();
    let mut wrapper = gate(&m, &server.url, &saved.verified.sha256, 0);
    wrapper.insert(
        wrapper.len() - 1,
        format!("--root-password-file={}", password_file.display()),
    );
    m.spawn(&wrapper, &binary, &ic, "new", "restored");
    m.wait_listening(Duration::from_secs(60));
    let as_root =
        |password: &str| etcd_client::ConnectOptions::new().with_user("root", password.to_string());
    let url = [m.client_url.as_str()];
    let mut ours = etcd_client::Client::connect(url, Some(as_root("ours")))
        .await
        .unwrap_or_else(|e| panic!("root by the cluster's password: {e}\n{}", m.log()));
    let tenant = ours.user_get("tenant").await.unwrap();
    assert_eq!(tenant.roles(), ["tenant"]);
    let keys = ours
        .get(
            "key-",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap()
        .count();
    assert_eq!(keys, i64::try_from(KEYS).unwrap());
    let refused = etcd_client::Client::connect(url, Some(as_root("theirs"))).await;
    assert!(refused.is_err(), "the old root password still works");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_made_elsewhere_with_authentication_on_is_restored_with_this_clusters_root_3_4() {
    foreign_auth_on("3.4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_made_elsewhere_with_authentication_on_is_restored_with_this_clusters_root_3_6() {
    foreign_auth_on("3.6").await;
}
