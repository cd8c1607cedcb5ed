//! Where result copies live: an object store (`object_store`), a local directory (`results.dir`, else under
//! the data dir) unless S3 is configured. An object's path starts with the day its copy expires
//! (`{prefix}/{YYYY-MM-DD}/{task_id}.{index}`), so the sweeper deletes whole expired days and never needs an
//! index of what expires when. A day is one flat directory on a filesystem: a copy creates its file, never a
//! directory of its own (a directory per task made a copy cost twice the syscalls, and its journal's work).
//! Copies made under the older layout (`{task_id}/{index}`) keep their paths, which their tasks record.

use crate::ports::files::{ByteStream, FileError, PutError, ResultFiles, Stored};
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{
    Attribute, Attributes, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMultipartOptions, WriteMultipart,
};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Parts uploaded at once while a copy streams in.
const PARTS_IN_FLIGHT: usize = 2;
/// How long a download waits for the storage to start answering: `object_store` retries a storage that
/// is down for minutes, and a client is better told at once that it may retry.
const READ_WAIT: Duration = Duration::from_secs(4);
/// A few quick retries of a storage call, then the caller decides: a copy goes back in its queue to wait for
/// the storage (`services::copies`) rather than holding its worker for minutes of backoff.
const RETRY: object_store::RetryConfig = object_store::RetryConfig {
    backoff: object_store::BackoffConfig {
        init_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(2),
        base: 2.0,
    },
    max_retries: 3,
    retry_timeout: Duration::from_secs(10),
};

/// Where result copies go: an S3-compatible bucket, else a directory.
#[derive(Debug, Clone)]
pub struct FilesConfig {
    pub dir: PathBuf,
    pub s3: Option<S3Config>,
}

/// An S3 bucket (or any S3-compatible store) for result copies.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    pub bucket: String,
    /// Prepended to every object's path.
    #[serde(default)]
    pub prefix: String,
    /// An S3-compatible server's address; AWS's own when unset.
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// Downloads answer with a redirect to a URL presigned for this long (seconds) instead of passing the
    /// bytes through the gateway; 0 passes them through.
    #[serde(default)]
    pub presigned_seconds: u64,
}

pub struct Files {
    store: Arc<dyn ObjectStore>,
    /// On S3 with `presigned_seconds` set: downloads are redirected to presigned URLs.
    presigner: Option<(Arc<AmazonS3>, Duration)>,
    /// Object attributes are stored on S3; the filesystem keeps none.
    attributes: bool,
    prefix: Path,
}

impl Files {
    /// The storage `config` names: its S3 bucket, else its directory.
    pub fn new(config: &FilesConfig) -> Result<Files, String> {
        let Some(s3) = &config.s3 else {
            let dir = &config.dir;
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let local = LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?
                .with_automatic_cleanup(true);
            return Ok(Files { store: Arc::new(local), presigner: None, attributes: false, prefix: Path::default() });
        };
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&s3.bucket).with_retry(RETRY);
        if let Some(endpoint) = &s3.endpoint {
            builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(region) = &s3.region {
            builder = builder.with_region(region);
        }
        let bucket = Arc::new(builder.build().map_err(|e| format!("results.s3: {e}"))?);
        let presigner = (s3.presigned_seconds > 0).then(|| (bucket.clone(), Duration::from_secs(s3.presigned_seconds)));
        Ok(Files { store: bucket, presigner, attributes: true, prefix: Path::from(s3.prefix.as_str()) })
    }
}

#[async_trait::async_trait(?Send)]
impl ResultFiles for Files {
    fn path(&self, task_id: &str, index: usize, expires_ms: i64) -> String {
        let day = chrono::DateTime::from_timestamp_millis(expires_ms).unwrap_or_default().format("%Y-%m-%d");
        self.prefix.clone().join(day.to_string()).join(format!("{task_id}.{index}")).to_string()
    }

