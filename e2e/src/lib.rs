//! Helpers for tests that run against a real Kubernetes API server: the local cluster that
//! `hack/cluster.sh` starts, or any cluster that `KUBECONFIG` names.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

mod client;
mod kubectl;
mod metrics;
mod operator;
mod waits;

pub use client::*;
pub use kubectl::*;
pub use metrics::*;
pub use operator::*;
pub use waits::*;

/// moto (S3) and Azurite (Azure Blob), shared with the unit tier's tests.
#[path = "../../tests/support/stores.rs"]
pub mod stores;

pub mod backups;

pub mod nodes;

pub mod prometheus;

pub mod tls;

/// A timeline of one operation: pod and cluster changes, and the operator's log.
pub mod timeline;

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use serde_json::Value;

    use super::*;

    #[test]
    fn cpu_ticks_count_fields_after_the_command_name() {
        let stat = "4242 (etcd (op) r) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 37 0 0 20 0 12 0 123456 0 0";
        assert_eq!(stat_cpu_ticks(stat), Some(287));
        assert_eq!(stat_cpu_ticks("1 (x) S 1 2"), None);
        // This process has used some CPU, and the figure only grows.
        let a = cpu_ticks(std::process::id());
        let b = cpu_ticks(std::process::id());
        assert!(b >= a);
    }

    #[test]
    fn series_reads_the_exposed_line() {
        let m = "# TYPE etcd_operator_reconciles counter\n\
                 etcd_operator_reconciles_total{controller=\"etcdcluster\"} 17\n\
                 etcd_operator_reconciles_total{controller=\"etcdbackup\"} 3 1700000000\n# EOF\n";
        assert_eq!(series(m, RECONCILES), Some(17.0));
        assert_eq!(
            series(
                m,
                "etcd_operator_reconciles_total{controller=\"etcdbackup\"}"
            ),
            Some(3.0)
        );
        assert_eq!(series(m, "etcd_operator_leader"), None);
    }

    #[test]
    fn labelled_series_reads_every_series_of_a_metric() {
        let m = "# HELP etcd_operator_api_requests Requests.\n\
                 # TYPE etcd_operator_api_requests counter\n\
                 etcd_operator_api_requests_total{verb=\"update\",resource=\"leases\"} 12\n\
                 etcd_operator_api_requests_total{verb=\"patch\",resource=\"etcdclusters/status\"} 3 1700000000\n\
                 etcd_operator_api_requests_totally{verb=\"get\",resource=\"pods\"} 9\n\
                 etcd_operator_leader 1\n# EOF\n";
        let all = api_requests(m);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[&("update".into(), "leases".into())], 12.0);
        assert_eq!(all[&("patch".into(), "etcdclusters/status".into())], 3.0);
        assert!(labelled_series(m, "etcd_operator_leader").is_empty());
        assert!(rss_kib(std::process::id()) > 0);
    }

    #[test]
    fn the_metrics_address_is_taken_from_the_arguments_or_chosen() {
        assert_eq!(
            metrics_bind_arg(&["--leader-elect", "--metrics-bind-address", "0.0.0.0:9000"]),
            Some("0.0.0.0:9000".into())
        );
        assert_eq!(
            metrics_bind_arg(&["--metrics-bind-address=127.0.0.1:9001"]),
            Some("127.0.0.1:9001".into())
        );
        assert_eq!(metrics_bind_arg(&["--leader-elect"]), None);
        assert_eq!(connect_address("0.0.0.0:9000"), "127.0.0.1:9000");
        assert_eq!(connect_address("[::]:9000"), "[::1]:9000");
        assert_eq!(connect_address("10.0.0.1:9000"), "10.0.0.1:9000");
        assert_ne!(free_port(), 0);
    }

    /// Reads one request (headers and Content-Length body) from `r`; None at the end.
    fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, String)> {
        let mut head = String::new();
        let mut line = String::new();
        let mut length = 0;
        loop {
            line.clear();
            if r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if line.trim_end().is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        r.read_exact(&mut body).ok()?;
        Some((head, String::from_utf8(body).unwrap()))
    }

    #[test]
    fn http_get_returns_the_body_of_a_200() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            for (i, conn) in listener.incoming().take(2).enumerate() {
                let mut r = BufReader::new(conn.unwrap());
                let (head, _) = read_request(&mut r).unwrap();
                assert!(head.starts_with("GET /metrics HTTP/1.0\r\n"), "{head}");
                let status = if i == 0 { "200 OK" } else { "404 Not Found" };
                write!(r.get_mut(), "HTTP/1.0 {status}\r\n\r\nline 1\nline 2\n").unwrap();
            }
        });
        assert_eq!(http_get(&addr, "/metrics").unwrap(), "line 1\nline 2\n");
        assert!(http_get(&addr, "/metrics").unwrap_err().contains("404"));
        server.join().unwrap();
    }

    /// A fake gateway: answers puts with a Content-Length body, every third chunked, and closes
    /// the connection after every fifth request. Returns the keys it was sent.
    fn fake_gateway(listener: TcpListener, stop: Arc<AtomicBool>) -> Vec<String> {
        listener.set_nonblocking(true).unwrap();
        let mut keys = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let conn = match listener.accept() {
                Ok((conn, _)) => conn,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut r = BufReader::new(conn);
            for i in 0..5 {
                let Some((head, body)) = read_request(&mut r) else {
                    break;
                };
                assert!(head.starts_with("POST /v3/kv/put HTTP/1.1\r\n"), "{head}");
                let v: Value = serde_json::from_str(&body).unwrap();
                keys.push(v["key"].as_str().unwrap().to_string());
                let answer = r#"{"header":{"revision":"2"}}"#;
                let w = r.get_mut();
                if i == 4 {
                    write!(w, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{answer}").unwrap();
                } else if keys.len() % 3 == 0 {
                    let (a, b) = answer.split_at(5);
                    write!(
                        w,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                         {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                        a.len(),
                        b.len()
                    )
                    .unwrap();
                } else {
                    write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                        answer.len()
                    )
                    .unwrap();
                }
            }
        }
        keys
    }

    #[test]
    fn the_writer_writes_serially_reconnects_and_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = stop.clone();
            std::thread::spawn(move || fake_gateway(listener, stop))
        };
        let writer = Writer::start(&endpoint, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(300));
        let writes = writer.stop();
        stop.store(true, Ordering::Relaxed);
        let keys = server.join().unwrap();
        assert!(writes > 10, "{writes} writes");
        // Every write the server saw succeeded (none failed, none was retried).
        assert_eq!(keys.len() as u64, writes);
        assert_eq!(keys[7], base64(b"e2e-writer/7"));

        // Bounded by itself: with nothing listening it gives up at its deadline.
        let free = format!("http://127.0.0.1:{}", free_port());
        let start = Instant::now();
        let writer = Writer::start(&free, Duration::from_millis(300));
        std::thread::sleep(Duration::from_millis(600));
        assert!(writer.thread.as_ref().unwrap().is_finished());
        assert_eq!(writer.stop(), 0);
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
