//! The EtcdCluster controller: a supervisor keeps one task per cluster; each task observes,
//! plans (pure), acts and writes status.

pub mod act;
pub mod handles;
pub mod members;
pub mod observe;
pub mod plan;
pub mod resources;
pub mod serving;
pub mod status;
pub mod supervisor;
pub mod task;
pub mod tls;
pub mod version;
