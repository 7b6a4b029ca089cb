//! The TLS of one cluster, at the start of a pass: the Secrets of `TLS.static` checked before
//! any pod mounts them, the PKI of `TLS.auto` made, renewed and rotated, and the operator's
//! client identity read from any of them; the Certificates of `TLS.certManager` written
//! (`cert_manager`).
//!
//! A rotation of an automatic CA goes through three rolls, each finished (every pod made from
//! the newest Secrets, every member a healthy voter) before the next begins, so that no two
//! members ever fail to trust each other: the members trust the old and the new CA; their
//! certificates come from the new CA; they trust only the new CA.

mod cert_manager;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use time::OffsetDateTime;

use crate::api::EtcdCluster;
use crate::etcd::ClientTls;
use crate::kube::cache::SecretApi;
use crate::kube::invalid::Invalid;
use crate::kube::names::{addressing, ca_name, meta, secrets};
use crate::pki::{self, Ca, Layout, MemberLayouts, Pair, Role};

/// A new value rotates the CA of a `TLS.auto` cluster and every certificate it signed.
pub const ROTATE_ANNOTATION: &str = "etcd.database.coreos.com/rotate-tls";
/// On the CA Secret: where a rotation stands.
const PHASE_ANNOTATION: &str = "etcd.database.coreos.com/tls-phase";
/// On the CA Secret: the value of [`ROTATE_ANNOTATION`] last acted on.
const ROTATED_FOR_ANNOTATION: &str = "etcd.database.coreos.com/tls-rotated-for";
/// On a certificate Secret: the fingerprint of the CA certificate that signed it.
const ISSUER_ANNOTATION: &str = "etcd.database.coreos.com/tls-issuer";

/// What keeps a pass from going on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A TLS Secret the spec names is missing or unusable; reported on the cluster.
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
    /// A certificate could not be made.
    #[error("making the certificates of {cluster}: {source}")]
    Pki {
        cluster: String,
        #[source]
        source: pki::Error,
    },
}

/// What a pass needs of TLS.
#[derive(Clone, Debug, Default)]
pub struct Material {
    /// The operator's client identity, for a cluster whose clients need one.
    pub client: Option<Arc<ClientTls>>,
    /// Fingerprint of the member Secrets' contents (and of their layouts, when not coreos's),
    /// part of the pod-template hash: a new certificate rolls the members. Empty without TLS.
    pub revision: String,
    /// The layouts of the member Secrets, which the member pods' mounts map.
    pub layouts: MemberLayouts,
    /// Where a rotation of an automatic CA stands, and the CA Secret as read this pass (a
    /// rotation step replaces it at that resourceVersion, so a concurrent change fails it).
    auto: Option<(AutoState, Secret)>,
}

impl Material {
    /// Takes what a checked TLS Secret of `role` in `layout` gives: the client identity, or
    /// member contents for the revision. A layout other than coreos's is part of the revision
    /// (the mounts differ), coreos's is not (the revision of a cluster made before layouts
    /// were read stays what it was, and its members do not roll).
    fn add(&mut self, contents: &mut Vec<Vec<u8>>, role: Role, layout: Layout, secret: &Secret) {
        match role {
            Role::Client => self.client = client_identity(secret).map(Arc::new),
            Role::Peer | Role::Server => {
                for key in [layout.cert, layout.key, layout.ca] {
                    contents.push(value(secret, key).unwrap_or_default());
                }
                if layout == pki::KUBERNETES_TLS {
                    contents.push(format!("{role:?} in {}", layout.cert).into_bytes());
                }
                if role == Role::Peer {
                    self.layouts.peer = layout;
                } else {
                    self.layouts.server = layout;
                }
            }
        }
    }
}

fn fingerprint(parts: &[&[u8]]) -> String {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p);
    }
    ctx.finish().as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret.data.as_ref()?.get(key).map(|v| v.0.clone())
}

