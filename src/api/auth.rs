//! `spec.auth`: etcd's own access control, declared: authentication on or off, and the roles
//! and users the operator keeps in etcd (an extension of this operator).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The user etcd's authentication needs before it can be turned on; the operator's own.
pub const ROOT: &str = "root";

/// How many roles and users a cluster may declare: enough for a platform's tenants, few enough
/// that the rules below stay within the API server's validation budget.
pub const MAX_ROLES: u32 = 256;
/// See [`MAX_ROLES`].
pub const MAX_USERS: u32 = 256;

/// etcd's authentication, roles and users.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
// That every role a user names is declared is checked by the operator (condition
// `AuthApplied`, an Event), not by a rule here: over 256 users and roles its estimated cost is
// twelve times what the API server allows a rule.
pub struct Auth {
    /// Whether etcd checks credentials. The operator first makes the `root` user (its own:
    /// the client certificate with CN `root` of `TLS.auto`, else the generated password in
    /// Secret `<cluster>-etcd-root`) and every declared role and user, then turns
    /// authentication on; false turns it off again.
    #[serde(default)]
    pub enabled: bool,
    /// Roles the operator keeps in etcd, each with exactly these permissions. Roles made by
    /// hand (with etcdctl) are left alone; one declared here with the same name is taken over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub roles: Vec<AuthRole>,
    /// Users the operator keeps in etcd, each with exactly these roles. Users made by hand are
    /// left alone; one declared here with the same name is taken over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub users: Vec<AuthUser>,
}

/// A role and what it may touch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthRole {
    /// The role's name in etcd; not `root`, which is the operator's.
    #[schemars(length(min = 1, max = 128), transform = not_root)]
    pub name: String,
    /// Key ranges and what the role may do on them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub permissions: Vec<Permission>,
}

/// A permission on a key, a prefix or a range.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.prefix) && self.prefix && has(self.rangeEnd))",
    "message": "a permission is on a prefix or on a range up to rangeEnd, not both"
}]))]
pub struct Permission {
    /// `read`, `write` or `readwrite`.
    #[serde(rename = "type")]
    pub type_: PermissionType,
    /// The key, or the start of the range or prefix.
    #[schemars(length(min = 1, max = 1024))]
    pub key: String,
    /// Every key that starts with `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<bool>,
    /// The end of the range (exclusive): keys from `key` up to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub range_end: Option<String>,
}

/// What a permission allows.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PermissionType {
    /// Reads and watches.
    #[default]
    Read,
    /// Writes and deletes.
    Write,
    /// Both.
    Readwrite,
}

/// A user and its roles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthUser {
    /// The user's name in etcd; not `root`, which is the operator's. Without a password it is
    /// the CN of the client certificate the user presents (with TLS).
    #[schemars(length(min = 1, max = 128), transform = not_root)]
    pub name: String,
    /// Declared roles granted to the user; others the user holds in etcd are revoked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 128)))]
    pub roles: Vec<String>,
    /// The user's password, from a Secret in the cluster's namespace; a change to it is
    /// applied to etcd. Without it the user has no password and authenticates by client
    /// certificate only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<PasswordSecret>,
}

/// A key of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSecret {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key that holds the password.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// What the operator keeps in etcd's access control, as last applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthStatus {
    /// Whether etcd checks credentials.
    #[serde(default)]
    pub enabled: bool,
    /// The users the operator manages (declared and made, or taken over); only these are
    /// ever deleted when they leave the spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// The roles the operator manages, likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// For each user with a password, the Secret and its resourceVersion that set it: a new
    /// version is applied to etcd. Never the password itself.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub password_versions: BTreeMap<String, String>,
}

fn not_root(schema: &mut schemars::Schema) {
    schema.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([{
            "rule": "self != 'root'",
            "message": "root is the operator's own user and role in etcd: choose another name"
        }]),
    );
}

impl Auth {
    /// Whether anything of access control is declared.
    pub fn declared(auth: Option<&Auth>) -> bool {
        auth.is_some_and(|a| a.enabled || !a.roles.is_empty() || !a.users.is_empty())
    }
}
