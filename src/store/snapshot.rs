//! An etcd snapshot streamed into object storage and verified on the way, never held whole in
//! memory: etcd's Snapshot stream goes chunk by chunk into a multipart upload, and the upload is
//! completed only once the stream has ended and its integrity is proven. Anything else (a hash
//! that does not match, a stream cut short, a failed part, the time limit) aborts the upload,
//! so no object ever appears under the final name.
//!
//! etcd sends the database in chunks and then one more message: the sha256 of everything
//! before it. `etcdctl snapshot save` writes all of it, so a snapshot file ends with its own
//! hash, and `etcdutl snapshot restore` checks it. The object written here is byte for byte
//! that file.

use std::time::Duration;

use aws_lc_rs::digest::{Context, SHA256};
use futures::{Stream, StreamExt};
use object_store::path::Path;
use object_store::signer::{SignedUrlOptions, Signer};
use object_store::{ObjectStore, PutMultipartOptions, WriteMultipart};

use super::compress::Compressor;
use super::storage::Metadata;
use crate::etcd::Etcd;

/// Length of the hash etcd appends.
pub use crate::etcd::SNAPSHOT_HASH_LEN as HASH_LEN;
/// Size of each uploaded part: S3's minimum is 5 MiB (except the last part).
const PART_SIZE: usize = 8 << 20;
/// Parts in flight at once; with [`PART_SIZE`], what the operator holds of one snapshot.
const PARTS_IN_FLIGHT: usize = 2;

/// What went wrong with a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd could not be asked for a snapshot, or its stream broke.
    #[error("reading the snapshot from etcd: {0}")]
    Etcd(#[source] crate::etcd::Error),
    /// The stream ended before etcd's hash could have been sent.
    #[error("the snapshot stream ended after {0} bytes, before etcd's hash")]
    Truncated(u64),
    /// The hash etcd appended is not the hash of what arrived.
    #[error(
        "the snapshot's hash does not match its contents: etcd sent {sent}, the data hashes to {computed}"
    )]
    HashMismatch {
        /// What etcd appended, in hex.
        sent: String,
        /// What the data before it hashes to, in hex.
        computed: String,
    },
    /// Writing to object storage failed.
    #[error("writing {path}: {source}")]
    Store {
        /// The object's path.
        path: String,
        #[source]
        source: object_store::Error,
    },
    /// The snapshot took longer than allowed.
    #[error("the snapshot took longer than {0:?}")]
    Timeout(Duration),
    /// Compressing or decompressing it failed.
    #[error("zstd: {0}")]
    Compress(String),
}

impl Error {
    /// The `error` label of `etcd_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Etcd(_) => "snapshot_etcd",
            Error::Truncated(_) => "snapshot_truncated",
            Error::HashMismatch { .. } => "snapshot_hash_mismatch",
            Error::Store { .. } => "snapshot_store",
            Error::Timeout(_) => "snapshot_timeout",
            Error::Compress(_) => "snapshot_compress",
        }
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks etcd's snapshot stream as it passes: the last [`HASH_LEN`] bytes must be the sha256
/// of every byte before them. Holds back only those last bytes. One sha256 pass serves both
/// hashes: the whole object's is the body's state, cloned at the end, given the held bytes.
/// (Two passes, and a third over the same bytes as they were stored, were a tenth of a 1 GiB
/// backup's CPU on a machine that etcd and the store share.)
pub struct Verifier {
    body: Context,
    held: Vec<u8>,
    size: u64,
}

/// A verified snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Bytes in all, etcd's hash included (the object's size).
    pub size: u64,
    /// sha256 of the whole object, in hex (what `sha256sum` of the file prints).
    pub sha256: String,
    /// The hash etcd appended (of the database before it), in hex.
    pub etcd_sha256: String,
    /// The snapshot itself, when the object is it compressed: its size and sha256 (what a
    /// restore's seed is sent and checks); the object's otherwise.
    pub snapshot_size: u64,
    /// See [`Verified::snapshot_size`].
    pub snapshot_sha256: String,
}

