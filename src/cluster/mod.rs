//! The EtcdCluster controller. `plan` is the pure middle: observation in, at most one action out.

pub mod members;
pub mod plan;
pub mod resources;
