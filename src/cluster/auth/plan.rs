//! What must change in etcd's access control for it to match the spec: pure, from the spec as
//! resolved (passwords read), etcd's state as read, and what the operator managed until now.
//!
//! The operator manages the roles and users the spec declares, and those it managed before
//! (`status.auth`): only those are ever changed or deleted. Users and roles made by hand are
//! left alone. An entry with a problem (a role not declared, a password Secret missing) is
//! left as it is in etcd, and named: nothing already granted is revoked because of it.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{Auth, AuthStatus, Permission, PermissionType};
use crate::etcd::Password;
use crate::etcd::auth::{Kind, Op, Perm, ROOT, State, prefix_end};

/// A declared user's password, resolved: the password and the version of its Secret.
pub type Resolved = Result<(Password, String), String>;

/// A declared user: its roles, and its password with its Secret's version, if it has one.
pub type User = (BTreeSet<String>, Option<(Password, String)>);

/// The spec's access control, resolved.
#[derive(Debug, Default)]
pub struct Declared {
    /// Whether etcd must check credentials.
    pub enabled: bool,
    /// Each role's permissions.
    pub roles: BTreeMap<String, BTreeSet<Perm>>,
    /// Each user's roles and password (with its Secret's version), if it has one.
    pub users: BTreeMap<String, User>,
    /// Users declared with a problem: left as they are.
    pub held: BTreeSet<String>,
    /// What could not be applied, each naming its field.
    pub problems: Vec<String>,
    /// Clients may only read ([`read_only`]).
    pub read_only: bool,
}

/// A standby's or a demoted primary's access control: every declared role keeps its read
/// permissions only, and roles etcd holds that are not declared (made by hand, or brought by
/// the source's data) lose their write permissions too; only root writes. Promotion gives the
/// declared roles their permissions back; undeclared ones stay read-only.
pub fn read_only(declared: &mut Declared) {
    declared.read_only = true;
    for perms in declared.roles.values_mut() {
        *perms = perms.iter().filter_map(reading).collect();
    }
}

/// The read part of `p`, if it has one.
fn reading(p: &Perm) -> Option<Perm> {
    (p.kind != Kind::Write).then(|| Perm {
        kind: Kind::Read,
        ..p.clone()
    })
}

/// A permission of the spec as etcd stores it.
pub fn perm(p: &Permission) -> Perm {
    let key = p.key.as_bytes().to_vec();
    let range_end = match (&p.range_end, p.prefix) {
        (Some(end), _) => end.as_bytes().to_vec(),
        (None, Some(true)) => prefix_end(&key),
        (None, _) => Vec::new(),
    };
    Perm {
        kind: match p.type_ {
            PermissionType::Read => Kind::Read,
            PermissionType::Write => Kind::Write,
            PermissionType::Readwrite => Kind::ReadWrite,
        },
        key,
        range_end,
    }
}

/// The spec's access control with each user's password resolved by `password` (given the
/// user's index, for the field it names).
pub fn declare(
    auth: Option<&Auth>,
    mut password: impl FnMut(usize) -> Option<Resolved>,
) -> Declared {
    let mut out = Declared::default();
    let Some(auth) = auth else { return out };
    out.enabled = auth.enabled;
    for role in &auth.roles {
        out.roles.insert(
            role.name.clone(),
            role.permissions.iter().map(perm).collect(),
        );
    }
    for (i, user) in auth.users.iter().enumerate() {
        let field = format!("spec.auth.users[{i}]");
        let missing: Vec<&String> = user
            .roles
            .iter()
            .filter(|r| !out.roles.contains_key(*r))
            .collect();
        if !missing.is_empty() {
            out.problems.push(format!(
                "{field}.roles: {} not declared in spec.auth.roles; user {} is left as it is",
                quoted(&missing),
                user.name
            ));
            out.held.insert(user.name.clone());
            continue;
        }
        let resolved = match password(i) {
            Some(Err(why)) => {
                out.problems.push(format!(
                    "{field}.passwordSecret: {why}; user {} is left as it is",
                    user.name
                ));
                out.held.insert(user.name.clone());
                continue;
            }
            Some(Ok(p)) => Some(p),
            None => None,
        };
        out.users.insert(
            user.name.clone(),
            (user.roles.iter().cloned().collect(), resolved),
        );
    }
    out
}

fn quoted(names: &[&String]) -> String {
    let names: Vec<String> = names.iter().map(|n| format!("role {n:?}")).collect();
    names.join(", ")
}

/// The changes, and what the operator manages once they are made.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// In any order: [`crate::etcd::Etcd::apply_auth`] orders them.
    pub ops: Vec<Op>,
    /// `status.auth` once every change is made.
    pub status: AuthStatus,
}

