//! Durable state in one redb file under the data dir: accounts, keys, tasks, the ledger, idempotency
//! records and model switches.
//!
//! Every write commits with `Durability::Immediate` before the caller answers anyone, so what a response
//! says happened survives a crash. Values are JSON, so records can grow fields without a migration.
//! Calls block: request handlers reach the store through `web::block`.

mod accounts;
pub mod ledger;
mod tasks;
mod writer;

pub use accounts::{Account, KeyRecord, hash_key};
pub use tasks::{Hold, IdempotencyRecord, Inserted, TaskError, TaskRecord, TaskResult, TaskStatus};

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
    serde_json::Error
);

/// Handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    writer: writer::Writer,
}

impl Store {
    /// Opens (or creates) `mediagate.redb` under `dir`, creating every table.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError(format!("create {}: {e}", dir.display())))?;
        let db = Database::create(dir.join("mediagate.redb"))?;
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
        Ok(Store { writer: writer::Writer::start(db.clone())?, db })
    }

    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    /// Runs a write through the group-commit writer; returns once it is durable.
    pub(crate) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.write(op)
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
