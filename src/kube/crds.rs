//! The operator's own CRDs, installed or updated at its start (`--install-crds`): Helm never
//! upgrades CRDs, so without this a `helm upgrade` to a version with new fields would leave
//! the API server pruning them. Applied server-side as field manager `etcd-operator`, each
//! marked with the operator version that wrote it; a CRD written by a newer operator is left
//! alone, so that rolling the operator back never takes fields away from objects that use them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

/// The annotation with the version of the operator that last applied a CRD.
pub const VERSION_ANNOTATION: &str = "etcd.database.coreos.com/operator-version";

/// What happened to one CRD.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Created or brought to this version's schema.
    Applied(String),
    /// Left as it is: a newer operator wrote it.
    Newer(String, String),
}

/// Installs or updates every CRD of this version.
pub async fn install(client: &Client) -> Result<Vec<Outcome>, kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = env!("CARGO_PKG_VERSION");
    let params = PatchParams::apply("etcd-operator").force();
    let mut outcomes = Vec::new();
    for mut crd in crate::api::crds() {
        let name = crd.name_any();
        if let Some(current) = api.get_opt(&name).await? {
            let theirs = current
                .annotations()
                .get(VERSION_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            if newer(&theirs, ours) {
                outcomes.push(Outcome::Newer(name, theirs));
                continue;
            }
        }
        crd.annotations_mut()
            .insert(VERSION_ANNOTATION.into(), ours.into());
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        outcomes.push(Outcome::Applied(name));
    }
    Ok(outcomes)
}

/// Whether version `a` is newer than `b` (`MAJOR.MINOR.PATCH`, numbers compared as numbers;
/// anything unreadable is not newer).
pub fn newer(a: &str, b: &str) -> bool {
    let parse = |v: &str| -> Option<Vec<u64>> {
        v.trim_start_matches('v')
            .split(['.', '-', '+'])
            .take(3)
            .map(|p| p.parse().ok())
            .collect()
    };
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert!(newer("0.10.0", "0.9.1"));
        assert!(newer("v1.0.0", "0.99.0"));
        assert!(!newer("0.1.0", "0.1.0"));
        assert!(!newer("0.1.0", "0.2.0"));
        assert!(!newer("", "0.1.0"));
        assert!(!newer("garbage", "0.1.0"));
    }
}
