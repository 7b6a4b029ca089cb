//! `/metrics`, `/healthz` and `/readyz`, served over plain HTTP/1.1 for Prometheus and the
//! kubelet's probes ([`serve`]); and, on a port of their own and over TLS only
//! ([`serve_snapshots`]), `/restores/<namespace>/<cluster>/snapshot`, the snapshot a restore's
//! seed member fetches (see [`crate::restore::serve`] and [`crate::restore::identity`]).
//!
//! Anyone who reaches the pod may connect, so a flood of idle or slow clients must not starve
//! the kubelet's probes (a failed liveness probe restarts the operator, and every cluster's
//! task with it): a connection costs no buffer until it sends something; one that sends no
//! whole request head within [`HEADER_TIMEOUT`] is closed; and at most [`connection_limit`]
//! are served at once, those beyond being closed at once rather than left to fill the accept
//! queue.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::restore::identity::Identity;
use crate::restore::serve::{Asked, Snapshots, after_of, parse_path};

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// Errors of the HTTP endpoint.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// How long a client may take to send a request's head (from its connection, or from its
/// previous response).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// This process's soft limit of open files (1024 where /proc does not say).
pub fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok())
        })
        .unwrap_or(1024)
}

/// Connections served at once: well below the process's open-file limit (the rest is for etcd
/// clients, watches and object stores), at most 32,768.
pub fn connection_limit() -> usize {
    let soft = open_file_limit();
    (soft.saturating_sub(soft / 8 + 64)).clamp(64, 32_768)
}

/// What a listener answers.
#[derive(Clone)]
enum Routes {
    /// `/metrics`, `/healthz`, `/readyz`.
    Probes(Arc<Metrics>),
    /// `/ca-<hex>/restores/...` (the prefix naming this process's CA).
    Restores {
        snapshots: Arc<Snapshots>,
        prefix: String,
    },
}

/// Binds `addr` now (so a taken port fails start-up); the returned future serves `/metrics`,
/// `/healthz` and `/readyz` until the process ends. Also returns the bound address (`addr`
/// may ask for port 0).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, impl Future<Output = ()>), Error> {
    listen(addr, Routes::Probes(metrics), None).await
}

/// The same for restore snapshots, over TLS with `identity`'s certificate alone: a snapshot is
/// a cluster's whole data.
pub async fn serve_snapshots(
    addr: SocketAddr,
    snapshots: Arc<Snapshots>,
    identity: &Identity,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), Error> {
    let routes = Routes::Restores {
        snapshots,
        prefix: identity.prefix.clone(),
    };
    let tls = tokio_rustls::TlsAcceptor::from(identity.tls.clone());
    listen(addr, routes, Some(tls)).await
}

async fn listen(
    addr: SocketAddr,
    routes: Routes,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<(SocketAddr, impl Future<Output = ()>), Error> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    let limit = connection_limit();
    match &routes {
        Routes::Probes(_) => {
            info!(%addr, connections = limit, "serving /metrics, /healthz and /readyz");
        }
        Routes::Restores { prefix, .. } => {
            info!(%addr, prefix, connections = limit, "serving restore snapshots over TLS");
        }
    }
    let permits = Arc::new(Semaphore::new(limit));
    let active = Arc::new(Semaphore::new(ACTIVE_MAX));
    let heads = Arc::new(Heads::default());
    Ok((addr, async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be closed rather
                    // than spin.
                    warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let served = Served {
                routes: routes.clone(),
                tls: tls.clone(),
                active: active.clone(),
                heads: heads.clone(),
            };
            tokio::spawn(async move {
                let _permit = permit;
                // Idle until it sends something: a small task, no buffer held for it meanwhile.
                if tokio::time::timeout(HEADER_TIMEOUT, stream.readable())
                    .await
                    .is_err()
                {
                    return;
                }
                // Boxed: an idle connection's task does not carry hyper's state inline.
                Box::pin(served.serve(stream)).await;
            });
        }
    }))
}

/// Connections reading or answering a request at once, each holding hyper's buffers (8 KiB
/// and up). Beyond, the connection that has been reading its first request head the longest is
/// cut to make room: a client that sends its request at once (a probe, a scrape, a seed) is
/// never the oldest for long, so a crowd of slow senders can neither starve it nor grow the
/// operator's memory.
pub const ACTIVE_MAX: usize = 512;

/// Connections past their first byte and not yet through their first request head, oldest
/// first, each with the signal that cuts it.
#[derive(Default)]
struct Heads {
    next: std::sync::atomic::AtomicU64,
    waiting: std::sync::Mutex<std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>>,
}

impl Heads {
    fn enter(&self) -> (u64, Arc<tokio::sync::Notify>) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cut = Arc::new(tokio::sync::Notify::new());
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.push_back((id, cut.clone()));
        (id, cut)
    }

    fn leave(&self, id: u64) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.retain(|(i, _)| *i != id);
    }

    /// Cuts the connection that has waited longest for its head, if there is one.
    fn cut_oldest(&self) {
        let oldest = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        if let Some((_, cut)) = oldest {
            cut.notify_one();
        }
    }
}

/// What serving one connection needs.
struct Served {
    routes: Routes,
    tls: Option<tokio_rustls::TlsAcceptor>,
    active: Arc<Semaphore>,
    heads: Arc<Heads>,
}

