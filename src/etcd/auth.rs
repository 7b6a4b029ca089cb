//! etcd's access control as the operator reads and changes it: whether authentication is on,
//! the roles with their permissions, the users with their roles; and the changes, applied in
//! an order that never leaves a user without what it is about to be given.

use std::collections::{BTreeMap, BTreeSet};

use etcd_client::{Permission, PermissionType, RoleRevokePermissionOptions, UserAddOptions};

use super::{Error, Etcd, Password, Result, within};

/// The user (and role) etcd's authentication needs before it is turned on.
pub const ROOT: &str = "root";

/// How many changes are in flight at once: each is one proposal through raft, and a hundred
/// users applied one after the other would take a round trip each.
const IN_FLIGHT: usize = 16;

/// Whether etcd refused because its authentication is off.
pub fn not_enabled(e: &etcd_client::Error) -> bool {
    e.to_string().contains("authentication is not enabled")
}

/// Whether etcd refused a user name and password.
pub fn failed(e: &etcd_client::Error) -> bool {
    e.to_string().contains("authentication failed")
}

/// What a permission allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Reads.
    Read,
    /// Writes.
    Write,
    /// Both.
    ReadWrite,
}

impl Kind {
    fn of(raw: i32) -> Kind {
        match PermissionType::try_from(raw) {
            Ok(PermissionType::Write) => Kind::Write,
            Ok(PermissionType::Readwrite) => Kind::ReadWrite,
            _ => Kind::Read,
        }
    }

    fn to_etcd(self) -> PermissionType {
        match self {
            Kind::Read => PermissionType::Read,
            Kind::Write => PermissionType::Write,
            Kind::ReadWrite => PermissionType::Readwrite,
        }
    }
}

/// A permission as etcd stores it: a key, and the end of its range (empty: the key alone).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Perm {
    /// What it allows.
    pub kind: Kind,
    /// The key, or the start of the range.
    pub key: Vec<u8>,
    /// The range's end, exclusive; empty for the key alone.
    pub range_end: Vec<u8>,
}

/// The end of the range of keys that start with `prefix`, as etcd computes it.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// etcd's access control as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Whether etcd checks credentials.
    pub enabled: bool,
    /// Each role's permissions (root's are implicit and not listed).
    pub roles: BTreeMap<String, BTreeSet<Perm>>,
    /// Each user's roles.
    pub users: BTreeMap<String, BTreeSet<String>>,
}

/// One change to etcd's access control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Adds a role with no permissions.
    AddRole(String),
    /// Grants a role a permission.
    Grant(String, Perm),
    /// Revokes a permission from a role.
    Revoke(String, Perm),
    /// Adds a user, with a password or none (client certificate only).
    AddUser(String, Option<Password>),
    /// Sets a user's password.
    ChangePassword(String, Password),
    /// Grants a user a role.
    GrantRole(String, String),
    /// Revokes a role from a user.
    RevokeRole(String, String),
    /// Deletes a user.
    DeleteUser(String),
    /// Deletes a role.
    DeleteRole(String),
    /// Turns authentication on (root must exist and hold the root role).
    Enable,
    /// Turns authentication off.
    Disable,
}

impl Op {
    /// Changes of a stage may run together; each stage waits for the one before: roles before
    /// their permissions, users before their roles, a user's role revoked before the role is
    /// deleted, everything before authentication is turned on.
    pub fn stage(&self) -> u8 {
        match self {
            Op::Disable => 0,
            Op::AddRole(_) => 1,
            Op::Grant(..) | Op::Revoke(..) => 2,
            Op::AddUser(..) | Op::ChangePassword(..) => 3,
            Op::GrantRole(..) | Op::RevokeRole(..) => 4,
            Op::DeleteUser(_) => 5,
            Op::DeleteRole(_) => 6,
            Op::Enable => 7,
        }
    }

