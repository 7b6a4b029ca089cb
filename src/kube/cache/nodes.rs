//! Whether each node is Ready and open, from the Node watch (only when node loss is acted on).

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};

/// The watch of every Node, for [`Nodes`].
pub fn node_watch(
    client: &kube::Client,
) -> impl futures::Stream<Item = Result<Event<Node>, watcher::Error>> + Send + use<> {
    use kube::runtime::WatchStreamExt;
    watcher::watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .backoff(crate::kube::watch_backoff())
}

/// A node's readiness as its kubelet last reported it (or the node controller, once the
/// kubelet went silent, set it Unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Since when it has not been: for `Unknown` (the kubelet went silent) the kubelet's last
    /// heartbeat in the condition, which is when the node stopped answering, well before the
    /// node controller noticed; for `False` (the kubelet reports itself not ready) when it
    /// became so.
    pub since: Option<k8s_openapi::jiff::Timestamp>,
    /// New pods may be put on it: not cordoned, and no `NoSchedule` or `NoExecute` taint
    /// (whether a cluster's tolerations would allow one is not judged: such a node is not
    /// counted on for spreading members).
    pub open: bool,
}

impl NodeHealth {
    fn of(node: &Node) -> Self {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let transition = ready.and_then(|c| c.last_transition_time.as_ref());
        let heartbeat = ready
            .filter(|c| c.status == "Unknown")
            .and_then(|c| c.last_heartbeat_time.as_ref());
        let spec = node.spec.as_ref();
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let tainted = spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.effect != "PreferNoSchedule"));
        NodeHealth {
            ready: ready.is_some_and(|c| c.status == "True"),
            since: heartbeat.or(transition).map(|t| t.0),
            open: !cordoned && !tainted,
        }
    }
}

