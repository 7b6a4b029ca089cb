//! The access-control stage of a pass: etcd's authentication, roles and users brought to what
//! `spec.auth` declares ([`plan`]), through the leader, in one pass however many there are.
//!
//! etcd is read only when something that decides the outcome changed since the last pass that
//! left everything applied (the spec's generation, a password Secret's version, root's, the
//! cluster's ID: a restore brings other data) or [`RECHECK`] has passed: at rest a cluster
//! with access control costs etcd nothing more.

use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::access::{self, password_in};
use crate::api::{AuthStatus, EtcdCluster};
use crate::cluster::handles::Handles;
use crate::cluster::observe::Observed;
use crate::etcd::Password;
use crate::kube::names::{ROOT_PASSWORD_KEY, root_secret};

pub mod plan;

/// How often etcd's access control is read again when nothing changed: what was changed by
/// hand in etcd (a managed role's permission revoked) is put back within this long.
pub const RECHECK: Duration = Duration::from_secs(300);

/// What the stage found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Finding {
    /// `status.auth` as etcd now holds it.
    pub status: AuthStatus,
    /// Entries of the spec that could not be applied, each naming its field: left as they are.
    pub problems: Vec<String>,
    /// Why nothing could be applied this pass (no leader, etcd refused), if so.
    pub error: Option<String>,
    /// How many changes this pass made.
    pub changed: usize,
    /// Clients may only read, as etcd now holds it (a standby, a demoted primary).
    pub read_only: bool,
}

/// What the stage remembers between passes: the inputs of the last pass that left everything
/// applied, when, and what it found.
#[derive(Debug, Default)]
pub struct Memory {
    last: Option<(String, Instant, Finding)>,
}

/// The user's passwords, resolved, and a key of everything the outcome depends on.
struct Inputs {
    declared: plan::Declared,
    root: (Password, String),
    key: String,
}

async fn inputs(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    read_only: bool,
) -> Option<Inputs> {
    let api = &handles.secrets;
    let ns = api.namespace().to_string();
    let auth = cluster.spec.auth.as_ref();
    let mut secrets = std::collections::BTreeMap::new();
    for user in auth.map(|a| a.users.as_slice()).unwrap_or_default() {
        if let Some(ps) = &user.password_secret
            && !secrets.contains_key(&ps.name)
        {
            secrets.insert(ps.name.clone(), api.get_opt(&ps.name).await);
        }
    }
    let mut declared = plan::declare(auth, |i| {
        let ps = auth?.users[i].password_secret.as_ref()?;
        Some(match &secrets[&ps.name] {
            Err(e) => Err(format!("reading Secret {ns}/{}: {e}", ps.name)),
            Ok(None) => Err(format!("Secret {ns}/{} does not exist", ps.name)),
            Ok(Some(s)) => password_in(s, &ps.key)
                .map(|p| {
                    (
                        p,
                        format!("{}@{}", ps.name, s.resource_version().unwrap_or_default()),
                    )
                })
                .ok_or_else(|| {
                    format!("Secret {ns}/{} has no non-empty key {:?}", ps.name, ps.key)
                }),
        })
    });
    if read_only {
        plan::read_only(&mut declared);
    }
    let root_name = root_secret(&cluster.name_any());
    let root_secret = api.get_opt(&root_name).await.ok().flatten()?;
    let root = password_in(&root_secret, ROOT_PASSWORD_KEY)?;
    let root_version = format!(
        "{root_name}@{}",
        root_secret.resource_version().unwrap_or_default()
    );
    let versions: Vec<String> = declared
        .users
        .values()
        .filter_map(|(_, p)| Some(p.as_ref()?.1.clone()))
        .collect();
    let cluster_id = obs.statuses.values().next().map(|s| s.cluster_id);
    let key = format!(
        "{:?} {root_version} {versions:?} {cluster_id:?} {:?} {read_only}",
        cluster.metadata.generation, declared.problems
    );
    Some(Inputs {
        declared,
        root: (root, root_version),
        key,
    })
}

/// Brings etcd's access control to the spec (every role read-only when `read_only`: a
/// standby, a demoted primary); `None` when the cluster has none and never had.
pub async fn reconcile(
    handles: &Handles,
    cluster: &EtcdCluster,
    obs: &Observed,
    read_only: bool,
    memory: &mut Memory,
) -> Option<Finding> {
    if !access::wanted(cluster) {
        memory.last = None;
        return None;
    }
    let managed = cluster
        .status
        .as_ref()
        .and_then(|s| s.auth.clone())
        .unwrap_or_default();
    let failed = |error: String| Finding {
        status: managed.clone(),
        error: Some(error),
        ..Finding::default()
    };
    let Some(inputs) = inputs(handles, cluster, obs, read_only).await else {
        return Some(failed(format!(
            "Secret {}/{} holds no root password yet",
            handles.secrets.namespace(),
            root_secret(&cluster.name_any())
        )));
    };
    if let Some((key, at, found)) = &memory.last
        && *key == inputs.key
        && at.elapsed() < RECHECK
    {
        return Some(Finding {
            changed: 0,
            ..found.clone()
        });
    }
    let found = match apply(obs, &inputs, &managed).await {
        Ok(found) => found,
        Err(e) => return Some(failed(e)),
    };
    memory.last = Some((inputs.key, Instant::now(), found.clone()));
    Some(found)
}

async fn apply(obs: &Observed, inputs: &Inputs, managed: &AuthStatus) -> Result<Finding, String> {
    let mut etcd = crate::cluster::act::connect(obs)
        .await
        .map_err(|e| format!("no member to apply access control through: {e}"))?;
    let current = etcd.read_auth().await.map_err(|e| e.to_string())?;
    let (root, version) = &inputs.root;
    let changes = plan::changes(&inputs.declared, &current, managed, (root, version));
    let changed = match etcd.apply_auth(&changes.ops).await {
        Ok(n) => n,
        Err((n, e)) => {
            tracing::warn!(changed = n, error = %e, "applying access control");
            return Err(format!("{e} (after {n} changes made)"));
        }
    };
    if changed > 0 {
        tracing::info!(changed, "access control applied");
    }
    Ok(Finding {
        status: changes.status,
        problems: inputs.declared.problems.clone(),
        error: None,
        changed,
        read_only: inputs.declared.read_only,
    })
}
