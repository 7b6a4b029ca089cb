//! A member that takes connections and never answers (a frozen etcd, a gate, a half-started
//! container) must cost the operator a bounded wait, never a task.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use etcd_operator::etcd::{self, Endpoint};

/// A listener that accepts every connection and then says nothing, for as long as it lives.
async fn silent() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (addr.to_string(), task)
}

/// A port nothing listens on.
async fn refused() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    addr
}

async fn bounded(what: &str, endpoint: Endpoint) {
    let timeout = Duration::from_secs(1);
    let start = Instant::now();
    let status =
        tokio::time::timeout(Duration::from_secs(20), etcd::status(&endpoint, timeout)).await;
    assert!(matches!(status, Ok(Err(_))), "{what}: status {status:?}");
    let members = tokio::time::timeout(
        Duration::from_secs(20),
        etcd::members_from(std::slice::from_ref(&endpoint), timeout),
    )
    .await;
    assert!(matches!(members, Ok(None)), "{what}: members {members:?}");
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        etcd::linearizable_read(&endpoint, timeout),
    )
    .await;
    assert!(matches!(read, Ok(Err(_))), "{what}: read {read:?}");
    // Three calls, each bounded by about its timeout (a connect, then a request).
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{what}: {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_member_that_never_answers_costs_a_bounded_wait() {
    let (addr, task) = silent().await;
    bounded("plain, silent", Endpoint::plain(format!("http://{addr}"))).await;
    bounded("TLS, silent", Endpoint::plain(format!("https://{addr}"))).await;
    task.abort();
    let addr = refused().await;
    bounded("plain, refused", Endpoint::plain(format!("http://{addr}"))).await;
    bounded("TLS, refused", Endpoint::plain(format!("https://{addr}"))).await;
}
