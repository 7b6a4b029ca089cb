use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;

use super::*;

/// A world of two tenants: `team-a` (asking) and `team-b`, each with an etcd's client Service
/// and pods, and a DNS that answers what the test says. Every lookup is recorded, so a test
/// shows that a refused name was never even resolved.
#[derive(Default)]
struct World {
    services: BTreeMap<(String, String), ServiceFacts>,
    pods: Vec<(String, IpAddr)>,
    dns: BTreeMap<String, Vec<IpAddr>>,
    looked_up: Mutex<Vec<String>>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl World {
    fn new() -> Self {
        let mut w = World::default();
        for ns in ["team-a", "team-b"] {
            let selected = ServiceFacts {
                selects_pods: true,
                ..ServiceFacts::default()
            };
            w.services
                .insert((ns.into(), "example-client".into()), selected.clone());
            w.services.insert((ns.into(), "example".into()), selected);
        }
        w.pods.push(("team-a".into(), ip("10.244.1.5")));
        w.pods.push(("team-b".into(), ip("10.244.2.7")));
        w
    }

    fn service(mut self, ns: &str, name: &str, facts: ServiceFacts) -> Self {
        self.services.insert((ns.into(), name.into()), facts);
        self
    }

    fn dns(mut self, name: &str, ips: &[&str]) -> Self {
        self.dns
            .insert(name.into(), ips.iter().map(|s| ip(s)).collect());
        self
    }

    fn looked_up(&self) -> Vec<String> {
        self.looked_up.lock().unwrap().clone()
    }
}

impl Resolve for World {
    async fn service(&self, ns: &str, name: &str) -> Result<Option<ServiceFacts>, String> {
        Ok(self.services.get(&(ns.into(), name.into())).cloned())
    }

    async fn pod_in(&self, ns: &str, at: IpAddr) -> Result<bool, String> {
        Ok(self.pods.iter().any(|(n, p)| n == ns && *p == at))
    }

    async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        self.looked_up.lock().unwrap().push(name.into());
        self.dns
            .get(name)
            .cloned()
            .ok_or_else(|| "no such host".to_string())
    }

    fn api_server(&self) -> Vec<IpAddr> {
        vec![ip("10.96.0.1")]
    }
}

fn none() -> Policy {
    Policy::default()
}

fn allowing(ranges: &[&str]) -> Policy {
    Policy {
        external: ranges.iter().map(|r| Cidr::parse(r).unwrap()).collect(),
    }
}

fn check(world: &World, policy: &Policy, url: &str) -> Result<Dial, Refused> {
    let run = etcd_url(world, policy, "team-a", "spec.etcdEndpoints", url);
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(run)
}

fn refused(world: &World, policy: &Policy, url: &str, why: &str) {
    let r = check(world, policy, url).expect_err(url);
    assert_eq!(r.field, "spec.etcdEndpoints");
    assert!(r.to_string().contains(why), "{url}: {r}");
}

#[test]
fn a_service_of_the_own_namespace_is_dialed_as_written_in_every_spelling() {
    let w = World::new();
    for url in [
        "http://example-client:2379",
        "http://example-client.team-a:2379",
        "http://example-client.team-a.svc:2379",
        "https://example-client.team-a.svc.cluster.local:2379/",
        "http://example-0.example.team-a.svc:2379",
    ] {
        let dial = check(&w, &none(), url).expect(url);
        assert_eq!(dial.url, url.trim_end_matches('/'), "{url}");
        assert_eq!(dial.server_name, None);
    }
    refused(
        &w,
        &none(),
        "http://nothing.team-a.svc:2379",
        "names no Service of namespace team-a",
    );
    assert!(w.looked_up().is_empty());
}

#[test]
fn another_namespace_is_refused_however_it_is_spelled() {
    let w = World::new();
    for url in [
        "http://example-client.team-b:2379",
        "http://example-client.team-b.svc:2379",
        "http://example-client.team-b.svc.cluster.local:2379",
        "http://example-client.team-b.svc.cluster.local.:2379",
        "http://example-0.example.team-b.svc:2379",
        "http://EXAMPLE-CLIENT.TEAM-B.SVC:2379",
    ] {
        refused(
            &w,
            &allowing(&["0.0.0.0/0"]),
            url,
            "is not a Service of namespace team-a",
        );
    }
    refused(
        &w,
        &none(),
        "http://10-244-2-7.team-b.pod:2379",
        "a pod of namespace team-b",
    );
    // The string test of before let these through.
    refused(
        &w,
        &none(),
        "http://example-client.team-b.svc:2379#@x.team-a",
        "'#'",
    );
    refused(&w, &none(), "http://x@example-client:2379", "'@'");
    assert!(w.looked_up().is_empty());
}