/// The client identity in a Secret of the coreos client layout, or the `kubernetes.io/tls`
/// layout.
pub fn client_identity(secret: &Secret) -> Option<ClientTls> {
    let layout = pki::layout_of(|k| value(secret, k), pki::CLIENT);
    Some(ClientTls {
        ca: value(secret, layout.ca)?,
        cert: value(secret, layout.cert)?,
        key: value(secret, layout.key)?,
    })
}

/// The client identity in Secret `name` (coreos client layout, or `kubernetes.io/tls`), which
/// `field` names: there, complete and valid at `now`.
pub async fn read_client(
    api: &SecretApi,
    field: &str,
    name: &str,
    now: OffsetDateTime,
) -> Result<Arc<ClientTls>, Error> {
    let secret = read(api, field, name).await?;
    let layout = pki::layout_of(|k| value(&secret, k), pki::CLIENT);
    pki::check_pair(|k| value(&secret, k), layout, &[], now)
        .map_err(|problem| invalid_secret(field, api, name, &problem))?;
    client_identity(&secret)
        .map(Arc::new)
        .ok_or_else(|| invalid_secret(field, api, name, "has no client certificate"))
}

/// The client identity of `cluster`, for a cluster whose clients need one.
pub async fn cluster_client(
    api: &SecretApi,
    cluster: &EtcdCluster,
) -> Result<Option<Arc<ClientTls>>, Error> {
    let secrets = secrets(cluster);
    let Some(name) = secrets.client else {
        return Ok(None);
    };
    let field = if secrets.auto {
        "spec.TLS.auto"
    } else if secrets.cert_manager {
        "spec.TLS.certManager"
    } else {
        "spec.TLS.static.operatorSecret"
    };
    read_client(api, field, &name, OffsetDateTime::now_utc())
        .await
        .map(Some)
}

fn invalid_secret(field: &str, api: &SecretApi, name: &str, problem: &str) -> Error {
    Error::Invalid(Invalid {
        reason: "InvalidTLSSecret",
        message: format!(
            "{field}: Secret {}/{name} {}{problem}",
            api.namespace(),
            if problem.starts_with("has no") {
                ""
            } else {
                "key "
            }
        ),
    })
}

/// Reads Secret `name`, or says which field names it and that it does not exist.
async fn read(api: &SecretApi, field: &str, name: &str) -> Result<Secret, Error> {
    match api.get_opt(name).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Error::Invalid(Invalid {
            reason: "SecretNotFound",
            message: format!("{field}: Secret {}/{name} does not exist", api.namespace()),
        })),
        Err(e) => Err(api_err("reading", name)(e)),
    }
}

/// Checks and reads what `cluster` needs of TLS, making the Secrets of `TLS.auto` first.
pub async fn prepare(
    api: &SecretApi,
    cluster: &EtcdCluster,
    now: OffsetDateTime,
) -> Result<Material, Error> {
    let Some(policy) = cluster.spec.tls.as_ref() else {
        return Ok(Material::default());
    };
    if let Some(auto) = &policy.auto {
        return prepare_auto(api, cluster, auto.validity(), now).await;
    }
    if let Some(cm) = &policy.cert_manager {
        return cert_manager::prepare(api, cluster, cm, now).await;
    }
    let secrets = secrets(cluster);
    // A member of the cluster by its DNS name; the placeholder label is what a wildcard name
    // must stand for.
    let member_host = addressing(cluster).host("<member>");
    let mut material = Material::default();
    let mut contents: Vec<Vec<u8>> = Vec::new();
    for (field, name, role, hosts) in [
        (
            "spec.TLS.static.member.peerSecret",
            &secrets.peer,
            Role::Peer,
            vec![member_host.clone()],
        ),
        (
            "spec.TLS.static.member.serverSecret",
            &secrets.server,
            Role::Server,
            vec![member_host.clone()],
        ),
        (
            "spec.TLS.static.operatorSecret",
            &secrets.client,
            Role::Client,
            vec![],
        ),
    ] {
        let Some(name) = name else { continue };
        let secret = read(api, field, name).await?;
        let layout = pki::layout_of(|k| value(&secret, k), coreos_layout(role));
        pki::check_pair(|k| value(&secret, k), layout, &hosts, now)
            .map_err(|problem| invalid_secret(field, api, name, &problem))?;
        material.add(&mut contents, role, layout, &secret);
    }
    if !contents.is_empty() {
        let parts: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
        material.revision = fingerprint(&parts);
    }
    Ok(material)
}

