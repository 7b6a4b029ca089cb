//! An index of one kind of object, by cluster or by name, fed by a watch.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};

use crate::kube::names::CLUSTER_LABEL;

/// Objects of one kind by namespace and group (the cluster they belong to, or for Secrets
/// their own name), as the watches last told.
pub struct Index<K> {
    inner: RwLock<Inner<K>>,
    group: fn(&K) -> Option<String>,
}

pub(super) struct Inner<K> {
    /// Each group sorted by name: a vector, where a map's first node alone is a few hundred
    /// bytes, and most groups hold one to five objects (10,000 clusters keep 60,000 groups).
    objects: HashMap<(String, String), Vec<Arc<K>>>,
    /// Scopes (`None`: every namespace) whose first list has finished.
    synced: HashSet<Option<String>>,
    /// Objects of a list under way, per scope.
    relisting: HashMap<Option<String>, Vec<K>>,
}

/// The (namespace, group) keys a watch event touched, for waking their tasks.
pub type Touched = Vec<(String, String)>;

impl<K: Resource + Clone> Index<K> {
    fn new(group: fn(&K) -> Option<String>) -> Self {
        Index {
            inner: RwLock::new(Inner {
                objects: HashMap::new(),
                synced: HashSet::new(),
                relisting: HashMap::new(),
            }),
            group,
        }
    }

    /// Grouped by the `etcd_cluster` label; objects without it are not kept.
    pub fn by_cluster() -> Self {
        Self::new(|o| o.labels().get(CLUSTER_LABEL).cloned())
    }

    /// Grouped by their own name.
    pub fn by_name() -> Self {
        Self::new(|o| o.meta().name.clone())
    }

    fn key(&self, o: &K) -> Option<((String, String), String)> {
        Some((
            (o.namespace().unwrap_or_default(), (self.group)(o)?),
            o.meta().name.clone()?,
        ))
    }

    /// Keeps `o`; returns its group, if it has one.
    fn put(&self, inner: &mut Inner<K>, o: K) -> Option<(String, String)> {
        let (k, name) = self.key(&o)?;
        let group = inner.objects.entry(k.clone()).or_default();
        match position(group, &name) {
            Ok(i) => group[i] = Arc::new(o),
            Err(i) => group.insert(i, Arc::new(o)),
        }
        Some(k)
    }

    /// How many objects are kept.
    pub fn count(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.objects.values().map(Vec::len).sum()
    }

    /// Applies one event of the watch over `scope`.
    pub fn apply(&self, scope: &Option<String>, event: Event<K>) -> Touched {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let mut touched = Vec::new();
        match event {
            Event::Init => {
                inner.relisting.insert(scope.clone(), Vec::new());
            }
            Event::InitApply(o) => {
                if let Some(buffer) = inner.relisting.get_mut(scope) {
                    buffer.push(o);
                }
            }
            Event::InitDone => {
                let listed = inner.relisting.remove(scope).unwrap_or_default();
                let in_scope = |ns: &str| scope.as_deref().is_none_or(|s| s == ns);
                let old: Vec<(String, String)> = inner
                    .objects
                    .keys()
                    .filter(|(ns, _)| in_scope(ns))
                    .cloned()
                    .collect();
                for k in old {
                    inner.objects.remove(&k);
                    touched.push(k);
                }
                for o in listed {
                    touched.extend(self.put(&mut inner, o));
                }
                inner.synced.insert(scope.clone());
            }
            Event::Apply(o) => touched.extend(self.put(&mut inner, o)),
            Event::Delete(o) => {
                if let Some((k, name)) = self.key(&o) {
                    if let Some(group) = inner.objects.get_mut(&k) {
                        if let Ok(i) = position(group, &name) {
                            group.remove(i);
                        }
                        if group.is_empty() {
                            inner.objects.remove(&k);
                        }
                    }
                    touched.push(k);
                }
            }
        }
        touched
    }