impl Verified {
    /// The figures of a snapshot that was stored compressed: `stored_size` bytes hashing to
    /// `stored_sha256`.
    pub fn stored_as(self, stored_size: u64, stored_sha256: String) -> Self {
        Verified {
            size: stored_size,
            sha256: stored_sha256,
            ..self
        }
    }
}

impl Default for Verifier {
    fn default() -> Self {
        Verifier {
            body: Context::new(&SHA256),
            held: Vec::with_capacity(2 * HASH_LEN),
            size: 0,
        }
    }
}

impl Verifier {
    /// Takes the next chunk of the stream.
    pub fn update(&mut self, chunk: &[u8]) {
        self.size += chunk.len() as u64;
        if chunk.len() >= HASH_LEN {
            // Everything held back so far, and all of this chunk but its tail, is body.
            self.body.update(&self.held);
            self.held.clear();
            let (body, tail) = chunk.split_at(chunk.len() - HASH_LEN);
            self.body.update(body);
            self.held.extend_from_slice(tail);
        } else {
            self.held.extend_from_slice(chunk);
            let excess = self.held.len().saturating_sub(HASH_LEN);
            self.body.update(&self.held[..excess]);
            self.held.drain(..excess);
        }
    }

    /// The stream has ended: its last bytes must be the hash of the rest.
    pub fn finish(self) -> Result<Verified, Error> {
        if self.held.len() < HASH_LEN {
            return Err(Error::Truncated(self.size));
        }
        let mut whole = self.body.clone();
        whole.update(&self.held);
        let computed = self.body.finish();
        if computed.as_ref() != self.held.as_slice() {
            return Err(Error::HashMismatch {
                sent: hex(&self.held),
                computed: hex(computed.as_ref()),
            });
        }
        let sha256 = hex(whole.finish().as_ref());
        Ok(Verified {
            size: self.size,
            sha256: sha256.clone(),
            etcd_sha256: hex(&self.held),
            snapshot_size: self.size,
            snapshot_sha256: sha256,
        })
    }
}

/// Writes the chunks of `stream` to `location` in `store`, verified; completes the upload only
/// when the stream ended whole and its hash matched, and aborts it otherwise. Bounded by
/// `timeout` as a whole.
pub async fn upload<S>(
    stream: S,
    store: &dyn ObjectStore,
    location: &Path,
    options: PutMultipartOptions,
    timeout: Duration,
) -> Result<Verified, Error>
where
    S: Stream<Item = Result<Vec<u8>, crate::etcd::Error>> + Unpin,
{
    upload_compressed(stream, store, location, options, timeout, None).await
}

/// As [`upload`], the object compressed with zstd at `level` when one is given: etcd's hash
/// is checked on the snapshot as it comes, the object's own sha256 on what is stored.
pub async fn upload_compressed<S>(
    stream: S,
    store: &dyn ObjectStore,
    location: &Path,
    options: PutMultipartOptions,
    timeout: Duration,
    level: Option<i32>,
) -> Result<Verified, Error>
where
    S: Stream<Item = Result<Vec<u8>, crate::etcd::Error>> + Unpin,
{
    let store_err = |source| Error::Store {
        path: location.to_string(),
        source,
    };
    let upload = store
        .put_multipart_opts(location, options)
        .await
        .map_err(store_err)?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let copied = tokio::time::timeout(timeout, copy(stream, &mut writer, location, level)).await;
    let verified = match copied {
        Ok(Ok((verifier, None))) => verifier.finish(),
        Ok(Ok((verifier, Some((size, sha256))))) => {
            verifier.finish().map(|v| v.stored_as(size, sha256))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Timeout(timeout)),
    };
    match verified {
        Ok(v) => {
            writer.finish().await.map_err(store_err)?;
            Ok(v)
        }
        Err(e) => {
            // Nothing is left under the final name; a failed abort only leaves parts that
            // the store's own lifecycle rules clean up, and the first error is the one to tell.
            if let Err(abort) = writer.abort().await {
                tracing::warn!(%location, "aborting the upload: {abort}");
            }
            Err(e)
        }
    }
}

