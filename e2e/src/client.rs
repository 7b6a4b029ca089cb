//! etcd through its JSON gateway: one write, a serial writer, and reading keys back.

use std::io::BufReader;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::*;

/// One client writing keys serially to one etcd endpoint through its JSON gateway
/// (`POST /v3/kv/put`), over a single kept-alive HTTP/1.1 connection that is opened again after
/// any error. Runs on its own thread until [`Writer::stop`], or by itself until the time limit
/// given at the start; dropping it stops it too.
pub struct Writer {
    endpoint: String,
    stop: Arc<AtomicBool>,
    acks: Arc<AtomicU64>,
    pub(crate) thread: Option<JoinHandle<WriterTally>>,
}

/// What a writer did.
#[derive(Default, Debug)]
pub struct WriterTally {
    /// Writes etcd acknowledged.
    pub writes: u64,
    /// Writes that failed (some may have been applied all the same).
    pub errors: u64,
    /// The last error.
    pub last_error: String,
    /// With [`Keys::Unique`]: the numbers of the acknowledged writes, whose keys
    /// (`e2e-writer/<n>`) must all be there afterwards.
    pub acked: Vec<u64>,
    /// With [`Keys::Unique`]: when each of those was acknowledged.
    pub acked_at: Vec<Instant>,
    /// The longest time between two acknowledged writes (or from the start to the first): the
    /// longest a client waited.
    pub longest_stall: Duration,
}

/// How long a client waits before it gives a connection up and opens another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// For a connection to be accepted.
    pub connect: Duration,
    /// For a request's answer (and to send it).
    pub request: Duration,
}

impl Timeouts {
    /// Generous: a write that is slow (a leader election on a loaded machine) still counts,
    /// for tests that require no failed write at all.
    pub const PATIENT: Timeouts = Timeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(5),
    };
    /// As a client that fails over does (etcd's clients are given a per-request deadline and
    /// several endpoints): after 2 s without an answer the connection is given up and the next
    /// one, through the Service, goes to a member that answers. For faults that kill a member's
    /// node, where a kept-alive connection to it never answers again and only the client's
    /// own deadline ends the wait; a write that timed out counts as failed (it may have been
    /// applied, and is not checked).
    pub const FAILOVER: Timeouts = Timeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(2),
    };
}

/// Which keys a [`Writer`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// `e2e-writer/0` to `e2e-writer/999`, overwritten in turn.
    Cycle,
    /// A new key per write, `e2e-writer/<n>`, so that every acknowledged write can be checked.
    Unique,
    /// As [`Keys::Unique`] from `e2e-writer/<base>` on: a second writer whose keys are not the
    /// first one's.
    UniqueFrom(u64),
}

impl Writer {
    /// Starts writing to `endpoint` (`http://IP:2379`) for at most `max`, cycling through
    /// `e2e-writer/0` to `e2e-writer/999`.
    pub fn start(endpoint: &str, max: Duration) -> Self {
        Writer::start_with(endpoint, max, Keys::Cycle)
    }

    /// Starts writing `keys` to `endpoint` for at most `max`.
    pub fn start_with(endpoint: &str, max: Duration, keys: Keys) -> Self {
        Writer::start_timed(endpoint, max, keys, Timeouts::PATIENT)
    }

    /// Starts writing `keys` to `endpoint` for at most `max`, giving connections up after
    /// `timeouts`.
    pub fn start_timed(endpoint: &str, max: Duration, keys: Keys, timeouts: Timeouts) -> Self {
        let addr = endpoint
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("{endpoint}: the writer speaks plain http:// only"))
            .trim_end_matches('/')
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(AtomicU64::new(0));
        let (flag, count) = (stop.clone(), acks.clone());
        let deadline = Instant::now() + max;
        let thread =
            std::thread::spawn(move || write_until(&addr, &flag, &count, deadline, keys, timeouts));
        Writer {
            endpoint: endpoint.into(),
            stop,
            acks,
            thread: Some(thread),
        }
    }

    /// Writes `keys` to `endpoint` until etcd has acknowledged `count` of them or `max` has
    /// passed, and returns all it did: a test that needs some data written asks for a count,
    /// not for a time, which a loaded machine (one fsync taking a second) would not honour.
    pub fn until_acked(endpoint: &str, count: u64, max: Duration, keys: Keys) -> WriterTally {
        let writer = Writer::start_with(endpoint, max, keys);
        while writer.acks.load(Ordering::Relaxed) < count && !writer.thread_done() {
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.report()
    }

    fn thread_done(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the writer (waiting for the write in flight) and returns how many writes
    /// succeeded. Failed writes, if any, are reported on stderr.
    pub fn stop(self) -> u64 {
        self.report().writes
    }

    /// Stops the writer and returns all it did. Failed writes, if any, are reported on stderr.
    pub fn report(mut self) -> WriterTally {
        let tally = self.finish();
        if tally.errors > 0 {
            eprintln!(
                "writer to {}: {} writes failed, the last with: {}",
                self.endpoint, tally.errors, tally.last_error
            );
        }
        tally
    }

    fn finish(&mut self) -> WriterTally {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().expect("the writer thread panicked"))
            .unwrap_or_default()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.finish();
    }
}

