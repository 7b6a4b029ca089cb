//! The etcd layer against real etcd processes on 127.0.0.1, for each supported minor version:
//! learner add, catch-up and promote, status, leader move, and removal of a follower and of a
//! learner that never started.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_operator::etcd::{self, ClientTls, Endpoint, Etcd, Member};
use support::{EtcdProcess, TestPki, etcd_binary, gate_binary};

const TIMEOUT: Duration = Duration::from_secs(5);

async fn until<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn initial_cluster(members: &[&EtcdProcess]) -> String {
    members
        .iter()
        .map(|m| m.initial_cluster_entry())
        .collect::<Vec<_>>()
        .join(",")
}

/// Adds `joiner` as a learner through `etcd` and starts it as the operator does: the process
/// starts first, held back by `etcd-gate` (the build the image ships), with the
/// `--initial-cluster` the source documents describe (the existing members plus itself,
/// state `existing`); the gate becomes etcd once the member is added. Waits until etcd accepts
/// the promotion, and returns its ID.
async fn grow(
    etcd: &mut Etcd,
    binary: &std::path::Path,
    existing: &[&EtcdProcess],
    joiner: &mut EtcdProcess,
    token: &str,
) -> u64 {
    let endpoints: Vec<String> = existing.iter().map(|m| m.gate_endpoint()).collect();
    let mut gate = vec![
        gate_binary().display().to_string(),
        "wait".into(),
        format!("--peer-url={}", joiner.peer_url),
        format!("--endpoints={}", endpoints.join(",")),
        format!("--data-dir={}", joiner.data_dir().display()),
        "--poll-ms=50".into(),
    ];
    if let Some(pki) = &joiner.tls {
        gate.push(format!("--tls-dir={}", pki.dir.display()));
    }
    gate.push("--".into());
    let mut all: Vec<&EtcdProcess> = existing.to_vec();
    all.push(joiner);
    let cluster = initial_cluster(&all);
    joiner.spawn(&gate, binary, &cluster, "existing", token);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        joiner.running() && !joiner.listening(),
        "the gate let etcd start before the add: {}",
        joiner.log()
    );

    // Right after a promotion etcd refuses the next change until the new voter has been
    // connected for its health interval; that refusal is recognisable and passes.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (added, after) = loop {
        match etcd.add_learner(&joiner.peer_url).await {
            Ok(r) => break r,
            Err(e) if e.is_settling() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("add failed: {e}"),
        }
    };
    let added_at = Instant::now();
    assert!(added.is_learner, "{added:?}");
    assert_eq!(added.name, "", "a member has no name before it starts");
    assert!(after.iter().any(|m| m.id == added.id && m.is_learner));
    joiner.wait_listening(Duration::from_secs(5));
    let log = joiner.log();
    assert!(log.contains("is a member after"), "{log}");
    eprintln!(
        "{}: etcd served {} ms after the add",
        joiner.name,
        added_at.elapsed().as_millis()
    );

    let status = until("the learner to answer status", 20, || async {
        etcd::status(&joiner.endpoint(), TIMEOUT).await.ok()
    })
    .await;
    assert_eq!(status.member_id, added.id);

    promote(etcd, added.id).await;
    added.id
}

/// Promotes learner `id`. etcd refuses to promote a learner that has not caught up; that
/// refusal is recognisable and waited out (30 s at most).
async fn promote(etcd: &mut Etcd, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match etcd.promote(id).await {
            Ok(_) => return,
            Err(e) if e.is_settling() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("promote failed: {e}"),
        }
    }
}

async fn remove(etcd: &mut Etcd, id: u64) -> Vec<Member> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match etcd.remove(id).await {
            Ok(members) => return members,
            Err(e) if e.is_settling() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("remove failed: {e}"),
        }
    }
}

/// A TLS member refuses a plain-HTTP client, and a client whose certificate another CA signed.
async fn refuses_strangers(m: &EtcdProcess, pki: &TestPki) {
    let plain = Endpoint::plain(m.client_url.replace("https://", "http://"));
    assert!(etcd::status(&plain, TIMEOUT).await.is_err());
    let other = TestPki::new();
    let stranger = Endpoint::new(
        m.client_url.clone(),
        etcd::Access::tls(Some(Arc::new(ClientTls {
            ca: pki.client.ca.clone(),
            cert: other.client.cert.clone(),
            key: other.client.key.clone(),
        }))),
        Some(support::TLS_NAME.into()),
    );
    let e = etcd::status(&stranger, TIMEOUT).await.unwrap_err();
    eprintln!("a client of another CA: {e}");
    // And the server's certificate is checked against the name asked for.
    let misnamed = Endpoint::new(
        m.client_url.clone(),
        etcd::Access::tls(Some(pki.client.clone())),
        Some("m0.other.ns.svc".into()),
    );
    assert!(etcd::status(&misnamed, TIMEOUT).await.is_err());
    assert!(etcd::status(&m.endpoint(), TIMEOUT).await.is_ok());
}

