//! Plumbing that every controller and every stage of the cluster controller reads: the names
//! and addresses of a cluster's objects ([`names`]), the shared watch caches with their
//! expectations and the Secret reader ([`cache`]), sizes as bytes ([`quantity`]), and the one
//! error of a spec that cannot be acted on ([`invalid`]).
//!
//! Anyone may import this module; it imports only `api`, `etcd` and `pki` of this crate, so
//! it can never close an import circle. What needs a stage's decisions belongs with that stage.
//!
//! The name shadows the kube crate at the crate root only: in every other module `kube::`
//! is still the kube crate, and this module is reached as `crate::kube`.

pub mod apiserver;
pub mod cache;
pub mod crds;
pub mod handoff;
pub mod invalid;
pub mod names;
pub mod quantity;
pub mod restore_token;

use std::time::Duration;

/// The backoff of every watch this operator keeps: from 250 ms doubling to 2 s, with jitter,
/// back to the start at the first event. kube-runtime's default (client-go's: 0.8 s doubling
/// to 30 s) made a 20 s API server outage cost up to 30 s more per watch after the server was
/// back, and the Lease, the clusters and their pods are watched one after another on the way
/// back to acting (a deleted member was replaced 75 s after the return). One operator's
/// handful of watches retrying every 2 s is nothing to a recovering API server.
pub fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    exponential(Duration::from_millis(250), Duration::from_secs(2)).into()
}

/// Delays doubling from `min` to `max`, with jitter, for as long as it takes.
pub fn exponential(min: Duration, max: Duration) -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
}
