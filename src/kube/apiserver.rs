//! The operator's route to the API server when the `kubernetes` Service has none.
//!
//! In a pod the API server is reached through the `kubernetes` Service, that is through
//! kube-proxy's rules. A kube-apiserver that stops takes its address out of the Service's
//! endpoints, and kube-proxy follows; when it runs again it puts the address back, but every
//! kube-proxy sees that only once its own watch is back, after client-go's backoff (up to 30 s
//! with jitter after an outage of 20 s). The chaos run measured 6.8 to 15 s between the API
//! server answering on its own address and the Service answering from a node, all of it time
//! the operator could not act in. So the operator remembers the API servers' own addresses (the
//! Service's EndpointSlice, read while the Service works) and, when a connection through the
//! Service is refused, dials them directly. TLS is unchanged: the handshake still names the
//! Service's address, which the API server's certificate carries, so nothing is trusted that
//! was not before.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tower::ServiceExt;
use tracing::{debug, info};

/// The API servers' own addresses, as last read.
#[derive(Clone, Default)]
pub struct Addresses(Arc<RwLock<Vec<SocketAddr>>>);

impl Addresses {
    fn get(&self) -> Vec<SocketAddr> {
        self.0.read().map(|a| a.clone()).unwrap_or_default()
    }

    fn set(&self, addresses: Vec<SocketAddr>) {
        if let Ok(mut a) = self.0.write()
            && *a != addresses
        {
            info!(?addresses, "the API servers' own addresses");
            *a = addresses;
        }
    }
}

/// The addresses an EndpointSlice of the `kubernetes` Service names: its ready endpoints at
/// its `https` port (the only port it has).
pub fn addresses_of(slice: &EndpointSlice) -> Vec<SocketAddr> {
    let Some(port) = slice
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref().is_none_or(|n| n == "https"))
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
    else {
        return Vec::new();
    };
    slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}

/// Keeps `addresses` at the `kubernetes` Service's EndpointSlice, read every `every` (a read
/// that fails keeps the last addresses: the outage is when they are needed). Ends when the
/// operator may not read it (the chart grants `get` on that one object): the route through the
/// Service is then the only one, as for any client.
pub async fn follow(client: kube::Client, addresses: Addresses, every: Duration) {
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    loop {
        match slices.get("kubernetes").await {
            Ok(slice) => addresses.set(addresses_of(&slice)),
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {
                info!(
                    "cannot read EndpointSlice default/kubernetes ({}): the API server is \
                     reached through its Service only",
                    s.message
                );
                return;
            }
            Err(e) => debug!("reading EndpointSlice default/kubernetes: {e}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// A TCP connector that dials the URI's address first and, when that fails, each of the API
/// servers' own addresses in turn, at the URI's scheme and path.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    addresses: Addresses,
}

impl Connector {
    /// `connect_timeout` bounds each attempt, so that a Service address that drops packets
    /// rather than refusing them still leaves time for the direct ones.
    pub fn new(addresses: Addresses, connect_timeout: Duration) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        Connector { http, addresses }
    }
}

type Stream = <HttpConnector as tower::Service<Uri>>::Response;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send + 'static>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let http = self.http.clone();
        let direct = self.addresses.get();
        Box::pin(async move {
            let refused = match http.clone().oneshot(uri.clone()).await {
                Ok(stream) => return Ok(stream),
                Err(e) => e,
            };
            for addr in direct {
                let Ok(alt) = Uri::builder()
                    .scheme(uri.scheme_str().unwrap_or("https"))
                    .authority(addr.to_string())
                    .path_and_query("/")
                    .build()
                else {
                    continue;
                };
                if let Ok(stream) = http.clone().oneshot(alt).await {
                    debug!(%addr, "{uri} refused ({refused}); connected to the API server directly");
                    return Ok(stream);
                }
            }
            Err(refused.into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    #[test]
    fn a_slice_gives_its_ready_addresses_at_its_port() {
        let slice = EndpointSlice {
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some("https".into()),
                port: Some(6443),
                ..Default::default()
            }]),
            endpoints: vec![
                Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    ..Default::default()
                },
                Endpoint {
                    addresses: vec!["10.0.0.2".into()],
                    conditions: Some(EndpointConditions {
                        ready: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            addresses_of(&slice),
            vec!["10.0.0.1:6443".parse::<SocketAddr>().unwrap()]
        );
    }

    /// A port with nothing listening refuses at once; the connector then reaches the listener
    /// it was told about, and with no such address it returns the refusal.
    #[tokio::test]
    async fn a_refused_address_falls_back_to_the_direct_ones() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = listener.local_addr().unwrap();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let uri: Uri = format!("https://{closed}/api").parse().unwrap();
        let addresses = Addresses::default();
        let connector = Connector::new(addresses.clone(), Duration::from_secs(1));
        assert!(connector.clone().oneshot(uri.clone()).await.is_err());
        addresses.set(vec![closed, live]);
        let accepted = tokio::spawn(async move { listener.accept().await.map(|(_, a)| a) });
        connector.oneshot(uri).await.expect("connected directly");
        accepted.await.unwrap().expect("the listener was reached");
    }
}