pub(crate) fn write_until(
    addr: &str,
    stop: &AtomicBool,
    acks: &AtomicU64,
    deadline: Instant,
    keys: Keys,
    timeouts: Timeouts,
) -> WriterTally {
    let mut tally = WriterTally::default();
    let mut conn = None;
    let mut last_ack = Instant::now();
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let n = tally.writes + tally.errors;
        let key = match keys {
            Keys::Cycle => n % 1000,
            Keys::Unique => n,
            Keys::UniqueFrom(base) => base + n,
        };
        match put(&mut conn, addr, key, n, timeouts) {
            Ok(()) => {
                tally.writes += 1;
                acks.store(tally.writes, Ordering::Relaxed);
                tally.longest_stall = tally.longest_stall.max(last_ack.elapsed());
                last_ack = Instant::now();
                if keys != Keys::Cycle {
                    tally.acked.push(key);
                    tally.acked_at.push(last_ack);
                }
            }
            Err(e) => {
                conn = None;
                tally.errors += 1;
                tally.last_error = e;
                // Not a busy loop against an endpoint that refuses.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    tally
}

/// The keys under `prefix` that the etcd member behind `endpoint` (`http://IP:2379`) serves,
/// read linearizably through its JSON gateway (`POST /v3/kv/range`, keys only).
pub fn keys_under(
    endpoint: &str,
    prefix: &str,
) -> Result<std::collections::BTreeSet<String>, String> {
    let addr = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint}: plain http:// only"))?
        .trim_end_matches('/');
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let body = format!(
        r#"{{"key":"{}","range_end":"{}","keys_only":true}}"#,
        base64(prefix.as_bytes()),
        base64(&end)
    );
    let stream = TcpStream::connect_timeout(&resolve(addr)?, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let request = format!(
        "POST /v3/kv/range HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    reader
        .get_mut()
        .write_all(request.as_bytes())
        .map_err(|e| format!("writing to {addr}: {e}"))?;
    let (status, body, _) = read_response(&mut reader).map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("range answered {status}"));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let key = kv["key"].as_str().ok_or("a key without a key")?;
            String::from_utf8(unbase64(key)?).map_err(|e| e.to_string())
        })
        .collect()
}

/// One put of key `e2e-writer/<key>`, value `value-<n>`, on `conn`, connecting first when
/// there is none.
pub(crate) fn put(
    conn: &mut Option<BufReader<TcpStream>>,
    addr: &str,
    key: u64,
    n: u64,
    timeouts: Timeouts,
) -> Result<(), String> {
    if conn.is_none() {
        *conn = Some(connect(addr, timeouts)?);
    }
    let body = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        base64(format!("e2e-writer/{key}").as_bytes()),
        base64(format!("value-{n}").as_bytes())
    );
    call(conn, addr, "put", &body)
}

/// A connection to `addr` with `timeouts`: bounded, so that a hung endpoint cannot hold a
/// writer's `stop` for long.
fn connect(addr: &str, timeouts: Timeouts) -> Result<BufReader<TcpStream>, String> {
    let stream = TcpStream::connect_timeout(&resolve(addr)?, timeouts.connect)
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeouts.request))
        .and_then(|()| stream.set_write_timeout(Some(timeouts.request)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| e.to_string())?;
    Ok(BufReader::new(stream))
}

