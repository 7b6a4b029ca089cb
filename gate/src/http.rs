//! The gate's HTTP/1.0 requests: to the operator's snapshot server (TLS, trusting only the CA
//! the seed's arguments give) and to the replay's etcd on loopback (plain).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Where requests go: an address, and for TLS the client configuration that checks the
/// server's certificate against that address.
#[derive(Clone)]
pub struct Server {
    pub addr: SocketAddr,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.addr)
    }
}

impl PartialEq for Server {
    fn eq(&self, other: &Self) -> bool {
        self.addr == other.addr && self.tls.is_some() == other.tls.is_some()
    }
}

impl Server {
    /// Plain HTTP to `addr`.
    pub fn plain(addr: SocketAddr) -> Server {
        Server { addr, tls: None }
    }
}

/// `http://IP:port/PATH`, or `https://IP:port/PATH` checked against `ca` (a certificate's
/// DER in base64, as `--server-ca` gives it): the server and the path.
pub fn url(flag: &str, url: &str, ca: Option<&str>) -> Result<(Server, String), String> {
    let (rest, tls) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => {
            let ca = ca.ok_or_else(|| format!("{flag} {url}: https needs --server-ca"))?;
            (rest, Some(client_config(ca)?))
        }
        (None, Some(rest)) => (rest, None),
        _ => {
            return Err(format!(
                "{flag} {url}: only http(s)://IP:port/PATH is supported"
            ));
        }
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let addr = host
        .parse()
        .map_err(|_| format!("{flag} {url}: not http(s)://IP:port/PATH"))?;
    Ok((Server { addr, tls }, path.to_string()))
}

/// A client that trusts the one CA `ca` (base64 DER) and shows no certificate.
fn client_config(ca: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    let body: String = ca.split_whitespace().collect();
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    );
    let cert = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| format!("--server-ca: not a certificate: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(|e| format!("--server-ca: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// An answer: its status code, its Content-Length if it gave one, and its body to read.
pub struct Answer {
    pub code: u16,
    pub length: Option<u64>,
    pub body: BufReader<Box<dyn Read + Send>>,
}

/// One HTTP/1.0 request; a read that makes no progress for `read_timeout` fails it. Over TLS,
/// a body cut short (the connection closed without TLS's close_notify) is an error, never
/// taken for the end.
pub fn request(
    server: &Server,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
    read_timeout: Duration,
) -> Result<Answer, String> {
    let addr = server.addr;
    let err = |e: std::io::Error| format!("{server:?}{path}: {e}");
    let conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(err)?;
    conn.set_read_timeout(Some(read_timeout)).map_err(err)?;
    conn.set_write_timeout(Some(read_timeout)).map_err(err)?;
    let mut stream: Box<dyn ReadWrite> = match &server.tls {
        None => Box::new(conn),
        Some(config) => {
            let name = ServerName::IpAddress(addr.ip().into());
            let session = rustls::ClientConnection::new(config.clone(), name)
                .map_err(|e| format!("{server:?}: {e}"))?;
            Box::new(rustls::StreamOwned::new(session, conn))
        }
    };
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(err)?;
    stream.write_all(body.as_bytes()).map_err(err)?;
    stream.flush().map_err(err)?;
    let mut reader = BufReader::with_capacity(1 << 16, stream as Box<dyn Read + Send>);
    let mut status = String::new();
    reader.read_line(&mut status).map_err(err)?;
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map_err(err)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse::<u64>().ok();
        }
    }
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{server:?}{path}: no HTTP status in {status:?}"))?;
    Ok(Answer {
        code,
        length,
        body: reader,
    })
}

/// At most 1 MiB of an answer's body, as text (an error's message, etcd's JSON).
pub fn body_of(mut reader: BufReader<Box<dyn Read + Send>>) -> String {
    let mut body = String::new();
    let _ = reader.by_ref().take(1 << 20).read_to_string(&mut body);
    body
}

trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    use rustls::pki_types::PrivateKeyDer;

    use super::*;

    /// A CA (its DER in base64, as `--server-ca` takes it) and a server configuration with a
    /// certificate it signed for `ip`.
    fn identity(ip: &str) -> (String, Arc<rustls::ServerConfig>) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::default();
        leaf.subject_alt_names = vec![SanType::IpAddress(ip.parse().unwrap())];
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
        )
        .unwrap();
        let b64: String = ca_cert
            .pem()
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        (b64, Arc::new(config))
    }

    /// Serves one connection over TLS: answers `body` and ends with close_notify, or, with
    /// `cut`, closes the TCP connection halfway through the body without it.
    fn serve_once(config: Arc<rustls::ServerConfig>, body: &'static [u8], cut: bool) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let session = rustls::ServerConnection::new(config).unwrap();
            let mut tls = rustls::StreamOwned::new(session, conn);
            let mut head = [0u8; 1024];
            // The whole request arrives in one record here; a failed handshake ends the test's
            // server quietly.
            if tls.read(&mut head).is_err() {
                return;
            }
            let sent = if cut { &body[..body.len() / 2] } else { body };
            let _ = tls.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            let _ = tls.write_all(sent);
            let _ = tls.flush();
            if !cut {
                tls.conn.send_close_notify();
                let _ = tls.conn.write_tls(&mut tls.sock);
            }
        });
        addr
    }

    fn fetch(ca: &str, addr: SocketAddr) -> Result<Vec<u8>, String> {
        let (server, path) = url("--url", &format!("https://{addr}/snapshot"), Some(ca))?;
        let answer = request(&server, "GET", &path, "", "", Duration::from_secs(5))?;
        let mut body = Vec::new();
        let mut reader = answer.body;
        reader.read_to_end(&mut body).map_err(|e| e.to_string())?;
        Ok(body)
    }

    #[test]
    fn fetches_over_tls_from_the_server_its_ca_signed_for_that_ip_only() {
        let (ca, config) = identity("127.0.0.1");
        let body: &'static [u8] = b"the snapshot's bytes";
        assert_eq!(
            fetch(&ca, serve_once(config.clone(), body, false)).unwrap(),
            body
        );
        // Another CA's server: refused before a byte of the body.
        let (other_ca, _) = identity("127.0.0.1");
        let e = fetch(&other_ca, serve_once(config.clone(), body, false)).unwrap_err();
        // (Both CAs bear rcgen's default name, so the check fails on the signature.)
        assert!(
            e.contains("BadSignature") || e.contains("UnknownIssuer"),
            "{e}"
        );
        // A certificate for another address.
        let (ca2, elsewhere) = identity("10.9.9.9");
        let e = fetch(&ca2, serve_once(elsewhere, body, false)).unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        // A body cut short without TLS's close_notify is an error, not the end.
        let e = fetch(&ca, serve_once(config, body, true)).unwrap_err();
        assert!(e.to_lowercase().contains("eof"), "{e}");
    }
}