/// A backup of a TLS member, as the backup controller takes it, is whole.
async fn snapshot_over_tls(m: &EtcdProcess) {
    let store = object_store::memory::InMemory::new();
    let saved = etcd_operator::store::snapshot::save(
        &m.endpoint(),
        &store,
        &object_store::path::Path::from("tls.db"),
        object_store::PutMultipartOptions::default(),
        Duration::from_secs(30),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert!(saved.verified.size > 0, "{saved:?}");
}

async fn scenario(minor: &str, tls: Option<Arc<TestPki>>) {
    let binary = etcd_binary(minor);
    let token = format!("test-{minor}-{}", std::process::id());
    let plan = |name: &str| EtcdProcess::plan_with(name, tls.clone());
    let mut seed = plan("m0");
    let cluster = initial_cluster(&[&seed]);
    seed.start(&binary, &cluster, "new", &token);

    let mut etcd = Etcd::connect(&seed.endpoint(), TIMEOUT).await.unwrap();
    if let Some(pki) = &tls {
        refuses_strangers(&seed, pki).await;
        snapshot_over_tls(&seed).await;
    }
    let members = etcd.members().await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].name, "m0");
    assert!(!members[0].is_learner);
    let seed_id = members[0].id;

    let mut m1 = plan("m1");
    let id1 = grow(&mut etcd, &binary, &[&seed], &mut m1, &token).await;
    let mut m2 = plan("m2");
    let id2 = grow(&mut etcd, &binary, &[&seed, &m1], &mut m2, &token).await;

    let members: Vec<Member> = etcd.members().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| !m.is_learner), "{members:?}");
    let mut names: Vec<_> = members.iter().map(|m| m.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["m0", "m1", "m2"]);

    // Every member reports the same cluster and leader, and the version under test.
    let mut statuses = Vec::new();
    for p in [&seed, &m1, &m2] {
        statuses.push(etcd::status(&p.endpoint(), TIMEOUT).await.unwrap());
    }
    let leader = statuses[0].leader;
    assert!([seed_id, id1, id2].contains(&leader));
    for s in &statuses {
        assert_eq!(s.cluster_id, statuses[0].cluster_id);
        assert_eq!(s.leader, leader);
        assert!(
            s.version.starts_with(&format!("{minor}.")),
            "{} is not {minor}",
            s.version
        );
        assert!(!s.is_learner);
        assert!(s.raft_index > 0 && s.db_size > 0);
    }

    // Leadership moves on request sent to the leader.
    let procs = [(&seed, seed_id), (&m1, id1), (&m2, id2)];
    let leader_url = &procs
        .iter()
        .find(|(_, id)| *id == leader)
        .unwrap()
        .0
        .endpoint();
    let target = procs
        .iter()
        .map(|(_, id)| *id)
        .find(|id| *id != leader)
        .unwrap();
    let mut at_leader = Etcd::connect(leader_url, TIMEOUT).await.unwrap();
    at_leader.move_leader(target).await.unwrap();
    until("the new leader to be known", 10, || async {
        let s = etcd::status(&seed.endpoint(), TIMEOUT).await.ok()?;
        (s.leader == target).then_some(())
    })
    .await;

    // A follower is removed, then its process stopped; the rest keep quorum.
    // (Not the seed: the client of this test talks to the seed.)
    let follower = procs[1..].iter().find(|(_, id)| *id != target).unwrap().1;
    let remaining = remove(&mut etcd, follower).await;
    assert_eq!(remaining.len(), 2);
    assert!(remaining.iter().all(|m| m.id != follower));
    // A removed member stops by itself; its process is reaped on drop.

    // A removal asked again (its first answer lost, as under a partition) is refused, and the
    // member list read back past a member that does not answer shows it applied.
    let again = etcd.remove(follower).await.unwrap_err();
    assert!(!again.is_settling(), "{again}");
    let ghost = plan("ghost");
    let read_back = etcd::members_from(&[ghost.endpoint(), seed.endpoint()], TIMEOUT)
        .await
        .unwrap();
    assert_eq!(read_back.len(), 2, "{read_back:?}");
    assert!(read_back.iter().all(|m| m.id != follower));
    assert!(
        etcd::members_from(&[ghost.endpoint()], TIMEOUT)
            .await
            .is_none()
    );

    // A learner that never started is removed without touching quorum.
    let (added, _) = etcd.add_learner(&ghost.peer_url).await.unwrap();
    assert_eq!(added.host_label(), Some("127"));
    let after = remove(&mut etcd, added.id).await;
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|m| !m.is_learner));

    // The survivors still serve.
    let survivors: Vec<Endpoint> = [&seed, &m1, &m2]
        .iter()
        .zip([seed_id, id1, id2])
        .filter(|(_, id)| *id != follower)
        .map(|(p, _)| p.endpoint())
        .collect();
    for url in &survivors {
        let s = etcd::status(url, TIMEOUT).await.unwrap();
        assert_eq!(s.leader, target);
    }

    // The member list read linearizably, as the operator reads it, is the same list.
    let mut linearizable = etcd.members_linearizable().await.unwrap();
    let mut plain = etcd.members().await.unwrap();
    linearizable.sort_by_key(|m| m.id);
    plain.sort_by_key(|m| m.id);
    assert_eq!(linearizable, plain);

    // A NOSPACE alarm raised for one member is reported by every member, names that member,
    // and makes no member unhealthy (the cluster's writes are refused, not the member's
    // service); disarmed, it is gone.
    let alarmed = *plain.iter().map(|m| &m.id).max().unwrap();
    let other = plain.iter().find(|m| m.id != alarmed).unwrap().clone();
    let alarmed_member = plain.iter().find(|m| m.id == alarmed).unwrap().clone();
    etcd.set_nospace_alarm(alarmed, true).await.unwrap();
    for url in &survivors {
        let s = until("the alarm to be reported", 10, || async {
            let s = etcd::status(url, TIMEOUT).await.ok()?;
            (!s.errors.is_empty()).then_some(s)
        })
        .await;
        assert!(
            s.errors.iter().any(|e| e.contains("NOSPACE")),
            "{:?}",
            s.errors
        );
        assert_eq!(s.nospace(), [alarmed], "{:?}", s.errors);
        assert!(!s.reports_problem_with(alarmed), "{:?}", s.errors);
        let own = if s.member_id == alarmed {
            &alarmed_member
        } else {
            &other
        };
        assert!(etcd_operator::cluster::observe::is_healthy(own, &s));
    }
    etcd.set_nospace_alarm(alarmed, false).await.unwrap();
    for url in &survivors {
        until("the alarm to be disarmed", 10, || async {
            let s = etcd::status(url, TIMEOUT).await.ok()?;
            s.errors.is_empty().then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_on_etcd_3_4() {
    scenario("3.4", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_on_etcd_3_5() {
    scenario("3.5", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_on_etcd_3_6() {
    scenario("3.6", None).await;
}

// The same with TLS for peers and clients and client certificates required, as a static or
// automatic TLS cluster runs: the operator's client, and etcd-gate on the peer port with the
// member's own peer certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_over_tls_on_etcd_3_4() {
    scenario("3.4", Some(TestPki::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_over_tls_on_etcd_3_5() {
    scenario("3.5", Some(TestPki::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_over_tls_on_etcd_3_6() {
    scenario("3.6", Some(TestPki::new())).await;
}

/// Starts `joiners` as one batch, as the operator does where every member accepts that many
/// learners: each process first, held back by `etcd-gate`, with the `--initial-cluster` of the
/// members and the whole batch; each added as a learner; no etcd starts before the last
/// addition (it would find a membership other than its `--initial-cluster` and exit); then
/// every one serves, and each is promoted, one voter at a time. Returns the time from the
/// first addition until all are voters.
async fn grow_batch(
    etcd: &mut Etcd,
    binary: &std::path::Path,
    existing: &[&EtcdProcess],
    joiners: &mut [EtcdProcess],
    token: &str,
) -> Duration {
    let endpoints: Vec<String> = existing.iter().map(|m| m.gate_endpoint()).collect();
    let mut all: Vec<&EtcdProcess> = existing.to_vec();
    all.extend(joiners.iter());
    let cluster = initial_cluster(&all);
    for j in joiners.iter_mut() {
        let gate = vec![
            gate_binary().display().to_string(),
            "wait".into(),
            format!("--peer-url={}", j.peer_url),
            format!("--endpoints={}", endpoints.join(",")),
            format!("--data-dir={}", j.data_dir().display()),
            "--poll-ms=50".into(),
            "--".into(),
        ];
        j.spawn(&gate, binary, &cluster, "existing", token);
    }
    let started = Instant::now();
    let mut ids = Vec::new();
    let count = joiners.len();
    for (i, j) in joiners.iter_mut().enumerate() {
        let (added, _) = etcd
            .add_learner(&j.peer_url)
            .await
            .unwrap_or_else(|e| panic!("adding learner {} of the batch: {e}", i + 1));
        assert!(added.is_learner);
        ids.push(added.id);
        if i + 1 < count {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                j.running() && !j.listening(),
                "{} started before its whole batch was added: {}",
                j.name,
                j.log()
            );
        }
    }
    for j in joiners.iter() {
        j.wait_listening(Duration::from_secs(10));
    }
    eprintln!(
        "batch serving {} ms after the first addition",
        started.elapsed().as_millis()
    );
    let members = etcd.members().await.unwrap();
    assert_eq!(
        members.iter().filter(|m| m.is_learner).count(),
        joiners.len(),
        "{members:?}"
    );
    for id in ids {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match etcd.promote(id).await {
                Ok(_) => break,
                Err(e) if e.is_settling() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("promote failed: {e}"),
            }
        }
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_3_6_with_max_learners_a_batch_of_members_joins_at_once() {
    let binary = etcd_binary("3.6");
    let token = format!("batch-{}", std::process::id());
    let limit = format!(
        "{}{}",
        etcd_operator::cluster::members::MAX_LEARNERS_FLAG,
        etcd_operator::cluster::members::MAX_LEARNERS
    );
    let mut seed = EtcdProcess::plan("b0");
    seed.extra.push(limit.clone());
    seed.start(&binary, &initial_cluster(&[&seed]), "new", &token);
    let mut etcd = Etcd::connect(&seed.endpoint(), TIMEOUT).await.unwrap();
    let mut batch: Vec<EtcdProcess> = ["b1", "b2", "b3", "b4"]
        .iter()
        .map(|n| {
            let mut p = EtcdProcess::plan(n);
            p.extra.push(limit.clone());
            p
        })
        .collect();
    let took = grow_batch(&mut etcd, &binary, &[&seed], &mut batch, &token).await;
    eprintln!(
        "4 members added together and promoted in {} ms",
        took.as_millis()
    );
    let members = etcd.members().await.unwrap();
    assert_eq!(members.len(), 5);
    assert!(members.iter().all(|m| !m.is_learner), "{members:?}");
    for p in std::iter::once(&seed).chain(&batch) {
        let s = etcd::status(&p.endpoint(), TIMEOUT).await.unwrap();
        assert_ne!(s.leader, 0, "{} knows no leader", p.name);
    }
    for p in batch.iter_mut() {
        p.stop();
    }
    seed.stop();
}

/// Where the members take one learner (etcd 3.5, and 3.6 without `--max-learners`), a second
/// learner is refused: the operator adds one at a time there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_learner_limit_raised_a_second_learner_is_refused() {
    for minor in ["3.5", "3.6"] {
        let binary = etcd_binary(minor);
        let token = format!("one-{minor}-{}", std::process::id());
        let mut seed = EtcdProcess::plan(&format!("o0-{}", minor.replace('.', "")));
        seed.start(&binary, &initial_cluster(&[&seed]), "new", &token);
        let mut etcd = Etcd::connect(&seed.endpoint(), TIMEOUT).await.unwrap();
        let first = EtcdProcess::plan("o1");
        let second = EtcdProcess::plan("o2");
        etcd.add_learner(&first.peer_url).await.unwrap();
        let refused = etcd.add_learner(&second.peer_url).await.unwrap_err();
        assert!(
            refused.to_string().contains("too many learner"),
            "{minor}: {refused}"
        );
        seed.stop();
    }
}

/// NOSPACE as etcd raises it (a 16 MiB quota filled by overwriting one key), and the way back
/// the operator takes: compaction (idempotent), defragmentation, the alarm disarmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nospace_is_reclaimed_by_compaction_defragmentation_and_disarming() {
    let binary = etcd_binary("3.6");
    let mut m = EtcdProcess::plan("nospace");
    m.extra
        .push(format!("--quota-backend-bytes={}", 16 * 1024 * 1024));
    let cluster = initial_cluster(&[&m]);
    m.start(
        &binary,
        &cluster,
        "new",
        &format!("nospace-{}", std::process::id()),
    );
    let endpoint = m.endpoint();
    let mut client = etcd_client::Client::connect([endpoint.url.as_str()], None)
        .await
        .unwrap();
    let value = vec![b'x'; 512 * 1024];
    let mut refused = None;
    for _ in 0..200 {
        if let Err(e) = client.put("k", value.clone(), None).await {
            refused = Some(e.to_string());
            break;
        }
    }
    let refused = refused.expect("writes refused once the quota is reached");
    assert!(refused.contains("database space exceeded"), "{refused}");
    let s = until("the alarm to be reported", 10, || async {
        let s = etcd::status(&endpoint, TIMEOUT).await.ok()?;
        (!s.nospace().is_empty()).then_some(s)
    })
    .await;
    let id = s.member_id;
    assert_eq!(s.nospace(), [id]);
    let me = Member {
        id,
        name: "nospace".into(),
        peer_urls: vec![m.peer_url.clone()],
        client_urls: vec![],
        is_learner: false,
    };
    assert!(etcd_operator::cluster::observe::is_healthy(&me, &s));
    // Reads are served meanwhile.
    assert_eq!(client.get("k", None).await.unwrap().kvs().len(), 1);

    let mut etcd = Etcd::connect(&endpoint, TIMEOUT).await.unwrap();
    assert!(etcd.compact(s.revision).await.unwrap());
    assert!(!etcd.compact(s.revision).await.unwrap());
    let compacted = etcd::status(&endpoint, TIMEOUT).await.unwrap();
    assert!(
        compacted.db_size_in_use < s.db_size / 4,
        "in use after compaction: {} of {}",
        compacted.db_size_in_use,
        s.db_size
    );
    // Still refused: the file is as large as ever, and the alarm armed.
    assert!(client.put("k2", "v", None).await.is_err());
    etcd.defragment(&endpoint.url).await.unwrap();
    let defragmented = etcd::status(&endpoint, TIMEOUT).await.unwrap();
    assert!(
        defragmented.db_size < s.db_size / 4,
        "after defragmentation: {} of {}",
        defragmented.db_size,
        s.db_size
    );
    etcd.set_nospace_alarm(id, false).await.unwrap();
    until("writes served again", 10, || async {
        let mut c = etcd_client::Client::connect([endpoint.url.as_str()], None)
            .await
            .ok()?;
        c.put("k2", "v", None).await.ok()
    })
    .await;
    let after = etcd::status(&endpoint, TIMEOUT).await.unwrap();
    assert!(after.nospace().is_empty(), "{:?}", after.errors);
}

/// What the planner's rule for NOSPACE raised by learners rests on, shown on etcd 3.6: a
/// learner that joins by replaying a log that filled the database once (no snapshot since) has
/// a backend at the quota, and the next write it applies raises the alarm, after the voters
/// were reclaimed and it was disarmed; etcd refuses to defragment a learner; promoted, it is
/// defragmented like any voter, and the alarm stays off.
///
/// The learner's quota is a quarter below the voter's: with equal quotas whether the replayed
/// file ends over the quota depends on how bbolt batched the replay (CI met a learner whose
/// file fit), and what is shown here is what follows once a learner is over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_replaying_a_full_log_raises_nospace_and_is_defragmented_only_once_promoted() {
    let binary = etcd_binary("3.6");
    let quota = format!("--quota-backend-bytes={}", 16 * 1024 * 1024);
    let token = format!("learner-nospace-{}", std::process::id());
    let mut m1 = EtcdProcess::plan("full1");
    m1.extra.push(quota);
    m1.start(&binary, &initial_cluster(&[&m1]), "new", &token);
    let endpoint = m1.endpoint();
    let mut client = etcd_client::Client::connect([endpoint.url.as_str()], None)
        .await
        .unwrap();
    let value = vec![b'x'; 512 * 1024];
    for _ in 0..200 {
        if client.put("k", value.clone(), None).await.is_err() {
            break;
        }
    }
    let s = until("the alarm to be reported", 10, || async {
        let s = etcd::status(&endpoint, TIMEOUT).await.ok()?;
        (!s.nospace().is_empty()).then_some(s)
    })
    .await;
    // Reclaimed on the only voter, as the operator does.
    let mut etcd = Etcd::connect(&endpoint, TIMEOUT).await.unwrap();
    etcd.compact(s.revision).await.unwrap();
    etcd.defragment(&endpoint.url).await.unwrap();
    etcd.set_nospace_alarm(s.member_id, false).await.unwrap();

    let mut m2 = EtcdProcess::plan("full2");
    m2.extra
        .push(format!("--quota-backend-bytes={}", 12 * 1024 * 1024));
    let (learner, _) = etcd.add_learner(&m2.peer_url).await.unwrap();
    m2.start(&binary, &initial_cluster(&[&m1, &m2]), "existing", &token);
    // The replay raises nothing (the voter's alarm, replayed with it, holds the learner's
    // back until the disarm replays); the next write the learner applies finds its file
    // over the quota.
    let raised = until("the learner to raise NOSPACE", 30, || async {
        let _ = client.clone().put("after", "v", None).await;
        let s = etcd::status(&endpoint, TIMEOUT).await.ok()?;
        s.nospace().contains(&learner.id).then_some(s)
    })
    .await;
    assert_eq!(raised.nospace(), [learner.id], "only the learner raises it");
    let mut on_learner = Etcd::connect(&m2.endpoint(), TIMEOUT).await.unwrap();
    let refused = on_learner
        .defragment(&m2.endpoint().url)
        .await
        .expect_err("etcd refuses to defragment a learner");
    assert!(refused.to_string().contains("learner"), "{refused}");
    // Disarmed while it is a learner, it is raised again at its next applied write.
    etcd.set_nospace_alarm(learner.id, false).await.unwrap();
    let _ = client.put("after", "v", None).await;
    until("the learner to raise NOSPACE again", 20, || async {
        let s = etcd::status(&endpoint, TIMEOUT).await.ok()?;
        s.nospace().contains(&learner.id).then_some(())
    })
    .await;

    promote(&mut etcd, learner.id).await;
    // The promoted member learns of its promotion when it applies it, a moment after the
    // leader: until then it still refuses as a learner (CI met it once).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match on_learner.defragment(&m2.endpoint().url).await {
            Ok(()) => break,
            Err(e) if e.to_string().contains("learner") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("defragmenting the promoted member: {e}"),
        }
    }
    etcd.set_nospace_alarm(learner.id, false).await.unwrap();
    until("writes served again, the alarm off", 20, || async {
        client.clone().put("after", "v", None).await.ok()?;
        let s = etcd::status(&endpoint, TIMEOUT).await.ok()?;
        s.nospace().is_empty().then_some(())
    })
    .await;
}

/// `spec.tuning` as each etcd version takes it: every field, and an extra flag, on the
/// command line of a real member, which starts, serves, and enforces what it was told (a
/// transaction over `maxTxnOps`, a request over `maxRequestBytes`).
async fn tuned(minor: &str) {
    let tuning: etcd_operator::api::Tuning = serde_json::from_value(serde_json::json!({
        "heartbeatInterval": 150, "electionTimeout": 1500, "snapshotCount": 5000,
        "maxRequestBytes": 65536, "maxTxnOps": 4,
        "grpcKeepalive": {"minTime": "5s", "interval": "30m", "timeout": "10s"},
        "logLevel": "warn", "logFormat": "console", "initialCorruptCheck": true,
        "extraArgs": ["--enable-pprof"]
    }))
    .unwrap();
    let binary = etcd_binary(minor);
    let mut m = EtcdProcess::plan(&format!("tuned-{}", minor.replace('.', "-")));
    m.extra = tuning.flags(&format!("{minor}.0"));
    let cluster = initial_cluster(&[&m]);
    m.start(
        &binary,
        &cluster,
        "new",
        &format!("tuned-{}", std::process::id()),
    );
    let mut client = etcd_client::Client::connect([m.endpoint().url.as_str()], None)
        .await
        .unwrap();
    client.put("k", "v", None).await.unwrap();
    let ops: Vec<etcd_client::TxnOp> = (0..5)
        .map(|i| etcd_client::TxnOp::put(format!("k{i}"), "v", None))
        .collect();
    let refused = client
        .txn(etcd_client::Txn::new().and_then(ops))
        .await
        .expect_err("5 operations in a transaction over maxTxnOps 4");
    assert!(
        refused.to_string().contains("too many operations"),
        "{refused}"
    );
    let refused = client
        .put("big", vec![b'x'; 100 * 1024], None)
        .await
        .expect_err("100 KiB over maxRequestBytes 64 KiB");
    assert!(refused.to_string().contains("too large"), "{refused}");
    m.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tuning_reaches_etcd_3_4_3_5_and_3_6() {
    for minor in ["3.4", "3.5", "3.6"] {
        tuned(minor).await;
    }
}
