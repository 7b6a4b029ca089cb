//! The certificate with which this operator serves restore snapshots to seed members.
//!
//! A snapshot is a whole cluster's data, so it travels over TLS, whether or not the cluster
//! itself uses TLS. Each operator process makes its own CA at start (never stored: nothing
//! outlives the process that could sign for it) and a server certificate for the address
//! seeds reach it on. A seed pod is given the CA's certificate (public) in its arguments and
//! trusts nothing else, and its bearer token still comes from a Secret.
//!
//! The snapshot URL names the CA (`https://IP:port/ca-<sha256 prefix>/restores/...`): a seed
//! made by another process, which would not trust this one's certificate, fetches from a
//! different URL, and the planner makes it again (as for a seed made by a replica that no
//! longer leads).

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::OffsetDateTime;

use crate::pki::{Ca, Role};
use crate::seed::SnapshotServer;

/// How long the certificates are valid: they die with the process long before.
const VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// This process's snapshot server: what seeds are told, and what the listener serves with.
pub struct Identity {
    /// Where seeds fetch from and the CA they trust.
    pub server: SnapshotServer,
    /// The path prefix that names this process's CA (`/ca-<hex>`).
    pub prefix: String,
    /// The listener's TLS configuration.
    pub tls: Arc<rustls::ServerConfig>,
}

/// The IP and port of `--snapshot-url`, which must be `https://IP:port`: the seed's gate
/// checks the certificate against the address it connects to.
pub fn parse_url(url: &str) -> Result<std::net::SocketAddr, String> {
    let rest = url
        .trim_end_matches('/')
        .strip_prefix("https://")
        .ok_or_else(|| {
            format!("--snapshot-url {url}: must be https://IP:port (snapshots travel over TLS)")
        })?;
    rest.parse()
        .map_err(|_| format!("--snapshot-url {url}: must be https://IP:port, with an IP address"))
}

impl Identity {
    /// A new CA, and a server certificate for the address of `url` (`https://IP:port`).
    pub fn new(url: &str, now: OffsetDateTime) -> Result<Identity, String> {
        let addr = parse_url(url)?;
        // Named apart from any other process's CA, so a stranger's is unknown, not a lookalike.
        let name = format!("etcd-operator snapshots {}", uuid::Uuid::new_v4().simple());
        let ca = Ca::new(&name, now, VALIDITY).map_err(|e| e.to_string())?;
        let leaf = ca
            .issue(
                Role::Server,
                "etcd-operator",
                &[addr.ip().to_string()],
                now,
                VALIDITY,
            )
            .map_err(|e| e.to_string())?;
        let ca_der = CertificateDer::from_pem_slice(ca.0.cert.as_bytes())
            .map_err(|e| format!("reading the CA certificate: {e}"))?;
        let cert = CertificateDer::from_pem_slice(leaf.cert.as_bytes())
            .map_err(|e| format!("reading the server certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes())
            .map_err(|e| format!("reading the server key: {e}"))?;
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| format!("the server certificate: {e}"))?;
        let fingerprint = crate::api::common::sha256_hex(ca_der.as_ref());
        let prefix = format!("/ca-{}", &fingerprint[..16]);
        Ok(Identity {
            server: SnapshotServer {
                url: format!("https://{addr}{prefix}"),
                ca: pem_body(&ca.0.cert),
            },
            prefix,
            tls: Arc::new(tls),
        })
    }
}

/// The base64 between a PEM block's armour lines, on one line: a certificate as one argument.
fn pem_body(pem: &str) -> String {
    pem.lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_must_be_https_to_an_ip() {
        assert_eq!(
            parse_url("https://10.0.0.9:8443/").unwrap(),
            "10.0.0.9:8443".parse().unwrap()
        );
        assert!(
            parse_url("http://10.0.0.9:8080")
                .unwrap_err()
                .contains("over TLS")
        );
        assert!(
            parse_url("https://operator.svc:8443")
                .unwrap_err()
                .contains("IP address")
        );
    }

    /// A TLS handshake in memory between a client that trusts only `ca` (base64 DER, as a seed
    /// is given it) and connects to `ip`, and `server`.
    fn handshake(ca: &str, ip: &str, server: Arc<rustls::ServerConfig>) -> Result<(), String> {
        let pem = format!("-----BEGIN CERTIFICATE-----\n{ca}\n-----END CERTIFICATE-----\n");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
            .unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(ip.to_string()).unwrap();
        let mut c = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut wire = Vec::new();
            c.write_tls(&mut wire).unwrap();
            s.read_tls(&mut wire.as_slice()).unwrap();
            s.process_new_packets().map_err(|e| e.to_string())?;
            let mut wire = Vec::new();
            s.write_tls(&mut wire).unwrap();
            c.read_tls(&mut wire.as_slice()).unwrap();
            c.process_new_packets().map_err(|e| e.to_string())?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        Err("the handshake did not finish".into())
    }

    #[test]
    fn a_seed_trusting_the_ca_it_is_given_accepts_the_server_at_its_ip_only() {
        let now = OffsetDateTime::now_utc();
        let id = Identity::new("https://10.0.0.9:8443", now).unwrap();
        assert!(id.server.url.starts_with("https://10.0.0.9:8443/ca-"));
        assert_eq!(id.server.url, format!("https://10.0.0.9:8443{}", id.prefix));
        handshake(&id.server.ca, "10.0.0.9", id.tls.clone()).unwrap();
        // Another address, or another process's CA, is refused.
        let e = handshake(&id.server.ca, "10.0.0.10", id.tls.clone()).unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        let stranger = Identity::new("https://10.0.0.9:8443", now).unwrap();
        assert_ne!(stranger.prefix, id.prefix, "each process names its own CA");
        let e = handshake(&stranger.server.ca, "10.0.0.9", id.tls.clone()).unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{e}");
    }
}
