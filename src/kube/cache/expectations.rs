//! The pods and claims a task created, changed or deleted, which the caches must show before
//! the task reads them from there.

use std::time::Instant;

use super::SETTLE;

/// A pod or claim this task created or deleted, which the cache must show before it is read
/// from again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// What was written.
    pub kind: Object,
    /// Its name.
    pub name: String,
    /// What the caches must show.
    pub change: Write,
}

/// The kind of object a task wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// A member pod.
    Pod,
    /// A member's volume claim.
    Claim,
}

/// What a task did to an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Created: it must be listed.
    Created,
    /// Deleted: it must be gone or being deleted.
    Deleted,
    /// Changed from the resourceVersion given: it must show another (or be gone).
    Changed(String),
}

/// An object as a cache shows it: its name, whether it is being deleted, its resourceVersion.
pub type Shown = (String, bool, String);

/// The writes a task waits to see in the caches, with when it made them.
#[derive(Debug, Default)]
pub struct Expectations {
    pending: Vec<(Expect, Instant)>,
}

impl Expectations {
    /// Records writes made now.
    pub fn add(&mut self, writes: impl IntoIterator<Item = Expect>) {
        let now = Instant::now();
        for e in writes {
            // The last write of a name is the one that counts.
            self.pending
                .retain(|(p, _)| !(p.kind == e.kind && p.name == e.name));
            self.pending.push((e, now));
        }
    }

    /// Whether the caches show every write, dropping those they show (and those older than
    /// [`SETTLE`]). `pods` and `claims` are the cluster's cached objects, as [`Shown`].
    pub fn met(&mut self, pods: &[Shown], claims: &[Shown]) -> bool {
        self.pending.retain(|(e, at)| {
            if at.elapsed() >= SETTLE {
                return false;
            }
            let seen = match e.kind {
                Object::Claim => claims,
                Object::Pod => pods,
            };
            let now = seen.iter().find(|(n, _, _)| *n == e.name);
            let alive = now.is_some_and(|(_, deleting, _)| !deleting);
            let shown = match &e.change {
                Write::Created => alive,
                Write::Deleted => !alive,
                Write::Changed(before) => now.is_none_or(|(_, _, version)| version != before),
            };
            !shown
        });
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn expectations_hold_until_the_cache_shows_the_writes() {
        let mut e = Expectations::default();
        assert!(e.met(&[], &[]));
        e.add([
            Expect {
                kind: Object::Pod,
                name: "m1".into(),
                change: Write::Created,
            },
            Expect {
                kind: Object::Pod,
                name: "m0".into(),
                change: Write::Deleted,
            },
        ]);
        let m0 = ("m0".to_string(), false, "1".to_string());
        let m1 = ("m1".to_string(), false, "2".to_string());
        assert!(!e.met(std::slice::from_ref(&m0), &[]), "m1 not listed yet");
        assert!(!e.met(&[m0.clone(), m1.clone()], &[]), "m0 still there");
        // Being deleted counts as deleted.
        assert!(e.met(&[("m0".into(), true, "3".into()), m1.clone()], &[]));
        // A claim is looked for among claims, not pods.
        e.add([Expect {
            kind: Object::Claim,
            name: "m1".into(),
            change: Write::Created,
        }]);
        assert!(!e.met(std::slice::from_ref(&m1), &[]));
        assert!(e.met(&[], std::slice::from_ref(&m1)));
        // A change is shown once the pod has another resourceVersion than before it.
        e.add([Expect {
            kind: Object::Pod,
            name: "m1".into(),
            change: Write::Changed("2".into()),
        }]);
        assert!(
            !e.met(std::slice::from_ref(&m1), &[]),
            "still the old version"
        );
        assert!(e.met(&[("m1".into(), false, "4".into())], &[]));
    }
}