/// The changes that bring `current` to `declared`, given what the operator `managed` and the
/// root password it keeps (with its Secret's version).
pub fn changes(
    declared: &Declared,
    current: &State,
    managed: &AuthStatus,
    root: (&Password, &str),
) -> Changes {
    let mut ops = Vec::new();
    let mut versions = BTreeMap::new();
    root_ops(declared, current, managed, root, &mut ops, &mut versions);
    for (name, want) in &declared.roles {
        let have = current.roles.get(name);
        if have.is_none() {
            ops.push(Op::AddRole(name.clone()));
        }
        let empty = BTreeSet::new();
        let have = have.unwrap_or(&empty);
        ops.extend(
            want.difference(have)
                .map(|p| Op::Grant(name.clone(), p.clone())),
        );
        // A grant on the same key or range replaces the permission's type: revoking it too
        // (etcd revokes by range, whatever the type) would race with the grant.
        let regranted = |p: &Perm| {
            want.iter()
                .any(|w| w.key == p.key && w.range_end == p.range_end)
        };
        ops.extend(
            have.difference(want)
                .filter(|p| !regranted(p))
                .map(|p| Op::Revoke(name.clone(), p.clone())),
        );
    }
    undeclared_read_only(declared, current, &mut ops);
    for name in &managed.roles {
        if !declared.roles.contains_key(name) && current.roles.contains_key(name) {
            ops.push(Op::DeleteRole(name.clone()));
        }
    }
    for (name, (want, password)) in &declared.users {
        user_ops(name, want, password.as_ref(), current, managed, &mut ops);
        if let Some((_, version)) = password {
            versions.insert(name.clone(), version.clone());
        }
    }
    let mut users: BTreeSet<String> = declared.users.keys().cloned().collect();
    for name in &managed.users {
        if declared.held.contains(name) {
            users.insert(name.clone());
            if let Some(v) = managed.password_versions.get(name) {
                versions.insert(name.clone(), v.clone());
            }
        } else if !declared.users.contains_key(name) && current.users.contains_key(name) {
            ops.push(Op::DeleteUser(name.clone()));
        }
    }
    match (declared.enabled, current.enabled) {
        (true, false) => ops.push(Op::Enable),
        (false, true) => ops.push(Op::Disable),
        _ => {}
    }
    Changes {
        ops,
        status: AuthStatus {
            enabled: declared.enabled,
            users: users.into_iter().collect(),
            roles: declared.roles.keys().cloned().collect(),
            password_versions: versions,
        },
    }
}

/// While read-only, the write permissions of roles etcd holds that are not declared.
fn undeclared_read_only(declared: &Declared, current: &State, ops: &mut Vec<Op>) {
    if !declared.read_only {
        return;
    }
    for (name, have) in &current.roles {
        if declared.roles.contains_key(name) || name == ROOT {
            continue;
        }
        for p in have.iter().filter(|p| p.kind != Kind::Read) {
            ops.push(match reading(p) {
                Some(read) => Op::Grant(name.clone(), read),
                None => Op::Revoke(name.clone(), p.clone()),
            });
        }
    }
}

/// root: the user exists with the root role before authentication is turned on, and carries
/// the operator's password, set again whenever its Secret changes, and always before etcd
/// starts checking it (a root made by hand has a password the operator does not know).
fn root_ops(
    declared: &Declared,
    current: &State,
    managed: &AuthStatus,
    (password, version): (&Password, &str),
    ops: &mut Vec<Op>,
    versions: &mut BTreeMap<String, String>,
) {
    versions.insert(ROOT.into(), version.into());
    if !declared.enabled && !current.enabled {
        if let Some(v) = managed.password_versions.get(ROOT) {
            versions.insert(ROOT.into(), v.clone());
        } else {
            versions.remove(ROOT);
        }
        return;
    }
    match current.users.get(ROOT) {
        None => ops.push(Op::AddUser(ROOT.into(), Some(password.clone()))),
        Some(_)
            if !current.enabled
                || managed.password_versions.get(ROOT).map(String::as_str) != Some(version) =>
        {
            ops.push(Op::ChangePassword(ROOT.into(), password.clone()));
        }
        Some(_) => {}
    }
    if !current.users.get(ROOT).is_some_and(|r| r.contains(ROOT)) {
        ops.push(Op::GrantRole(ROOT.into(), ROOT.into()));
    }
}