/// The coreos layout of a Secret of `role`.
fn coreos_layout(role: Role) -> Layout {
    match role {
        Role::Peer => pki::PEER,
        Role::Server => pki::SERVER,
        Role::Client => pki::CLIENT,
    }
}

/// Where a rotation of an automatic CA stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// One CA, trusted and signing.
    #[default]
    Steady,
    /// A new CA is trusted beside the old one, which still signs.
    TrustNext,
    /// Both are trusted; the new one signs.
    IssuedNext,
}

impl Phase {
    fn parse(s: &str) -> Phase {
        match s {
            "trust-next" => Phase::TrustNext,
            "issued-next" => Phase::IssuedNext,
            _ => Phase::Steady,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Phase::Steady => "steady",
            Phase::TrustNext => "trust-next",
            Phase::IssuedNext => "issued-next",
        }
    }
}

/// The CA Secret of an automatic PKI.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AutoState {
    ca: Ca,
    next: Option<Ca>,
    phase: Phase,
    rotated_for: String,
    validity: Duration,
}

impl AutoState {
    fn from_secret(secret: &Secret, validity: Duration) -> Option<AutoState> {
        let text = |k: &str| value(secret, k).and_then(|v| String::from_utf8(v).ok());
        let pair = |c: &str, k: &str| {
            Some(Ca(Pair {
                cert: text(c)?,
                key: text(k)?,
            }))
        };
        let ann = secret.annotations();
        let next = pair("next.crt", "next.key");
        Some(AutoState {
            ca: pair("ca.crt", "ca.key")?,
            phase: if next.is_some() {
                Phase::parse(ann.get(PHASE_ANNOTATION).map_or("", String::as_str))
            } else {
                Phase::Steady
            },
            next,
            rotated_for: ann.get(ROTATED_FOR_ANNOTATION).cloned().unwrap_or_default(),
            validity,
        })
    }

    fn to_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |k: &str, v: &str| {
            data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
        };
        put("ca.crt", &self.ca.0.cert);
        put("ca.key", &self.ca.0.key);
        if let Some(next) = &self.next {
            put("next.crt", &next.0.cert);
            put("next.key", &next.0.key);
        }
        data
    }

    /// The CAs members and clients trust.
    fn bundle(&self) -> String {
        let mut b = self.ca.0.cert.clone();
        if let Some(next) = &self.next {
            if !b.ends_with('\n') {
                b.push('\n');
            }
            b.push_str(&next.0.cert);
        }
        b
    }

    /// The CA that signs new certificates.
    fn issuer(&self) -> &Ca {
        match (&self.next, self.phase) {
            (Some(next), Phase::IssuedNext) => next,
            _ => &self.ca,
        }
    }
}

/// The names a certificate of `role` carries for `cluster`: the members (by wildcard) and, for
/// the server certificate, the client Service and the loopback a member's own gateway uses.
fn names(cluster: &EtcdCluster, role: Role) -> Vec<String> {
    let addr = addressing(cluster);
    let (name, ns) = (addr.cluster.clone(), addr.namespace.clone());
    let mut domains = vec![String::new(), ".cluster.local".to_string()];
    if !addr.cluster_domain.is_empty() {
        domains.push(format!(".{}", addr.cluster_domain));
    }
    domains.dedup();
    let mut out = Vec::new();
    match role {
        Role::Peer | Role::Server => {
            for d in &domains {
                out.push(format!("*.{name}.{ns}.svc{d}"));
            }
        }
        Role::Client => out.push(format!("{name}-client")),
    }
    if role == Role::Server {
        out.push(format!("{name}-client"));
        out.push(format!("{name}-client.{ns}"));
        for d in &domains {
            out.push(format!("{name}-client.{ns}.svc{d}"));
        }
        out.push("localhost".into());
        out.push("127.0.0.1".into());
        out.push("::1".into());
    }
    out
}

