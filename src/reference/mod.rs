//! The one gate for what a spec names outside its own object. An etcd client URL a tenant
//! writes (`etcdEndpoints`, `bootstrap.existing.endpoints`, and the member URLs the cluster
//! behind them lists) is resolved and authorized here before anything dials it, and what the
//! gate returns is the only address dialed.
//!
//! It decides by what a name resolves to, not by how it is spelled. From namespace `ns`, a
//! URL may reach a Service of `ns` (an ExternalName one is followed to its target, which is
//! judged again; one without a selector is judged by the addresses of its EndpointSlices) or
//! a pod of `ns`. Nothing else, unless an administrator allowed an address range
//! (`tenancy.allowedExternalCIDRs`): then names outside the cluster resolve through DNS and
//! every address must lie in the range, and the address found is the one dialed, so a name
//! cannot resolve one way when judged and another when dialed. Loopback, link-local
//! (169.254.0.0/16, the cloud metadata address among them), unspecified, multicast and
//! broadcast addresses and the API server's own are refused whatever the ranges say.

pub mod kube;
pub mod url;

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::sync::OnceLock;

pub use url::{Host, Scheme, Target};

/// How many ExternalName Services a name may be followed through.
const MAX_HOPS: usize = 4;

/// An address range (`10.244.0.0/16`, `fd00::/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// `a.b.c.d/n` or `v6/n`; a bare address is a range of one.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (ip, bits) = s.split_once('/').unwrap_or((s, ""));
        let net: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?}: {ip:?} is not an IP address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            "" => max,
            b => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{s:?}: /{b} is not a prefix length from 0 to {max}"))?,
        };
        Ok(Cidr { net, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = u32::from(self.bits);
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

/// What an administrator allows beyond a tenant's own namespace. Set once at start
/// ([`set_policy`]); unset, nothing.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// `--allowed-external-cidrs` (chart: `tenancy.allowedExternalCIDRs`).
    pub external: Vec<Cidr>,
}

static POLICY: OnceLock<Policy> = OnceLock::new();

/// Sets the policy of this process. Called once, at start.
pub fn set_policy(policy: Policy) {
    let _ = POLICY.set(policy);
}

/// The policy of this process.
pub fn policy() -> Policy {
    POLICY.get().cloned().unwrap_or_default()
}

/// Why a reference is refused: the field, what it named, and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub field: String,
    pub value: String,
    pub reason: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} {}", self.field, self.value, self.reason)
    }
}

impl std::error::Error for Refused {}

/// A Service as the gate needs to know it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceFacts {
    /// Its `spec.externalName`, for an ExternalName Service.
    pub external_name: Option<String>,
    /// Whether it selects pods (of its own namespace, by the endpoint controller); without a
    /// selector its EndpointSlices say anything their author wrote.
    pub selects_pods: bool,
    /// The addresses of its EndpointSlices.
    pub endpoint_ips: Vec<IpAddr>,
}

/// What the gate asks of the world: the Kubernetes objects and DNS, behind one seam so the
/// decisions are tested without either.
pub trait Resolve {
    /// The Service `name` of namespace `ns`, if there is one.
    fn service(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ServiceFacts>, String>> + Send;
    /// Whether a pod of namespace `ns` has address `ip`.
    fn pod_in(&self, ns: &str, ip: IpAddr) -> impl Future<Output = Result<bool, String>> + Send;
    /// The addresses DNS gives for a name outside the cluster's Services.
    fn lookup(&self, name: &str) -> impl Future<Output = Result<Vec<IpAddr>, String>> + Send;
    /// The API server's addresses (its Service's and its own).
    fn api_server(&self) -> Vec<IpAddr>;
}

/// An authorized etcd client URL: what to dial, and the name a TLS server must prove (the
/// name the spec gave, where the URL dials the address it resolved to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dial {
    pub url: String,
    pub server_name: Option<String>,
}

