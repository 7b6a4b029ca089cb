//! The one spelling of an etcd client URL the gate accepts. Anything a URL parser might read
//! two ways (userinfo, a fragment, a query, percent-escapes, an empty port) is refused rather
//! than interpreted: `http://victim.team-b:2379#@x.team-a` names a host only by accident of
//! which parser reads it.

use std::net::IpAddr;

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// What a URL's host is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, lowercased, without a trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// A parsed `scheme://host:port` with nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
}

impl Target {
    /// The URL that reaches `host` (another spelling of this target's, or the address it was
    /// found at) on this target's scheme and port.
    pub fn url_at(&self, host: &Host) -> String {
        let host = match host {
            Host::Name(name) => name.clone(),
            Host::Ip(IpAddr::V4(ip)) => ip.to_string(),
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
        };
        format!("{}://{host}:{}", self.scheme.as_str(), self.port)
    }
}

/// `url` as a [`Target`], or why it is refused.
pub fn parse(url: &str) -> Result<Target, String> {
    let (scheme, rest) = match url.split_once("://") {
        Some(("http", rest)) => (Scheme::Http, rest),
        Some(("https", rest)) => (Scheme::Https, rest),
        _ => return Err("is not an http:// or https:// URL".into()),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if let Some(c) = authority
        .chars()
        .find(|c| matches!(c, '/' | '?' | '#' | '@' | '%' | '\\') || c.is_whitespace())
    {
        return Err(format!(
            "has {c:?} after its scheme: a client URL is scheme://host:port and nothing else"
        ));
    }
    let (host, port) = split_port(authority)?;
    let port = match port {
        None => 2379,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("has port {p:?}, not a number from 1 to 65535"))?,
    };
    Ok(Target {
        scheme,
        host: parse_host(host)?,
        port,
    })
}

/// Splits `host[:port]` or `[v6][:port]`.
fn split_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or("has an unclosed '[' in its host")?;
        return match after {
            "" => Ok((ip, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((ip, Some(port))),
                None => Err("has something other than a port after its IPv6 address".into()),
            },
        };
    }
    Ok(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

/// A host as a name or an address: an IP in its usual text, else a DNS name of letters,
/// digits, '-' and '.' (no empty label). Forms some resolvers read as addresses (`0x7f.1`,
/// `2130706433`, `127.1`) are refused, not guessed at.
pub fn parse_host(host: &str) -> Result<Host, String> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err("has no host".into());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Host::Ip(ip.to_canonical()));
    }
    let host = host.to_ascii_lowercase();
    let labels_ok = host.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    if !labels_ok || host.len() > 253 {
        return Err(format!("has host {host:?}, which is not a DNS name"));
    }
    // The last label of a name is never all digits (nor hex): such a host is an address in a
    // form only some resolvers take.
    let last = host.rsplit('.').next().unwrap_or_default();
    if last.chars().all(|c| c.is_ascii_digit())
        || last.starts_with("0x") && last[2..].chars().all(|c| c.is_ascii_hexdigit())
    {
        return Err(format!(
            "has host {host:?}, an address in a form not every resolver reads alike"
        ));
    }
    Ok(Host::Name(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_url_is_scheme_host_and_port_and_nothing_else() {
        let t = parse("http://example-client.team-a.svc:2379/").unwrap();
        assert_eq!(t.scheme, Scheme::Http);
        assert_eq!(t.host, Host::Name("example-client.team-a.svc".into()));
        assert_eq!(t.port, 2379);
        let t = parse("https://Example-Client.").unwrap();
        assert_eq!(t.host, Host::Name("example-client".into()));
        assert_eq!(t.port, 2379);
        let t = parse("http://[::ffff:10.0.0.7]:22379").unwrap();
        assert_eq!(t.host, Host::Ip("10.0.0.7".parse().unwrap()));
        assert_eq!(t.url_at(&t.host), "http://10.0.0.7:22379");
        let t = parse("http://[fd00::7]:2379").unwrap();
        assert_eq!(t.url_at(&t.host), "http://[fd00::7]:2379");
        for (url, why) in [
            ("http://victim-client.team-b.svc:2379#@x.team-a", "'#'"),
            ("http://user@example-client:2379", "'@'"),
            ("http://example-client:2379/v3/kv", "'/'"),
            ("http://example-client:2379?x=1", "'?'"),
            ("http://example%2Dclient:2379", "'%'"),
            ("ftp://example-client:2379", "not an http"),
            ("example-client:2379", "not an http"),
            ("http://example-client:", "not a number"),
            ("http://example-client:0", "not a number"),
            ("http://example-client:99999", "not a number"),
            ("http://:2379", "no host"),
            ("http://[fd00::7:2379", "unclosed"),
            ("http://0x7f.1:2379", "not every resolver"),
            ("http://2130706433:2379", "not every resolver"),
            ("http://127.1:2379", "not every resolver"),
            ("http://a..b:2379", "not a DNS name"),
            ("http://a_b:2379", "not a DNS name"),
        ] {
            let refused = parse(url).expect_err(url);
            assert!(refused.contains(why), "{url}: {refused}");
        }
    }
}
