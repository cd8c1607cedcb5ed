//! The store's tables, and the one list of them that start-up creates and log replay looks names up in.

use super::StoreError;
use redb::{Key, TableDefinition, Value, WriteTransaction};

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
/// The store's own bookkeeping: the write-ahead log's checkpoint. Never logged itself.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The sequence number of the last log record a durable redb commit holds.
pub(crate) const CHECKPOINT: &str = "wal_checkpoint";

/// A table whatever its key and value types: what creating it and replaying a logged change need.
pub(crate) trait AnyTable {
    fn name(&self) -> &str;
    fn create(&self, tx: &WriteTransaction) -> Result<(), StoreError>;
    /// Writes (or, without a value, removes) a key as the log recorded it, in stored byte form.
    fn apply(&self, tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError>;
}

impl<K: Key + 'static, V: Value + 'static> AnyTable for TableDefinition<'static, K, V> {
    fn name(&self) -> &str {
        redb::TableHandle::name(self)
    }

    fn create(&self, tx: &WriteTransaction) -> Result<(), StoreError> {
        tx.open_table(*self)?;
        Ok(())
    }

    fn apply(&self, tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let mut table = tx.open_table(*self)?;
        match value {
            Some(value) => drop(table.insert(K::from_bytes(key), V::from_bytes(value))?),
            None => drop(table.remove(K::from_bytes(key))?),
        }
        Ok(())
    }
}

pub(crate) const ALL: [&dyn AnyTable; 10] =
    [&ACCOUNTS, &KEYS, &MODEL_SWITCHES, &TASKS, &IN_FLIGHT, &IDEMPOTENCY, &LEDGER, &FUNDS, &USAGE_LOG, &META];

/// The table a logged change names.
pub(crate) fn named(name: &str) -> Result<&'static dyn AnyTable, StoreError> {
    ALL.into_iter()
        .find(|table| table.name() == name)
        .ok_or_else(|| StoreError::new(format!("write-ahead log: unknown table {name}")))
}
