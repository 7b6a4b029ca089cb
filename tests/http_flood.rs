//! The operator's HTTP server under a flood of idle and slow-header connections (anyone who
//! reaches the pod may open them): `/healthz` is still answered at once, and the slow ones are
//! closed after the header timeout. The real server, on 127.0.0.1, with real sockets.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_operator::http::{HEADER_TIMEOUT, serve};
use etcd_operator::metrics::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections this process can hold at both ends: half of its open-file limit, less a margin.
fn budget() -> usize {
    (etcd_operator::http::open_file_limit().saturating_sub(512) / 2).min(5_000)
}

/// This process's resident memory, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn healthz(addr: std::net::SocketAddr) -> (String, Duration) {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    (out, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_answered_at_once_under_idle_and_slow_header_connections() {
    let metrics = Arc::new(Metrics::new());
    let (addr, server) = serve("127.0.0.1:0".parse().unwrap(), metrics)
        .await
        .unwrap();
    let server = tokio::spawn(server);
    let n = budget();
    assert!(
        n >= 500,
        "this machine's open-file limit allows only {n} connections"
    );
    let rss_before = rss_kib();
    let mut idle = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        if i % 2 == 1 {
            // Slow headers: the start of a request, never its end.
            s.write_all(b"GET /metrics HTTP/1.1\r\nx-slow: ")
                .await
                .unwrap();
        }
        idle.push(s);
    }
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let (answer, took) = healthz(addr).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        worst = worst.max(took);
    }
    let grew = rss_kib().saturating_sub(rss_before) / 1024;
    eprintln!(
        "/healthz with {n} idle or slow-header connections open: worst of 5 {worst:?}; \
         this process (both ends) grew {grew} MiB"
    );
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    // The server holds hyper's buffers for at most ACTIVE_MAX of them. Both ends grew 40-41
    // MiB alone on this machine and 48 MiB once in a clean `make test`; a buffer (8 KiB and
    // more) held for every one of 5,000 connections would add 40 MiB more.
    assert!(grew < 64, "memory grew {grew} MiB with {n} connections");

    // Past the header timeout every one of them has been closed by the server.
    tokio::time::sleep(HEADER_TIMEOUT + Duration::from_secs(2)).await;
    let mut closed = 0;
    for s in &mut idle {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), s.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, n, "connections left open past the header timeout");
    server.abort();
}