#[test]
fn an_external_name_service_is_judged_by_where_it_leads() {
    let external = |to: &str| ServiceFacts {
        external_name: Some(to.into()),
        ..ServiceFacts::default()
    };
    let w = World::new()
        .service(
            "team-a",
            "to-b",
            external("example-client.team-b.svc.cluster.local"),
        )
        .service("team-a", "to-ours", external("example-client.team-a.svc"))
        .service("team-a", "to-metadata", external("169.254.169.254"))
        .service("team-a", "to-outside", external("etcd.corp.example"))
        .service("team-a", "loop-1", external("loop-2"))
        .service("team-a", "loop-2", external("loop-1"))
        .dns("etcd.corp.example", &["10.244.2.7"]);
    refused(
        &w,
        &none(),
        "http://to-b:2379",
        "a Service of namespace team-b",
    );
    assert_eq!(
        check(&w, &none(), "http://to-ours:2379").unwrap().url,
        "http://example-client.team-a.svc:2379"
    );
    refused(
        &w,
        &allowing(&["0.0.0.0/0"]),
        "http://to-metadata:2379",
        "link-local",
    );
    refused(
        &w,
        &none(),
        "http://to-outside:2379",
        "allows no address outside",
    );
    refused(
        &w,
        &none(),
        "http://loop-1:2379",
        "more than 4 ExternalName",
    );
    assert!(w.looked_up().is_empty());
}

#[test]
fn a_service_without_a_selector_is_judged_by_its_endpoints() {
    let by_hand = |ips: &[&str]| ServiceFacts {
        selects_pods: false,
        endpoint_ips: ips.iter().map(|s| ip(s)).collect(),
        ..ServiceFacts::default()
    };
    let w = World::new()
        .service("team-a", "into-b", by_hand(&["10.244.1.5", "10.244.2.7"]))
        .service("team-a", "ours", by_hand(&["10.244.1.5"]));
    refused(
        &w,
        &none(),
        "http://into-b:2379",
        "endpoint 10.244.2.7 is not a pod of this namespace",
    );
    assert!(check(&w, &none(), "http://ours:2379").is_ok());
}

#[test]
fn addresses_reach_the_own_pods_and_the_allowed_ranges_never_metadata_loopback_or_api() {
    let w = World::new();
    let own = check(&w, &none(), "http://10.244.1.5:2379").unwrap();
    assert_eq!(own.url, "http://10.244.1.5:2379");
    let own = check(
        &w,
        &none(),
        "https://10-244-1-5.team-a.pod.cluster.local:2379",
    )
    .unwrap();
    assert_eq!(own.url, "https://10.244.1.5:2379");
    assert_eq!(
        own.server_name.as_deref(),
        Some("10-244-1-5.team-a.pod.cluster.local")
    );
    refused(
        &w,
        &none(),
        "http://10.244.2.7:2379",
        "not a pod of this namespace",
    );
    let everything = allowing(&["0.0.0.0/0", "::/0"]);
    for (url, why) in [
        ("http://169.254.169.254:80", "link-local"),
        ("http://[::ffff:169.254.169.254]:80", "link-local"),
        ("http://[fe80::1]:2379", "link-local"),
        ("http://127.0.0.1:2379", "loopback"),
        ("http://[::1]:2379", "loopback"),
        ("http://0.0.0.0:2379", "not a unicast"),
        ("http://10.96.0.1:443", "the API server"),
    ] {
        refused(&w, &everything, url, why);
    }
    assert!(check(&w, &allowing(&["10.244.0.1/32"]), "http://10.244.0.1:22379").is_ok());
    refused(
        &w,
        &allowing(&["10.244.0.1/32"]),
        "http://10.244.0.2:22379",
        "tenancy.allowedExternalCIDRs: 10.244.0.1/32",
    );
}

#[test]
fn a_name_outside_the_cluster_is_looked_up_only_when_allowed_and_dialed_where_judged() {
    let w = World::new()
        .dns("etcd.corp.example", &["10.244.0.1"])
        .dns("metadata.corp.example", &["10.244.0.1", "169.254.169.254"]);
    refused(
        &w,
        &none(),
        "http://etcd.corp.example:2379",
        "allows no address outside",
    );
    assert!(
        w.looked_up().is_empty(),
        "looked up without a range allowed"
    );
    let ranges = allowing(&["10.244.0.0/16"]);
    let dial = check(&w, &ranges, "https://etcd.corp.example:2379").unwrap();
    assert_eq!(dial.url, "https://10.244.0.1:2379");
    assert_eq!(dial.server_name.as_deref(), Some("etcd.corp.example"));
    refused(
        &w,
        &ranges,
        "http://metadata.corp.example:2379",
        "resolves to 169.254.169.254, which is a link-local",
    );
    refused(
        &w,
        &ranges,
        "http://nowhere.corp.example:2379",
        "could not be resolved",
    );
}

#[test]
fn ranges_hold_what_they_say() {
    let r = Cidr::parse("10.244.0.0/16").unwrap();
    assert!(r.contains(ip("10.244.255.1")));
    assert!(r.contains(ip("::ffff:10.244.3.3")));
    assert!(!r.contains(ip("10.245.0.1")));
    assert!(!r.contains(ip("fd00::1")));
    let one = Cidr::parse("10.244.0.1").unwrap();
    assert_eq!(one.to_string(), "10.244.0.1/32");
    assert!(one.contains(ip("10.244.0.1")) && !one.contains(ip("10.244.0.2")));
    assert!(Cidr::parse("fd00::/8").unwrap().contains(ip("fd12::1")));
    assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("192.0.2.1")));
    assert!(Cidr::parse("10.0.0.0/7").unwrap().contains(ip("11.1.1.1")));
    for bad in ["10.0.0.0/33", "10.0.0/8", "x/8", "fd00::/129"] {
        assert!(Cidr::parse(bad).is_err(), "{bad}");
    }
}