    /// The change, for an error or a log line (never a password).
    pub fn describe(&self) -> String {
        let range = |p: &Perm| {
            format!(
                "{:?} {}{}",
                p.kind,
                String::from_utf8_lossy(&p.key),
                if p.range_end.is_empty() {
                    String::new()
                } else {
                    format!("..{}", String::from_utf8_lossy(&p.range_end))
                }
            )
        };
        match self {
            Op::AddRole(r) => format!("adding role {r}"),
            Op::Grant(r, p) => format!("granting role {r} {}", range(p)),
            Op::Revoke(r, p) => format!("revoking {} from role {r}", range(p)),
            Op::AddUser(u, _) => format!("adding user {u}"),
            Op::ChangePassword(u, _) => format!("setting the password of user {u}"),
            Op::GrantRole(u, r) => format!("granting user {u} role {r}"),
            Op::RevokeRole(u, r) => format!("revoking role {r} from user {u}"),
            Op::DeleteUser(u) => format!("deleting user {u}"),
            Op::DeleteRole(r) => format!("deleting role {r}"),
            Op::Enable => "turning authentication on".into(),
            Op::Disable => "turning authentication off".into(),
        }
    }
}

fn auth_err(what: impl Into<String>) -> impl FnOnce(etcd_client::Error) -> Error {
    let what = what.into();
    move |source| Error::Auth { what, source }
}

impl Etcd {
    /// Whether etcd checks credentials: etcd answers an unknown user "authentication failed"
    /// when it does and "not enabled" when it does not, from the member's own state (no
    /// proposal, no password hashed).
    pub async fn auth_enabled(&mut self) -> Result<bool> {
        let mut auth = self.client.auth_client();
        let probe = auth.authenticate("\0etcd-operator-probe".into(), String::new());
        match within(self.timeout, probe).await {
            Err(e) if not_enabled(&e) => Ok(false),
            Err(e) if failed(&e) => Ok(true),
            Err(source) => Err(Error::Auth {
                what: "asking whether authentication is on".into(),
                source,
            }),
            Ok(_) => Ok(true),
        }
    }

    /// etcd's access control: every role with its permissions, every user with its roles.
    pub async fn read_auth(&mut self) -> Result<State> {
        let enabled = self.auth_enabled().await?;
        let timeout = self.timeout;
        let roles = within(timeout, self.client.role_list())
            .await
            .map_err(auth_err("listing roles"))?
            .roles()
            .to_vec();
        let users = within(timeout, self.client.user_list())
            .await
            .map_err(auth_err("listing users"))?
            .users()
            .to_vec();
        let mut role_perms = BTreeMap::new();
        for chunk in roles.chunks(IN_FLIGHT) {
            let reads = chunk
                .iter()
                .filter(|r| *r != ROOT)
                .map(|name| self.role_perms(name.clone()));
            for read in futures::future::join_all(reads).await {
                let (name, perms) = read?;
                role_perms.insert(name, perms);
            }
        }
        let mut user_roles = BTreeMap::new();
        for chunk in users.chunks(IN_FLIGHT) {
            let reads = chunk.iter().map(|name| self.user_roles(name.clone()));
            for read in futures::future::join_all(reads).await {
                let (name, roles) = read?;
                user_roles.insert(name, roles);
            }
        }
        let (roles, users) = (role_perms, user_roles);
        Ok(State {
            enabled,
            roles,
            users,
        })
    }

    /// Applies `ops` stage by stage ([`Op::stage`]), the changes of a stage together. Stops at
    /// the first stage with a failure; returns how many changes were made.
    pub async fn apply_auth(&mut self, ops: &[Op]) -> std::result::Result<usize, (usize, Error)> {
        let mut done = 0;
        let mut stages: BTreeMap<u8, Vec<&Op>> = BTreeMap::new();
        for op in ops {
            stages.entry(op.stage()).or_default().push(op);
        }
        // etcd drops every token when authentication goes on or off, and root's with its
        // password: the next connection obtains a new one.
        let drops_tokens = ops.iter().any(|op| {
            matches!(op, Op::Enable | Op::Disable)
                || matches!(op, Op::ChangePassword(u, _) if u == ROOT)
        });
        if drops_tokens && let Some((root, token)) = &self.token {
            root.forget(token);
        }
        for stage in stages.into_values() {
            for chunk in stage.chunks(IN_FLIGHT) {
                let calls = chunk.iter().map(|op| self.apply_one(op));
                let results = futures::future::join_all(calls).await;
                done += results.iter().filter(|r| r.is_ok()).count();
                if let Some(e) = results.into_iter().find_map(|r| r.err()) {
                    return Err((done, e));
                }
            }
        }
        Ok(done)
    }

