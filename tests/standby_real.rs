//! A standby's replay and its read-only access control, against a real etcd 3.6 on 127.0.0.1:
//! archived changes applied in transactions guarded by the marker (a transaction replayed
//! with a stale marker changes nothing: no change is applied twice), clients refused writes
//! by etcd while every role is read-only, and writing again once the roles are given back.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use etcd_operator::api::{
    Auth, AuthRole, AuthStatus, AuthUser, MARKER_KEY, PasswordSecret, Permission, PermissionType,
};
use etcd_operator::cluster::auth::plan;
use etcd_operator::etcd::{Access, Endpoint, Etcd, Guarded, Password, Root};
use etcd_operator::store::chunk::{Change, Chunk, Event};
use etcd_operator::store::follow;
use support::{EtcdProcess, etcd_binary};

const TIMEOUT: Duration = Duration::from_secs(5);
const ROOT_PASSWORD: &str = "root-secret-password";

fn tenant() -> Auth {
    Auth {
        enabled: true,
        roles: vec![AuthRole {
            name: "tenant".into(),
            permissions: vec![Permission {
                type_: PermissionType::Readwrite,
                key: "/t/".into(),
                prefix: Some(true),
                range_end: None,
            }],
        }],
        users: vec![AuthUser {
            name: "tenant".into(),
            roles: vec!["tenant".into()],
            password_secret: Some(PasswordSecret {
                name: "tenant".into(),
                key: "password".into(),
            }),
        }],
    }
}

/// Applies `auth` as the access-control stage does, read-only or not.
async fn apply(etcd: &mut Etcd, auth: &Auth, read_only: bool, managed: &AuthStatus) -> AuthStatus {
    let mut declared = plan::declare(Some(auth), |_| {
        Some(Ok((Password("pw".into()), "v1".into())))
    });
    if read_only {
        plan::read_only(&mut declared);
    }
    let current = etcd.read_auth().await.unwrap();
    let root = Password(ROOT_PASSWORD.into());
    let changes = plan::changes(&declared, &current, managed, (&root, "r1"));
    etcd.apply_auth(&changes.ops).await.unwrap();
    changes.status
}

fn event(revision: i64, key: &str, value: Option<&str>) -> Event {
    Event {
        revision,
        unix_ms: revision,
        change: match value {
            Some(v) => Change::Put {
                key: key.into(),
                value: v.into(),
            },
            None => Change::Delete { key: key.into() },
        },
    }
}

async fn get(c: &mut Client, key: &str) -> Option<String> {
    let got = c.get(key, None).await.unwrap();
    got.kvs()
        .first()
        .map(|kv| kv.value_str().unwrap().to_string())
}

