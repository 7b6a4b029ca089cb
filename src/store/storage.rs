//! Where snapshots go: an object store built from an EtcdBackup's (or EtcdRestore's) storage
//! section and the Secret it names, in the coreos Secret formats, so that Secrets made for the
//! coreos operator keep working:
//!
//! - S3 (`awsSecret`): `credentials` and `config`, the AWS shared files, profile `default`
//!   (`aws_access_key_id`, `aws_secret_access_key`, optional `aws_session_token`; `region`);
//!   Ours, optional: `sse-customer-key`, the base64 of the 32-byte key of `encryption.mode`
//!   SSE-C;
//! - ABS (`absSecret`): `storage-account`, `storage-key`; ours, optional: `storage-endpoint`
//!   for an Azure-compatible server such as Azurite, and `storage-encryption-key`, the base64
//!   of a 32-byte customer-provided key (CPK) that encrypts what is written and reads it back;
//! - GCS (`gcpSecret`): `access-token` (an OAuth2 bearer token), or `credentials.json` (a
//!   service account key).
//!
//! A section without a Secret gets no credentials at all: the operator never lends its own
//! cloud identity (its pod's environment, a node's instance metadata) to whoever may create an
//! EtcdBackup, unless an administrator allowed that namespace ([`allow_ambient`]).
//!
//! Pure except for [`build`], which only constructs the client (no request is made).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use object_store::ObjectStore;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::azure::{MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};
use object_store::path::Path;

use crate::api::{AbsSource, GcsSource, S3Encryption, S3EncryptionMode, S3Source, StorageType};

/// What is wrong with a storage section or its Secret. Every message names the field or the
/// Secret key, so a user can fix it from the status alone.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage type has no section, or is not supported.
    #[error("{0}")]
    Spec(String),
    /// The Secret lacks a key, or a key holds something unreadable.
    #[error("Secret {secret}: {problem}")]
    Secret {
        /// The Secret's name.
        secret: String,
        /// What is missing or wrong, naming the key.
        problem: String,
    },
    /// object_store refused the settings.
    #[error("configuring {kind} storage: {source}")]
    Build {
        /// S3, ABS or GCS.
        kind: &'static str,
        #[source]
        source: object_store::Error,
    },
}

/// The namespaces whose backups and restores may use the operator's own cloud identity when
/// their storage section names no Secret (`--ambient-credentials-namespaces`; `*` for all).
/// Set once at start; unset, none may.
static AMBIENT: OnceLock<Vec<String>> = OnceLock::new();

/// Allows the storage sections of `namespaces` without a Secret to use the operator's own
/// identity: the environment its pod is given (IRSA's web identity token, GKE workload
/// identity), falling back to the platform's metadata server. Called once, at start.
pub fn allow_ambient(namespaces: Vec<String>) {
    let _ = AMBIENT.set(namespaces.into_iter().filter(|n| !n.is_empty()).collect());
}

/// Whether a storage section of namespace `ns` without a Secret may use the operator's own
/// identity.
pub fn ambient_allowed(ns: &str) -> bool {
    AMBIENT
        .get()
        .is_some_and(|allowed| allowed.iter().any(|n| n == ns || n == "*"))
}

/// Why a section without a Secret (`field`) is refused in namespace `ns`.
pub fn no_ambient(field: &str, ns: &str) -> Error {
    Error::Spec(format!(
        "{field} is not set: name a Secret with the store's credentials; this operator lends \
         its own cloud identity only to the namespaces its administrator listed \
         (backups.ambientCredentials.namespaces), and {ns:?} is not one of them"
    ))
}

/// Splits a coreos storage path, `<bucket or container>/<key>`, into its two parts.
pub fn split_path(path: &str) -> Option<(&str, Path)> {
    let (bucket, key) = path.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then(|| (bucket, Path::from(key)))
}

