//! Restores of etcd clusters from snapshots in object storage.
//!
//! [`controller`] reconciles EtcdRestores: it verifies the snapshot, keeps a snapshot of what
//! it replaces, and hands the restore to the cluster's task (which alone changes members);
//! [`serve`] streams the snapshot to the seed member that restores it, over TLS with the
//! certificate of [`identity`].

pub mod controller;
pub mod identity;
pub mod serve;
