//! Certificates of TLS clusters. Pure: the time is always a parameter.
//!
//! - [`Ca::new`] and [`Ca::issue`]: the CA of a `TLS.auto` cluster and the peer, server and
//!   client certificates it signs (rcgen, ECDSA P-256).
//! - [`check_pair`]: what every TLS Secret must pass before a member pod mounts it: the keys
//!   are there, the certificate parses and is valid now, and for member certificates its
//!   names cover every member's DNS name.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

/// What failed while making a certificate.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Error {
    what: &'static str,
    #[source]
    source: rcgen::Error,
}

fn err(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |source| Error { what, source }
}

/// What a certificate is for, which sets its key usages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A member's peer certificate: presented to peers and, as a client, by the member to its
    /// peers (and by its `etcd-gate`).
    Peer,
    /// A member's server certificate. etcd's gRPC gateway dials its own client port with it,
    /// so it authenticates clients too.
    Server,
    /// A client's certificate.
    Client,
}

/// A certificate and its key, in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

/// The key never reaches a log or a panic message through `{:?}`.
impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("cert", &format_args!("{} bytes of PEM", self.cert.len()))
            .field("key", &format_args!("<redacted>"))
            .finish()
    }
}

/// A CA: its certificate and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca(pub Pair);

fn validity_window(params: &mut CertificateParams, now: OffsetDateTime, validity: Duration) {
    // A minute back, so a node whose clock is slightly behind the operator's accepts it.
    params.not_before = now - time::Duration::minutes(1);
    // No spec asks for more than i64 seconds; should one, the certificate ends at the latest
    // time there is rather than at a wrapped-around time in the past.
    let secs = i64::try_from(validity.as_secs()).unwrap_or(i64::MAX);
    params.not_after = now.saturating_add(time::Duration::seconds(secs));
}

impl Ca {
    /// A new self-signed CA named after `cluster`.
    pub fn new(cluster: &str, now: OffsetDateTime, validity: Duration) -> Result<Ca, Error> {
        let key = KeyPair::generate().map_err(err("generating the CA key"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("{cluster} etcd CA"));
        // A serial of the time makes two CAs of one cluster (before and after a rotation)
        // different certificates even with the same name.
        dn.push(
            DnType::OrganizationName,
            format!("etcd-operator {}", now.unix_timestamp()),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity_window(&mut params, now, validity);
        let cert = params
            .self_signed(&key)
            .map_err(err("signing the CA certificate"))?;
        Ok(Ca(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }))
    }

    /// A certificate for `role`, named `common_name`, valid for the DNS names and IP
    /// addresses in `names`, signed by this CA.
    pub fn issue(
        &self,
        role: Role,
        common_name: &str,
        names: &[String],
        now: OffsetDateTime,
        validity: Duration,
    ) -> Result<Pair, Error> {
        let ca_key = KeyPair::from_pem(&self.0.key).map_err(err("reading the CA key"))?;
        let issuer =
            Issuer::from_ca_cert_pem(&self.0.cert, ca_key).map_err(err("reading the CA"))?;
        let key = KeyPair::generate().map_err(err("generating a key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for name in names {
            params.subject_alt_names.push(match name.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => {
                    SanType::DnsName(name.clone().try_into().map_err(err("a certificate name"))?)
                }
            });
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match role {
            Role::Peer | Role::Server => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Role::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        validity_window(&mut params, now, validity);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(err("signing a certificate"))?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// What a certificate says that the checks need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: OffsetDateTime,
    /// End of validity.
    pub not_after: OffsetDateTime,
    /// DNS names and IP addresses it is valid for.
    pub names: Vec<String>,
    /// The subject's common name (etcd's user, for a client certificate).
    pub common_name: String,
}

impl CertInfo {
    /// Whether two thirds of its validity have passed (or it is not valid at all): time to
    /// issue its successor, with a third of its life left for the roll that puts it in place.
    pub fn renewal_due(&self, now: OffsetDateTime) -> bool {
        let life = self.not_after - self.not_before;
        now >= self.not_before + life * 2 / 3 || now >= self.not_after
    }
}

/// The certificates of a PEM bundle, in order.
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertInfo>, String> {
    let mut out = Vec::new();
    for block in Pem::iter_from_buffer(pem) {
        let block = block.map_err(|e| format!("not PEM: {e}"))?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let cert = block
            .parse_x509()
            .map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => names.push(d.to_string()),
                    // 4 bytes are an IPv4 address, 16 an IPv6 one; other lengths name none.
                    GeneralName::IPAddress(ip) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(*ip) {
                            names.push(std::net::Ipv4Addr::from(v4).to_string());
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*ip) {
                            names.push(std::net::Ipv6Addr::from(v6).to_string());
                        }
                    }
                    _ => {}
                }
            }
        }
        out.push(CertInfo {
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            names,
            common_name: cert
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .unwrap_or_default()
                .to_string(),
        });
    }
    if out.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(out)
}

