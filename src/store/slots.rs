//! How many snapshots stream at once in this process, across every namespace: a backup, a
//! restore's verification and its safety snapshot each hold a slot while they read or write a
//! snapshot. The operator is one process for every cluster; without a bound, a burst of
//! EtcdBackups (a tenant's, or every schedule at midnight) would take its memory, its CPU and
//! the members' network at once, and the other clusters' tasks with them. Those over the
//! bound wait their turn.

use std::sync::OnceLock;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Slots when the operator was not told (`--max-concurrent-snapshots`).
pub const DEFAULT: usize = 4;

static SLOTS: OnceLock<(Semaphore, usize)> = OnceLock::new();

/// Sets the number of slots; once, at start (later calls change nothing).
pub fn set(n: usize) {
    let _ = SLOTS.set((Semaphore::new(n.max(1)), n.max(1)));
}

/// Waits for `n` slots at once (never more than there are: a holder of some waiting for
/// more would block every other); they are given back when the permit is dropped. (`None`
/// only were the slots ever closed, which they are not.)
pub async fn take(n: u32) -> Option<SemaphorePermit<'static>> {
    let (slots, total) = SLOTS.get_or_init(|| (Semaphore::new(DEFAULT), DEFAULT));
    let n = n.min(u32::try_from(*total).unwrap_or(u32::MAX)).max(1);
    slots.acquire_many(n).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_more_than_the_slots_run_at_once() {
        set(2);
        let wait = |n| tokio::time::timeout(std::time::Duration::from_millis(100), take(n));
        let a = take(1).await;
        let _b = take(1).await;
        assert!(
            wait(1).await.is_err(),
            "a third slot was given while two were held"
        );
        drop(a);
        assert!(wait(1).await.is_ok(), "a freed slot was not given");
        drop(_b);
        // Asking for more than there are takes them all, rather than waiting forever.
        assert!(wait(5).await.is_ok());
    }
}
