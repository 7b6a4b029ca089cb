//! Secrets: the operator's own from the cache, a user's read by name, contents fetched once per
//! resourceVersion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams, PostParams};

use super::{Caches, SETTLE, clear_managed_fields};
use crate::kube::names::MANAGER;

/// How long a Secret the operator does not own is trusted as last read: a user's Secret that
/// changes (a static certificate renewed by cert-manager) is seen within this long.
pub const USER_SECRET_TTL: Duration = Duration::from_secs(300);

/// The label the watch of Secrets selects: only those the operator made.
pub const OWN_SECRETS: &str = "app.kubernetes.io/managed-by=etcd-operator";

/// A Secret's contents as last read, at the resourceVersion the read returned.
pub(super) struct Content {
    version: String,
    secret: Option<Arc<Secret>>,
    /// When this operator last wrote the Secret: until the watch shows the write, reads go to
    /// the API server.
    written: Option<Instant>,
    /// When it was last read or written.
    at: Instant,
}

/// Only what the index reads of a Secret: its name and resourceVersion. Annotations go first
/// (`kubectl.kubernetes.io/last-applied-configuration` holds a Secret's data when it was
/// applied with kubectl).
pub(super) fn slim_secret(s: &mut PartialObjectMeta<Secret>) {
    clear_managed_fields(s);
    s.metadata.annotations = None;
}

/// Secrets of one namespace, read through the caches when there are any.
#[derive(Clone)]
pub struct SecretApi {
    api: Api<Secret>,
    ns: String,
    caches: Option<Arc<Caches>>,
}

impl SecretApi {
    /// Every read goes to the API server.
    pub fn live(client: &kube::Client, ns: &str) -> Self {
        SecretApi {
            api: Api::namespaced(client.clone(), ns),
            ns: ns.into(),
            caches: None,
        }
    }

    /// Reads are answered from `caches` when they can be.
    pub fn cached(client: &kube::Client, ns: &str, caches: Arc<Caches>) -> Self {
        SecretApi {
            caches: Some(caches),
            ..Self::live(client, ns)
        }
    }

    /// A client of the API server these Secrets are read from.
    pub fn client(&self) -> kube::Client {
        self.api.clone().into_client()
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    fn key(&self, name: &str) -> (String, String) {
        (self.ns.clone(), name.to_string())
    }

    /// What the caches say of `name`: `None` when they cannot say (not synced, this operator
    /// wrote the Secret moments ago, or a Secret it does not own was read too long ago), else
    /// its resourceVersion if it exists.
    fn cached_version(&self, name: &str) -> Option<Option<String>> {
        let caches = self.caches.as_ref()?;
        let listed = caches.secrets.group(&self.ns, name)?;
        let contents = caches.contents.lock().unwrap_or_else(|e| e.into_inner());
        let content = contents.get(&self.key(name));
        let recent = content
            .and_then(|c| c.written)
            .is_some_and(|at| at.elapsed() < SETTLE);
        if let Some(version) = listed.first().and_then(|m| m.resource_version()) {
            return Some(Some(version));
        }
        if recent {
            // Written by us and not yet shown by the watch: only a read of the object knows.
            return None;
        }
        // Not one of ours: as last read, while that is fresh enough. One found missing is read
        // again (a spec that names it is looked at again soon, and the user may have made it).
        let content = content.filter(|c| c.secret.is_some() && c.at.elapsed() < USER_SECRET_TTL)?;
        Some(content.secret.as_ref().and_then(|s| s.resource_version()))
    }

    /// Secret `name`, or `None` if it does not exist.
    pub async fn get_opt(&self, name: &str) -> kube::Result<Option<Secret>> {
        if let (Some(caches), Some(version)) = (&self.caches, self.cached_version(name)) {
            let Some(version) = version else {
                return Ok(None);
            };
            let contents = caches.contents.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = contents
                .get(&self.key(name))
                .filter(|c| c.version == version)
            {
                return Ok(c.secret.as_deref().cloned());
            }
        }
        let secret = self.api.get_opt(name).await?;
        self.remember(name, secret.as_ref(), false);
        Ok(secret)
    }

    /// Secret `name`, read from the API server.
    pub async fn get(&self, name: &str) -> kube::Result<Secret> {
        let secret = self.api.get(name).await?;
        self.remember(name, Some(&secret), false);
        Ok(secret)
    }

    /// Whether Secret `name` exists.
    pub async fn exists(&self, name: &str) -> kube::Result<bool> {
        if let Some(version) = self.cached_version(name) {
            return Ok(version.is_some());
        }
        Ok(self.api.get_metadata_opt(name).await?.is_some())
    }

    /// Creates `secret`.
    pub async fn create(&self, secret: &Secret) -> kube::Result<Secret> {
        let made = self.api.create(&PostParams::default(), secret).await?;
        self.remember(&made.name_any(), Some(&made), true);
        Ok(made)
    }

    /// Server-side applies `secret` as the operator.
    pub async fn apply(&self, secret: &Secret) -> kube::Result<Secret> {
        let name = secret.name_any();
        let params = PatchParams::apply(MANAGER).force();
        let applied = self
            .api
            .patch(&name, &params, &Patch::Apply(secret))
            .await?;
        self.remember(&name, Some(&applied), true);
        Ok(applied)
    }

    /// Replaces `secret` whole (at its resourceVersion).
    pub async fn replace(&self, secret: &Secret) -> kube::Result<Secret> {
        let name = secret.name_any();
        let replaced = self
            .api
            .replace(&name, &PostParams::default(), secret)
            .await?;
        self.remember(&name, Some(&replaced), true);
        Ok(replaced)
    }

    fn remember(&self, name: &str, secret: Option<&Secret>, wrote: bool) {
        let Some(caches) = &self.caches else { return };
        let mut contents = caches.contents.lock().unwrap_or_else(|e| e.into_inner());
        let key = self.key(name);
        let written = if wrote {
            Some(Instant::now())
        } else {
            contents.get(&key).and_then(|c| c.written)
        };
        contents.insert(
            key,
            Content {
                version: secret
                    .and_then(|s| s.resource_version())
                    .unwrap_or_default(),
                secret: secret.cloned().map(Arc::new),
                written,
                at: Instant::now(),
            },
        );
    }
}
