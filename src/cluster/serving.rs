//! What a client of a cluster's client Service reaches: the members the Service sends clients
//! to (their pods Ready and listed as ready endpoints of its EndpointSlices), and whether a
//! linearizable read through the Service's own address is answered, by this cluster. etcd's
//! own view of its members says nothing of this: a member serves a moment before its pod turns
//! Ready, its endpoint is published after that, and every node's proxy programs the address
//! after that again. `Available` waits for all of it (see `status`), so that a script that
//! waits for the condition and then writes through the Service is answered.
//!
//! The read goes to the Service's cluster IP, not its DNS name: the operator needs no cluster
//! DNS, and the proxy on the operator's node is the one its clients there use. With TLS the
//! certificate is checked against the Service's DNS name, which its clients use.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, ResourceExt};

use crate::api::EtcdCluster;
use crate::etcd::{self, Access, Endpoint};
use crate::kube::cache::Caches;
use crate::kube::names::Addressing;

/// How long the read through the Service may take. A proxy that knows the Service but has no
/// endpoint programmed for it refuses at once, a member answers in milliseconds; but an
/// endpoint whose pod has just gone (still programmed for a moment) does not answer at all, the
/// bridge gives up only after 3 s, and the pass that asked waits: the member being replaced
/// waits with it.
pub const READ_TIMEOUT: Duration = Duration::from_millis(750);

/// How often a cluster that is Available is read through its Service. Its passes come every
/// 250 ms while it changes; between reads the last answer stands, and failures are judged over
/// [`READ_GRACE`] anyway. A cluster that is not Available is read on every pass that finds a
/// member published, so that it turns Available at once.
pub const READ_EVERY: Duration = Duration::from_secs(5);

/// How long reads through the Service may keep failing before a cluster that was Available,
/// and whose members are still healthy and published, stops being so. One read lost to a busy
/// node is no outage; a proxy that stopped forwarding is.
pub const READ_GRACE: Duration = Duration::from_secs(10);

/// What clients of the client Service reach.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Serving {
    /// Member pods that are Ready and listed as ready endpoints of the client Service.
    pub published: BTreeSet<String>,
    /// The read through the Service's address: `None` when none was made (no member is
    /// published), else its answer; `Err` says why it failed.
    pub read: Option<Result<(), String>>,
    /// How long reads through the Service have been failing (zero after an answer).
    pub failing_for: Duration,
}

/// Errors of this observation: the API server's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the client Service's EndpointSlices failed.
    #[error("listing the EndpointSlices of Service {service}: {source}")]
    ListEndpoints {
        service: String,
        #[source]
        source: kube::Error,
    },
    /// Reading the client Service failed.
    #[error("reading Service {service}: {source}")]
    GetService {
        service: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::ListEndpoints { .. } => "list_endpoints",
            Error::GetService { .. } => "get_service",
        }
    }
}

/// Where the client Service is read from: the watch caches when they have listed, else the
/// API server.
pub struct Sources<'a> {
    /// The shared watch caches.
    pub caches: &'a Caches,
    /// Services of the cluster's namespace.
    pub services: &'a Api<Service>,
    /// EndpointSlices of the cluster's namespace.
    pub slices: &'a Api<EndpointSlice>,
}

/// The last read through the Service and since when reads have been failing; kept by the task
/// between passes.
#[derive(Debug, Default)]
pub struct ReadMemory {
    failing_since: Option<Instant>,
    last: Option<(Instant, Result<(), String>)>,
}

impl ReadMemory {
    /// The last answer, when it may stand for a read now: the cluster is Available and the
    /// last read is younger than [`READ_EVERY`].
    pub fn standing(&self, available: bool, now: Instant) -> Option<Result<(), String>> {
        let (at, answer) = self.last.as_ref()?;
        (available && now.saturating_duration_since(*at) < READ_EVERY).then(|| answer.clone())
    }

