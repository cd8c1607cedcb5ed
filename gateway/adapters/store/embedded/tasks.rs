//! Task records. Every status change is a compare-and-swap inside one write transaction, so a task reaches
//! exactly one terminal state however many pollers, cancels and restarts race for it.

use super::Earmark;
use super::earmarks::Book;
use super::ledger::{self, Keep};
use super::{
    Commit, Hold, IDEMPOTENCY, IN_FLIGHT, IdempotencyClaim, IdempotencyRecord, Inserted, Store, StoreError, StoredTask,
    TASKS, TASKS_BY_ACCOUNT, TaskRecord, TaskRef, TaskStatus, Tx, decode, encode,
};
use crate::domain::billing::books::hold_postings;
use crate::domain::listing::TaskQuery;
use crate::ports::storage::{Forwarded, PolledBy, TaskChange, Tasks};
use std::sync::Arc;

/// Writes a task stored for the first time, and indexes it.
fn insert_new(tx: &Tx, task: &TaskRecord, bytes: &[u8]) -> Result<(), StoreError> {
    tx.open_table(TASKS)?.insert(task.task_id.as_str(), bytes)?;
    tx.open_table(TASKS_BY_ACCOUNT)?.insert(account_position(task), ())
}

/// A task's key in `TASKS_BY_ACCOUNT`.
pub(super) fn account_position(task: &TaskRecord) -> (&str, i64, &str) {
    (task.account.as_str(), task.created_ms, task.task_id.as_str())
}

impl Store {
    /// Every task that has not reached a terminal state. Apart from [`Tasks::claim`], which hands them to the
    /// poller only once, because the restart bench reads them twice (cold, then warm) to time start-up.
    pub fn in_flight(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let tx = self.view()?;
        let ids = tx.open_table(IN_FLIGHT)?;
        let tasks = tx.open_table(TASKS)?;
        let mut out = Vec::new();
        for row in ids.iter()? {
            let (id, _) = row?;
            if let Some(v) = tasks.get(id.value())? {
                out.push(decode(v.value())?);
            }
        }
        Ok(out)
    }
}

/// Settles `task`, which has just ended, inside `tx` ([`crate::domain::billing::settle`]): appends its entries,
/// spending `spending` if given. An earmarked task's charge is journaled on its settlement, which the caller
/// writes in the same transaction.
fn settle(tx: &Tx, earmarks: &Arc<Book>, task: &mut TaskRecord, spending: Option<Earmark>) -> Result<(), StoreError> {
    let keep = match task.billing.as_ref() {
        Some(billing) if billing.entries_on_settlement() => Keep::OnSettlement,
        _ => Keep::Rows,
    };
    let Some(settled) = task.settle() else { return Ok(()) };
    super::super::unusable_usage_noted(task, &settled);
    let first = ledger::append(tx, earmarks, settled.postings, spending, keep)?;
    if keep == Keep::OnSettlement
        && let Some(settlement) = task.billing.as_mut().and_then(|b| b.settlement.as_mut())
    {
        settlement.ledger_seq = first;
    }
    Ok(())
}

/// What the write ending a task queues with it: the delivery of its end, and the copy of its results.
fn queue_follow_ups(tx: &Tx, task: &TaskRecord) -> Result<(), StoreError> {
    super::webhooks::enqueue(tx, task)?;
    super::mirrors::enqueue(tx, task)
}

#[async_trait::async_trait]
impl Tasks for Store {
    async fn add_task(
        &self,
        mut new: TaskRecord,
        idempotency: Option<IdempotencyClaim>,
        hold: Option<Hold>,
        commit: Commit,
    ) -> Result<Inserted, StoreError> {
        let earmarks = self.earmarks.clone();
        self.queue(commit, move |tx: &Tx| {
            // Every refusal is decided before the first write, so a refused insert writes nothing.
            if let Some(claim) = &idempotency {
                let table = tx.open_table(IDEMPOTENCY)?;
                let existing: Option<IdempotencyRecord> =
                    table.get(claim.key.as_str())?.map(|v| decode(v.value())).transpose()?;
                if let Some(existing) = existing
                    && claim.replacing.as_deref() != Some(existing.task_id.as_str())
                {
                    return Ok(Inserted::Duplicate(existing));
                }
            }
            let earmark = match hold {
                Some(hold) => match earmarks.earmark_from(&new.account, ledger::funds_in(tx, &new.account)?, hold) {
                    Ok(earmark) => Some(earmark),
                    Err(shortfall) => return Ok(Inserted::Shortfall(shortfall)),
                },
                None => None,
            };
            if let Some(claim) = &idempotency {
                tx.open_table(IDEMPOTENCY)?.insert(claim.key.as_str(), encode(&claim.record)?.as_slice())?;
            }
            if let Some(earmark) = earmark {
                let split = earmark.split().to_vec();
                let postings = hold_postings(&new.account, &new.task_id, &new.model, &split);
                // Held: the earmark becomes ledger entries at once.
                ledger::append(tx, &earmarks, postings, Some(earmark), Keep::Rows)?;
                if let Some(billing) = new.billing.as_mut() {
                    billing.hold = split;
                }
            }
            let bytes = encode(&new)?;
            insert_new(tx, &new, &bytes)?;
            if new.status.is_terminal() {
                queue_follow_ups(tx, &new)?;
            } else {
                tx.open_table(IN_FLIGHT)?.insert(new.task_id.as_str(), ())?;
            }
            Ok(Inserted::Stored(Box::new(StoredTask { record: new, bytes })))
        })
        .await
    }

