//! A snapshot of real etcd streamed, in several parts, into real object-store APIs on 127.0.0.1
//! (moto's S3, Azurite's Azure Blob; tests/support/stores.rs), through stores built from
//! coreos-format Secrets: the object is what etcd sent, its sha256 then becomes its metadata,
//! and a refused stream leaves neither an object nor (S3) an unfinished multipart upload.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use etcd_operator::api::{AbsSource, S3Encryption, S3EncryptionMode, S3Source};
use etcd_operator::store::snapshot::{self, Error, hex};
use etcd_operator::store::storage;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{Attribute, ObjectStoreExt, PutMultipartOptions};
use support::stores::{AZURITE_ACCOUNT, AZURITE_KEY, Azurite, Moto, Versitygw, s3_curl};
use support::{EtcdProcess, etcd_binary};

const BUCKET: &str = "backups";

/// A single etcd 3.6 member holding about 20 MiB: three parts of an upload.
async fn etcd_with_20_mib(token: &str) -> EtcdProcess {
    let binary = etcd_binary("3.6");
    let mut m = EtcdProcess::plan("m0");
    let cluster = m.initial_cluster_entry();
    m.start(
        &binary,
        &cluster,
        "new",
        &format!("{token}-{}", std::process::id()),
    );
    let mut client = etcd_client::Client::connect([m.client_url.as_str()], None)
        .await
        .unwrap();
    for i in 0..2000 {
        client
            .put(format!("key-{i:05}"), vec![b'x'; 10 * 1024], None)
            .await
            .unwrap();
    }
    m
}

/// `object` with one byte flipped, as a snapshot stream.
fn corrupted(
    object: &[u8],
) -> futures::stream::BoxStream<'static, Result<Vec<u8>, etcd_operator::etcd::Error>> {
    let mut corrupted = object.to_vec();
    corrupted[1 << 20] ^= 0xff;
    futures::stream::iter(
        corrupted
            .chunks(32 * 1024)
            .map(|c| Ok(c.to_vec()))
            .collect::<Vec<_>>(),
    )
    .boxed()
}