/// One gateway call (`POST /v3/kv/<what>`) on the connection `conn` holds, which must be open.
fn call(
    conn: &mut Option<BufReader<TcpStream>>,
    addr: &str,
    what: &str,
    body: &str,
) -> Result<(), String> {
    let reader = conn.as_mut().ok_or("no connection")?;
    let request = format!(
        "POST /v3/kv/{what} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    reader
        .get_mut()
        .write_all(request.as_bytes())
        .map_err(|e| format!("writing to {addr}: {e}"))?;
    let (status, body, keep_alive) =
        read_response(reader).map_err(|e| format!("reading from {addr}: {e}"))?;
    if !keep_alive {
        *conn = None;
    }
    let body = String::from_utf8_lossy(&body);
    if status != 200 || !body.contains("\"header\"") {
        return Err(format!("{what} answered {status}: {body}"));
    }
    Ok(())
}

/// Reads one HTTP/1.1 response: (status, body, whether the connection stays open). Bodies with
/// a Content-Length, chunked, or up to the end of the connection.
pub(crate) fn read_response(r: &mut BufReader<TcpStream>) -> std::io::Result<(u16, Vec<u8>, bool)> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("status line {line:?}")))?;
    let mut keep_alive = line.starts_with("HTTP/1.1");
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = line.trim_end().split(';').next().unwrap_or("");
            let size =
                usize::from_str_radix(size, 16).map_err(|_| bad(format!("chunk size {line:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
        keep_alive = false;
    }
    Ok((status, body, keep_alive))
}

/// Decodes standard base64 (etcd's gateway answers keys and values in it).
pub fn unbase64(text: &str) -> Result<Vec<u8>, String> {
    STANDARD
        .decode(text)
        .map_err(|e| format!("not base64 ({e}): {text}"))
}

/// Standard base64 with padding, which etcd's gateway wants for keys and values.
pub(crate) fn base64(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// One write of key `e2e-writer/<key>` through `endpoint` (`http://IP:2379`, etcd's JSON
/// gateway), on a connection of its own, with no retry: what a script does right after it
/// waited for a condition.
pub fn write_once(endpoint: &str, key: u64) -> Result<(), String> {
    let addr = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint}: plain http:// only"))?
        .trim_end_matches('/');
    put(&mut None, addr, key, key, Timeouts::PATIENT)
}

/// One gateway call through `endpoint` (`http://IP:2379`) on a connection of its own, with no
/// retry: `what` is `put` or `deleterange`, `body` its JSON request.
fn call_once(endpoint: &str, what: &str, body: &str) -> Result<(), String> {
    let addr = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint}: plain http:// only"))?
        .trim_end_matches('/');
    call(
        &mut Some(connect(addr, Timeouts::PATIENT)?),
        addr,
        what,
        body,
    )
}

/// One put of `value` at `key` through `endpoint`, with no retry.
pub fn put_value(endpoint: &str, key: &str, value: &[u8]) -> Result<(), String> {
    let body = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        base64(key.as_bytes()),
        base64(value)
    );
    call_once(endpoint, "put", &body)
}

/// Deletes every key under `prefix` through `endpoint`, with no retry.
pub fn delete_under(endpoint: &str, prefix: &str) -> Result<(), String> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let body = format!(
        r#"{{"key":"{}","range_end":"{}"}}"#,
        base64(prefix.as_bytes()),
        base64(&end)
    );
    call_once(endpoint, "deleterange", &body)
}

/// Panics unless every key a [`Writer`] had acknowledged (`acked`) is served through
/// `endpoint`.
pub fn assert_acked_present(endpoint: &str, acked: &[u64]) {
    // Read as a client would, retrying for a while: right after every member pod was replaced,
    // this host's kube-proxy may not route the Service to the new pods yet (the operator reads
    // through it from its own node); the data is what is judged here, not the route.
    let start = Instant::now();
    let keys = loop {
        match keys_under(endpoint, "e2e-writer/") {
            Ok(keys) => break keys,
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                panic!("reading the keys through {endpoint}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    let lost: Vec<&u64> = acked
        .iter()
        .filter(|n| !keys.contains(&format!("e2e-writer/{n}")))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
}

/// One put of `key` through `endpoint` (`http://IP:2379`) with etcd's own client, on a
/// connection of its own, given up after `within`: the ID of the cluster that served it. A
/// write served by a rebuilt cluster is told from one the old cluster still took by it.
pub fn put_cluster_id(endpoint: &str, key: &str, within: Duration) -> Result<u64, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let put = async {
            let options = etcd_client::ConnectOptions::new().with_connect_timeout(within);
            let mut c = etcd_client::Client::connect([endpoint], Some(options))
                .await
                .map_err(|e| e.to_string())?;
            let r = c.put(key, "x", None).await.map_err(|e| e.to_string())?;
            r.header()
                .map(|h| h.cluster_id())
                .ok_or_else(|| "no header".to_string())
        };
        tokio::time::timeout(within, put)
            .await
            .map_err(|_| format!("no answer within {within:?}"))?
    })
}

/// The revision of the cluster behind `endpoint` (`http://IP:2379`), read linearizably with
/// etcd's own client.
pub fn revision(endpoint: &str) -> i64 {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .expect("connecting");
        c.get("revision-probe", None)
            .await
            .expect("a read")
            .header()
            .expect("a header")
            .revision()
    })
}

/// A physical compaction of the cluster behind `endpoint` to its current revision; returns it.
pub fn compact(endpoint: &str) -> i64 {
    let revision = revision(endpoint);
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .expect("connecting");
        c.compact(
            revision,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .expect("a compaction");
    });
    revision
}

/// Puts `n` keys `<prefix>-<i>`, eight writers at once.
pub fn put_keys(endpoint: &str, prefix: &str, n: usize) {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let client = etcd_client::Client::connect([endpoint], None)
            .await
            .expect("connecting");
        let writers = (0..8).map(|w| {
            let mut kv = client.kv_client();
            async move {
                for i in (w..n).step_by(8) {
                    kv.put(format!("{prefix}-{i:05}"), format!("v{i}"), None)
                        .await
                        .expect("a write");
                }
            }
        });
        futures::future::join_all(writers).await;
    });
}
