//! The backup controller and its schedules; the object-store code they stand on is
//! [`crate::store`].
//!
//! - [`controller`] reconciles EtcdBackups: one-shot and periodic snapshots, retention;
//! - [`archive`]: the task that writes the continuous archive's chunks, one per archiving
//!   backup;
//! - [`schedule`]: one run of a CronJob schedule (`etcd-operator backup create`).

pub mod archive;
pub mod controller;
pub mod schedule;
