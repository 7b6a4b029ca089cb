//! How many snapshots stream at once in this process, across every namespace: a backup, a
//! restore's verification and its safety snapshot each hold a slot while they read or write a
//! snapshot. The operator is one process for every cluster; without a bound, a burst of
//! EtcdBackups (a tenant's, or every schedule at midnight) would take its memory, its CPU and
//! the members' network at once, and the other clusters' tasks with them. Those over the
//! bound wait their turn.
//!
//! The slots are shared between namespaces, not first come first served: one namespace never
//! holds them all (one is always left for the others, when there are two or more), and a freed
//! slot goes to the waiting namespace that holds the fewest, the longest waiting among equals.
//! A tenant that makes a hundred EtcdBackups at once waits behind itself, not in front of
//! everyone.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tokio::sync::oneshot;

/// Slots when the operator was not told (`--max-concurrent-snapshots`).
pub const DEFAULT: usize = 4;

/// Who waits for slots.
struct Waiter {
    ns: String,
    n: usize,
    granted: oneshot::Sender<()>,
}

/// The slots of one process.
struct Slots {
    total: usize,
    free: usize,
    held: BTreeMap<String, usize>,
    waiting: VecDeque<Waiter>,
}

impl Slots {
    fn new(total: usize) -> Self {
        let total = total.max(1);
        Slots {
            total,
            free: total,
            held: BTreeMap::new(),
            waiting: VecDeque::new(),
        }
    }

    /// The most one namespace may hold: all but one, so that another namespace never waits
    /// for a slot only because one tenant took every slot.
    fn cap(&self) -> usize {
        if self.total > 1 { self.total - 1 } else { 1 }
    }

    fn held_by(&self, ns: &str) -> usize {
        self.held.get(ns).copied().unwrap_or(0)
    }

    /// The waiter to serve next, if one fits: of those whose namespace may take `n` more, the
    /// one whose namespace holds the fewest, the first to come among equals.
    fn next(&self) -> Option<usize> {
        (self.waiting.iter().enumerate())
            .filter(|(_, w)| w.n <= self.free && self.held_by(&w.ns) + w.n <= self.cap())
            .min_by_key(|(i, w)| (self.held_by(&w.ns), *i))
            .map(|(i, _)| i)
    }

    /// Gives slots to waiters while any fits; a waiter that stopped waiting is passed over.
    fn grant(&mut self) {
        while let Some(i) = self.next() {
            let Some(w) = self.waiting.remove(i) else {
                return;
            };
            if w.granted.send(()).is_ok() {
                self.free -= w.n;
                *self.held.entry(w.ns).or_default() += w.n;
            }
        }
    }

    fn release(&mut self, ns: &str, n: usize) {
        self.free += n;
        if let Some(h) = self.held.get_mut(ns) {
            *h = h.saturating_sub(n);
            if *h == 0 {
                self.held.remove(ns);
            }
        }
        self.grant();
    }
}

static SLOTS: OnceLock<Mutex<Slots>> = OnceLock::new();

fn slots() -> MutexGuard<'static, Slots> {
    let m = SLOTS.get_or_init(|| Mutex::new(Slots::new(DEFAULT)));
    // A panic while the lock is held leaves counts that are still consistent: every change
    // to them is made whole before anything can panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sets the number of slots; once, at start (later calls change nothing).
pub fn set(n: usize) {
    let _ = SLOTS.set(Mutex::new(Slots::new(n)));
}

/// Slots held; given back when dropped.
pub struct Permit {
    ns: String,
    n: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        slots().release(&self.ns, self.n);
    }
}

/// Waits for `n` slots at once for namespace `ns` (never more than one namespace may hold: a
/// holder of some waiting for more would block every other).
pub async fn take(ns: &str, n: u32) -> Permit {
    let (tx, rx) = oneshot::channel();
    let n = {
        let mut s = slots();
        let n = usize::try_from(n).unwrap_or(usize::MAX).clamp(1, s.cap());
        s.waiting.push_back(Waiter {
            ns: ns.into(),
            n,
            granted: tx,
        });
        s.grant();
        n
    };
    // The permit exists before the wait, so that slots granted to a wait that is then
    // dropped are given back; until the grant it holds nothing.
    let mut permit = Pending {
        ns: ns.into(),
        n,
        rx: Some(rx),
    };
    permit.wait().await
}

