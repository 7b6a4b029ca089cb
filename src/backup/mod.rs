//! Backups of etcd clusters to object storage.
//!
//! So far the layer every backup and restore path stands on: [`snapshot`] streams one member's
//! snapshot into object storage, verified as it passes and never held whole in memory. The
//! EtcdBackup controller (issue: EtcdBackup controller) is built on it.

pub mod snapshot;
