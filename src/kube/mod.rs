//! Plumbing that every controller and every stage of the cluster controller reads: the names
//! and addresses of a cluster's objects ([`names`]), the shared watch caches with their
//! expectations and the Secret reader ([`cache`]), and the one error of a spec that cannot be
//! acted on ([`invalid`]).
//!
//! Anyone may import this module; it imports only `api`, `etcd` and `pki` of this crate, so
//! it can never close an import circle. What needs a stage's decisions belongs with that stage.
//!
//! The name shadows the kube crate at the crate root only: in every other module `kube::`
//! is still the kube crate, and this module is reached as `crate::kube`.

pub mod cache;
pub mod invalid;
pub mod names;