impl Served {
    /// Serves `stream`, which has sent its first bytes, once it has one of the active slots.
    async fn serve(self, stream: tokio::net::TcpStream) {
        let slot = match self.active.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                self.heads.cut_oldest();
                match tokio::time::timeout(HEADER_TIMEOUT, self.active.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(slot)) => slot,
                    _ => return,
                }
            }
        };
        let _slot = slot;
        let (id, cut) = self.heads.enter();
        let (routes, heads) = (self.routes, self.heads.clone());
        let service = service_fn(move |req| {
            // Through its first head: no longer one to cut.
            heads.leave(id);
            let routes = routes.clone();
            async move { Ok::<_, Infallible>(route(&req, &routes).await) }
        });
        let builder = {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(64 * 1024);
            b
        };
        let served = async {
            match self.tls {
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                // The handshake counts against the head's time, like the head it carries.
                Some(tls) => {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(HEADER_TIMEOUT, tls.accept(stream)).await
                    {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            }
        };
        tokio::select! {
            _ = served => {}
            _ = cut.notified() => {}
        }
        self.heads.leave(id);
    }
}

/// The answer to `req` on a listener of `routes`.
async fn route(req: &Request<Incoming>, routes: &Routes) -> Response<Body> {
    match routes {
        Routes::Probes(metrics) => {
            respond(req, metrics).map(|b| b.map_err(|n| match n {}).boxed_unsync())
        }
        Routes::Restores { snapshots, prefix } => {
            let asked = req
                .uri()
                .path()
                .strip_prefix(prefix.as_str())
                .and_then(parse_path);
            match asked {
                Some((ns, cluster, Asked::Snapshot)) => snapshot(req, snapshots, ns, cluster).await,
                Some((ns, cluster, Asked::Changes)) => changes(req, snapshots, ns, cluster).await,
                None => {
                    let mut response = Response::new(
                        Full::new(Bytes::from_static(b"not found\n"))
                            .map_err(|n| match n {})
                            .boxed_unsync(),
                    );
                    *response.status_mut() = StatusCode::NOT_FOUND;
                    response
                }
            }
        }
    }
}

fn bearer(req: &Request<Incoming>) -> Option<&str> {
    req.headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

fn refused(ns: &str, cluster: &str, status: StatusCode, message: String) -> Response<Body> {
    warn!(ns, cluster, %status, "refused a restore's request: {message}");
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{message}\n")))
            .map_err(|n| match n {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response
}

/// The archived changes a point-in-time restore's seed replays, one transaction per line.
async fn changes(
    req: &Request<Incoming>,
    snapshots: &Snapshots,
    ns: &str,
    cluster: &str,
) -> Response<Body> {
    let Some(after) = after_of(req.uri().query()) else {
        let message = "the query must give after=REVISION".to_string();
        return refused(ns, cluster, StatusCode::BAD_REQUEST, message);
    };
    match snapshots.changes(ns, cluster, bearer(req), after).await {
        Ok(lines) => {
            info!(
                ns,
                cluster,
                after,
                lines = lines.len(),
                "serving a restore's changes"
            );
            let mut body = lines.join("\n");
            body.push('\n');
            let mut response = Response::new(
                Full::new(Bytes::from(body))
                    .map_err(|n| match n {})
                    .boxed_unsync(),
            );
            response.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/x-ndjson"),
            );
            response
        }
        Err((status, message)) => refused(ns, cluster, status, message),
    }
}

/// The snapshot of the restore pending on `ns`/`cluster`, streamed, to the holder of its token.
async fn snapshot(
    req: &Request<Incoming>,
    snapshots: &Snapshots,
    ns: &str,
    cluster: &str,
) -> Response<Body> {
    let bearer = bearer(req);
    match snapshots.open(ns, cluster, bearer).await {
        Ok(opened) => {
            info!(
                ns,
                cluster,
                size = ?opened.size,
                "serving a restore's snapshot"
            );
            let body = StreamBody::new(opened.body.map(|chunk| chunk.map(Frame::data)));
            let mut response = Response::new(BodyExt::boxed_unsync(body));
            // Without a length (a snapshot decompressed on the way) the body ends with the
            // connection: the seed's gate speaks HTTP/1.0, and etcd's hash at the end of the
            // snapshot tells a cut one.
            if let Some(size) = opened.size {
                response.headers_mut().insert(CONTENT_LENGTH, size.into());
            }
            response
        }
        Err((status, message)) => refused(ns, cluster, status, message),
    }
}

fn respond(req: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let role = if metrics.is_leader() {
        "leader"
    } else {
        "standby"
    };
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok\n".into()),
        // A standby is ready too: it has its caches and takes over without a restart.
        "/readyz" if metrics.synced() => (StatusCode::OK, "text/plain", format!("ok: {role}\n")),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!("caches not synced yet: {role}\n"),
        ),
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn readyz_waits_for_the_caches_and_tells_the_role() {
        let metrics = Arc::new(Metrics::new());
        let (addr, server) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .unwrap();
        let server = tokio::spawn(server);
        let r = get(addr, "/readyz").await;
        assert!(r.starts_with("HTTP/1.1 503"), "{r}");
        assert!(r.ends_with("caches not synced yet: standby\n"), "{r}");
        metrics.set_synced();
        let r = get(addr, "/readyz").await;
        assert!(
            r.starts_with("HTTP/1.1 200") && r.ends_with("ok: standby\n"),
            "{r}"
        );
        metrics.set_leader(true);
        assert!(get(addr, "/readyz").await.ends_with("ok: leader\n"));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        let m = get(addr, "/metrics").await;
        assert!(m.contains("etcd_operator_leader 1"), "{m}");
        server.abort();
    }
}
