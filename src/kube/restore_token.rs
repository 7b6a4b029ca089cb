//! The bearer token with which a restore's seed fetches its snapshot from the operator, kept
//! in a Secret rather than in the EtcdCluster's hand-off annotation or the seed pod's spec:
//! whoever may read pods or EtcdClusters must not be able to fetch a cluster's data. The
//! annotation carries only the token's sha256, which the operator checks a request against;
//! the seed reads the token from the Secret, mounted into it. The Secret is owned by the
//! EtcdCluster and deleted once the seed serves.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::names;
use crate::api::EtcdCluster;

/// The key of the token in the Secret.
pub const KEY: &str = "token";
/// The field manager of the Secret.
const MANAGER: &str = "etcd-operator-restore";

/// The Secret of `cluster`'s restore token.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-restore-token")
}

/// The sha256 of `token`, hex: what the hand-off annotation carries.
pub fn digest(token: &str) -> String {
    crate::api::common::sha256_hex(token.as_bytes())
}

/// A new token, written to `cluster`'s Secret (replacing an earlier restore's); returns its
/// sha256 for the hand-off. A Secret of that name the cluster does not own is never taken
/// over (nor deleted later): that is a conflict (409) naming it.
pub async fn issue(client: &kube::Client, cluster: &EtcdCluster) -> Result<String, kube::Error> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let ns = cluster.namespace().unwrap_or_default();
    let name = secret_name(&cluster.name_any());
    let secret = Secret {
        metadata: names::meta(cluster, &name, "restore-token"),
        data: Some([(KEY.to_string(), ByteString(token.clone().into_bytes()))].into()),
        ..Secret::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    if let Some(existing) = api.get_metadata_opt(&name).await?
        && !names::controlled_by(&existing.metadata, cluster)
    {
        let message = format!(
            "Secret {ns}/{name} exists and is not EtcdCluster {}'s (no controller \
             ownerReference to it); the restore's token is kept there, so rename or delete it",
            cluster.name_any()
        );
        return Err(kube::Error::Api(Box::new(
            kube::core::Status::failure(&message, "AlreadyExists").with_code(409),
        )));
    }
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    Ok(digest(&token))
}

/// Deletes `cluster`'s token Secret; gone already is fine.
pub async fn revoke(client: &kube::Client, ns: &str, cluster: &str) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    match api
        .delete(&secret_name(cluster), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `bearer` is the token whose sha256 is `expected`.
pub fn matches(bearer: Option<&str>, expected: &str) -> bool {
    !expected.is_empty() && bearer.is_some_and(|b| digest(b) == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_let_through_by_the_token_only() {
        let expected = digest("s3cr3t");
        assert_eq!(expected.len(), 64);
        assert!(matches(Some("s3cr3t"), &expected));
        assert!(!matches(Some("guess"), &expected));
        assert!(!matches(None, &expected));
        assert!(!matches(Some(""), ""), "no digest lets nothing through");
        // The digest is the token's sha256 (what `printf s3cr3t | sha256sum` prints).
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
