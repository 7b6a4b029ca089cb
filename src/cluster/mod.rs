//! The EtcdCluster controller. `plan` is the pure middle: observation in, at most one action out.

pub mod plan;