/// A wait for slots: dropped after its grant arrived but before it was turned into a
/// [`Permit`], it gives the slots back.
struct Pending {
    ns: String,
    n: usize,
    rx: Option<oneshot::Receiver<()>>,
}

impl Pending {
    async fn wait(&mut self) -> Permit {
        if let Some(rx) = self.rx.as_mut() {
            // The sender lives in the queue until it is granted: it is never dropped unsent.
            let _ = rx.await;
        }
        self.rx = None;
        Permit {
            ns: std::mem::take(&mut self.ns),
            n: self.n,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        // Granted while nobody was looking: give the slots back. Not granted: close the
        // channel, so the grant passes this waiter over.
        rx.close();
        if rx.try_recv().is_ok() {
            slots().release(&self.ns, self.n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(ns: &str, n: usize) -> (Waiter, oneshot::Receiver<()>) {
        let (granted, rx) = oneshot::channel();
        (
            Waiter {
                ns: ns.into(),
                n,
                granted,
            },
            rx,
        )
    }

    #[test]
    fn one_namespace_never_holds_every_slot_and_a_freed_one_goes_to_the_fewest_held() {
        let mut s = Slots::new(4);
        let mut hog = Vec::new();
        for _ in 0..6 {
            let (w, rx) = waiter("team-a", 1);
            s.waiting.push_back(w);
            hog.push(rx);
        }
        s.grant();
        assert_eq!(s.held_by("team-a"), 3, "one slot stays for the others");
        assert_eq!(s.free, 1);
        let (w, mut b) = waiter("team-b", 1);
        s.waiting.push_back(w);
        s.grant();
        assert!(b.try_recv().is_ok(), "team-b waited behind team-a's queue");
        let (w, mut c) = waiter("team-c", 1);
        s.waiting.push_back(w);
        s.grant();
        assert!(c.try_recv().is_err(), "no slot is free");
        // team-a gives one back: team-c, holding none, goes before team-a's own queue.
        s.release("team-a", 1);
        assert!(c.try_recv().is_ok());
        assert_eq!(s.held_by("team-a"), 2);
        let granted = hog
            .iter_mut()
            .map(|rx| rx.try_recv())
            .filter(Result::is_ok)
            .count();
        assert_eq!(granted, 3, "team-a's first three only");
        // Everyone else done: team-a takes its queue up to its cap again.
        s.release("team-b", 1);
        s.release("team-c", 1);
        assert_eq!(s.held_by("team-a"), 3);
        assert_eq!(s.free, 1);
    }

    #[test]
    fn a_waiter_that_left_is_passed_over() {
        let mut s = Slots::new(2);
        let (w, _a) = waiter("team-a", 1);
        s.waiting.push_back(w);
        let (w, mut a2) = waiter("team-a", 1);
        s.waiting.push_back(w);
        let (gone, gone_rx) = waiter("team-b", 1);
        s.waiting.push_back(gone);
        drop(gone_rx);
        let (w, mut c) = waiter("team-c", 1);
        s.waiting.push_back(w);
        s.grant();
        assert!(a2.try_recv().is_err(), "team-a took both slots of two");
        assert!(
            c.try_recv().is_ok(),
            "team-c waited behind a waiter that had left"
        );
        assert_eq!((s.free, s.waiting.len()), (0, 1), "{:?}", s.held);
        s.release("team-c", 1);
        assert!(a2.try_recv().is_err(), "team-a took both slots of two");
        s.release("team-a", 1);
        assert!(a2.try_recv().is_ok());
        assert!(s.waiting.is_empty());
    }

    #[tokio::test]
    async fn permits_give_their_slots_back_even_when_the_wait_is_abandoned() {
        set(3);
        let wait = |ns: &'static str, n| {
            tokio::time::timeout(std::time::Duration::from_millis(100), take(ns, n))
        };
        let a = take("ns-a", 1).await;
        let _b = take("ns-a", 1).await;
        assert!(wait("ns-a", 1).await.is_err(), "ns-a took the last slot");
        let other = take("ns-b", 1).await;
        assert!(wait("ns-c", 1).await.is_err(), "a fourth slot was given");
        drop(a);
        drop(other);
        // Asking for more than a namespace may hold takes what it may, rather than waiting
        // forever; the abandoned waits above left nothing held.
        let c = wait("ns-c", 5).await.expect("ns-c waited");
        assert_eq!(c.n, 2);
        drop(c);
        drop(_b);
        assert_eq!(slots().free, 3);
        assert!(slots().held.is_empty());
    }
}