/// Whether a certificate Secret is what `state` would issue now: the CAs trusted, the signer,
/// the names, and not yet due for renewal.
/// The subject of a certificate of `role`. The operator's client certificate is etcd's `root`
/// user: with authentication on, etcd takes a client certificate's CN for the user, and the
/// operator's changes (membership, maintenance, access control) are root's to make.
fn common_name(cluster: &EtcdCluster, role: Role) -> String {
    match role {
        Role::Client => crate::etcd::auth::ROOT.to_string(),
        _ => format!(
            "{}.{}",
            cluster.name_any(),
            cluster.namespace().unwrap_or_default()
        ),
    }
}

fn leaf_current(
    secret: &Secret,
    layout: Layout,
    state: &AutoState,
    (names, common): (&[String], &str),
    now: OffsetDateTime,
) -> bool {
    let issuer = fingerprint(&[state.issuer().0.cert.as_bytes()]);
    if secret.annotations().get(ISSUER_ANNOTATION) != Some(&issuer)
        || value(secret, layout.ca).as_deref() != Some(state.bundle().as_bytes())
        || value(secret, layout.key).is_none()
    {
        return false;
    }
    let Some(cert) = value(secret, layout.cert) else {
        return false;
    };
    match pki::parse_certs(&cert) {
        Ok(certs) => {
            certs[0].names == names
                && (layout == pki::PEER || layout == pki::SERVER || certs[0].common_name == common)
                && !certs[0].renewal_due(now)
        }
        Err(_) => false,
    }
}

/// Refuses to write over a Secret of `TLS.auto`'s names that the cluster does not own (no
/// controller ownerReference to it): a user's Secret is reported, never taken over.
fn not_ours(api: &SecretApi, cluster: &EtcdCluster, secret: &Secret) -> Result<(), Error> {
    if crate::kube::names::controlled_by(&secret.metadata, cluster) {
        return Ok(());
    }
    Err(Error::Invalid(Invalid {
        reason: "TLSSecretConflict",
        message: format!(
            "spec.TLS.auto: Secret {}/{} exists and is not this cluster's (no controller \
             ownerReference to EtcdCluster {}); the operator does not overwrite it: rename or \
             delete it, or name it in spec.TLS.static",
            api.namespace(),
            secret.name_any(),
            cluster.name_any()
        ),
    }))
}