    /// The objects of `group` in `ns`, or `None` while no finished list covers `ns`.
    pub fn group(&self, ns: &str, group: &str) -> Option<Vec<Arc<K>>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let synced = inner.synced.contains(&None) || inner.synced.contains(&Some(ns.to_string()));
        if !synced {
            return None;
        }
        Some(
            inner
                .objects
                .get(&(ns.to_string(), group.to_string()))
                .cloned()
                .unwrap_or_default(),
        )
    }
}

/// Where the object named `name` is in `group` (sorted by name), or would go.
fn position<K: Resource>(group: &[Arc<K>], name: &str) -> Result<usize, usize> {
    group.binary_search_by(|o| o.meta().name.as_deref().unwrap_or_default().cmp(name))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use kube::api::ObjectMeta;

    fn pod(ns: &str, name: &str, cluster: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some([(CLUSTER_LABEL.to_string(), cluster.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn names(index: &Index<Pod>, ns: &str, group: &str) -> Option<Vec<String>> {
        index
            .group(ns, group)
            .map(|v| v.iter().map(|p| p.name_any()).collect())
    }

    #[test]
    fn an_index_answers_only_after_its_first_list_and_follows_the_watch() {
        let index = Index::<Pod>::by_cluster();
        let all = None;
        assert_eq!(names(&index, "ns", "a"), None, "not listed yet");
        index.apply(&all, Event::Init);
        index.apply(&all, Event::InitApply(pod("ns", "a-1", "a")));
        assert_eq!(names(&index, "ns", "a"), None, "list under way");
        let touched = index.apply(&all, Event::InitDone);
        assert_eq!(touched, vec![("ns".to_string(), "a".to_string())]);
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-1".into()]));
        assert_eq!(
            names(&index, "ns", "b"),
            Some(vec![]),
            "listed: known empty"
        );
        index.apply(&all, Event::Apply(pod("ns", "a-2", "a")));
        index.apply(&all, Event::Apply(pod("other", "a-1", "a")));
        index.apply(&all, Event::Delete(pod("ns", "a-1", "a")));
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-2".into()]));
        assert_eq!(names(&index, "other", "a"), Some(vec!["a-1".into()]));
        // A relist replaces what the scope held: a deletion missed while the watch was down
        // is gone afterwards.
        index.apply(&all, Event::Init);
        index.apply(&all, Event::InitApply(pod("ns", "a-3", "a")));
        index.apply(&all, Event::InitDone);
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-3".into()]));
        assert_eq!(names(&index, "other", "a"), Some(vec![]));
        // Objects without the cluster label are not kept.
        let mut stray = pod("ns", "x", "a");
        stray.metadata.labels = None;
        assert!(index.apply(&all, Event::Apply(stray)).is_empty());
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-3".into()]));
    }

    #[test]
    fn a_group_is_in_name_order_and_holds_each_name_once() {
        let index = Index::<Pod>::by_cluster();
        let all = None;
        index.apply(&all, Event::Init);
        index.apply(&all, Event::InitDone);
        for name in ["a-3", "a-1", "a-2", "a-1"] {
            index.apply(&all, Event::Apply(pod("ns", name, "a")));
        }
        let want = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect());
        assert_eq!(names(&index, "ns", "a"), want(&["a-1", "a-2", "a-3"]));
        assert_eq!(index.count(), 3);
        index.apply(&all, Event::Delete(pod("ns", "a-2", "a")));
        index.apply(&all, Event::Delete(pod("ns", "a-9", "a")));
        assert_eq!(names(&index, "ns", "a"), want(&["a-1", "a-3"]));
    }

    #[test]
    fn a_namespace_scope_answers_for_its_namespace_only() {
        let index = Index::<Pod>::by_cluster();
        let scope = Some("ns".to_string());
        index.apply(&scope, Event::Init);
        index.apply(&scope, Event::InitApply(pod("ns", "a-1", "a")));
        index.apply(&scope, Event::InitDone);
        assert_eq!(names(&index, "ns", "a"), Some(vec!["a-1".into()]));
        assert_eq!(names(&index, "elsewhere", "a"), None);
    }
}
