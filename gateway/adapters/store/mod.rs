//! The store adapters: the embedded store (one redb file under the data dir, with a write-ahead log in
//! front; the default, no server) and PostgreSQL (shared by any number of replicas), each implementing the
//! storage port ([`crate::ports::storage::Storage`]); the key cache both keep; and `store copy`, which moves
//! the first into the second.

pub mod copy;
pub mod embedded;
pub mod keys;
pub mod postgres;

use crate::ports::storage::StoreError;
use serde::{Serialize, de::DeserializeOwned};

/// The secret result links and console sessions are signed with: where one process owns the store, a file
/// of this name in its data dir; where replicas share it, the store's secret of this name
/// ([`crate::ports::storage::Storage::shared_secret`]).
pub const LINK_SECRET: &str = "link-secret";

/// The link secret kept in `data_dir` by a process that owned its store, if one is.
pub fn kept_link_secret(data_dir: &std::path::Path) -> Result<Option<Vec<u8>>, String> {
    let path = data_dir.join(LINK_SECRET);
    match std::fs::read(&path) {
        Ok(secret) => Ok(Some(secret).filter(|s| !s.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Counts and logs a settlement that priced a task as quoted because the upstream's usage made no sense.
fn unusable_usage_noted(task: &crate::domain::tasks::TaskRecord, settled: &crate::domain::billing::Settled) {
    if settled.usage_unusable {
        crate::support::metrics::usage_unusable();
        tracing::warn!(task_id = task.task_id, "the upstream's usage makes no sense; priced as quoted");
    }
}

/// A stored value's bytes: MessagePack, a struct as the array of its fields in declaration order. Strings are
/// copied rather than scanned for escapes and no field names are written: a settled task record is 352 bytes
/// (805 as JSON, 633 as a map keyed by field name). So a stored struct only ever gains fields at its end, each
/// `#[serde(default)]` (an older record is a shorter array and reads with the default), and never skips one
/// when serializing for the store (`Units` shows how to skip for JSON only):
/// `embedded::tests::records_written_by_earlier_formats_still_read` holds records as each format wrote them.
/// Both backends store records this way.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    // Room for a task record at once, so it is not regrown and copied on the way.
    let mut bytes = Vec::with_capacity(1024);
    rmp_serde::encode::write(&mut bytes, value)?;
    Ok(bytes)
}

/// Reads what [`encode`] wrote.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    Ok(rmp_serde::from_slice(bytes)?)
}

macro_rules! store_error_from {
    ($($t:ty),*) => { $(impl From<$t> for StoreError { fn from(e: $t) -> StoreError { StoreError::new(e.to_string()) } })* };
}
store_error_from!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    serde_json::Error,
    rmp_serde::encode::Error,
    rmp_serde::decode::Error
);