    /// Records a read made now (`made`; else `serving.read` is the standing answer) and fills
    /// in `serving.failing_for` as of `now`.
    pub fn stamp(&mut self, serving: &mut Serving, made: bool, now: Instant) {
        if made && let Some(answer) = &serving.read {
            self.last = Some((now, answer.clone()));
        }
        match &serving.read {
            Some(Err(_)) => {
                let since = *self.failing_since.get_or_insert(now);
                serving.failing_for = now.saturating_duration_since(since);
            }
            Some(Ok(())) => {
                self.failing_since = None;
                serving.failing_for = Duration::ZERO;
            }
            // No read made: nothing is published, which status reports by itself.
            None => serving.failing_for = Duration::ZERO,
        }
    }
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pods that `slices` list as ready endpoints, by name (`targetRef`), else by address.
/// An endpoint without a `ready` condition counts as ready, as the API defines.
pub fn ready_endpoints(
    slices: &[Arc<EndpointSlice>],
    pods: &BTreeMap<String, Pod>,
) -> BTreeSet<String> {
    let by_ip: BTreeMap<&str, &str> = pods
        .iter()
        .filter_map(|(name, p)| Some((p.status.as_ref()?.pod_ip.as_deref()?, name.as_str())))
        .collect();
    let mut out = BTreeSet::new();
    for e in slices.iter().flat_map(|s| &s.endpoints) {
        if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
            continue;
        }
        let by_ref = e
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .and_then(|r| r.name.clone());
        match by_ref {
            Some(name) => {
                out.insert(name);
            }
            None => out.extend(
                e.addresses
                    .iter()
                    .filter_map(|a| by_ip.get(a.as_str()))
                    .map(|n| n.to_string()),
            ),
        }
    }
    out
}

/// The client Service's EndpointSlices.
async fn client_slices(
    from: &Sources<'_>,
    cluster: &EtcdCluster,
) -> Result<Vec<Arc<EndpointSlice>>, Error> {
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    let service = format!("{name}-client");
    from.caches
        .service_slices(from.slices, &ns, &name, &service)
        .await
        .map_err(|source| Error::ListEndpoints { service, source })
}

/// The client Service's cluster IP, if it has one.
async fn cluster_ip(from: &Sources<'_>, cluster: &EtcdCluster) -> Result<Option<String>, Error> {
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    let service = format!("{name}-client");
    let found = match from.caches.services.group(&ns, &name) {
        Some(services) => services.into_iter().find(|s| s.name_any() == service),
        None => from
            .services
            .get_opt(&service)
            .await
            .map_err(|source| Error::GetService {
                service: service.clone(),
                source,
            })?
            .map(Arc::new),
    };
    Ok(found
        .and_then(|s| s.spec.as_ref()?.cluster_ip.clone())
        .filter(|ip| !ip.is_empty() && ip != "None"))
}

/// How the read through the Service is made.
pub struct Read {
    /// What the operator presents to the cluster.
    pub access: Access,
    /// The ID the members answered with, if any did: the read must be answered by it.
    pub cluster_id: Option<u64>,
    /// An answer that stands for a read now (see [`ReadMemory::standing`]): none is made.
    pub standing: Option<Result<(), String>>,
}

/// Observes what clients of `cluster`'s client Service reach. `pods` are the member pods by
/// name. The read is made only when some member is published, and no answer stands for it.
pub async fn observe(
    from: &Sources<'_>,
    cluster: &EtcdCluster,
    addr: &Addressing,
    pods: &BTreeMap<String, Pod>,
    how: Read,
) -> Result<Serving, Error> {
    let slices = client_slices(from, cluster).await?;
    let published: BTreeSet<String> = ready_endpoints(&slices, pods)
        .into_iter()
        .filter(|name| pods.get(name).is_some_and(pod_ready))
        .collect();
    if published.is_empty() {
        return Ok(Serving::default());
    }
    if let Some(answer) = how.standing {
        return Ok(Serving {
            published,
            read: Some(answer),
            failing_for: Duration::ZERO,
        });
    }
    let Read {
        access, cluster_id, ..
    } = how;
    let read = match cluster_ip(from, cluster).await? {
        None => Err(format!(
            "Service {}-client has no cluster IP",
            cluster.name_any()
        )),
        Some(ip) => {
            let endpoint =
                Endpoint::new(addr.client_url_at(&ip), access, Some(addr.service_host()));
            read_through(&endpoint, cluster_id, addr).await
        }
    };
    Ok(Serving {
        published,
        read: Some(read),
        failing_for: Duration::ZERO,
    })
}

