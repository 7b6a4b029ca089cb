//! `TLS.certManager`: the cluster's peer, server and client certificates as cert-manager
//! `Certificate` objects the cluster owns, and their Secrets read once cert-manager has filled
//! them.
//!
//! A Certificate is written only when its Secret does not carry the fingerprint of the
//! Certificate the spec asks for (cert-manager copies it from `secretTemplate`), so a cluster
//! at rest costs no request: the Secrets wear the operator's label and are in its watch, and a
//! renewal is seen when cert-manager writes it.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{Error, Material, api_err, fingerprint, invalid_secret, names, value};
use crate::api::{CertManagerTls, EtcdCluster};
use crate::kube::cache::SecretApi;
use crate::kube::invalid::Invalid;
use crate::kube::names::{MANAGER, addressing, controlled_by, labels, meta, secrets};
use crate::pki::{self, Role};

/// On a certificate Secret, by way of its Certificate's `secretTemplate`: the fingerprint of
/// the Certificate's spec the Secret was issued for.
const SPEC_ANNOTATION: &str = "etcd.database.coreos.com/certificate-spec";
/// What cert-manager writes on the Secrets it issues: the Certificate's name.
const CERTIFICATE_NAME_ANNOTATION: &str = "cert-manager.io/certificate-name";

/// cert-manager's Certificate kind.
fn certificate_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
        "certificates",
    )
}

/// The Certificate of `role` that `cluster` asks of cert-manager, and the fingerprint of its
/// spec (carried to the Secret).
fn certificate(
    cluster: &EtcdCluster,
    cm: &CertManagerTls,
    role: Role,
    name: &str,
) -> (Value, String) {
    let (dns, ips): (Vec<String>, Vec<String>) = names(cluster, role)
        .into_iter()
        .partition(|n| n.parse::<std::net::IpAddr>().is_err());
    let usages: &[&str] = match role {
        Role::Peer | Role::Server => &[
            "digital signature",
            "key encipherment",
            "server auth",
            "client auth",
        ],
        Role::Client => &["digital signature", "key encipherment", "client auth"],
    };
    let issuer = &cm.issuer_ref;
    let mut spec = json!({
        "secretName": name,
        "commonName": super::common_name(cluster, role),
        "dnsNames": dns,
        "usages": usages,
        "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        "issuerRef": {
            "name": issuer.name,
            "kind": issuer.kind.as_deref().unwrap_or("Issuer"),
            "group": issuer.group.as_deref().unwrap_or("cert-manager.io"),
        },
    });
    if !ips.is_empty() {
        spec["ipAddresses"] = json!(ips);
    }
    if let Some(d) = &cm.duration {
        spec["duration"] = json!(d);
    }
    let hash = fingerprint(&[spec.to_string().as_bytes()]);
    spec["secretTemplate"] = json!({
        "labels": labels(&cluster.name_any(), "tls"),
        "annotations": {SPEC_ANNOTATION: hash},
    });
    let metadata = meta(cluster, name, "tls");
    let object = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": metadata,
        "spec": spec,
    });
    (object, hash)
}

/// The Secrets of `TLS.certManager`, each checked as a `TLS.static` one is (in the
/// `kubernetes.io/tls` layout). A Certificate whose Secret does not hold what the spec asks
/// for is written, and the pass waits for cert-manager: reported, naming the field.
pub(super) async fn prepare(
    api: &SecretApi,
    cluster: &EtcdCluster,
    cm: &CertManagerTls,
    now: OffsetDateTime,
) -> Result<Material, Error> {
    let secrets = secrets(cluster);
    let member_host = addressing(cluster).host("<member>");
    let mut material = Material::default();
    let mut contents: Vec<Vec<u8>> = Vec::new();
    let mut pending = Vec::new();
    for (name, role) in [
        (&secrets.peer, Role::Peer),
        (&secrets.server, Role::Server),
        (&secrets.client, Role::Client),
    ] {
        let Some(name) = name else { continue };
        let (object, hash) = certificate(cluster, cm, role, name);
        let secret = api.get_opt(name).await.map_err(api_err("reading", name))?;
        let issued = secret.filter(|s| {
            let a = s.annotations();
            a.get(SPEC_ANNOTATION) == Some(&hash)
                && a.get(CERTIFICATE_NAME_ANNOTATION).map(String::as_str) == Some(name.as_str())
        });
        let Some(secret) = issued else {
            write_certificate(api, cluster, name, &object).await?;
            pending.push(name.clone());
            continue;
        };
        let hosts = match role {
            Role::Client => vec![],
            _ => vec![member_host.clone()],
        };
        pki::check_pair(|k| value(&secret, k), pki::KUBERNETES_TLS, &hosts, now)
            .map_err(|problem| invalid_secret("spec.TLS.certManager", api, name, &problem))?;
        material.add(&mut contents, role, pki::KUBERNETES_TLS, &secret);
    }
    if !pending.is_empty() {
        return Err(Error::Invalid(Invalid {
            reason: "CertificatesPending",
            message: format!(
                "spec.TLS.certManager: waiting for cert-manager to issue Certificate {} \
                 (issuer {} {}); no member starts before",
                pending.join(", "),
                cm.issuer_ref.kind.as_deref().unwrap_or("Issuer"),
                cm.issuer_ref.name
            ),
        }));
    }
    let parts: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
    material.revision = fingerprint(&parts);
    Ok(material)
}

