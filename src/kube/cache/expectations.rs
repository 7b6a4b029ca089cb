//! The pods and claims a task created or deleted, which the caches must show before the task
//! reads them from there.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Created: it must be listed.
    Created,
    /// Deleted: it must be gone or being deleted.
    Deleted,
}

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
    /// [`SETTLE`]). `pods` and `claims` are the cluster's cached objects: (name, being
    /// deleted).
    pub fn met(&mut self, pods: &[(String, bool)], claims: &[(String, bool)]) -> bool {
        self.pending.retain(|(e, at)| {
            if at.elapsed() >= SETTLE {
                return false;
            }
            let seen = match e.kind {
                Object::Claim => claims,
                Object::Pod => pods,
            };
            let alive = seen.iter().any(|(n, deleting)| *n == e.name && !deleting);
            alive != (e.change == Write::Created)
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
        let m0 = ("m0".to_string(), false);
        let m1 = ("m1".to_string(), false);
        assert!(!e.met(std::slice::from_ref(&m0), &[]), "m1 not listed yet");
        assert!(!e.met(&[m0.clone(), m1.clone()], &[]), "m0 still there");
        // Being deleted counts as deleted.
        assert!(e.met(&[("m0".into(), true), m1.clone()], &[]));
        // A claim is looked for among claims, not pods.
        e.add([Expect {
            kind: Object::Claim,
            name: "m1".into(),
            change: Write::Created,
        }]);
        assert!(!e.met(std::slice::from_ref(&m1), &[]));
        assert!(e.met(&[], &[m1]));
    }
}
