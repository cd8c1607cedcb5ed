//! The result-files port: where copies of tasks' result files are kept (a directory, or an S3-compatible
//! bucket, in `adapters::files`), each object written as it streams in and read back whole or by range.

use bytes::Bytes;
use std::pin::Pin;

/// Bytes as they stream, in or out.
pub type ByteStream = Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, String>>>>;

#[async_trait::async_trait(?Send)]
pub trait ResultFiles: Send + Sync {
    /// Where result `index` of `task_id` is kept, expiring at `expires_ms`.
    fn path(&self, task_id: &str, index: usize, expires_ms: i64) -> String;
    /// Writes what `body` yields to `path` as it comes (never whole in memory), hashing it on the way; a
    /// copy cut short leaves nothing at `path`.
    async fn put(&self, path: &str, content_type: &str, body: ByteStream) -> Result<Stored, PutError>;
    /// Reads `path`, or the bytes `first..=last` of it.
    async fn get(&self, path: &str, range: Option<(u64, u64)>) -> Result<ByteStream, FileError>;
    /// A presigned URL for `path`, where downloads are redirected to one.
    async fn presigned(&self, path: &str) -> Option<Result<String, String>>;
    /// Deletes every copy whose expiry day is before `now_ms`'s; the objects and bytes left.
    async fn sweep(&self, now_ms: i64) -> Result<(u64, u64), String>;
}

/// A result file as stored.
pub struct Stored {
    pub size: u64,
    pub sha256: String,
}

/// Why a file could not be written.
#[derive(Debug)]
pub enum PutError {
    /// `body` failed as it streamed in.
    Source(String),
    /// The storage answered and refused (no such bucket, no permission): it will not take this file as it is
    /// set up.
    Refused(String),
    /// The storage did not answer, or failed on its side: an outage, worth waiting out.
    Unavailable(String),
}

/// Why a stored file could not be read.
#[derive(Debug)]
pub enum FileError {
    /// It is not there (swept, or deleted).
    NotFound,
    /// The storage cannot be read now: its detail, for the log.
    Unavailable(String),
}