/// One profile of an AWS shared file (`credentials` or `config`): its `key = value` pairs. In
/// `config`, profiles other than `default` are written `[profile NAME]`.
pub fn aws_profile(file: &str, profile: &str) -> BTreeMap<String, String> {
    let mut current = None::<String>;
    let mut values = BTreeMap::new();
    for line in file.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim();
            let name = section.strip_prefix("profile ").unwrap_or(section).trim();
            current = Some(name.to_string());
            continue;
        }
        if current.as_deref() == Some(profile)
            && let Some((k, v)) = line.split_once('=')
        {
            values.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    values
}

/// The Secret's data, as text.
pub type SecretData = BTreeMap<String, String>;

fn key<'a>(data: &'a SecretData, secret: &str, key: &str) -> Result<&'a str, Error> {
    data.get(key)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::Secret {
            secret: secret.into(),
            problem: format!("has no key {key:?}"),
        })
}

/// An object store and the location of the object inside it.
pub struct Target {
    /// The store, rooted at the bucket or container.
    pub store: Arc<dyn ObjectStore>,
    /// The object's key inside it.
    pub location: Path,
    /// `s3://bucket/key` and the like, for status and Events.
    pub url: String,
    /// How metadata is attached to a finished object.
    pub metadata: Metadata,
}

impl Target {
    /// The same store and settings, for another object in it.
    pub fn with_location(&self, location: Path) -> Target {
        let key = self.location.as_ref();
        let base = self.url.strip_suffix(key).unwrap_or(&self.url);
        Target {
            store: self.store.clone(),
            url: format!("{base}{location}"),
            location,
            metadata: self.metadata.clone(),
        }
    }
}

/// How metadata reaches an object after its upload. The sha256 of a snapshot is known only
/// once the stream has ended, after the multipart upload (which carries the object's metadata)
/// was created, and object_store has no call that changes metadata later; so the one request
/// each store has for it is presigned by object_store's own signer (see
/// [`crate::store::snapshot::set_metadata`]).
#[derive(Clone)]
pub enum Metadata {
    /// S3 copies the object onto itself with `x-amz-metadata-directive: REPLACE`.
    S3 {
        /// The store, as a signer.
        store: Arc<AmazonS3>,
        /// Its bucket (the copy source names it).
        bucket: String,
        /// The encryption headers of the copy: a copy states its encryption again (S3 would
        /// otherwise store it under the bucket's default, an SSE-KMS backup silently becoming
        /// SSE-S3), and an SSE-C source is read with its key.
        encryption: Headers,
    },
    /// Azure's Set Blob Metadata, with the customer-provided key's headers when one is set.
    Abs {
        /// The store, as a signer.
        store: Arc<MicrosoftAzure>,
        /// The CPK headers.
        encryption: Headers,
    },
    /// GCS: a token alone cannot presign, and an object's metadata is not changed here.
    Unsupported,
}

/// Request headers, name and value.
pub type Headers = Vec<(String, String)>;

/// The 32-byte key in `data[name]` as base64, checked.
fn customer_key(data: &SecretData, secret: &str, name: &str) -> Result<String, Error> {
    use base64::Engine;
    let encoded = key(data, secret, name)?;
    match base64::engine::general_purpose::STANDARD.decode(encoded) {
        Ok(bytes) if bytes.len() == 32 => Ok(encoded.to_string()),
        Ok(bytes) => Err(Error::Secret {
            secret: secret.into(),
            problem: format!(
                "{name:?} must be the base64 of a 32-byte key, it decodes to {} bytes",
                bytes.len()
            ),
        }),
        Err(e) => Err(Error::Secret {
            secret: secret.into(),
            problem: format!("{name:?} is not base64: {e}"),
        }),
    }
}

/// The base64 of the MD5 of a base64 key, as SSE-C and CPK headers carry it.
fn key_md5(key_base64: &str) -> String {
    use base64::Engine;
    use md5::Digest;
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine.decode(key_base64).unwrap_or_default();
    engine.encode(md5::Md5::digest(key))
}

/// The base64 of the SHA-256 of a base64 key, as Azure's CPK headers carry it.
fn key_sha256(key_base64: &str) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine.decode(key_base64).unwrap_or_default();
    engine.encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &key))
}

