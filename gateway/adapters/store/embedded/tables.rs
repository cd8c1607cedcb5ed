//! The store's tables, and the one list of them that start-up creates and log replay looks names up in.

use crate::ports::storage::StoreError;
use redb::{Key, TableDefinition, Value, WriteTransaction};
use std::cmp::Ordering;

pub(crate) const ACCOUNTS: TableDefinition<&str, &[u8]> = TableDefinition::new("accounts");
pub(crate) const KEYS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("keys");
pub(crate) const MODEL_SWITCHES: TableDefinition<&str, bool> = TableDefinition::new("model_switches");
pub(crate) const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
/// Every task by account, creation time and id, for listing an account's tasks newest first.
pub(crate) const TASKS_BY_ACCOUNT: TableDefinition<(&str, i64, &str), ()> = TableDefinition::new("tasks_by_account");
/// Each account's webhook settings (secrets, default endpoint), by account.
pub(crate) const WEBHOOK_SETTINGS: TableDefinition<&str, &[u8]> = TableDefinition::new("webhook_settings");
/// Deliveries of task ends to webhook endpoints, by id (time-ordered).
pub(crate) const DELIVERIES: TableDefinition<&str, &[u8]> = TableDefinition::new("deliveries");
/// Pending deliveries by when each is next attempted (epoch ms), then id: the due ones are where it starts.
pub(crate) const DELIVERIES_DUE: TableDefinition<(i64, &str), ()> = TableDefinition::new("deliveries_due");
/// Ids of the deliveries pending, as stores kept them before `DELIVERIES_DUE`: read once, on the first open,
/// to build it, and still named so their logs replay.
pub(crate) const PENDING_DELIVERIES: TableDefinition<&str, ()> = TableDefinition::new("pending_deliveries");
/// Tasks whose results wait to be copied, by id: when each is next tried (epoch ms).
pub(crate) const PENDING_MIRRORS: TableDefinition<&str, i64> = TableDefinition::new("pending_mirrors");
/// The usage lines of tasks retention purged, by when each task ended and its id.
pub(crate) const USAGE_LINES: TableDefinition<(i64, &str), &[u8]> = TableDefinition::new("usage_lines");
/// The audit trail by sequence number: appended to, never changed or removed.
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
/// Named operators by name (their tokens' hashes, never the tokens).
pub(crate) const OPERATORS: TableDefinition<&str, &[u8]> = TableDefinition::new("operators");
/// Ids of tasks that are not terminal yet, so start-up and polling never scan finished work.
pub(crate) const IN_FLIGHT: TableDefinition<&str, ()> = TableDefinition::new("in_flight");
pub(crate) const IDEMPOTENCY: TableDefinition<&str, &[u8]> = TableDefinition::new("idempotency");
/// Append-only ledger entries by sequence number.
pub(crate) const LEDGER: TableDefinition<u64, &[u8]> = TableDefinition::new("ledger");
/// Per account, the sums of its ledger entries per pot (kept in step with `LEDGER`).
pub(crate) const FUNDS: TableDefinition<&str, &[u8]> = TableDefinition::new("funds");
/// Named counters: `LEDGER_SEQ`, the next ledger entry's sequence number (not every entry is a `LEDGER` row).
pub(crate) const SEQUENCES: TableDefinition<&str, u64> = TableDefinition::new("sequences");
/// The store's own bookkeeping: the write-ahead log's checkpoint, and which indexes were built over the
/// tasks stored before them. Never logged itself.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The next ledger entry's sequence number, in `SEQUENCES`.
pub(crate) const LEDGER_SEQ: &str = "ledger";

/// The last audit entry's sequence number, in `SEQUENCES`.
pub(crate) const AUDIT_SEQ: &str = "audit";

/// The sequence number of the last log record a durable redb commit holds.
pub(crate) const CHECKPOINT: &str = "wal_checkpoint";

/// Set once `TASKS_BY_ACCOUNT` holds every task (stores from before it are indexed on first open).
pub(crate) const TASKS_BY_ACCOUNT_BUILT: &str = "tasks_by_account_built";

/// Set once `DELIVERIES_DUE` holds every pending delivery (built from `PENDING_DELIVERIES` on first open).
pub(crate) const DELIVERIES_DUE_BUILT: &str = "deliveries_due_built";

/// A table whatever its key and value types: what creating it and replaying a logged change need.
pub(crate) trait AnyTable {
    fn name(&self) -> &str;
    fn create(&self, tx: &WriteTransaction) -> Result<(), StoreError>;
    /// Orders two keys in stored byte form as the table does.
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering;
    /// Writes (or, without a value, removes) keys as the log or the overlay recorded them, in stored byte
    /// form.
    fn apply(&self, tx: &WriteTransaction, changes: &[(&[u8], Option<&[u8]>)]) -> Result<(), StoreError>;
}

impl<K: Key + 'static, V: Value + 'static> AnyTable for TableDefinition<'static, K, V> {
    fn name(&self) -> &str {
        redb::TableHandle::name(self)
    }

    fn create(&self, tx: &WriteTransaction) -> Result<(), StoreError> {
        tx.open_table(*self)?;
        Ok(())
    }

    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        K::compare(a, b)
    }

    fn apply(&self, tx: &WriteTransaction, changes: &[(&[u8], Option<&[u8]>)]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut table = tx.open_table(*self)?;
        for (key, value) in changes {
            match value {
                Some(value) => drop(table.insert(K::from_bytes(key), V::from_bytes(value))?),
                None => drop(table.remove(K::from_bytes(key))?),
            }
        }
        Ok(())
    }
}

/// How many tables the store has.
pub(crate) const COUNT: usize = 18;

/// Every table a change may name (`META` is the checkpointer's own), by [`id`].
pub(crate) const ALL: [&dyn AnyTable; COUNT] = [
    &TASKS,
    &IN_FLIGHT,
    &LEDGER,
    &FUNDS,
    &SEQUENCES,
    &IDEMPOTENCY,
    &KEYS,
    &ACCOUNTS,
    &MODEL_SWITCHES,
    &TASKS_BY_ACCOUNT,
    &WEBHOOK_SETTINGS,
    &DELIVERIES,
    &PENDING_DELIVERIES,
    &PENDING_MIRRORS,
    &DELIVERIES_DUE,
    &USAGE_LINES,
    &AUDIT,
    &OPERATORS,
];

/// The position in [`ALL`] of the table named `name`.
pub(crate) fn id(name: &str) -> Result<usize, StoreError> {
    ALL.iter().position(|table| table.name() == name).ok_or_else(|| StoreError::new(format!("unknown table {name}")))
}