fn owned_secret(cluster: &EtcdCluster, name: &str) -> Secret {
    Secret {
        metadata: meta(cluster, name, "tls"),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

fn api_err(what: &'static str, name: &str) -> impl FnOnce(kube::Error) -> Error {
    let name = name.to_string();
    move |source| Error::Api { what, name, source }
}

fn pki_err(cluster: &EtcdCluster) -> impl FnOnce(pki::Error) -> Error {
    let cluster = cluster.name_any();
    move |source| Error::Pki { cluster, source }
}

async fn apply(api: &SecretApi, secret: &Secret) -> Result<Secret, Error> {
    api.apply(secret)
        .await
        .map_err(api_err("writing", &secret.name_any()))
}

/// The automatic CA as its Secret holds it, made and created when there is none yet.
async fn auto_ca(
    api: &SecretApi,
    cluster: &EtcdCluster,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<(AutoState, Secret), Error> {
    let ca_name = ca_name(cluster);
    let existing = api
        .get_opt(&ca_name)
        .await
        .map_err(api_err("reading", &ca_name))?;
    if let Some(s) = &existing {
        not_ours(api, cluster, s)?;
    }
    let ca_present = existing.is_some();
    let found = match existing.and_then(|s| Some((AutoState::from_secret(&s, validity)?, s))) {
        Some(found) => found,
        None if ca_present => {
            return Err(Error::Invalid(Invalid {
                reason: "InvalidTLSSecret",
                message: format!(
                    "spec.TLS.auto: Secret {}/{ca_name} has no ca.crt and ca.key; delete it \
                     only if no member uses it yet",
                    api.namespace()
                ),
            }));
        }
        None => {
            // Certificates without their CA: members run on a CA whose key is gone. A new CA
            // would roll in members that no old member trusts, so nothing is made.
            let peer = secrets(cluster).peer.unwrap_or_default();
            if api.exists(&peer).await.map_err(api_err("reading", &peer))? {
                return Err(Error::Invalid(Invalid {
                    reason: "InvalidTLSSecret",
                    message: format!(
                        "spec.TLS.auto: Secret {ns}/{ca_name} (the cluster's CA) is gone while \
                         {ns}/{peer} holds certificates it signed; put it back from a backup of \
                         the namespace, or restore a backup of the data into a new cluster",
                        ns = api.namespace()
                    ),
                }));
            }
            let state = AutoState {
                ca: Ca::new(&cluster.name_any(), now, validity * 10).map_err(pki_err(cluster))?,
                next: None,
                phase: Phase::Steady,
                rotated_for: cluster
                    .annotations()
                    .get(ROTATE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
                validity,
            };
            let mut secret = owned_secret(cluster, &ca_name);
            secret.data = Some(state.to_data());
            secret.metadata.annotations = Some(ca_annotations(&state));
            match api.create(&secret).await {
                Ok(created) => (state, created),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    // Made meanwhile (by a previous leader): use that one.
                    let s = api
                        .get(&ca_name)
                        .await
                        .map_err(api_err("reading", &ca_name))?;
                    let state = AutoState::from_secret(&s, validity).ok_or_else(|| {
                        Error::Invalid(Invalid {
                            reason: "InvalidTLSSecret",
                            message: format!("spec.TLS.auto: Secret {ca_name} has no ca.crt"),
                        })
                    })?;
                    (state, s)
                }
                Err(e) => return Err(api_err("creating", &ca_name)(e)),
            }
        }
    };
    Ok(found)
}

/// The Secrets of `TLS.auto`: the CA made once (and created, never overwritten, so that two
/// writers cannot each make one), then every certificate Secret brought up to date.
async fn prepare_auto(
    api: &SecretApi,
    cluster: &EtcdCluster,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<Material, Error> {
    let (state, ca_secret) = auto_ca(api, cluster, validity, now).await?;
    let secrets = secrets(cluster);
    let mut material = Material::default();
    let mut contents: Vec<Vec<u8>> = Vec::new();
    for (name, layout, role) in [
        (&secrets.peer, pki::PEER, Role::Peer),
        (&secrets.server, pki::SERVER, Role::Server),
        (&secrets.client, pki::CLIENT, Role::Client),
    ] {
        let Some(name) = name else { continue };
        let want = names(cluster, role);
        let existing = api.get_opt(name).await.map_err(api_err("reading", name))?;
        if let Some(s) = &existing {
            not_ours(api, cluster, s)?;
        }
        let secret = match existing {
            Some(s)
                if leaf_current(
                    &s,
                    layout,
                    &state,
                    (&want, &common_name(cluster, role)),
                    now,
                ) =>
            {
                s
            }
            _ => {
                let common = common_name(cluster, role);
                let pair = state
                    .issuer()
                    .issue(role, &common, &want, now, validity)
                    .map_err(pki_err(cluster))?;
                apply(api, &leaf_secret(cluster, name, layout, &pair, &state)).await?
            }
        };
        material.add(&mut contents, role, layout, &secret);
    }
    let parts: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
    material.revision = fingerprint(&parts);
    issue_user_certificates(api, cluster, &state, validity, now).await?;
    material.auto = Some((state, ca_secret));
    Ok(material)
}

/// A Secret of the cluster holding `pair` in `layout`, marked with the CA that signed it.
fn leaf_secret(
    cluster: &EtcdCluster,
    name: &str,
    layout: Layout,
    pair: &Pair,
    state: &AutoState,
) -> Secret {
    let mut s = owned_secret(cluster, name);
    s.data = Some(
        layout
            .entries(pair, &state.bundle())
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
            .collect(),
    );
    s.metadata.annotations = Some(BTreeMap::from([(
        ISSUER_ANNOTATION.to_string(),
        fingerprint(&[state.issuer().0.cert.as_bytes()]),
    )]));
    s
}

/// The Secret of the client certificate `TLS.auto` issues to user `user` of `spec.auth`, if
/// the user's name can name a Secret.
pub fn user_secret(cluster: &str, user: &str) -> Option<String> {
    let name = format!("{cluster}-user-{user}-tls");
    let valid = name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !user.starts_with(['-', '.'])
        && !user.ends_with(['-', '.']);
    valid.then_some(name)
}

/// A client certificate with CN `user` for every user of `spec.auth` without a password (the
/// user is its certificate's CN), in a `kubernetes.io/tls` Secret the cluster owns, issued and
/// renewed with the members' certificates. Members do not mount them: a new one rolls nothing.
async fn issue_user_certificates(
    api: &SecretApi,
    cluster: &EtcdCluster,
    state: &AutoState,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<(), Error> {
    let users = cluster.spec.auth.as_ref().map(|a| a.users.as_slice());
    let certified = users
        .unwrap_or_default()
        .iter()
        .filter(|u| u.password_secret.is_none());
    for user in certified {
        let Some(name) = user_secret(&cluster.name_any(), &user.name) else {
            continue;
        };
        let existing = api
            .get_opt(&name)
            .await
            .map_err(api_err("reading", &name))?;
        if let Some(s) = &existing {
            not_ours(api, cluster, s)?;
            if leaf_current(s, pki::KUBERNETES_TLS, state, (&[], &user.name), now) {
                continue;
            }
        }
        let pair = state
            .issuer()
            .issue(Role::Client, &user.name, &[], now, validity)
            .map_err(pki_err(cluster))?;
        let mut s = leaf_secret(cluster, &name, pki::KUBERNETES_TLS, &pair, state);
        s.type_ = Some("kubernetes.io/tls".into());
        apply(api, &s).await?;
    }
    Ok(())
}

fn ca_annotations(state: &AutoState) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            PHASE_ANNOTATION.to_string(),
            state.phase.as_str().to_string(),
        ),
        (
            ROTATED_FOR_ANNOTATION.to_string(),
            state.rotated_for.clone(),
        ),
    ])
}

/// Whether a rotation of `cluster`'s automatic CA has a step to take: asked for by the
/// annotation, two thirds of the CA's validity passed, or a rotation under way. Cheap (no key
/// is made): the planner asks it every pass.
pub fn rotation_due(material: &Material, cluster: &EtcdCluster, now: OffsetDateTime) -> bool {
    material
        .auto
        .as_ref()
        .is_some_and(|(state, _)| step_due(state, &wanted_token(cluster), now))
}

/// The rotation token the annotation asks for (empty when none).
fn wanted_token(cluster: &EtcdCluster) -> String {
    cluster
        .annotations()
        .get(ROTATE_ANNOTATION)
        .cloned()
        .unwrap_or_default()
}

/// Whether [`next_state`] has a step to take from `state`.
fn step_due(state: &AutoState, wanted_token: &str, now: OffsetDateTime) -> bool {
    match state.phase {
        Phase::Steady => renewal_due(state, now) || asked(state, wanted_token),
        Phase::TrustNext => true,
        Phase::IssuedNext => state.next.is_some(),
    }
}

/// Two thirds of the CA's validity have passed (or its certificate cannot be read).
fn renewal_due(state: &AutoState, now: OffsetDateTime) -> bool {
    pki::parse_certs(state.ca.0.cert.as_bytes())
        .map(|c| c[0].renewal_due(now))
        .unwrap_or(true)
}

/// The annotation asks for a rotation not made yet.
fn asked(state: &AutoState, wanted_token: &str) -> bool {
    !wanted_token.is_empty() && wanted_token != state.rotated_for
}

/// The next state of a rotation, for members that run on the current Secrets, and what it
/// does, for the Event. Pure.
fn next_state(
    state: &AutoState,
    wanted_token: &str,
    cluster: &str,
    now: OffsetDateTime,
) -> Result<Option<(AutoState, String)>, pki::Error> {
    if !step_due(state, wanted_token, now) {
        return Ok(None);
    }
    let mut next = state.clone();
    let message = match state.phase {
        Phase::Steady => {
            let asked = asked(state, wanted_token);
            next.next = Some(Ca::new(cluster, now, state.validity * 10)?);
            next.phase = Phase::TrustNext;
            next.rotated_for = wanted_token.to_string();
            format!(
                "rotating the CA ({}): step 1 of 3, the members trust the new CA beside the old",
                if asked {
                    format!("{ROTATE_ANNOTATION} is {wanted_token}")
                } else {
                    "two thirds of its validity have passed".to_string()
                }
            )
        }
        Phase::TrustNext => {
            next.phase = Phase::IssuedNext;
            "rotating the CA: step 2 of 3, the members get certificates of the new CA".to_string()
        }
        Phase::IssuedNext => {
            let Some(new) = state.next.clone() else {
                return Ok(None);
            };
            next.ca = new;
            next.next = None;
            next.phase = Phase::Steady;
            "rotating the CA: step 3 of 3, the members trust only the new CA".to_string()
        }
    };
    Ok(Some((next, message)))
}

/// Moves a rotation of `cluster`'s automatic CA one step on. Planned ([`Action::RotateCa`])
/// only when the members run on the current Secrets (every pod current, every member a
/// healthy voter), so that each step's roll has finished before the next begins.
///
/// [`Action::RotateCa`]: crate::cluster::plan::Action::RotateCa
/// Returns what it did, for an Event.
pub async fn advance(
    api: &SecretApi,
    cluster: &EtcdCluster,
    material: &Material,
    now: OffsetDateTime,
) -> Result<Option<String>, Error> {
    let Some((state, ca_secret)) = &material.auto else {
        return Ok(None);
    };
    let wanted = wanted_token(cluster);
    let Some((next, message)) =
        next_state(state, &wanted, &cluster.name_any(), now).map_err(pki_err(cluster))?
    else {
        return Ok(None);
    };
    // Replaced whole, not applied: apply would keep next.crt, which the last step removes.
    let mut secret = ca_secret.clone();
    secret.data = Some(next.to_data());
    secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(ca_annotations(&next));
    api.replace(&secret)
        .await
        .map_err(api_err("writing", &secret.name_any()))?;
    Ok(Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    const YEAR: Duration = Duration::from_secs(8760 * 3600);

    fn steady() -> AutoState {
        AutoState {
            ca: Ca::new("c", now(), YEAR * 10).unwrap(),
            next: None,
            phase: Phase::Steady,
            rotated_for: String::new(),
            validity: YEAR,
        }
    }

    #[test]
    fn a_user_whose_name_can_name_a_secret_gets_one() {
        assert_eq!(
            user_secret("tenants", "tenant-a").as_deref(),
            Some("tenants-user-tenant-a-tls")
        );
        assert_eq!(user_secret("tenants", "Tenant:A"), None);
        assert_eq!(user_secret("tenants", "-a"), None);
    }

    #[test]
    fn a_step_is_due_exactly_when_next_state_has_one() {
        let s0 = steady();
        assert!(!step_due(&s0, "", now()));
        assert!(step_due(&s0, "r1", now()));
        let (s1, _) = next_state(&s0, "r1", "c", now()).unwrap().unwrap();
        assert!(step_due(&s1, "r1", now()));
        let (s2, _) = next_state(&s1, "r1", "c", now()).unwrap().unwrap();
        assert!(step_due(&s2, "r1", now()));
        let (s3, _) = next_state(&s2, "r1", "c", now()).unwrap().unwrap();
        assert!(!step_due(&s3, "r1", now()));
        assert_eq!(next_state(&s3, "r1", "c", now()).unwrap(), None);
        // Two thirds of ten years later, renewal is due without being asked.
        let later = now() + YEAR * 7;
        assert!(step_due(&s3, "r1", later));
    }

    #[test]
    fn a_rotation_takes_three_settled_steps_and_ends_on_the_new_ca() {
        let s0 = steady();
        assert_eq!(next_state(&s0, "", "c", now()).unwrap(), None);

        let (s1, m1) = next_state(&s0, "r1", "c", now()).unwrap().unwrap();
        assert_eq!(s1.phase, Phase::TrustNext);
        assert!(m1.contains("step 1 of 3") && m1.contains("r1"), "{m1}");
        let new = s1.next.clone().unwrap();
        assert_ne!(new, s0.ca);
        // Both trusted, the old one still signs.
        assert_eq!(s1.issuer(), &s0.ca);
        assert!(s1.bundle().contains(&s0.ca.0.cert) && s1.bundle().contains(&new.0.cert));

        let (s2, _) = next_state(&s1, "r1", "c", now()).unwrap().unwrap();
        assert_eq!(s2.phase, Phase::IssuedNext);
        assert_eq!(s2.issuer(), &new);
        assert_eq!(s2.bundle(), s1.bundle());

        let (s3, m3) = next_state(&s2, "r1", "c", now()).unwrap().unwrap();
        assert!(m3.contains("step 3 of 3"), "{m3}");
        assert_eq!(s3.phase, Phase::Steady);
        assert_eq!(s3.ca, new);
        assert_eq!(s3.bundle(), new.0.cert);
        // The same token does not rotate again.
        assert_eq!(next_state(&s3, "r1", "c", now()).unwrap(), None);
    }

    #[test]
    fn the_ca_rotates_by_itself_when_two_thirds_of_it_have_passed() {
        let s0 = steady();
        let later = now() + time::Duration::days(365 * 7);
        let (s1, m) = next_state(&s0, "", "c", later).unwrap().unwrap();
        assert_eq!(s1.phase, Phase::TrustNext);
        assert!(m.contains("two thirds"), "{m}");
    }

    #[test]
    fn a_leaf_is_reissued_when_its_signer_its_trust_or_its_age_changes() {
        let s0 = steady();
        let cluster: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"size": 3, "TLS": {"auto": {}}}
        }))
        .unwrap();
        let want = names(&cluster, Role::Peer);
        assert_eq!(want[0], "*.c.ns.svc");
        let pair = s0
            .issuer()
            .issue(Role::Peer, "c", &want, now(), YEAR)
            .unwrap();
        let mut secret = owned_secret(&cluster, "c-peer-tls");
        secret.data = Some(BTreeMap::from([
            ("peer.crt".to_string(), ByteString(pair.cert.into_bytes())),
            ("peer.key".to_string(), ByteString(pair.key.into_bytes())),
            (
                "peer-ca.crt".to_string(),
                ByteString(s0.bundle().into_bytes()),
            ),
        ]));
        secret.metadata.annotations = Some(BTreeMap::from([(
            ISSUER_ANNOTATION.to_string(),
            fingerprint(&[s0.ca.0.cert.as_bytes()]),
        )]));
        assert!(leaf_current(&secret, pki::PEER, &s0, (&want, ""), now()));
        let later = now() + time::Duration::days(250);
        assert!(!leaf_current(&secret, pki::PEER, &s0, (&want, ""), later));
        let (s1, _) = next_state(&s0, "r", "c", now()).unwrap().unwrap();
        assert!(
            !leaf_current(&secret, pki::PEER, &s1, (&want, ""), now()),
            "trust changed"
        );
        assert!(
            !leaf_current(&secret, pki::PEER, &s0, (&want[1..], ""), now()),
            "names changed"
        );
    }
}