/// A snapshot of `m` into `target`, then its sha256 set as the object's metadata (known only
/// at the stream's end, so set afterwards), as the backup controller does.
async fn save_with_metadata(m: &EtcdProcess, target: &storage::Target) -> snapshot::Saved {
    let saved = snapshot::save(
        &m.endpoint(),
        target.store.as_ref(),
        &target.location,
        PutMultipartOptions::default(),
        Duration::from_secs(120),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    snapshot::set_metadata(
        &target.metadata,
        &target.location,
        saved.verified.size,
        &[("sha256", &saved.verified.sha256), ("etcd_revision", "1")],
    )
    .await
    .unwrap();
    saved
}

/// Uploads `object` with one byte flipped to `cluster/corrupted.db`: refused by its hash once
/// every part was sent. Returns where it would have been.
async fn refuse_corrupted(store: &dyn object_store::ObjectStore, object: &[u8]) -> Path {
    let refused = Path::from("cluster/corrupted.db");
    let err = snapshot::upload(
        corrupted(object),
        store,
        &refused,
        PutMultipartOptions::default(),
        Duration::from_secs(120),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    refused
}

/// Through the S3 server at `url` (with `bucket` made): a snapshot streamed in parts, its
/// sha256 set as metadata by the copy in place, the bytes read back, listed, and a refused
/// stream leaving no object, nor an unfinished multipart upload.
async fn s3_round_trip(url: &str, token: &str) {
    // Built the way an EtcdBackup's S3 section and its coreos-format Secret are.
    let source = S3Source {
        path: format!("{BUCKET}/cluster/snapshot.db"),
        aws_secret: Some("aws".into()),
        endpoint: Some(url.into()),
        force_path_style: Some(true),
        encryption: None,
    };
    let secret: storage::SecretData = [
        (
            "credentials",
            "[default]\naws_access_key_id = test\naws_secret_access_key = test\n",
        ),
        ("config", "[default]\nregion = us-east-1\n"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let target = storage::s3(&source, Some(&secret)).unwrap();
    let store = target.store.as_ref();
    assert_eq!(target.url, format!("s3://{BUCKET}/cluster/snapshot.db"));

    let m = etcd_with_20_mib(token).await;
    let location = target.location.clone();
    let saved = save_with_metadata(&m, &target).await;
    assert!(saved.verified.size > 16 << 20, "{}", saved.verified.size);
    let got = store.get(&location).await.unwrap();
    assert_eq!(
        got.attributes
            .get(&Attribute::Metadata("sha256".into()))
            .map(|v| v.as_ref()),
        Some(saved.verified.sha256.as_str()),
        "{:?}",
        got.attributes
    );
    let object = got.bytes().await.unwrap();
    assert_eq!(object.len() as u64, saved.verified.size);
    assert_eq!(
        saved.verified.sha256,
        hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &object).as_ref())
    );
    let listed: Vec<_> = store
        .list(Some(&Path::from("cluster")))
        .map(|m| m.unwrap().location.to_string())
        .collect()
        .await;
    assert_eq!(listed, ["cluster/snapshot.db"]);

    // The same bytes with one flipped: refused after the parts were sent, and aborted.
    let refused = refuse_corrupted(store, &object).await;
    assert!(matches!(
        store.head(&refused).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let uploads = s3_curl(url, &[], &format!("/{BUCKET}?uploads="));
    let uploads = String::from_utf8_lossy(&uploads);
    assert!(!uploads.contains("<Upload>"), "{uploads}");
    store.delete(&location).await.unwrap();
    assert!(matches!(
        store.head(&location).await,
        Err(object_store::Error::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_streams_into_s3_in_parts_and_a_refused_one_leaves_nothing() {
    let moto = Moto::start("127.0.0.1");
    moto.create_bucket(BUCKET);
    s3_round_trip(&moto.url, "s3").await;
}

/// The backup benchmark's fast store does all that the backups need of S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versitygw_takes_what_backups_need_parts_metadata_listing_aborts_and_deletes() {
    let server = Versitygw::start("127.0.0.1");
    server.create_bucket(BUCKET);
    s3_round_trip(&server.url, "vgw").await;
}

/// moto keeps what an object was written with (SSE-S3, SSE-KMS and its key) and reports it;
/// it does not enforce SSE-C (an object written with a key reads back without one), so SSE-C
/// is shown by the headers' unit tests alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_encryption_is_asked_for_and_survives_the_metadata_copy() {
    let moto = Moto::start("127.0.0.1");
    moto.create_bucket(BUCKET);
    let secret: storage::SecretData = [(
        "credentials",
        "[default]\naws_access_key_id = test\naws_secret_access_key = test\n",
    )]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let m = etcd_with_20_mib("sse").await;
    let kms = "arn:aws:kms:us-east-1:123456789012:key/backup-key";
    for (key, mode, kms_key_id, expected) in [
        ("sse-s3.db", S3EncryptionMode::SseS3, None, "AES256"),
        ("sse-kms.db", S3EncryptionMode::SseKms, Some(kms), "aws:kms"),
    ] {
        let source = S3Source {
            path: format!("{BUCKET}/cluster/{key}"),
            aws_secret: Some("aws".into()),
            endpoint: Some(moto.url.clone()),
            force_path_style: Some(true),
            encryption: Some(S3Encryption {
                mode,
                kms_key_id: kms_key_id.map(String::from),
                bucket_key: None,
            }),
        };
        let target = storage::s3(&source, Some(&secret)).unwrap();
        let saved = save_with_metadata(&m, &target).await;
        let object = format!("cluster/{key}");
        // The copy that set the metadata kept the encryption (a copy without it would have
        // been stored under the bucket's default, AES256, and without the KMS key).
        assert_eq!(
            moto.metadata(BUCKET, &object, "sha256").as_deref(),
            Some(saved.verified.sha256.as_str())
        );
        assert_eq!(
            moto.header(BUCKET, &object, "x-amz-server-side-encryption")
                .as_deref(),
            Some(expected),
            "{key}"
        );
        assert_eq!(
            moto.header(
                BUCKET,
                &object,
                "x-amz-server-side-encryption-aws-kms-key-id"
            )
            .as_deref(),
            kms_key_id,
            "{key}"
        );
        // Read back through the same store, whole.
        let back = target.store.get(&target.location).await.unwrap();
        assert_eq!(
            back.bytes().await.unwrap().len() as u64,
            saved.verified.size
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_streams_into_azure_blob_and_a_refused_one_leaves_nothing() {
    let azurite = Azurite::start("127.0.0.1");
    azurite.create_container("backups");
    // A coreos ABS Secret, plus our storage-endpoint for an Azure-compatible server.
    let source = AbsSource {
        path: "backups/cluster/snapshot.db".into(),
        abs_secret: "abs".into(),
    };
    let secret: storage::SecretData = [
        ("storage-account", AZURITE_ACCOUNT),
        ("storage-key", AZURITE_KEY),
        ("storage-endpoint", azurite.url.as_str()),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let target = storage::abs(&source, &secret).unwrap();
    assert_eq!(target.url, "abs://backups/cluster/snapshot.db");
    let m = etcd_with_20_mib("abs").await;

    let saved = save_with_metadata(&m, &target).await;
    // Read back by Azure's own client: the bytes, the size and the metadata.
    let file = std::env::temp_dir().join(format!("abs-{}.db", std::process::id()));
    let got = azurite.get("backups", "cluster/snapshot.db", &file);
    let object = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(got["size"], saved.verified.size, "{got}");
    assert_eq!(got["metadata"]["sha256"], saved.verified.sha256, "{got}");
    assert_eq!(
        saved.verified.sha256,
        hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &object).as_ref())
    );

    refuse_corrupted(target.store.as_ref(), &object).await;
    assert_eq!(
        azurite.blobs("backups", "cluster/"),
        ["cluster/snapshot.db"]
    );
}
