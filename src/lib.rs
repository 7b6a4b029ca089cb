//! etcd-operator: runs etcd clusters on Kubernetes, wire-compatible with the coreos
//! etcd-operator's `etcd.database.coreos.com/v1beta2` API.

#![forbid(unsafe_code)]

pub mod access;
pub mod api;
pub mod backup;
pub mod cluster;
pub mod crash;
pub mod etcd;
pub mod http;
pub mod kube;
pub mod leader;
pub mod metrics;
pub mod pki;
pub mod reference;
pub mod report;
pub mod restore;
pub mod runner;
pub mod seed;
pub mod store;
pub mod tls;