/// Whether certificate name `san` matches host `host` by the rules TLS clients apply: exactly,
/// or as a wildcard that stands for the whole first label.
pub fn covers(san: &str, host: &str) -> bool {
    let (san, host) = (san.to_ascii_lowercase(), host.to_ascii_lowercase());
    if san == host {
        return true;
    }
    match (san.strip_prefix("*."), host.split_once('.')) {
        (Some(rest), Some((first, host_rest))) => !first.is_empty() && rest == host_rest,
        _ => false,
    }
}

/// The keys of a TLS Secret in the coreos layout: certificate, key, CA bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Key of the certificate.
    pub cert: &'static str,
    /// Key of the private key.
    pub key: &'static str,
    /// Key of the CA bundle.
    pub ca: &'static str,
}

impl Layout {
    /// The entries of a Secret in this layout holding `pair` and the CA bundle `ca`.
    pub fn entries(&self, pair: &Pair, ca: &str) -> [(&'static str, String); 3] {
        [
            (self.cert, pair.cert.clone()),
            (self.key, pair.key.clone()),
            (self.ca, ca.to_string()),
        ]
    }
}

/// The layouts of a cluster's member Secrets, which their mounts map to the coreos file names
/// etcd's flags give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberLayouts {
    /// Of the peer Secret.
    pub peer: Layout,
    /// Of the server Secret.
    pub server: Layout,
}

impl Default for MemberLayouts {
    fn default() -> Self {
        MemberLayouts {
            peer: PEER,
            server: SERVER,
        }
    }
}

/// `TLS.static.member.peerSecret`.
pub const PEER: Layout = Layout {
    cert: "peer.crt",
    key: "peer.key",
    ca: "peer-ca.crt",
};
/// `TLS.static.member.serverSecret`.
pub const SERVER: Layout = Layout {
    cert: "server.crt",
    key: "server.key",
    ca: "server-ca.crt",
};
/// Kubernetes' `kubernetes.io/tls` Secrets, which cert-manager writes; the client certificates
/// `TLS.auto` issues to the users of `spec.auth`.
pub const KUBERNETES_TLS: Layout = Layout {
    cert: "tls.crt",
    key: "tls.key",
    ca: "ca.crt",
};
/// `TLS.static.operatorSecret`, and `clientTLSSecret` of backups and restores.
pub const CLIENT: Layout = Layout {
    cert: "etcd-client.crt",
    key: "etcd-client.key",
    ca: "etcd-client-ca.crt",
};

/// The layout a TLS Secret is in: `coreos` (the layout its field names) when it holds that
/// layout's certificate, else Kubernetes' `kubernetes.io/tls` (what cert-manager writes) when
/// it holds `tls.crt`, else `coreos`, whose keys a complaint then names.
pub fn layout_of(get: impl Fn(&str) -> Option<Vec<u8>>, coreos: Layout) -> Layout {
    let has = |k: &str| get(k).is_some_and(|v| !v.is_empty());
    if !has(coreos.cert) && has(KUBERNETES_TLS.cert) {
        KUBERNETES_TLS
    } else {
        coreos
    }
}

