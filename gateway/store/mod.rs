//! Durable state in one redb file under the data dir: accounts, keys, tasks, the ledger, idempotency
//! records and model switches.
//!
//! Writes go through one group-commit writer (`writer`): durable writes are on disk before their caller
//! hears back, so what a response says happened survives a crash; deferred writes (state no response has
//! claimed yet) ride on the next durable commit. Values are JSON, so records can grow fields without a
//! migration. Reads run on the calling thread: a redb read transaction never waits for the writer.

mod accounts;
pub mod ledger;
mod tasks;
mod writer;

pub use accounts::{Account, KeyRecord, hash_key};
pub use tasks::{Hold, IdempotencyRecord, Inserted, TaskError, TaskRecord, TaskResult, TaskStatus};
pub use writer::{Commit, Pending};

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Serialize, de::DeserializeOwned};
use std::path::Path;
use std::sync::Arc;

pub(crate) const ACCOUNTS: TableDefinition<&str, &[u8]> = TableDefinition::new("accounts");
pub(crate) const KEYS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("keys");
pub(crate) const MODEL_SWITCHES: TableDefinition<&str, bool> = TableDefinition::new("model_switches");
pub(crate) const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
/// Ids of tasks that are not terminal yet, so start-up and polling never scan finished work.
pub(crate) const IN_FLIGHT: TableDefinition<&str, ()> = TableDefinition::new("in_flight");
pub(crate) const IDEMPOTENCY: TableDefinition<&str, &[u8]> = TableDefinition::new("idempotency");
/// Append-only ledger entries by sequence number.
pub(crate) const LEDGER: TableDefinition<u64, &[u8]> = TableDefinition::new("ledger");
/// Per account, the sums of its ledger entries per pot (kept in step with `LEDGER`).
pub(crate) const FUNDS: TableDefinition<&str, &[u8]> = TableDefinition::new("funds");
/// Usage log records by sequence number.
pub(crate) const USAGE_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("usage_log");

/// redb's page cache. Its default (1 GiB) keeps every page written, so the process would grow with the
/// store file; recent tasks and the tables' upper levels fit well within this, and the OS page cache holds
/// the rest.
const CACHE_BYTES: usize = 64 << 20;

/// A store failure; the detail is logged, the client sees `internal_error`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("store: {0}")]
pub struct StoreError(String);

impl StoreError {
    pub fn new(message: impl Into<String>) -> StoreError {
        StoreError(message.into())
    }
}

macro_rules! store_error_from {
    ($($t:ty),*) => { $(impl From<$t> for StoreError { fn from(e: $t) -> StoreError { StoreError(e.to_string()) } })* };
}
store_error_from!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError,
    serde_json::Error
);

/// Handle to the database; cheap to clone. Dropping the last clone closes the file cleanly (the writer
/// thread holds the last database handle; `db` is declared first so it is released before the writer waits).
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    writer: writer::Writer,
    key_cache: Arc<accounts::KeyCache>,
}

impl Store {
    /// Opens (or creates) `mediagate.redb` under `dir`, creating every table.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError(format!("create {}: {e}", dir.display())))?;
        let db = Database::builder().set_cache_size(CACHE_BYTES).create(dir.join("mediagate.redb"))?;
        let tx = db.begin_write()?;
        tx.open_table(ACCOUNTS)?;
        tx.open_table(KEYS)?;
        tx.open_table(MODEL_SWITCHES)?;
        tx.open_table(TASKS)?;
        tx.open_table(IN_FLIGHT)?;
        tx.open_table(IDEMPOTENCY)?;
        tx.open_table(LEDGER)?;
        tx.open_table(FUNDS)?;
        tx.open_table(USAGE_LOG)?;
        tx.commit()?;
        let db = Arc::new(db);
        Ok(Store { writer: writer::Writer::start(db.clone())?, db, key_cache: Arc::default() })
    }

    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    /// Runs a write through the group-commit writer, blocking until it is durable (CLI, tools, `web::block`).
    pub(crate) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.write(op)
    }

    /// Queues a write for the group-commit writer; the future resolves once it is committed as `commit` asks.
    pub(crate) fn queue<T, F>(&self, commit: Commit, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.queue(commit, op)
    }

    /// Commits every queued write and stops taking writes, leaving a file the next start opens without a
    /// full repair. Call once the server has stopped.
    pub fn close(&self) -> Result<(), StoreError> {
        self.writer.close()
    }

    /// Resolves once every write queued before it is on disk: for answers that repeat state another
    /// request wrote (an idempotent replay) and must not get ahead of its commit.
    pub fn barrier(&self) -> Pending<()> {
        self.writer.queue(Commit::Durable, |_| Ok(()))
    }

    /// Models switched on or off by an operator, overriding the spec's `enabled`.
    pub fn model_switches(&self) -> Result<Vec<(String, bool)>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(MODEL_SWITCHES)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::iter(&table)? {
            let (k, v) = row?;
            out.push((k.value().to_string(), v.value()));
        }
        Ok(out)
    }

    pub fn set_model_switch(&self, model: &str, enabled: bool) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        tx.open_table(MODEL_SWITCHES)?.insert(model, enabled)?;
        tx.commit()?;
        Ok(())
    }
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    Ok(serde_json::to_vec(value)?)
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    Ok(serde_json::from_slice(bytes)?)
}