    async fn add_ended(&self, mut task: TaskRecord, earmark: Earmark) -> Result<TaskRecord, StoreError> {
        // The write spends the earmark; a write that does not happen drops it, which releases its money.
        let earmarks = self.earmarks.clone();
        self.queue(Commit::Durable, move |tx: &Tx| {
            if !task.status.is_terminal() {
                return Err(StoreError::new(format!("task {} is stored once it ends, not before", task.task_id)));
            }
            settle(tx, &earmarks, &mut task, Some(earmark))?;
            queue_follow_ups(tx, &task)?;
            insert_new(tx, &task, &encode(&task)?)?;
            Ok(task)
        })
        .await
    }

    async fn task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let tx = self.view()?;
        let table = tx.open_table(TASKS)?;
        table.get(task_id)?.map(|v| decode(v.value())).transpose()
    }

    async fn list_tasks(&self, query: TaskQuery) -> Result<Vec<TaskRecord>, StoreError> {
        let view = self.view()?;
        let (tasks, by_account) = (view.open_table(TASKS)?, view.open_table(TASKS_BY_ACCOUNT)?);
        let account = query.account.as_str();
        let (since, upper) = (query.created_since.unwrap_or(i64::MIN), query.upper_bound());
        let mut listed = Vec::new();
        for row in by_account.range_back((account, since, ""), (account, upper.created_ms, upper.task_id.as_str()))? {
            if listed.len() >= query.limit {
                break;
            }
            let (key, _) = row?;
            let Some(stored) = tasks.get(key.value().2)? else { continue };
            let task: TaskRecord = decode(stored.value())?;
            if query.keeps(&task) {
                listed.push(task);
            }
        }
        Ok(listed)
    }

    async fn change_task(
        &self,
        task: TaskRef,
        expected: &[TaskStatus],
        commit: Commit,
        change: TaskChange,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let (expected, earmarks) = (expected.to_vec(), self.earmarks.clone());
        self.queue(commit, move |tx: &Tx| {
            let (task_id, known) = match task {
                TaskRef::Id(id) | TaskRef::Polled(id) => (id, None),
                TaskRef::AsStored(task) => (task.record.task_id.clone(), Some(task)),
            };
            let mut tasks = tx.open_table(TASKS)?;
            let current = match (tasks.get(task_id.as_str())?, known) {
                (Some(stored), Some(known)) if stored.value() == known.bytes.as_slice() => Some(known.record),
                (stored, _) => stored.map(|v| decode::<TaskRecord>(v.value())).transpose()?,
            };
            let Some(mut task) = current.filter(|t| expected.contains(&t.status)) else { return Ok(None) };
            change(&mut task);
            if task.status.is_terminal() {
                tx.open_table(IN_FLIGHT)?.remove(task_id.as_str())?;
                // Settlement rides in the transaction that makes the task terminal: exactly once; so does
                // the delivery of its end.
                settle(tx, &earmarks, &mut task, None)?;
                queue_follow_ups(tx, &task)?;
            }
            tasks.insert(task_id.as_str(), encode(&task)?.as_slice())?;
            Ok(Some(task))
        })
        .await
    }

    async fn forwarded(&self, task: TaskRef, _: PolledBy, change: TaskChange) -> Result<Option<Forwarded>, StoreError> {
        let written = self.change_task(task, &[TaskStatus::Queued], Commit::Durable, change).await?;
        Ok(written.map(|task| Forwarded { task, polled_here: true }))
    }

    async fn claim(&self) -> Result<Vec<TaskRecord>, StoreError> {
        // This process polls every task of the store: all that are live when it first asks, and then
        // those it submits itself.
        if self.claimed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(Vec::new());
        }
        self.in_flight()
    }

    async fn polls_here(&self, task_id: &str) -> Result<bool, StoreError> {
        Ok(self.task(task_id).await?.is_some_and(|task| !task.status.is_terminal()))
    }

    async fn leased(&self, _: Option<String>, _: usize) -> Result<Option<Vec<TaskRecord>>, StoreError> {
        Ok(None)
    }

    async fn abandoned(&self, task: &TaskRecord, started_ms: i64) -> Result<bool, StoreError> {
        Ok(task.created_ms < started_ms)
    }

    async fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let tx = self.view()?;
        let table = tx.open_table(IDEMPOTENCY)?;
        table.get(key)?.map(|v| decode(v.value())).transpose()
    }
}