impl Dial {
    /// The endpoint that dials it with `access`.
    pub fn endpoint(&self, access: crate::etcd::Access) -> crate::etcd::Endpoint {
        crate::etcd::Endpoint::new(self.url.clone(), access, self.server_name.clone())
    }
}

/// Why `ip` may never be dialed for a tenant, whatever the policy allows.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_link_local() {
                Some("a link-local address (where cloud metadata services answer)")
            } else if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() {
                Some("not a unicast address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unicast_link_local() {
                Some("a link-local address (where cloud metadata services answer)")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("not a unicast address")
            } else {
                None
            }
        }
    }
}

/// A name the cluster's DNS answers for a Service or pod: `svc`, `svc.ns`, `svc.ns.svc`,
/// `host.svc.ns.svc` (a member of a headless Service), each with `.cluster.local` or not,
/// and `a-b-c-d.ns.pod[.cluster.local]`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClusterName {
    Service { ns: String, name: String },
    Pod { ns: String, ip: IpAddr },
}

fn cluster_name(name: &str, own: &str) -> Option<ClusterName> {
    let name = name.strip_suffix(".cluster.local").unwrap_or(name);
    let labels: Vec<&str> = name.split('.').collect();
    let service = |ns: &str, name: &str| ClusterName::Service {
        ns: ns.into(),
        name: name.into(),
    };
    match labels.as_slice() {
        [svc] => Some(service(own, svc)),
        // `svc.ns`: the search path of a pod makes it a Service; a name of two labels is
        // never taken for a host outside the cluster here.
        [svc, ns] => Some(service(ns, svc)),
        [svc, ns, "svc"] | [_, svc, ns, "svc"] => Some(service(ns, svc)),
        [dashed, ns, "pod"] => {
            let ip = dashed.replace('-', ".").parse().ok().or_else(|| {
                // IPv6 pod names write ':' as '-'.
                dashed.replace('-', ":").parse().ok()
            })?;
            Some(ClusterName::Pod {
                ns: (*ns).into(),
                ip,
            })
        }
        _ => None,
    }
}

/// Authorizes the etcd client URL `url` that `field` of an object in namespace `ns` names.
pub async fn etcd_url(
    resolver: &impl Resolve,
    policy: &Policy,
    ns: &str,
    field: &str,
    url: &str,
) -> Result<Dial, Refused> {
    let refuse = |reason: String| Refused {
        field: field.into(),
        value: url.into(),
        reason,
    };
    let target = url::parse(url).map_err(refuse)?;
    let mut host = target.host.clone();
    for _ in 0..=MAX_HOPS {
        let name = match host {
            Host::Ip(ip) => {
                address(resolver, policy, ns, ip).await.map_err(refuse)?;
                return Ok(Dial {
                    url: target.url_at(&host),
                    server_name: None,
                });
            }
            Host::Name(name) => name,
        };
        match cluster_name(&name, ns) {
            Some(ClusterName::Pod { ns: theirs, ip }) => {
                if theirs != ns {
                    return Err(refuse(elsewhere("a pod", &theirs, ns)));
                }
                address(resolver, policy, ns, ip).await.map_err(refuse)?;
                return Ok(Dial {
                    url: target.url_at(&Host::Ip(ip)),
                    server_name: Some(name),
                });
            }
            Some(ClusterName::Service {
                ns: theirs,
                name: svc,
            }) => {
                if theirs != ns {
                    return Err(refuse(elsewhere("a Service", &theirs, ns)));
                }
                let facts = (resolver.service(ns, &svc).await)
                    .map_err(|e| refuse(format!("could not be checked: {e}")))?
                    .ok_or_else(|| refuse(format!("names no Service of namespace {ns}")))?;
                if let Some(target_name) = facts.external_name {
                    host = url::parse_host(&target_name).map_err(|e| {
                        refuse(format!("is an ExternalName Service whose target {e}"))
                    })?;
                    continue;
                }
                if !facts.selects_pods {
                    for ip in facts.endpoint_ips {
                        address(resolver, policy, ns, ip)
                            .await
                            .map_err(|e| refuse(format!("is a Service whose endpoint {ip} {e}")))?;
                    }
                }
                return Ok(Dial {
                    url: target.url_at(&Host::Name(name)),
                    server_name: None,
                });
            }
            None => {
                return outside(resolver, policy, &target, &name)
                    .await
                    .map_err(refuse);
            }
        }
    }
    Err(refuse(format!(
        "leads through more than {MAX_HOPS} ExternalName Services"
    )))
}