/// `encryption` applied to `builder`, and the headers a copy of an object in place repeats.
/// `customer_key` is the SSE-C key (base64).
fn s3_encryption(
    builder: AmazonS3Builder,
    encryption: &S3Encryption,
    customer_key: Option<String>,
) -> (AmazonS3Builder, Headers) {
    use object_store::aws::AmazonS3ConfigKey;
    let sse = "x-amz-server-side-encryption";
    // object_store names these settings only by their keys (its enum of them is private); the
    // moto test shows they reach the server.
    let set = |b: AmazonS3Builder, k: &str, v: &str| match k.parse::<AmazonS3ConfigKey>() {
        Ok(k) => b.with_config(k, v),
        Err(_) => b,
    };
    let mut headers = Headers::new();
    let builder = match (encryption.mode, customer_key) {
        (S3EncryptionMode::SseC, Some(key)) => {
            let md5 = key_md5(&key);
            for prefix in ["x-amz-", "x-amz-copy-source-"] {
                headers.push((
                    format!("{prefix}server-side-encryption-customer-algorithm"),
                    "AES256".into(),
                ));
                headers.push((
                    format!("{prefix}server-side-encryption-customer-key"),
                    key.clone(),
                ));
                headers.push((
                    format!("{prefix}server-side-encryption-customer-key-MD5"),
                    md5.clone(),
                ));
            }
            builder.with_ssec_encryption(key)
        }
        (mode, _) => {
            let value = match mode {
                S3EncryptionMode::SseKms => "aws:kms",
                S3EncryptionMode::DsseKms => "aws:kms:dsse",
                _ => "AES256",
            };
            headers.push((sse.into(), value.into()));
            let mut b = set(builder, "aws_server_side_encryption", value);
            if let Some(id) = encryption.kms_key_id.as_deref() {
                headers.push((format!("{sse}-aws-kms-key-id"), id.into()));
                b = set(b, "aws_sse_kms_key_id", id);
            }
            if let Some(on) = encryption.bucket_key {
                headers.push((format!("{sse}-bucket-key-enabled"), on.to_string()));
                b = b.with_bucket_key(on);
            }
            b
        }
    };
    (builder, headers)
}

