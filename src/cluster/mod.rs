//! The EtcdCluster controller: a supervisor keeps one task per cluster, and each pass of a task
//! goes through the stages below, top to bottom.
//!
//! ```text
//!   supervisor   one task per EtcdCluster, woken by the watch caches (src/kube/cache/)
//!       |
//!     task       the loop: validate, then for each pass:
//!       |
//!   prepare      act::ensure_services, crate::tls::prepare: the Services, the PodDisruptionBudget
//!       |        and the TLS Secrets every member's address and identity depend on
//!   observe      pods, claims, each member's status, the member list, the client Service
//!       |        (observe.rs, serving.rs) -> plan::Observation
//!     plan       pure: the one next action (plan/), no client, no clock; a step of the
//!       |        automatic CA's rotation is an action too, once the cluster is otherwise steady
//!      act       carries the action out (act/), one function per action
//!       |
//!    status      pure: the status from the observation, the action and what the pass found
//!                (status/: the one place conditions are decided); the task writes it,
//!                publishes Events, and decides how soon to look again (task/)
//! ```
//!
//! Import rules (checked by `hack/import-rules.py` in `make lint`): `plan` imports nothing of
//! the crate but itself; `observe` never imports `act`; nothing but the supervisor (and the
//! binary) imports `task` or `supervisor`; everyone may import `crate::kube`; the three
//! controllers (cluster, backup, restore) never import each other.

pub mod act;
pub mod auth;
pub mod external;
pub mod handles;
pub mod hibernation;
pub mod members;
pub mod network_policy;
pub mod observe;
pub mod plan;
pub mod recovery;
pub mod resources;
pub mod serving;
pub mod standby;
pub mod status;
pub mod supervisor;
pub mod task;
pub mod upkeep;
pub mod volumes;

pub use plan::version;