/// Every node's readiness, by name. Only whether each is Ready and since when is kept: a Node
/// object is mostly its image list.
#[derive(Default)]
pub struct Nodes {
    inner: RwLock<NodesInner>,
    /// Never watched: the operator acts on no node loss (`--node-loss-grace=0`).
    unwatched: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
pub(super) struct NodesInner {
    synced: bool,
    relisting: Option<HashMap<String, NodeHealth>>,
    nodes: HashMap<String, NodeHealth>,
}

impl Nodes {
    /// Records that Nodes are not watched in this process.
    pub fn set_unwatched(&self) {
        self.unwatched
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether Nodes are not watched in this process (see [`Nodes::set_unwatched`]).
    pub fn unwatched(&self) -> bool {
        self.unwatched.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Applies one event of the Node watch; says whether some node's readiness or openness
    /// changed (the heartbeats that make most Node updates change nothing here).
    pub fn apply(&self, event: Event<Node>) -> bool {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let ready = |m: &HashMap<String, NodeHealth>, n: &str| m.get(n).map(|h| (h.ready, h.open));
        match event {
            Event::Init => {
                inner.relisting = Some(HashMap::new());
                false
            }
            Event::InitApply(n) => {
                if let Some(r) = inner.relisting.as_mut() {
                    r.insert(n.name_any(), NodeHealth::of(&n));
                }
                false
            }
            Event::InitDone => {
                let listed = inner.relisting.take().unwrap_or_default();
                let changed = listed.len() != inner.nodes.len()
                    || listed
                        .iter()
                        .any(|(n, h)| ready(&inner.nodes, n) != Some((h.ready, h.open)));
                inner.nodes = listed;
                inner.synced = true;
                changed
            }
            Event::Apply(n) => {
                let (name, health) = (n.name_any(), NodeHealth::of(&n));
                let changed = ready(&inner.nodes, &name) != Some((health.ready, health.open));
                inner.nodes.insert(name, health);
                changed
            }
            Event::Delete(n) => inner.nodes.remove(&n.name_any()).is_some(),
        }
    }

    /// The nodes a new member could be put on: Ready and open (see [`NodeHealth::open`]);
    /// `None` until a list has finished.
    pub fn open(&self) -> Option<BTreeSet<String>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.synced.then(|| {
            (inner.nodes.iter())
                .filter(|(_, h)| h.ready && h.open)
                .map(|(n, _)| n.clone())
                .collect()
        })
    }

    /// How long node `name` has not been Ready at `now`: `None` when it is Ready or when no
    /// list has finished (nothing is known); `Duration::MAX` for a node that no longer exists.
    pub fn not_ready_for(&self, name: &str, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        if !inner.synced {
            return None;
        }
        let Some(h) = inner.nodes.get(name) else {
            return Some(Duration::MAX);
        };
        if h.ready {
            return None;
        }
        Some(
            h.since
                .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
                .unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn node(name: &str, status: &str, heartbeat: &str, transition: &str) -> Node {
        use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |t: &str| Some(Time(t.parse().unwrap()));
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    last_heartbeat_time: at(heartbeat),
                    last_transition_time: at(transition),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_node_is_lost_from_its_last_heartbeat_and_only_readiness_changes_wake() {
        let nodes = Nodes::default();
        let now: k8s_openapi::jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let t = |s: u32| format!("2026-01-01T00:00:{s:02}Z");
        // Nothing is known before the first list.
        assert_eq!(nodes.not_ready_for("a", now), None);
        assert!(!nodes.apply(Event::Init));
        assert!(!nodes.apply(Event::InitApply(node("a", "True", &t(0), &t(0)))));
        assert!(nodes.apply(Event::InitDone));
        assert_eq!(nodes.not_ready_for("a", now), None);
        // A heartbeat changes nothing that matters.
        assert!(!nodes.apply(Event::Apply(node("a", "True", &t(30), &t(0)))));
        // Silent since its last heartbeat (00:00:30), though marked Unknown at 00:00:50.
        assert!(nodes.apply(Event::Apply(node("a", "Unknown", &t(30), &t(50)))));
        assert_eq!(nodes.not_ready_for("a", now), Some(Duration::from_secs(30)));
        // Reporting itself not ready: since it said so.
        nodes.apply(Event::Apply(node("a", "False", &t(55), &t(50))));
        assert_eq!(nodes.not_ready_for("a", now), Some(Duration::from_secs(10)));
        // A node that is gone is lost for good.
        assert_eq!(nodes.not_ready_for("b", now), Some(Duration::MAX));
    }

    #[test]
    fn open_nodes_are_ready_uncordoned_and_untainted_and_a_cordon_wakes() {
        use k8s_openapi::api::core::v1::{NodeSpec, Taint};
        let nodes = Nodes::default();
        let t = "2026-01-01T00:00:00Z";
        assert_eq!(nodes.open(), None, "nothing known before the first list");
        nodes.apply(Event::Init);
        nodes.apply(Event::InitApply(node("a", "True", t, t)));
        nodes.apply(Event::InitApply(node("b", "False", t, t)));
        let tainted = |name: &str, key: &str, effect: &str| Node {
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: key.into(),
                    effect: effect.into(),
                    ..Taint::default()
                }]),
                ..NodeSpec::default()
            }),
            ..node(name, "True", t, t)
        };
        let control_plane = tainted("c", "node-role.kubernetes.io/control-plane", "NoSchedule");
        nodes.apply(Event::InitApply(control_plane));
        nodes.apply(Event::InitApply(tainted("d", "spot", "PreferNoSchedule")));
        nodes.apply(Event::InitDone);
        let open = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(nodes.open(), open(&["a", "d"]));
        // Cordoned: no longer open, and the change wakes the clusters.
        let mut cordoned = node("a", "True", t, t);
        cordoned.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..NodeSpec::default()
        });
        assert!(nodes.apply(Event::Apply(cordoned)));
        assert_eq!(nodes.open(), open(&["d"]));
        assert!(nodes.apply(Event::Apply(node("a", "True", t, t))));
        assert_eq!(nodes.open(), open(&["a", "d"]));
    }
}