fn user_ops(
    name: &str,
    want: &BTreeSet<String>,
    password: Option<&(Password, String)>,
    current: &State,
    managed: &AuthStatus,
    ops: &mut Vec<Op>,
) {
    let Some(have) = current.users.get(name) else {
        ops.push(Op::AddUser(name.into(), password.map(|(p, _)| p.clone())));
        ops.extend(want.iter().map(|r| Op::GrantRole(name.into(), r.clone())));
        return;
    };
    if let Some((p, version)) = password
        && managed.password_versions.get(name) != Some(version)
    {
        ops.push(Op::ChangePassword(name.into(), p.clone()));
    }
    ops.extend(
        want.difference(have)
            .map(|r| Op::GrantRole(name.into(), r.clone())),
    );
    ops.extend(
        have.difference(want)
            .map(|r| Op::RevokeRole(name.into(), r.clone())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AuthRole, AuthUser, PasswordSecret};

    fn spec() -> Auth {
        Auth {
            enabled: true,
            roles: vec![AuthRole {
                name: "tenant-a".into(),
                permissions: vec![Permission {
                    type_: PermissionType::Readwrite,
                    key: "/tenant-a/".into(),
                    prefix: Some(true),
                    range_end: None,
                }],
            }],
            users: vec![AuthUser {
                name: "tenant-a".into(),
                roles: vec!["tenant-a".into()],
                password_secret: Some(PasswordSecret {
                    name: "a".into(),
                    key: "password".into(),
                }),
            }],
        }
    }

    fn root() -> (Password, String) {
        (Password("r".into()), "1".into())
    }

    fn ok(_: usize) -> Option<Resolved> {
        Some(Ok((Password("p".into()), "7".into())))
    }

    fn tenant_perm() -> Perm {
        Perm {
            kind: Kind::ReadWrite,
            key: b"/tenant-a/".to_vec(),
            range_end: b"/tenant-a0".to_vec(),
        }
    }

    #[test]
    fn a_fresh_cluster_gets_root_roles_users_then_authentication() {
        let declared = declare(Some(&spec()), ok);
        let (pw, v) = root();
        let c = changes(
            &declared,
            &State::default(),
            &AuthStatus::default(),
            (&pw, &v),
        );
        assert_eq!(
            c.ops,
            vec![
                Op::AddUser("root".into(), Some(Password("r".into()))),
                Op::GrantRole("root".into(), "root".into()),
                Op::AddRole("tenant-a".into()),
                Op::Grant("tenant-a".into(), tenant_perm()),
                Op::AddUser("tenant-a".into(), Some(Password("p".into()))),
                Op::GrantRole("tenant-a".into(), "tenant-a".into()),
                Op::Enable,
            ]
        );
        assert_eq!(c.status.users, vec!["tenant-a"]);
        assert_eq!(c.status.password_versions["tenant-a"], "7");
        assert_eq!(c.status.password_versions["root"], "1");
    }

    fn applied(declared: &Declared) -> (State, AuthStatus) {
        let (pw, v) = root();
        let first = changes(
            declared,
            &State::default(),
            &AuthStatus::default(),
            (&pw, &v),
        );
        let state = State {
            enabled: declared.enabled,
            roles: declared.roles.clone(),
            users: declared
                .users
                .iter()
                .map(|(n, (r, _))| (n.clone(), r.clone()))
                .chain([("root".to_string(), BTreeSet::from(["root".to_string()]))])
                .collect(),
        };
        (state, first.status)
    }

    #[test]
    fn once_applied_nothing_changes_until_the_spec_or_a_secret_does() {
        let declared = declare(Some(&spec()), ok);
        let (state, managed) = applied(&declared);
        let (pw, v) = root();
        let again = changes(&declared, &state, &managed, (&pw, &v));
        assert_eq!(again.ops, vec![]);
        assert_eq!(again.status, managed);
        // A new version of the password's Secret: the password is set again.
        let newer = declare(Some(&spec()), |_| {
            Some(Ok((Password("q".into()), "8".into())))
        });
        let c = changes(&newer, &state, &managed, (&pw, &v));
        assert_eq!(
            c.ops,
            vec![Op::ChangePassword("tenant-a".into(), Password("q".into()))]
        );
        // root's Secret changed: root's password follows.
        let c = changes(&declared, &state, &managed, (&pw, "2"));
        assert_eq!(
            c.ops,
            vec![Op::ChangePassword("root".into(), Password("r".into()))]
        );
    }

    #[test]
    fn what_was_made_by_hand_is_left_alone_and_what_left_the_spec_is_deleted() {
        let declared = declare(Some(&spec()), ok);
        let (mut state, managed) = applied(&declared);
        state
            .users
            .insert("by-hand".into(), BTreeSet::from(["tenant-a".into()]));
        state.roles.insert("by-hand".into(), BTreeSet::new());
        // A permission added by hand to a managed role is revoked: the role is the spec's.
        let extra = Perm {
            kind: Kind::Read,
            key: b"/other".to_vec(),
            range_end: Vec::new(),
        };
        state
            .roles
            .get_mut("tenant-a")
            .unwrap()
            .insert(extra.clone());
        let (pw, v) = root();
        let c = changes(&declared, &state, &managed, (&pw, &v));
        assert_eq!(c.ops, vec![Op::Revoke("tenant-a".into(), extra)]);
        // The spec loses its user and role: both go, the hand-made ones stay.
        let mut smaller = spec();
        smaller.users.clear();
        smaller.roles.clear();
        let c = changes(&declare(Some(&smaller), ok), &state, &managed, (&pw, &v));
        assert_eq!(
            c.ops,
            vec![
                Op::DeleteRole("tenant-a".into()),
                Op::DeleteUser("tenant-a".into())
            ]
        );
        assert!(c.status.users.is_empty() && c.status.roles.is_empty());
    }

    #[test]
    fn a_problem_holds_its_user_as_it_is_and_names_the_field() {
        let declared = declare(Some(&spec()), ok);
        let (state, managed) = applied(&declared);
        let (pw, v) = root();
        // The password's Secret is gone: the user keeps its roles and password.
        let gone = declare(Some(&spec()), |_| {
            Some(Err("Secret ns/a does not exist".into()))
        });
        let c = changes(&gone, &state, &managed, (&pw, &v));
        assert_eq!(c.ops, vec![]);
        assert_eq!(c.status.users, vec!["tenant-a"]);
        assert_eq!(c.status.password_versions["tenant-a"], "7");
        assert!(
            gone.problems[0].starts_with("spec.auth.users[0].passwordSecret: Secret ns/a"),
            "{:?}",
            gone.problems
        );
        // A role that is not declared (the schema refuses it; an older object may have it).
        let mut bad = spec();
        bad.users[0].roles.push("nope".into());
        let held = declare(Some(&bad), ok);
        let c = changes(&held, &state, &managed, (&pw, &v));
        assert_eq!(c.ops, vec![]);
        assert!(held.problems[0].starts_with("spec.auth.users[0].roles: role \"nope\""));
    }

    #[test]
    fn read_only_keeps_every_roles_reads_and_promotion_gives_the_declared_writes_back() {
        let declared = declare(Some(&spec()), ok);
        let (mut state, managed) = applied(&declared);
        // A role the source's data brought, not declared here: write and read-write.
        let by_hand = |kind| Perm {
            kind,
            key: b"/other/".to_vec(),
            range_end: prefix_end(b"/other/"),
        };
        state
            .roles
            .insert("other".into(), BTreeSet::from([by_hand(Kind::ReadWrite)]));
        state
            .roles
            .insert("writer".into(), BTreeSet::from([by_hand(Kind::Write)]));
        let mut ro = declare(Some(&spec()), ok);
        read_only(&mut ro);
        let (pw, v) = root();
        let c = changes(&ro, &state, &managed, (&pw, &v));
        let tenant_read = Perm {
            kind: Kind::Read,
            ..tenant_perm()
        };
        // A grant replaces the type of a permission on the same range: no revoke beside it.
        assert_eq!(
            c.ops,
            vec![
                Op::Grant("tenant-a".into(), tenant_read.clone()),
                Op::Grant("other".into(), by_hand(Kind::Read)),
                Op::Revoke("writer".into(), by_hand(Kind::Write)),
            ]
        );
        // Promoted: the declared role writes again; the others stay as they are.
        state
            .roles
            .insert("tenant-a".into(), BTreeSet::from([tenant_read]));
        let c = changes(&declared, &state, &managed, (&pw, &v));
        assert_eq!(c.ops, vec![Op::Grant("tenant-a".into(), tenant_perm())]);
    }

    #[test]
    fn turning_authentication_off_keeps_roles_and_users() {
        let declared = declare(Some(&spec()), ok);
        let (state, managed) = applied(&declared);
        let mut off = spec();
        off.enabled = false;
        let (pw, v) = root();
        let c = changes(&declare(Some(&off), ok), &state, &managed, (&pw, &v));
        assert_eq!(c.ops, vec![Op::Disable]);
        assert!(!c.status.enabled);
        // root made by hand, with a password the operator does not know: set before enabling.
        let mut by_hand = State::default();
        by_hand
            .users
            .insert("root".into(), BTreeSet::from(["root".into()]));
        let c = changes(&declared, &by_hand, &AuthStatus::default(), (&pw, &v));
        assert_eq!(
            c.ops[0],
            Op::ChangePassword("root".into(), Password("r".into()))
        );
    }

    #[test]
    fn a_prefix_a_range_and_a_key_are_stored_as_etcd_stores_them() {
        let p = |prefix, range_end: Option<&str>| {
            perm(&Permission {
                type_: PermissionType::Read,
                key: "/a".into(),
                prefix,
                range_end: range_end.map(String::from),
            })
            .range_end
        };
        assert_eq!(p(Some(true), None), b"/b");
        assert_eq!(p(None, Some("/c")), b"/c");
        assert_eq!(p(None, None), b"");
    }
}
