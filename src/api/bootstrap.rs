//! How a cluster comes to be when it is not bootstrapped from nothing: joining an etcd that
//! runs elsewhere (ours; the coreos operator has no such field).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the cluster's data comes from when it is created.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// Join an etcd cluster that runs elsewhere (on VMs, or in another Kubernetes cluster with
    /// routable peer addresses) instead of bootstrapping a new one: this operator's members
    /// join it as learners and are promoted one at a time; the external members stay voters
    /// until `removeExternal` is set, then leave one at a time, keeping quorum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing: Option<ExistingCluster>,
}

/// A running etcd cluster to join.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExistingCluster {
    /// Client URLs of some of its members (`http://` or `https://`), which the operator reads
    /// the member list from; the members' own client URLs (from that list) are used after.
    /// Each, and each URL in that list, must lie in the operator's
    /// `tenancy.allowedExternalCIDRs` or name a Service or pod of this namespace; otherwise the
    /// cluster is `Degraded` with reason `ReferenceRefused` naming this field, and nothing is
    /// dialed.
    #[schemars(
        length(min = 1, max = 16),
        inner(regex(pattern = r"^https?://[^/\s]+/?$"))
    )]
    pub endpoints: Vec<String>,
    /// A Secret with the client identity the external members accept (coreos's client layout,
    /// `etcd-client.crt`, `etcd-client.key`, `etcd-client-ca.crt`, or `kubernetes.io/tls`);
    /// unset: the cluster's own client identity (`spec.TLS`), or none.
    #[serde(
        rename = "clientTLSSecret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 253))]
    pub client_tls_secret: Option<String>,
    /// Remove the external members, one at a time (leadership moved to a member of this
    /// operator first), once this operator's members are `spec.size` healthy voters. Until
    /// then the external members stay voters beside them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove_external: bool,
}

/// How far a migration from an external cluster is (`spec.bootstrap.existing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MigrationPhase {
    /// This operator's members are joining, one at a time.
    #[default]
    Joining,
    /// This operator's members are all voters; the external ones stay until
    /// `spec.bootstrap.existing.removeExternal` is set.
    Joined,
    /// The external members are being removed, one at a time.
    RemovingExternal,
    /// No external member is left: an ordinary cluster. The endpoints are not used again.
    Complete,
}

/// A member of the external cluster, as etcd lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMember {
    /// Its etcd name.
    pub name: String,
    /// etcd member ID, in hex.
    pub id: String,
    /// Its peer URL.
    #[serde(rename = "peerURL")]
    pub peer_url: String,
}

/// A migration's progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// Joining, Joined, RemovingExternal or Complete.
    pub phase: MigrationPhase,
    /// The external members still in the membership.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_members: Vec<ExternalMember>,
    /// This operator's members that are voters.
    #[serde(default)]
    pub joined: i32,
    /// The external members removed so far (their etcd names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}
