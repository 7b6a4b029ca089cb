//! What the operator presents to a cluster's etcd ([`Access`]): its TLS identity and, once the
//! cluster's access control was declared, the password of etcd's `root` user, kept in a Secret
//! the cluster owns (`<cluster>-etcd-root`). Shared by the three controllers and the plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::{Auth, EtcdCluster};
use crate::etcd::{Access, Password, Root};
use crate::kube::cache::SecretApi;
use crate::kube::invalid::Invalid;
use crate::kube::names::{ROOT_PASSWORD_KEY, controlled_by, meta, root_secret};

/// Why root's password could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Secret of the root Secret's name exists and is not the cluster's.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The API server refused or failed a read or a write.
    #[error("{what} Secret {name}: {source}")]
    Api {
        what: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// TLS material could not be read.
    #[error(transparent)]
    Tls(#[from] crate::tls::Error),
}

/// A password of 32 letters and digits (190 bits), from the system's random source.
pub fn generate_password() -> Password {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 32];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system's random source");
    Password(
        bytes
            .iter()
            .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
            .collect(),
    )
}

/// The password under `key` of `secret`, if it holds a non-empty UTF-8 one.
pub fn password_in(secret: &Secret, key: &str) -> Option<Password> {
    let bytes = secret.data.as_ref()?.get(key)?;
    let text = String::from_utf8(bytes.0.clone()).ok()?;
    (!text.is_empty()).then_some(Password(text))
}

fn conflict(api: &SecretApi, cluster: &EtcdCluster, name: &str) -> Error {
    Error::Invalid(Invalid {
        reason: "RootSecretConflict",
        message: format!(
            "spec.auth: Secret {}/{name} exists and is not this cluster's (no controller \
             ownerReference to EtcdCluster {}); the operator keeps etcd root's password there \
             and does not take over or trust a Secret it did not make: rename or delete it",
            api.namespace(),
            cluster.name_any()
        ),
    })
}

/// root's password, when the cluster's Secret holds one. A Secret of that name the cluster
/// does not own is refused: its password would be handed to etcd as root's.
pub async fn read_root(api: &SecretApi, cluster: &EtcdCluster) -> Result<Option<Password>, Error> {
    let name = root_secret(&cluster.name_any());
    let secret = api.get_opt(&name).await.map_err(|source| Error::Api {
        what: "reading",
        name: name.clone(),
        source,
    })?;
    match secret {
        None => Ok(None),
        Some(s) if !controlled_by(&s.metadata, cluster) => Err(conflict(api, cluster, &name)),
        Some(s) => Ok(password_in(&s, ROOT_PASSWORD_KEY)),
    }
}

/// root's password, made and kept in the cluster's Secret when there is none yet (created,
/// never overwritten, so that two writers cannot each set one).
pub async fn ensure_root(api: &SecretApi, cluster: &EtcdCluster) -> Result<Password, Error> {
    if let Some(password) = read_root(api, cluster).await? {
        return Ok(password);
    }
    let name = root_secret(&cluster.name_any());
    let password = generate_password();
    let secret = Secret {
        metadata: meta(cluster, &name, "auth"),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            ROOT_PASSWORD_KEY.to_string(),
            ByteString(password.0.clone().into_bytes()),
        )])),
        ..Secret::default()
    };
    match api.create(&secret).await {
        Ok(_) => Ok(password),
        // Made meanwhile (another replica, an earlier pass the cache did not show yet): its.
        Err(kube::Error::Api(e)) if e.code == 409 => read_root(api, cluster)
            .await?
            .ok_or_else(|| conflict(api, cluster, &name)),
        Err(source) => Err(Error::Api {
            what: "creating",
            name,
            source,
        }),
    }
}

/// Whether the operator's TLS identity is root's own (`TLS.auto` and `TLS.certManager` issue
/// it with CN `root`), so
/// that no password need be sent: a password costs etcd a bcrypt check and a proposal at
/// every connection.
pub fn tls_is_root(cluster: &EtcdCluster) -> bool {
    let secrets = crate::kube::names::secrets(cluster);
    secrets.auto || secrets.cert_manager
}

/// What the operator presents to `cluster`'s etcd: its TLS identity, and root's password
/// when the cluster has one.
pub async fn cluster_access(api: &SecretApi, cluster: &EtcdCluster) -> Result<Access, Error> {
    let tls = crate::tls::cluster_client(api, cluster).await?;
    let root = if wanted(cluster) {
        read_root(api, cluster)
            .await?
            .map(|p| Arc::new(Root::new(p)))
    } else {
        None
    };
    Ok(Access {
        tls,
        root,
        cert_is_root: tls_is_root(cluster),
    })
}

/// Whether the operator must keep root's password for `cluster`: access control is declared,
/// or was (the status says etcd checks credentials, or names users or roles the operator still
/// has to delete).
pub fn wanted(cluster: &EtcdCluster) -> bool {
    Auth::declared(cluster.spec.auth.as_ref())
        || cluster
            .status
            .as_ref()
            .and_then(|s| s.auth.as_ref())
            .is_some_and(|a| a.enabled || !a.users.is_empty() || !a.roles.is_empty())
}