/// Authorizes every URL of `urls` (a list field); the first refusal is the answer.
pub async fn etcd_urls(
    resolver: &impl Resolve,
    policy: &Policy,
    ns: &str,
    field: &str,
    urls: &[String],
) -> Result<Vec<Dial>, Refused> {
    let mut dials = Vec::with_capacity(urls.len());
    for url in urls {
        dials.push(etcd_url(resolver, policy, ns, field, url).await?);
    }
    Ok(dials)
}

/// The reason of the condition and Event that report a refused reference.
pub const REFUSED: &str = "ReferenceRefused";

fn elsewhere(what: &str, theirs: &str, ns: &str) -> String {
    format!(
        "is not a Service of namespace {ns}: it names {what} of namespace {theirs}, and an \
         object reaches only its own namespace's etcd"
    )
}

/// A name outside the cluster's Services: allowed only within the administrator's ranges,
/// dialed at the address it resolved to.
async fn outside(
    resolver: &impl Resolve,
    policy: &Policy,
    target: &Target,
    name: &str,
) -> Result<Dial, String> {
    if policy.external.is_empty() {
        return Err(format!(
            "is not a Service of this namespace, and this operator allows no address outside \
             it (tenancy.allowedExternalCIDRs is empty): {name} was not looked up"
        ));
    }
    let ips = resolver
        .lookup(name)
        .await
        .map_err(|e| format!("could not be resolved: {e}"))?;
    let Some(first) = ips.first().copied() else {
        return Err(format!("resolves to no address ({name})"));
    };
    // Every address is judged: a name with one good address and one bad one is refused, as
    // the one dialed could be either on the next look.
    for ip in &ips {
        allowed_outside(resolver, policy, *ip)
            .map_err(|e| format!("resolves to {ip}, which {e}"))?;
    }
    Ok(Dial {
        url: target.url_at(&Host::Ip(first)),
        server_name: Some(name.into()),
    })
}

/// Whether the address `ip` may be dialed for namespace `ns`: a pod of `ns`, or an address in
/// the administrator's ranges; never a forbidden one nor the API server.
async fn address(
    resolver: &impl Resolve,
    policy: &Policy,
    ns: &str,
    ip: IpAddr,
) -> Result<(), String> {
    let ip = ip.to_canonical();
    if let Some(why) = forbidden(ip) {
        return Err(format!("is {why}"));
    }
    if resolver.api_server().contains(&ip) {
        return Err("is the API server's address".into());
    }
    if resolver
        .pod_in(ns, ip)
        .await
        .map_err(|e| format!("could not be checked: {e}"))?
    {
        return Ok(());
    }
    allowed_outside(resolver, policy, ip)
}

fn allowed_outside(resolver: &impl Resolve, policy: &Policy, ip: IpAddr) -> Result<(), String> {
    let ip = ip.to_canonical();
    if let Some(why) = forbidden(ip) {
        return Err(format!("is {why}"));
    }
    if resolver.api_server().contains(&ip) {
        return Err("is the API server's address".into());
    }
    if policy.external.iter().any(|c| c.contains(ip)) {
        return Ok(());
    }
    Err(format!(
        "is not a pod of this namespace nor in the ranges this operator allows \
         (tenancy.allowedExternalCIDRs: {})",
        match policy.external.as_slice() {
            [] => "none".to_string(),
            ranges => ranges
                .iter()
                .map(Cidr::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }
    ))
}

#[cfg(test)]
mod tests;