/// Writes Certificate `name` (server-side apply), unless one of that name exists that the
/// cluster does not own: a user's Certificate is reported, never taken over.
async fn write_certificate(
    secrets: &SecretApi,
    cluster: &EtcdCluster,
    name: &str,
    object: &Value,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        secrets.client(),
        secrets.namespace(),
        &certificate_resource(),
    );
    let missing_kind = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404 && s.reason == "NotFound");
    let existing = match api.get_opt(name).await {
        Ok(found) => found,
        Err(e) if missing_kind(&e) => None,
        Err(e) => return Err(certificate_err(secrets, name, e)),
    };
    if let Some(found) = existing
        && !controlled_by(&found.metadata, cluster)
    {
        return Err(Error::Invalid(Invalid {
            reason: "TLSCertificateConflict",
            message: format!(
                "spec.TLS.certManager: Certificate {}/{name} exists and is not this cluster's \
                 (no controller ownerReference to EtcdCluster {}); the operator does not take \
                 it over: rename or delete it",
                secrets.namespace(),
                cluster.name_any()
            ),
        }));
    }
    let params = PatchParams::apply(MANAGER).force();
    api.patch(name, &params, &Patch::Apply(object))
        .await
        .map(|_| ())
        .map_err(|e| certificate_err(secrets, name, e))
}

/// A failed read or write of a Certificate: with no Certificate kind served, the user is told
/// to install cert-manager.
fn certificate_err(secrets: &SecretApi, name: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 404 => Error::Invalid(Invalid {
            reason: "CertManagerMissing",
            message: format!(
                "spec.TLS.certManager: the API server does not serve cert-manager's \
                 Certificate (cert-manager.io/v1) in namespace {}: install cert-manager \
                 (Certificate {name} could not be written)",
                secrets.namespace()
            ),
        }),
        _ => api_err("writing the Certificate of", name)(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{IssuerRef, TlsPolicy};

    fn cluster() -> (EtcdCluster, CertManagerTls) {
        let cm = CertManagerTls {
            issuer_ref: IssuerRef {
                name: "etcd-ca".into(),
                ..IssuerRef::default()
            },
            duration: Some("2160h".into()),
        };
        let mut c = EtcdCluster::new("example", Default::default());
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c.spec.tls = Some(Box::new(TlsPolicy {
            cert_manager: Some(cm.clone()),
            ..TlsPolicy::default()
        }));
        (c, cm)
    }

    #[test]
    fn certificates_carry_the_names_and_usages_of_auto_tls_and_their_fingerprint() {
        let (c, cm) = cluster();
        let (server, hash) = certificate(&c, &cm, Role::Server, "example-server-tls");
        let spec = &server["spec"];
        assert_eq!(spec["secretName"], "example-server-tls");
        assert_eq!(spec["commonName"], "example.ns");
        assert_eq!(spec["dnsNames"][0], "*.example.ns.svc");
        assert!(
            spec["dnsNames"]
                .as_array()
                .unwrap()
                .contains(&json!("example-client.ns.svc.cluster.local")),
            "{spec}"
        );
        assert_eq!(spec["ipAddresses"], json!(["127.0.0.1", "::1"]));
        assert_eq!(spec["issuerRef"]["kind"], "Issuer");
        assert_eq!(spec["issuerRef"]["group"], "cert-manager.io");
        assert_eq!(spec["duration"], "2160h");
        assert_eq!(spec["secretTemplate"]["annotations"][SPEC_ANNOTATION], hash);
        assert_eq!(
            spec["secretTemplate"]["labels"]["app.kubernetes.io/managed-by"],
            "etcd-operator"
        );
        assert_eq!(server["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(server["metadata"]["ownerReferences"][0]["controller"], true);

        let (client, other) = certificate(&c, &cm, Role::Client, "example-client-tls");
        assert_eq!(client["spec"]["commonName"], "root");
        assert_eq!(
            client["spec"]["usages"],
            json!(["digital signature", "key encipherment", "client auth"])
        );
        assert!(client["spec"].get("ipAddresses").is_none());
        assert_ne!(hash, other);

        // Another issuer is another certificate: the Secret no longer matches, and is issued
        // again.
        let mut cm2 = cm.clone();
        cm2.issuer_ref.name = "other".into();
        assert_ne!(
            certificate(&c, &cm2, Role::Server, "example-server-tls").1,
            hash
        );
        assert_eq!(
            certificate(&c, &cm, Role::Server, "example-server-tls").1,
            hash
        );
    }
}
