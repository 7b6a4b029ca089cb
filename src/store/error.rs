//! Why a backup, or the reading of a snapshot a restore names, failed: shared by both
//! controllers.

use std::time::Duration;

use super::{snapshot, storage};
use crate::kube::invalid::Invalid;

/// Why a backup could not be taken. Every message names its cause (field, Secret, cluster,
/// endpoint), since it becomes the status `Reason`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `clusterName` names no EtcdCluster.
    #[error("spec.clusterName: EtcdCluster {0} does not exist")]
    ClusterNotFound(String),
    /// The cluster has no member that can give a snapshot.
    #[error("EtcdCluster {cluster} has no healthy member to take a snapshot from ({detail})")]
    NoHealthyMember {
        /// The cluster.
        cluster: String,
        /// Its phase and reason, as its status says.
        detail: String,
    },
    /// None of the endpoints answers as a member that knows a leader.
    #[error("no etcd endpoint answers as a member with a leader: {0}")]
    Unreachable(String),
    /// A field this operator does not implement yet.
    #[error("{0}")]
    Unsupported(String),
    /// A one-shot backup's object exists already, and this backup did not write it.
    #[error(
        "{0} exists already and this EtcdBackup did not write it: a one-shot backup never \
         overwrites an object; delete it or choose another path"
    )]
    Exists(String),
    /// `etcdEndpoints` reaches beyond the backup's own namespace without a client certificate.
    #[error("{0}")]
    Refused(String),
    /// A Secret the spec names does not exist.
    #[error("{field}: Secret {name} does not exist")]
    SecretNotFound {
        /// The field naming it.
        field: &'static str,
        /// The Secret.
        name: String,
    },
    /// The storage section or its Secret is unusable.
    #[error(transparent)]
    Storage(#[from] storage::Error),
    /// The snapshot failed (etcd, the stream's hash, the store, the time limit).
    #[error(transparent)]
    Snapshot(#[from] snapshot::Error),
    /// The client certificate Secret of a TLS cluster is missing or unusable.
    #[error(transparent)]
    Tls(#[from] crate::tls::Error),
    /// root's password could not be read.
    #[error(transparent)]
    Access(#[from] crate::access::Error),
    /// Listing a store's objects failed.
    #[error("listing {url}: {source}")]
    List {
        /// The store and prefix listed.
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// Reading from the API server failed.
    #[error("reading {what}: {source}")]
    Kube {
        /// What was being read or written.
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::ClusterNotFound(_) => "cluster_not_found",
            Error::NoHealthyMember { .. } => "no_healthy_member",
            Error::Unreachable(_) => "etcd_unreachable",
            Error::Unsupported(_) => "unsupported_field",
            Error::Refused(_) => "refused_endpoint",
            Error::Exists(_) => "object_exists",
            Error::SecretNotFound { .. } => "secret_not_found",
            Error::Storage(_) => "storage_config",
            Error::Snapshot(e) => e.metric_label(),
            Error::Tls(crate::tls::Error::Invalid(Invalid { .. })) => "invalid_tls_secret",
            Error::Tls(_) => "kube",
            Error::Access(crate::access::Error::Invalid(_)) => "invalid_root_secret",
            Error::Access(_) => "kube",
            Error::Kube { .. } => "kube",
            Error::List { .. } => "store_list",
        }
    }

    /// The Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ClusterNotFound(_) => "ClusterNotFound",
            Error::NoHealthyMember { .. } => "NoHealthyMember",
            Error::Unreachable(_) => "EtcdUnreachable",
            Error::Unsupported(_) => "UnsupportedField",
            Error::Refused(_) => "RefusedEndpoint",
            Error::Exists(_) => "ObjectExists",
            Error::SecretNotFound { .. } => "SecretNotFound",
            Error::Storage(_) => "InvalidStorage",
            Error::Snapshot(_) => "SnapshotFailed",
            Error::Tls(crate::tls::Error::Invalid(Invalid { reason, .. })) => reason,
            Error::Tls(_) => "ApiError",
            Error::Access(crate::access::Error::Invalid(Invalid { reason, .. })) => reason,
            Error::Access(_) => "ApiError",
            Error::Kube { .. } => "ApiError",
            Error::List { .. } => "StoreUnreachable",
        }
    }

    /// How soon to try again: a spec or Secret problem waits for the user (a Secret created
    /// later is not announced), anything else is retried sooner.
    pub fn retry_after(&self) -> Duration {
        match self {
            Error::ClusterNotFound(_)
            | Error::Unsupported(_)
            | Error::Refused(_)
            | Error::Exists(_)
            | Error::SecretNotFound { .. }
            | Error::Storage(_) => Duration::from_secs(20),
            _ => Duration::from_secs(10),
        }
    }
}