    async fn put(&self, path: &str, content_type: &str, mut body: ByteStream) -> Result<Stored, PutError> {
        let storage = |e: object_store::Error| match e {
            object_store::Error::NotFound { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::InvalidPath { .. } => PutError::Refused(e.to_string()),
            e => PutError::Unavailable(e.to_string()),
        };
        use sha2::{Digest, Sha256};
        let mut attributes = Attributes::new();
        if self.attributes {
            attributes.insert(Attribute::ContentType, content_type.to_string().into());
        }
        let options = PutMultipartOptions { attributes, ..Default::default() };
        let upload = self.store.put_multipart_opts(&Path::from(path), options).await.map_err(storage)?;
        let mut writer = WriteMultipart::new(upload);
        let (mut hash, mut size) = (Sha256::new(), 0u64);
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(PutError::Source(format!("reading the upstream's file: {e}")));
                }
            };
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                let _ = writer.abort().await;
                return Err(storage(e));
            }
            hash.update(&chunk);
            size = size.saturating_add(chunk.len() as u64);
            writer.put(chunk);
        }
        writer.finish().await.map_err(storage)?;
        Ok(Stored { size, sha256: hex::encode(hash.finalize()) })
    }

    async fn get(&self, path: &str, range: Option<(u64, u64)>) -> Result<ByteStream, FileError> {
        let range = range.map(|(first, last)| GetRange::Bounded(first..last + 1));
        let location = Path::from(path);
        let read = self.store.get_opts(&location, GetOptions { range, ..Default::default() });
        match tokio::time::timeout(READ_WAIT, read).await {
            Ok(Ok(object)) => Ok(Box::pin(object.into_stream().map(|chunk| chunk.map_err(|e| e.to_string())))),
            Ok(Err(object_store::Error::NotFound { .. })) => Err(FileError::NotFound),
            Ok(Err(e)) => Err(FileError::Unavailable(e.to_string())),
            Err(_) => Err(FileError::Unavailable(format!("no answer in {} s", READ_WAIT.as_secs()))),
        }
    }

    async fn presigned(&self, path: &str) -> Option<Result<String, String>> {
        let (bucket, valid_for) = self.presigner.as_ref()?;
        let url = bucket.signed_url(http::Method::GET, &Path::from(path), *valid_for).await;
        Some(url.map(|url| url.to_string()).map_err(|e| e.to_string()))
    }

    async fn sweep(&self, now_ms: i64) -> Result<(u64, u64), String> {
        let today = chrono::DateTime::from_timestamp_millis(now_ms).unwrap_or_default().format("%Y-%m-%d").to_string();
        let days = self.store.list_with_delimiter(Some(&self.prefix)).await.map_err(|e| e.to_string())?;
        let (mut objects, mut bytes) = (0u64, 0u64);
        for day in days.common_prefixes {
            let expired = day.filename().is_some_and(|name| name < today.as_str());
            let mut listed = self.store.list(Some(&day));
            while let Some(object) = listed.next().await {
                let object = object.map_err(|e| e.to_string())?;
                if expired {
                    self.store.delete(&object.location).await.map_err(|e| e.to_string())?;
                } else {
                    objects += 1;
                    bytes = bytes.saturating_add(object.size);
                }
            }
        }
        Ok((objects, bytes))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DAY_MS: i64 = 86_400_000;

    /// Copies go under the day they expire; a sweep deletes the days before its own and counts the rest.
    #[test]
    fn a_sweep_deletes_the_copies_of_days_past() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::new(&FilesConfig { dir: dir.path().to_path_buf(), s3: None }).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let start = 1_800_000_000_000;
        let body = |text: &'static str| -> ByteStream {
            Box::pin(futures_util::stream::iter([Ok::<_, String>(bytes::Bytes::from(text))]))
        };
        runtime.block_on(async {
            let old = files.path("task-a", 0, start);
            let kept = files.path("task-b", 0, start + 2 * DAY_MS);
            assert_ne!(old.split('/').next(), kept.split('/').next(), "{old} {kept}");
            let stored = files.put(&old, "video/mp4", body("gone soon")).await.unwrap();
            assert_eq!((stored.size, stored.sha256.len()), (9, 64));
            files.put(&kept, "image/png", body("kept")).await.unwrap();
            assert_eq!(files.sweep(start).await.unwrap(), (2, 13), "nothing has expired by its day");
            assert_eq!(files.sweep(start + DAY_MS).await.unwrap(), (1, 4));
            assert!(files.get(&old, None).await.is_err());
            let read: Vec<bytes::Bytes> =
                files.get(&kept, Some((1, 2))).await.unwrap().map(Result::unwrap).collect().await;
            assert_eq!(&read.concat()[..], b"ep");
        });
    }
}