/// The stream into the upload, verified; compressed at `level` if one is given, in which case
/// the size and sha256 of what was stored come back too.
async fn copy<S>(
    mut stream: S,
    writer: &mut WriteMultipart,
    location: &Path,
    level: Option<i32>,
) -> Result<(Verifier, Option<(u64, String)>), Error>
where
    S: Stream<Item = Result<Vec<u8>, crate::etcd::Error>> + Unpin,
{
    let compress_err = |e: std::io::Error| Error::Compress(e.to_string());
    let mut compressor = level
        .map(Compressor::new)
        .transpose()
        .map_err(compress_err)?;
    // What is stored is hashed apart only when it is not the stream itself.
    let mut stored = (0u64, Context::new(&SHA256));
    let mut verifier = Verifier::default();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Error::Etcd)?;
        verifier.update(&chunk);
        match &mut compressor {
            Some(c) => {
                let out = c.push(&chunk).map_err(compress_err)?;
                stored.0 += out.len() as u64;
                stored.1.update(&out);
                put(writer, location, &out).await?;
            }
            None => put(writer, location, &chunk).await?,
        }
    }
    if let Some(c) = compressor {
        let tail = c.finish().map_err(compress_err)?;
        stored.0 += tail.len() as u64;
        stored.1.update(&tail);
        put(writer, location, &tail).await?;
        return Ok((verifier, Some((stored.0, hex(stored.1.finish().as_ref())))));
    }
    Ok((verifier, None))
}

/// Writes `bytes` to the upload once it has room.
async fn put(writer: &mut WriteMultipart, location: &Path, bytes: &[u8]) -> Result<(), Error> {
    if bytes.is_empty() {
        return Ok(());
    }
    writer
        .wait_for_capacity(PARTS_IN_FLIGHT)
        .await
        .map_err(|source| Error::Store {
            path: location.to_string(),
            source,
        })?;
    writer.write(bytes);
    Ok(())
}

/// S3 copies an object in place in one request only up to this size.
const S3_COPY_LIMIT: u64 = 5 << 30;
/// How long a presigned metadata request stays valid.
const PRESIGNED_FOR: Duration = Duration::from_secs(300);

/// Percent-encodes an object key for a header, keeping `/`.
fn encode_key(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `pairs` as headers named `prefix` + name.
fn add_headers<'a>(
    headers: &mut reqwest::header::HeaderMap,
    prefix: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), String> {
    use reqwest::header::{HeaderName, HeaderValue};
    for (name, value) in pairs {
        headers.insert(
            HeaderName::try_from(format!("{prefix}{name}")).map_err(|e| e.to_string())?,
            HeaderValue::try_from(value).map_err(|e| e.to_string())?,
        );
    }
    Ok(())
}