#[tokio::test]
async fn a_standby_replays_each_change_once_and_refuses_clients_writes_until_promoted() {
    let mut m = EtcdProcess::plan("s0");
    let cluster = m.initial_cluster_entry();
    m.start(&etcd_binary("3.6"), &cluster, "new", "standby");
    let endpoint = Endpoint::new(
        m.client_url.clone(),
        Access {
            tls: None,
            root: Some(Arc::new(Root::new(Password(ROOT_PASSWORD.into())))),
            cert_is_root: false,
        },
        None,
    );
    let mut etcd = Etcd::connect(&endpoint, TIMEOUT).await.unwrap();
    // A standby: authentication on, the tenant's read-write role held to reading.
    let managed = apply(&mut etcd, &tenant(), true, &AuthStatus::default()).await;
    let mut etcd = Etcd::connect(&endpoint, TIMEOUT).await.unwrap();
    let options = ConnectOptions::new()
        .with_user("tenant", "pw")
        .with_timeout(TIMEOUT);
    let mut client = Client::connect([m.client_url.as_str()], Some(options.clone()))
        .await
        .unwrap();
    let refused = client.put("/t/a", "by-client", None).await.unwrap_err();
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );

    // The source's changes 11 to 20: a transaction of revision 14 wrote two keys, and the
    // marker key of the source's own standby days is left out.
    let chunk = Chunk {
        from: 11,
        to: 20,
        events: vec![
            event(11, "/t/a", Some("1")),
            event(12, "/t/b", Some("1")),
            event(13, "/t/a", Some("2")),
            event(14, "/t/c", Some("1")),
            event(14, "/t/d", Some("1")),
            event(15, "/t/b", None),
            event(16, MARKER_KEY, None),
            event(17, "/t/e", Some("1")),
        ],
    };
    let marker = MARKER_KEY.as_bytes();
    let start = br#"{"restore":"r","revision":10}"#.to_vec();
    let init = Guarded {
        marker,
        expected: None,
        ops: &[],
        after: Some(&start),
    };
    assert!(etcd.apply_guarded(&init).await.unwrap().is_some());
    // Made again (an answer lost): the marker exists, nothing changes.
    assert!(etcd.apply_guarded(&init).await.unwrap().is_none());

    let batches = follow::batches(&chunk, 10, 3, 1 << 20, marker);
    assert!(batches.len() > 1, "{batches:?}");
    let mut current = start.clone();
    for b in &batches {
        let next = format!(r#"{{"restore":"r","revision":{}}}"#, b.to).into_bytes();
        let g = Guarded {
            marker,
            expected: Some(&current),
            ops: &b.ops,
            after: Some(&next),
        };
        assert!(etcd.apply_guarded(&g).await.unwrap().is_some(), "{b:?}");
        // The same transaction again, as after a lost answer or by a second leader: refused.
        assert!(
            etcd.apply_guarded(&g).await.unwrap().is_none(),
            "applied twice: {b:?}"
        );
        current = next;
    }
    assert_eq!(
        String::from_utf8(current.clone()).unwrap(),
        r#"{"restore":"r","revision":20}"#
    );
    assert_eq!(get(&mut client, "/t/a").await.as_deref(), Some("2"));
    assert_eq!(get(&mut client, "/t/b").await, None);
    assert_eq!(get(&mut client, "/t/c").await.as_deref(), Some("1"));
    assert_eq!(get(&mut client, "/t/e").await.as_deref(), Some("1"));
    let refused = client.put("/t/a", "by-client", None).await.unwrap_err();
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );

    // Promoted: the marker deleted in the last transaction, the roles given back.
    let done = Guarded {
        marker,
        expected: Some(&current),
        ops: &[],
        after: None,
    };
    assert!(etcd.apply_guarded(&done).await.unwrap().is_some());
    assert_eq!(etcd.value(marker).await.unwrap(), None);
    apply(&mut etcd, &tenant(), false, &managed).await;
    let mut client = Client::connect([m.client_url.as_str()], Some(options))
        .await
        .unwrap();
    client.put("/t/a", "by-client", None).await.unwrap();
    assert_eq!(get(&mut client, "/t/a").await.as_deref(), Some("by-client"));
    m.stop();
}

/// How fast a standby applies archived changes: 20,000 revisions of one key each (the worst
/// case: nothing folds), in transactions of 127 keys and the marker, as the replayer makes
/// them. The lag target is 5 s at 1,000 writes/s: the replay must keep well ahead of that.
#[tokio::test]
async fn a_standby_applies_archived_changes_far_faster_than_a_thousand_a_second() {
    let mut m = EtcdProcess::plan("r0");
    let cluster = m.initial_cluster_entry();
    m.start(&etcd_binary("3.6"), &cluster, "new", "replay");
    let mut etcd = Etcd::connect(&Endpoint::plain(m.client_url.clone()), TIMEOUT)
        .await
        .unwrap();
    let n = 20_000i64;
    let chunk = Chunk {
        from: 1,
        to: n,
        events: (1..=n)
            .map(|r| {
                event(
                    r,
                    &format!("app/{r:05}"),
                    Some("value-of-about-32-bytes-like-a-k8s"),
                )
            })
            .collect(),
    };
    let marker = MARKER_KEY.as_bytes();
    let started = std::time::Instant::now();
    let mut current: Option<Vec<u8>> = None;
    for b in follow::batches(&chunk, 0, 127, 1 << 20, marker) {
        let next = format!(r#"{{"restore":"r","revision":{}}}"#, b.to).into_bytes();
        let g = Guarded {
            marker,
            expected: current.as_deref(),
            ops: &b.ops,
            after: Some(&next),
        };
        assert!(etcd.apply_guarded(&g).await.unwrap().is_some());
        current = Some(next);
    }
    let took = started.elapsed();
    let rate = n as f64 / took.as_secs_f64();
    eprintln!(
        "| changes a standby applies per second (real etcd 3.6, one member, nothing folded) | {rate:.0} ({n} in {:.2} s) | ≥ 1,000 (the lag target's write rate) |",
        took.as_secs_f64()
    );
    assert!(rate > 1_000.0, "{rate:.0} changes/s");
    let got = etcd.value(b"app/20000").await.unwrap();
    assert_eq!(
        got.as_deref(),
        Some(&b"value-of-about-32-bytes-like-a-k8s"[..])
    );
    m.stop();
}