/// Checks the data of a TLS Secret in `layout`: every key present and not empty, the
/// certificate and the CA bundle parse and are valid at `now`, and the certificate names each
/// of `hosts`. Returns the certificate, or what is wrong, in words that name the key.
pub fn check_pair(
    get: impl Fn(&str) -> Option<Vec<u8>>,
    layout: Layout,
    hosts: &[String],
    now: OffsetDateTime,
) -> Result<CertInfo, String> {
    let missing: Vec<&str> = [layout.cert, layout.key, layout.ca]
        .into_iter()
        .filter(|k| get(k).is_none_or(|v| v.is_empty()))
        .collect();
    if !missing.is_empty() {
        let k = KUBERNETES_TLS;
        let or = if layout == k {
            String::new()
        } else {
            format!(
                ", or {}, {} and {} as cert-manager writes them",
                k.cert, k.key, k.ca
            )
        };
        return Err(format!(
            "has no {} (a TLS Secret holds {}, {} and {}{or})",
            missing.join(", "),
            layout.cert,
            layout.key,
            layout.ca
        ));
    }
    let cert = parse_certs(&get(layout.cert).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", layout.cert))?
        .remove(0);
    let valid = |c: &CertInfo, key: &str| {
        if now < c.not_before {
            Err(format!("{key}: not valid before {}", c.not_before))
        } else if now >= c.not_after {
            Err(format!("{key}: expired at {}", c.not_after))
        } else {
            Ok(())
        }
    };
    valid(&cert, layout.cert)?;
    for ca in parse_certs(&get(layout.ca).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", layout.ca))?
    {
        valid(&ca, layout.ca)?;
    }
    for host in hosts {
        if !cert.names.iter().any(|n| covers(n, host)) {
            return Err(format!(
                "{}: its names ({}) do not cover {host}; member certificates need \
                 a wildcard name for the members, such as *.{}",
                layout.cert,
                if cert.names.is_empty() {
                    "none".to_string()
                } else {
                    cert.names.join(", ")
                },
                host.split_once('.').map_or(host.as_str(), |(_, r)| r)
            ));
        }
    }
    Ok(cert)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn secret(layout: Layout, pair: &Pair, ca: &Ca) -> impl Fn(&str) -> Option<Vec<u8>> {
        let map = layout.entries(pair, &ca.0.cert);
        move |k| {
            map.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.clone().into_bytes())
        }
    }

    #[test]
    fn wildcards_stand_for_one_whole_label() {
        assert!(covers("*.c.ns.svc", "c-abcde.c.ns.svc"));
        assert!(covers("C-ABCDE.c.ns.svc", "c-abcde.c.ns.svc"));
        assert!(!covers("*.c.ns.svc", "c.ns.svc"));
        assert!(!covers("*.c.ns.svc", "x.y.c.ns.svc"));
        assert!(!covers("*.c.ns.svc", "c-abcde.c.ns.svc.cluster.local"));
        assert!(!covers("*.other.ns.svc", "c-abcde.c.ns.svc"));
    }

    #[test]
    fn issued_certificates_pass_their_checks() {
        let ca = Ca::new("c", now(), 10 * DAY).unwrap();
        let names = vec!["*.c.ns.svc".to_string(), "127.0.0.1".into()];
        let pair = ca.issue(Role::Peer, "c", &names, now(), DAY).unwrap();
        let hosts = vec!["c-abcde.c.ns.svc".to_string(), "127.0.0.1".into()];
        let info = check_pair(secret(PEER, &pair, &ca), PEER, &hosts, now()).unwrap();
        assert_eq!(info.names, names);
        assert!(!info.renewal_due(now()));
        assert!(info.renewal_due(now() + time::Duration::hours(17)));
    }

    #[test]
    fn every_problem_names_the_key() {
        let ca = Ca::new("c", now(), 10 * DAY).unwrap();
        let pair = ca
            .issue(Role::Server, "c", &["*.other.ns.svc".into()], now(), DAY)
            .unwrap();
        let hosts = vec!["c-abcde.c.ns.svc".to_string()];
        let e = check_pair(secret(SERVER, &pair, &ca), SERVER, &hosts, now()).unwrap_err();
        assert!(
            e.starts_with("server.crt: its names (*.other.ns.svc) do not cover c-abcde.c.ns.svc"),
            "{e}"
        );
        assert!(e.contains("*.c.ns.svc"), "{e}");

        let later = now() + time::Duration::days(2);
        let e = check_pair(secret(SERVER, &pair, &ca), SERVER, &[], later).unwrap_err();
        assert!(e.starts_with("server.crt: expired at"), "{e}");

        let get = |k: &str| (k == "server.crt").then(|| pair.cert.clone().into_bytes());
        let e = check_pair(get, SERVER, &[], now()).unwrap_err();
        assert_eq!(
            e,
            "has no server.key, server-ca.crt (a TLS Secret holds server.crt, server.key and \
             server-ca.crt, or tls.crt, tls.key and ca.crt as cert-manager writes them)"
        );
        let get = |k: &str| {
            Some(if k == "server.crt" {
                b"junk".to_vec()
            } else {
                b"x".to_vec()
            })
        };
        let e = check_pair(get, SERVER, &[], now()).unwrap_err();
        assert!(e.starts_with("server.crt: "), "{e}");
    }

    #[test]
    fn a_secret_in_the_kubernetes_layout_is_read_as_such_and_the_coreos_layout_comes_first() {
        let ca = Ca::new("c", now(), 10 * DAY).unwrap();
        let pair = ca
            .issue(Role::Peer, "c", &["*.c.ns.svc".into()], now(), DAY)
            .unwrap();
        let k8s = secret(KUBERNETES_TLS, &pair, &ca);
        assert_eq!(layout_of(&k8s, PEER), KUBERNETES_TLS);
        assert!(check_pair(&k8s, layout_of(&k8s, PEER), &[], now()).is_ok());
        let both = |k: &str| secret(PEER, &pair, &ca)(k).or_else(|| k8s(k));
        assert_eq!(layout_of(both, PEER), PEER);
        assert_eq!(layout_of(|_: &str| None, SERVER), SERVER);
    }
}