/// Borrowed pairs of owned headers.
fn pairs(headers: &crate::store::storage::Headers) -> impl Iterator<Item = (&str, &str)> {
    headers.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// Attaches `metadata` (user metadata: `x-amz-meta-*` on S3, `x-ms-meta-*` on Azure) to the
/// finished object at `location` of `size` bytes. Names must suit both: Azure takes only
/// identifiers (`etcd_revision`, not `etcd-revision`). What the store answered, on failure.
pub async fn set_metadata(
    how: &Metadata,
    location: &Path,
    size: u64,
    metadata: &[(&str, &str)],
) -> Result<(), String> {
    use reqwest::header::HeaderMap;
    let mut headers = HeaderMap::new();
    let url = match how {
        Metadata::S3 {
            store,
            bucket,
            encryption,
        } => {
            if size > S3_COPY_LIMIT {
                return Err(format!(
                    "S3 copies objects in place only up to 5 GiB, this one has {size} bytes"
                ));
            }
            let copy_source = format!("/{bucket}/{}", encode_key(location.as_ref()));
            let copy = [
                ("copy-source", copy_source.as_str()),
                ("metadata-directive", "REPLACE"),
            ];
            add_headers(&mut headers, "x-amz-", copy)?;
            add_headers(&mut headers, "x-amz-meta-", metadata.iter().copied())?;
            add_headers(&mut headers, "", pairs(encryption))?;
            let options = SignedUrlOptions::new();
            let options = headers.iter().fold(options, |o, (k, v)| {
                o.with_signed_header(k.clone(), v.clone())
            });
            store
                .signed_url_opts(reqwest::Method::PUT, location, PRESIGNED_FOR, &options)
                .await
                .map_err(|e| e.to_string())?
        }
        Metadata::Abs { store, encryption } => {
            add_headers(&mut headers, "x-ms-meta-", metadata.iter().copied())?;
            add_headers(&mut headers, "", pairs(encryption))?;
            let mut url = store
                .signed_url(reqwest::Method::PUT, location, PRESIGNED_FOR)
                .await
                .map_err(|e| e.to_string())?;
            // A SAS authorizes by permission and resource; the operation is unsigned.
            url.query_pairs_mut().append_pair("comp", "metadata");
            url
        }
        Metadata::Unsupported => return Err("this store's metadata is not set".into()),
    };
    let response = reqwest::Client::new()
        .put(url)
        .headers(headers)
        .header(reqwest::header::CONTENT_LENGTH, 0)
        .timeout(PRESIGNED_FOR)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    // S3 can answer a copy with 200 and an error in the body.
    if !status.is_success() || body.contains("<Error>") {
        return Err(format!("{status}: {}", body.trim()));
    }
    Ok(())
}

/// A snapshot saved, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    /// Size and hashes of the object.
    pub verified: Verified,
    /// The revision the member had reached when asked (the snapshot holds at least this).
    pub revision: i64,
    /// The member's etcd version.
    pub version: String,
}

/// Takes a snapshot of the member behind `endpoint` into `location`, verified (see
/// [`upload`]); `timeout` bounds the whole snapshot, `connect_timeout` each connection.
pub async fn save(
    endpoint: &crate::etcd::Endpoint,
    store: &dyn ObjectStore,
    location: &Path,
    options: PutMultipartOptions,
    timeout: Duration,
    connect_timeout: Duration,
) -> Result<Saved, Error> {
    let status = crate::etcd::status(endpoint, connect_timeout)
        .await
        .map_err(Error::Etcd)?;
    let mut etcd = Etcd::connect_streaming(endpoint, connect_timeout)
        .await
        .map_err(Error::Etcd)?;
    let stream = etcd.snapshot().await.map_err(Error::Etcd)?;
    let verified = upload(stream, store, location, options, timeout).await?;
    Ok(Saved {
        verified,
        revision: status.revision,
        version: status.version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_of(body: &[u8]) -> Vec<u8> {
        let mut all = body.to_vec();
        all.extend_from_slice(aws_lc_rs::digest::digest(&SHA256, body).as_ref());
        all
    }

    fn verify_in_chunks(data: &[u8], chunk: usize) -> Result<Verified, Error> {
        let mut v = Verifier::default();
        for c in data.chunks(chunk) {
            v.update(c);
        }
        v.finish()
    }

    #[test]
    fn a_whole_stream_verifies_however_it_is_cut() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let data = snapshot_of(&body);
        let whole = hex(aws_lc_rs::digest::digest(&SHA256, &data).as_ref());
        for chunk in [1, 7, 31, 32, 33, 4096, data.len()] {
            let v = verify_in_chunks(&data, chunk).unwrap();
            assert_eq!(v.size, data.len() as u64);
            assert_eq!(v.sha256, whole, "chunk {chunk}");
        }
    }

    #[test]
    fn a_corrupted_or_short_stream_is_refused() {
        let body = vec![42u8; 5000];
        let mut data = snapshot_of(&body);
        data[100] ^= 1;
        assert!(matches!(
            verify_in_chunks(&data, 512),
            Err(Error::HashMismatch { .. })
        ));
        let data = snapshot_of(&body);
        // Cut anywhere: the last 32 bytes are then not the hash of the rest.
        assert!(matches!(
            verify_in_chunks(&data[..4096], 512),
            Err(Error::HashMismatch { .. })
        ));
        assert!(matches!(
            verify_in_chunks(&data[..20], 512),
            Err(Error::Truncated(20))
        ));
    }
}