/// A linearizable read through `endpoint`, answered by the cluster `cluster_id` (when known).
async fn read_through(
    endpoint: &Endpoint,
    cluster_id: Option<u64>,
    addr: &Addressing,
) -> Result<(), String> {
    let service = addr.service_host();
    match etcd::linearizable_read(endpoint, READ_TIMEOUT).await {
        Ok(id) if cluster_id.is_none_or(|want| want == id) => Ok(()),
        Ok(id) => Err(format!(
            "Service {service} ({endpoint}) led to a member of another etcd cluster ({id:x})"
        )),
        Err(e) => Err(format!("a read through Service {service} failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ObjectReference, PodCondition, PodStatus};
    use k8s_openapi::api::discovery::v1::{Endpoint as SliceEndpoint, EndpointConditions};

    use super::*;

    fn pod(name: &str, ip: &str, ready: bool) -> (String, Pod) {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.status = Some(PodStatus {
            pod_ip: Some(ip.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        (name.into(), p)
    }

    fn endpoint(ip: &str, target: Option<&str>, ready: Option<bool>) -> SliceEndpoint {
        SliceEndpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready,
                ..EndpointConditions::default()
            }),
            target_ref: target.map(|n| ObjectReference {
                kind: Some("Pod".into()),
                name: Some(n.into()),
                ..ObjectReference::default()
            }),
            ..SliceEndpoint::default()
        }
    }

    #[test]
    fn ready_endpoints_are_named_by_their_pod_or_found_by_address() {
        let pods: BTreeMap<String, Pod> = [
            pod("a", "10.0.0.1", true),
            pod("b", "10.0.0.2", true),
            pod("c", "10.0.0.3", true),
            pod("d", "10.0.0.4", true),
        ]
        .into_iter()
        .collect();
        let slice = EndpointSlice {
            endpoints: vec![
                endpoint("10.0.0.1", Some("a"), Some(true)),
                // Not ready: not a route clients take.
                endpoint("10.0.0.2", Some("b"), Some(false)),
                // No condition: ready, as the API defines; no reference: found by address.
                endpoint("10.0.0.3", None, None),
            ],
            ..EndpointSlice::default()
        };
        let ready = ready_endpoints(&[Arc::new(slice)], &pods);
        assert_eq!(
            ready.into_iter().collect::<Vec<_>>(),
            vec!["a".to_string(), "c".to_string()]
        );
        assert!(pod_ready(&pods["a"]));
        assert!(!pod_ready(&pod("x", "10.0.0.9", false).1));
        assert!(!pod_ready(&Pod::default()));
    }

    #[test]
    fn reads_fail_for_as_long_as_they_have_failed_and_an_answer_forgets() {
        let mut memory = ReadMemory::default();
        let t0 = Instant::now();
        let failed = |for_: Duration| Serving {
            read: Some(Err("refused".into())),
            failing_for: for_,
            ..Serving::default()
        };
        let mut s = failed(Duration::ZERO);
        memory.stamp(&mut s, true, t0);
        assert_eq!(s.failing_for, Duration::ZERO);
        let mut s = failed(Duration::ZERO);
        memory.stamp(&mut s, true, t0 + Duration::from_secs(4));
        assert_eq!(s.failing_for, Duration::from_secs(4));
        let mut ok = Serving {
            read: Some(Ok(())),
            ..Serving::default()
        };
        memory.stamp(&mut ok, true, t0 + Duration::from_secs(5));
        assert_eq!(ok.failing_for, Duration::ZERO);
        let mut s = failed(Duration::ZERO);
        memory.stamp(&mut s, true, t0 + Duration::from_secs(6));
        assert_eq!(s.failing_for, Duration::ZERO);
    }

    #[test]
    fn an_available_cluster_is_read_through_its_service_every_few_seconds_only() {
        let mut memory = ReadMemory::default();
        let t0 = Instant::now();
        assert_eq!(memory.standing(true, t0), None);
        let mut ok = Serving {
            read: Some(Ok(())),
            ..Serving::default()
        };
        memory.stamp(&mut ok, true, t0);
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(memory.standing(true, soon), Some(Ok(())));
        // Not Available: every pass reads, so that it turns Available at once.
        assert_eq!(memory.standing(false, soon), None);
        assert_eq!(memory.standing(true, t0 + READ_EVERY), None);
        // A standing answer stamped again does not make itself younger.
        let mut standing = ok.clone();
        memory.stamp(&mut standing, false, soon);
        assert_eq!(memory.standing(true, t0 + READ_EVERY), None);
    }
}