/// The store for an S3 section; `data` is the Secret's data when `awsSecret` is set, and
/// `None` only where [`ambient_allowed`] (the pod's environment then gives the credentials).
pub fn s3(source: &S3Source, data: Option<&SecretData>) -> Result<Target, Error> {
    let (bucket, location) = split_path(&source.path).ok_or_else(|| {
        Error::Spec(format!(
            "s3.path must be <bucket>/<key>, got {:?}",
            source.path
        ))
    })?;
    // Bodies are not hashed into the request's signature: each part would be hashed once more
    // by us and again by the server, while a snapshot's integrity is checked end to end (its
    // sha256, recorded in the EtcdBackup's status and the object's metadata, is checked by
    // every restore, as is etcd's own hash inside it) and TLS guards it in transit.
    let base = match data {
        Some(_) => AmazonS3Builder::new(),
        None => AmazonS3Builder::from_env(),
    };
    let mut builder = base.with_bucket_name(bucket).with_unsigned_payload(true);
    if let (Some(data), Some(secret)) = (data, source.aws_secret.as_deref()) {
        let credentials = key(data, secret, "credentials")?;
        let profile = aws_profile(credentials, "default");
        let field = |name: &str| {
            profile.get(name).cloned().ok_or_else(|| Error::Secret {
                secret: secret.into(),
                problem: format!("its \"credentials\" file has no {name} in [default]"),
            })
        };
        builder = builder
            .with_access_key_id(field("aws_access_key_id")?)
            .with_secret_access_key(field("aws_secret_access_key")?);
        if let Some(token) = profile.get("aws_session_token") {
            builder = builder.with_token(token);
        }
        if let Some(config) = data.get("config")
            && let Some(region) = aws_profile(config, "default").get("region")
        {
            builder = builder.with_region(region);
        }
    }
    if let Some(endpoint) = source.endpoint.as_deref().filter(|e| !e.is_empty()) {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    // coreos's forcePathStyle: bucket in the path, as S3-compatible servers need.
    builder = builder.with_virtual_hosted_style_request(!source.force_path_style.unwrap_or(false));
    let mut encryption = Headers::new();
    if let Some(how) = &source.encryption {
        let customer = match (how.mode, data, source.aws_secret.as_deref()) {
            (S3EncryptionMode::SseC, Some(data), Some(secret)) => {
                Some(customer_key(data, secret, "sse-customer-key")?)
            }
            (S3EncryptionMode::SseC, _, _) => {
                return Err(Error::Spec(
                    "s3.encryption.mode SSE-C reads its key from s3.awsSecret (key \
                     sse-customer-key): set awsSecret"
                        .into(),
                ));
            }
            _ => None,
        };
        (builder, encryption) = s3_encryption(builder, how, customer);
    }
    let store = Arc::new(
        builder
            .build()
            .map_err(|source| Error::Build { kind: "S3", source })?,
    );
    Ok(Target {
        url: format!("s3://{bucket}/{location}"),
        metadata: Metadata::S3 {
            store: store.clone(),
            bucket: bucket.to_string(),
            encryption,
        },
        store,
        location,
    })
}

/// The store for an ABS section.
pub fn abs(source: &AbsSource, data: &SecretData) -> Result<Target, Error> {
    let (container, location) = split_path(&source.path).ok_or_else(|| {
        Error::Spec(format!(
            "abs.path must be <container>/<blob>, got {:?}",
            source.path
        ))
    })?;
    let secret = source.abs_secret.as_str();
    let mut builder = MicrosoftAzureBuilder::new()
        .with_container_name(container)
        .with_account(key(data, secret, "storage-account")?)
        .with_access_key(key(data, secret, "storage-key")?);
    if let Some(endpoint) = data.get("storage-endpoint").map(|e| e.trim()) {
        builder = builder
            .with_endpoint(endpoint.to_string())
            .with_allow_http(endpoint.starts_with("http://"));
    }
    let mut encryption = Headers::new();
    if data.contains_key("storage-encryption-key") {
        let key = customer_key(data, secret, "storage-encryption-key")?;
        encryption = vec![
            ("x-ms-encryption-key".into(), key.clone()),
            ("x-ms-encryption-key-sha256".into(), key_sha256(&key)),
            ("x-ms-encryption-algorithm".into(), "AES256".into()),
        ];
        builder = builder.with_encryption_key(key);
    }
    let store = Arc::new(builder.build().map_err(|source| Error::Build {
        kind: "ABS",
        source,
    })?);
    Ok(Target {
        url: format!("abs://{container}/{location}"),
        metadata: Metadata::Abs {
            store: store.clone(),
            encryption,
        },
        store,
        location,
    })
}

/// The store for a GCS section; `data` is `None` only where [`ambient_allowed`].
pub fn gcs(source: &GcsSource, data: Option<&SecretData>) -> Result<Target, Error> {
    let (bucket, location) = split_path(&source.path).ok_or_else(|| {
        Error::Spec(format!(
            "gcs.path must be <bucket>/<object>, got {:?}",
            source.path
        ))
    })?;
    let base = match data {
        Some(_) => GoogleCloudStorageBuilder::new(),
        None => GoogleCloudStorageBuilder::from_env(),
    };
    let mut builder = base.with_bucket_name(bucket);
    if let (Some(data), Some(secret)) = (data, source.gcp_secret.as_deref()) {
        if let Some(token) = data.get("access-token").filter(|t| !t.trim().is_empty()) {
            builder = builder.with_credentials(Arc::new(
                object_store::StaticCredentialProvider::new(GcpCredential {
                    bearer: token.trim().to_string(),
                }),
            ));
        } else if let Some(json) = data.get("credentials.json") {
            builder = builder.with_service_account_key(json);
        } else {
            return Err(Error::Secret {
                secret: secret.into(),
                problem: "has neither \"access-token\" nor \"credentials.json\"".into(),
            });
        }
    }
    let store = builder.build().map_err(|source| Error::Build {
        kind: "GCS",
        source,
    })?;
    Ok(Target {
        url: format!("gs://{bucket}/{location}"),
        store: Arc::new(store),
        location,
        metadata: Metadata::Unsupported,
    })
}

/// The name of the Secret a storage section names, if any, with the field it came from.
pub fn secret_of(
    storage: StorageType,
    s3: Option<&S3Source>,
    abs: Option<&AbsSource>,
    gcs: Option<&GcsSource>,
) -> Option<(&'static str, String)> {
    match storage {
        StorageType::S3 => s3
            .and_then(|s| s.aws_secret.clone())
            .map(|n| ("s3.awsSecret", n)),
        StorageType::Abs => abs.map(|a| ("abs.absSecret", a.abs_secret.clone())),
        StorageType::Gcs => gcs
            .and_then(|g| g.gcp_secret.clone())
            .map(|n| ("gcs.gcpSecret", n)),
        StorageType::Oss => None,
    }
    .filter(|(_, n)| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREDENTIALS: &str = "\
# written by `aws configure`
[default]
aws_access_key_id = AKIAEXAMPLE
aws_secret_access_key=secret/with+chars

[other]
aws_access_key_id = NOT-THIS
";
    const CONFIG: &str = "[profile other]\nregion = eu-west-1\n[default]\nregion = us-west-2\n";

    #[test]
    fn aws_shared_files_are_read_by_profile() {
        let p = aws_profile(CREDENTIALS, "default");
        assert_eq!(p["aws_access_key_id"], "AKIAEXAMPLE");
        assert_eq!(p["aws_secret_access_key"], "secret/with+chars");
        assert_eq!(aws_profile(CONFIG, "default")["region"], "us-west-2");
        assert_eq!(aws_profile(CONFIG, "other")["region"], "eu-west-1");
    }

    #[test]
    fn paths_split_into_bucket_and_key() {
        let (bucket, key) = split_path("my-bucket/etcd/prod.db").unwrap();
        assert_eq!(bucket, "my-bucket");
        assert_eq!(key.as_ref(), "etcd/prod.db");
        assert!(split_path("no-key").is_none());
        assert!(split_path("/key").is_none());
        assert!(split_path("bucket/").is_none());
    }

    fn data(pairs: &[(&str, &str)]) -> SecretData {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_coreos_s3_secret_builds_a_store_and_a_missing_key_is_named() {
        let source = S3Source {
            path: "bucket/backups/etcd.db".into(),
            aws_secret: Some("aws".into()),
            endpoint: Some("http://10.0.0.1:9000".into()),
            force_path_style: Some(true),
            encryption: None,
        };
        let target = s3(
            &source,
            Some(&data(&[("credentials", CREDENTIALS), ("config", CONFIG)])),
        )
        .unwrap();
        assert_eq!(target.url, "s3://bucket/backups/etcd.db");
        assert_eq!(target.location.as_ref(), "backups/etcd.db");

        let err = s3(&source, Some(&data(&[("config", CONFIG)])))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, "Secret aws: has no key \"credentials\"");
        let err = s3(&source, Some(&data(&[("credentials", "[default]\n")])))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no aws_access_key_id in [default]"), "{err}");
    }

    #[test]
    fn abs_and_gcs_secrets_are_read_in_the_coreos_keys() {
        let abs_source = AbsSource {
            path: "container/etcd.db".into(),
            abs_secret: "abs".into(),
        };
        let ok = data(&[
            ("storage-account", "devstoreaccount1"),
            ("storage-key", "Zm9vYmFy"),
            ("storage-endpoint", "http://10.0.0.1:10000/devstoreaccount1"),
        ]);
        assert_eq!(
            abs(&abs_source, &ok).unwrap().url,
            "abs://container/etcd.db"
        );
        let err = abs(&abs_source, &data(&[("storage-account", "a")]))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, "Secret abs: has no key \"storage-key\"");

        let gcs_source = GcsSource {
            path: "bucket/etcd.db".into(),
            gcp_secret: Some("gcp".into()),
        };
        assert!(gcs(&gcs_source, Some(&data(&[("access-token", "ya29.token")]))).is_ok());
        let err = gcs(&gcs_source, Some(&data(&[])))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("neither \"access-token\" nor \"credentials.json\""),
            "{err}"
        );
    }

    /// 32 zero bytes, base64; its MD5 and SHA-256, base64, as Python's hashlib gives them.
    const ZERO_KEY: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    const ZERO_KEY_MD5: &str = "cLyPS3KoaSFGi/joRB3OUQ==";
    const ZERO_KEY_SHA256: &str = "Zmh6rfhivXdsj8GLjp+OIAiXFIVu4jOzkCpZHQ1fKSU=";

    fn encrypted(mode: S3EncryptionMode, kms: Option<&str>) -> S3Source {
        S3Source {
            path: "bucket/etcd.db".into(),
            aws_secret: Some("aws".into()),
            encryption: Some(S3Encryption {
                mode,
                kms_key_id: kms.map(String::from),
                bucket_key: kms.map(|_| true),
            }),
            ..Default::default()
        }
    }

    fn copy_headers(target: &Target) -> Headers {
        match &target.metadata {
            Metadata::S3 { encryption, .. } | Metadata::Abs { encryption, .. } => {
                encryption.clone()
            }
            Metadata::Unsupported => vec![],
        }
    }

    #[test]
    fn an_encrypted_object_is_copied_with_its_encryption_and_a_bad_key_is_named() {
        let owned = |h: &[(&str, &str)]| -> Headers {
            h.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let creds = [("credentials", CREDENTIALS)];
        let kms = s3(
            &encrypted(S3EncryptionMode::SseKms, Some("alias/etcd")),
            Some(&data(&creds)),
        );
        assert_eq!(
            copy_headers(&kms.unwrap()),
            owned(&[
                ("x-amz-server-side-encryption", "aws:kms"),
                ("x-amz-server-side-encryption-aws-kms-key-id", "alias/etcd"),
                ("x-amz-server-side-encryption-bucket-key-enabled", "true"),
            ])
        );
        let with_key = data(&[("credentials", CREDENTIALS), ("sse-customer-key", ZERO_KEY)]);
        let ssec = s3(&encrypted(S3EncryptionMode::SseC, None), Some(&with_key)).unwrap();
        let headers = copy_headers(&ssec);
        for prefix in ["x-amz-", "x-amz-copy-source-"] {
            for (name, value) in [
                ("algorithm", "AES256"),
                ("key", ZERO_KEY),
                ("key-MD5", ZERO_KEY_MD5),
            ] {
                let name = format!("{prefix}server-side-encryption-customer-{name}");
                assert!(
                    headers.contains(&(name.clone(), value.into())),
                    "{name}: {headers:?}"
                );
            }
        }
        for name in ["aws_server_side_encryption", "aws_sse_kms_key_id"] {
            let parsed = name.parse::<object_store::aws::AmazonS3ConfigKey>();
            assert!(parsed.is_ok(), "{name}");
        }
        // No key, or not 32 bytes: refused, naming the Secret's key.
        let err = s3(
            &encrypted(S3EncryptionMode::SseC, None),
            Some(&data(&creds)),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("sse-customer-key"), "{err}");
        let short = data(&[("credentials", CREDENTIALS), ("sse-customer-key", "AAAA")]);
        let err = s3(&encrypted(S3EncryptionMode::SseC, None), Some(&short))
            .err()
            .unwrap();
        assert!(err.to_string().contains("decodes to 3 bytes"), "{err}");
        let abs_secret = data(&[
            ("storage-account", "account"),
            ("storage-key", "a2V5"),
            ("storage-encryption-key", ZERO_KEY),
        ]);
        let source = AbsSource {
            path: "container/etcd.db".into(),
            abs_secret: "abs".into(),
        };
        assert!(
            copy_headers(&abs(&source, &abs_secret).unwrap())
                .contains(&("x-ms-encryption-key-sha256".into(), ZERO_KEY_SHA256.into()))
        );
    }
}