    fn role_perms(
        &self,
        name: String,
    ) -> impl std::future::Future<Output = Result<(String, BTreeSet<Perm>)>> + use<> {
        let mut auth = self.client.auth_client();
        let timeout = self.timeout;
        async move {
            let got = within(timeout, auth.role_get(name.clone()))
                .await
                .map_err(auth_err(format!("reading role {name}")))?;
            let perms = got
                .permissions()
                .iter()
                .map(|p| Perm {
                    kind: Kind::of(p.get_type()),
                    key: p.key().to_vec(),
                    range_end: p.range_end().to_vec(),
                })
                .collect();
            Ok((name, perms))
        }
    }

    fn user_roles(
        &self,
        name: String,
    ) -> impl std::future::Future<Output = Result<(String, BTreeSet<String>)>> + use<> {
        let mut auth = self.client.auth_client();
        let timeout = self.timeout;
        async move {
            let got = within(timeout, auth.user_get(name.clone()))
                .await
                .map_err(auth_err(format!("reading user {name}")))?;
            Ok((name, got.roles().iter().cloned().collect()))
        }
    }

    fn apply_one(&self, op: &Op) -> impl std::future::Future<Output = Result<()>> + use<> {
        let mut auth = self.client.auth_client();
        let timeout = self.timeout;
        let op = op.clone();
        async move {
            let what = op.describe();
            let call = async {
                match op {
                    Op::AddRole(r) => auth.role_add(r).await.map(drop),
                    Op::Grant(r, p) => {
                        let mut perm = Permission::new(p.kind.to_etcd(), p.key);
                        if !p.range_end.is_empty() {
                            perm = perm.with_range_end(p.range_end);
                        }
                        auth.role_grant_permission(r, perm).await.map(drop)
                    }
                    Op::Revoke(r, p) => {
                        let options =
                            RoleRevokePermissionOptions::new().with_range_end(p.range_end);
                        auth.role_revoke_permission(r, p.key, Some(options))
                            .await
                            .map(drop)
                    }
                    Op::AddUser(u, Some(password)) => {
                        auth.user_add(u, password.0, None).await.map(drop)
                    }
                    Op::AddUser(u, None) => auth
                        .user_add(u, "", Some(UserAddOptions::new().with_no_pwd()))
                        .await
                        .map(drop),
                    Op::ChangePassword(u, password) => {
                        auth.user_change_password(u, password.0).await.map(drop)
                    }
                    Op::GrantRole(u, r) => auth.user_grant_role(u, r).await.map(drop),
                    Op::RevokeRole(u, r) => auth.user_revoke_role(u, r).await.map(drop),
                    Op::DeleteUser(u) => auth.user_delete(u).await.map(drop),
                    Op::DeleteRole(r) => auth.role_delete(r).await.map(drop),
                    Op::Enable => auth.auth_enable().await.map(drop),
                    Op::Disable => auth.auth_disable().await.map(drop),
                }
            };
            within(timeout, call).await.map_err(auth_err(what))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_etcd_ends_it() {
        assert_eq!(prefix_end(b"/tenant-a/"), b"/tenant-a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn every_change_waits_for_what_it_needs() {
        let perm = Perm {
            kind: Kind::Read,
            key: b"/a/".to_vec(),
            range_end: b"/a0".to_vec(),
        };
        let order = [
            Op::AddRole("a".into()).stage(),
            Op::Grant("a".into(), perm).stage(),
            Op::AddUser("a".into(), None).stage(),
            Op::GrantRole("a".into(), "a".into()).stage(),
            Op::DeleteUser("b".into()).stage(),
            Op::DeleteRole("b".into()).stage(),
            Op::Enable.stage(),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert!(Op::Disable.stage() < Op::AddRole("a".into()).stage());
        let secret = Op::AddUser("a".into(), Some(Password("hunter2".into())));
        assert!(!format!("{secret:?}{}", secret.describe()).contains("hunter2"));
    }
}
