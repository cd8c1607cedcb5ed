//! Retention: finished work past its time, removed in small batches (`Purging::purge`). Candidates are read
//! from a view, off the writer; the write that removes them checks each again, so work that changed
//! meanwhile stays. Tasks, deliveries and idempotency records are keyed by time-ordered ids (UUIDv7), so
//! the old ones are where each table starts; a purged task's usage line goes to `USAGE_LINES`.

use super::overlay::ReadTable;
use super::tables::{DELIVERIES, DELIVERIES_DUE, PENDING_DELIVERIES, USAGE_LINES};
use super::{IDEMPOTENCY, IdempotencyRecord, Store, StoreError, TASKS, TASKS_BY_ACCOUNT, TaskRecord, blocking};
use super::{decode, encode, tasks::account_position};
use crate::domain::clock::prefixed_at;
use crate::domain::deliveries::Delivery;
use crate::domain::retention::Retention;
use crate::domain::usage_log::UsageLine;
use crate::ports::storage::{Purged, Purging};
use std::collections::HashSet;

/// Rows read at most per table and pass, purgeable or not: a pass stays short whatever the store holds.
const SCANNED_AT_MOST: usize = 20_000;

#[async_trait::async_trait]
impl Purging for Store {
    async fn purge(&self, retention: &Retention, now_ms: i64, limit: usize) -> Result<Purged, StoreError> {
        let retention = *retention;
        blocking(self, move |store| {
            let view = store.view()?;
            // Deliveries no longer pending and old enough.
            let deliveries_before = prefixed_at("msg_", retention.deliveries_created_before(now_ms));
            let mut deliveries = Vec::new();
            for row in view.open_table(DELIVERIES)?.iter()?.take(SCANNED_AT_MOST) {
                let (id, stored) = row?;
                if id.value() >= deliveries_before.as_str() || deliveries.len() == limit {
                    break;
                }
                let delivery: Delivery = decode(stored.value())?;
                if retention.purges_delivery(&delivery, now_ms) {
                    deliveries.push(delivery.id);
                }
            }
            let needed = pending_deliveries_tasks(&view.open_table(DELIVERIES)?, &view.open_table(DELIVERIES_DUE)?)?;
            // Idempotency records of old tasks (a task id tells when it was made). Not ordered by time: each
            // pass reads the table from the start, at most `SCANNED_AT_MOST` rows.
            let records_before = prefixed_at("task-", retention.idempotency_created_before(now_ms));
            let mut records = Vec::new();
            for row in view.open_table(IDEMPOTENCY)?.iter()?.take(SCANNED_AT_MOST) {
                let (key, stored) = row?;
                let record: IdempotencyRecord = decode(stored.value())?;
                if record.task_id < records_before {
                    records.push(key.value().to_string());
                    if records.len() == limit {
                        break;
                    }
                }
            }
            // Finished tasks past their time.
            let tasks_before = prefixed_at("task-", retention.tasks_created_before(now_ms));
            let mut tasks = Vec::new();
            for row in view.open_table(TASKS)?.iter()?.take(SCANNED_AT_MOST) {
                let (id, stored) = row?;
                if id.value() >= tasks_before.as_str() || tasks.len() == limit {
                    break;
                }
                let task: TaskRecord = decode(stored.value())?;
                if retention.purges_task(&task, now_ms) && !needed.contains(&task.task_id) {
                    tasks.push(task.task_id);
                }
            }
            drop(view);
            if deliveries.is_empty() && records.is_empty() && tasks.is_empty() {
                return Ok(Purged::default());
            }
            store.write(move |tx| {
                let mut purged = Purged::default();
                let mut table = tx.open_table(DELIVERIES)?;
                for id in deliveries {
                    let Some(stored) = table.get(id.as_str())? else { continue };
                    let delivery: Delivery = decode(stored.value())?;
                    drop(stored);
                    if retention.purges_delivery(&delivery, now_ms) {
                        table.remove(id.as_str())?;
                        // A store from before `DELIVERIES_DUE` may still list it (pending there once).
                        tx.open_table(PENDING_DELIVERIES)?.remove(id.as_str())?;
                        purged.deliveries += 1;
                    }
                }
                let mut table = tx.open_table(IDEMPOTENCY)?;
                for key in records {
                    let Some(stored) = table.get(key.as_str())? else { continue };
                    let record: IdempotencyRecord = decode(stored.value())?;
                    drop(stored);
                    if record.task_id < records_before {
                        table.remove(key.as_str())?;
                        purged.idempotency += 1;
                    }
                }
                let needed = pending_deliveries_tasks(&*tx.open_table(DELIVERIES)?, &*tx.open_table(DELIVERIES_DUE)?)?;
                let (mut table, mut by_account) = (tx.open_table(TASKS)?, tx.open_table(TASKS_BY_ACCOUNT)?);
                let mut lines = tx.open_table(USAGE_LINES)?;
                for id in tasks {
                    let Some(stored) = table.get(id.as_str())? else { continue };
                    let task: TaskRecord = decode(stored.value())?;
                    drop(stored);
                    if !retention.purges_task(&task, now_ms) || needed.contains(&task.task_id) {
                        continue;
                    }
                    if let Some(line) = UsageLine::of(&task) {
                        lines.insert((line.at_ms, line.task_id.as_str()), encode(&line)?.as_slice())?;
                    }
                    by_account.remove(account_position(&task))?;
                    table.remove(id.as_str())?;
                    purged.tasks += 1;
                }
                Ok(purged)
            })
        })
        .await
    }
}

/// The tasks whose deliveries are still pending: kept while a delivery needs them (it sends their view).
fn pending_deliveries_tasks(
    deliveries: &ReadTable<'_, &'static str, &'static [u8]>,
    due: &ReadTable<'_, (i64, &'static str), ()>,
) -> Result<HashSet<String>, StoreError> {
    let mut needed = HashSet::new();
    for row in due.iter()? {
        let (key, _) = row?;
        if let Some(stored) = deliveries.get(key.value().1)? {
            needed.insert(decode::<Delivery>(stored.value())?.task_id);
        }
    }
    Ok(needed)
}
