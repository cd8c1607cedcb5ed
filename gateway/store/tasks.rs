//! Task records. Every status change is a compare-and-swap inside one write transaction, so a task reaches
//! exactly one terminal state however many pollers, cancels and restarts race for it.

use super::Tx;
use super::earmarks::{Book, Earmark};
use super::ledger::{self, Keep};
use super::usage::UsageRecord;
use super::{Commit, IDEMPOTENCY, IN_FLIGHT, Pending, Store, StoreError, TASKS, decode, encode};
use crate::billing::books::{EntryKind, Posting, Shortfall};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    Success,
    Failed,
    Timeout,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Success | TaskStatus::Failed | TaskStatus::Timeout | TaskStatus::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Success => "success",
            TaskStatus::Failed => "failed",
            TaskStatus::Timeout => "timeout",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Success,
        TaskStatus::Failed,
        TaskStatus::Timeout,
        TaskStatus::Cancelled,
    ];
}

/// One result file of a finished task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskResult {
    pub url: String,
    #[serde(rename = "type")]
    pub kind: Cow<'static, str>,
    pub expires_at: String,
}

/// Why a task failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// Money to set aside for a new task.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub amount: i64,
    /// Only the free-trial pot may fund it.
    pub trial_only: bool,
}

/// What `add_task` did.
#[derive(Debug)]
pub enum Inserted {
    Stored(Box<StoredTask>),
    /// The idempotency key was already used; nothing was written.
    Duplicate(IdempotencyRecord),
    /// The account cannot fund the hold; nothing was written.
    Shortfall(Shortfall),
}

/// What an `Idempotency-Key` was first used for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex.
    pub body_hash: String,
    pub task_id: String,
}

/// An `Idempotency-Key` a new task claims.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    /// The store key (account and client key).
    pub key: String,
    pub record: IdempotencyRecord,
    /// A task the key may be taken over from: one that ended without doing its work (its submission was
    /// interrupted, or its client went away), so a retry does the work instead of replaying nothing.
    pub replacing: Option<String>,
}

/// A task as a write stored it, with the bytes it is stored as.
#[derive(Debug, Clone)]
pub struct StoredTask {
    pub record: TaskRecord,
    bytes: Vec<u8>,
}

/// The task a change is for.
#[derive(Debug)]
pub enum TaskRef {
    Id(String),
    /// The task as the caller last had it from the store: while the stored bytes are still the same (a
    /// compare), they are neither decoded nor the record encoded again.
    AsStored(Box<StoredTask>),
}

impl From<&str> for TaskRef {
    fn from(task_id: &str) -> TaskRef {
        TaskRef::Id(task_id.to_string())
    }
}

impl From<Box<StoredTask>> for TaskRef {
    fn from(task: Box<StoredTask>) -> TaskRef {
        TaskRef::AsStored(task)
    }
}

/// A task as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: String,
    pub request_id: String,
    pub account: String,
    pub key_prefix: String,
    /// The catalog's names, borrowed when a task is made (no copy per request) and owned when read back.
    pub model: Cow<'static, str>,
    pub operation: Cow<'static, str>,
    pub media: crate::catalog::Media,
    pub status: TaskStatus,
    /// Local time, `YYYY-MM-DD HH:MM:SS`.
    pub created_at: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    #[serde(default)]
    pub finished_ms: Option<i64>,
    /// Set once the upstream accepted the job.
    #[serde(default)]
    pub upstream_task_id: Option<String>,
    /// When the poller should ask the upstream next (epoch ms).
    #[serde(default)]
    pub next_poll_ms: i64,
    pub deadline_ms: i64,
    #[serde(default)]
    pub results: Vec<TaskResult>,
    /// The upstream's `usage`, as it came.
    #[serde(default)]
    pub usage: Option<crate::upstream::Usage>,
    #[serde(default)]
    pub error: Option<TaskError>,
    /// Billing state of the task (hold, settlement), owned by the billing module.
    #[serde(default)]
    pub billing: Option<crate::billing::TaskBilling>,
}

impl TaskRecord {
    /// Settles the task, which has just ended, by billing's rules ([`crate::billing::settle`]): writes the
    /// settlement onto its billing and returns the ledger postings; `None` without billing or if settled.
    pub fn settle(&mut self) -> Option<Vec<Posting>> {
        let TaskRecord { task_id, account, model, status, usage, billing, .. } = self;
        let ending = crate::billing::Ending {
            task_id,
            account,
            model,
            state: status.as_str(),
            delivered: (*status == TaskStatus::Success).then_some(usage.as_ref()),
        };
        crate::billing::settle(billing.as_mut()?, &ending)
    }

    /// When the task ended (what its usage line and its settlement's entries are dated by).
    pub fn ended_ms(&self) -> i64 {
        self.finished_ms.unwrap_or(self.updated_ms)
    }
}

impl Store {
    /// Stores a new task in one transaction with its idempotency record and the hold on the account's
    /// funds, committed as `commit` asks; resolves to what was decided, with the task as stored (with its
    /// hold). Nothing is written if the idempotency key is taken or the account cannot fund `hold`.
    pub fn add_task(
        &self,
        mut new: TaskRecord,
        idempotency: Option<IdempotencyClaim>,
        hold: Option<Hold>,
        commit: Commit,
    ) -> Pending<Inserted> {
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
                let postings: Vec<Posting> = split
                    .iter()
                    .map(|(pot, amount)| Posting {
                        account: new.account.clone(),
                        kind: EntryKind::Hold,
                        pot: *pot,
                        delta: -amount,
                        task_id: Some(new.task_id.clone()),
                        note: new.model.to_string(),
                    })
                    .collect();
                // Held: the earmark becomes ledger entries at once.
                ledger::append(tx, &earmarks, postings, Some(earmark), Keep::Rows)?;
                if let Some(billing) = new.billing.as_mut() {
                    billing.hold = split;
                }
            }
            let bytes = encode(&new)?;
            tx.open_table(TASKS)?.insert(new.task_id.as_str(), bytes.as_slice())?;
            if !new.status.is_terminal() {
                tx.open_table(IN_FLIGHT)?.insert(new.task_id.as_str(), ())?;
            }
            Ok(Inserted::Stored(Box::new(StoredTask { record: new, bytes })))
        })
    }

    /// Earmarks `hold` from the account's funds in memory, for a task written once, when it ends
    /// ([`Store::add_ended`]); writes nothing. At once when the account's funds are known, else through
    /// the writer. Resolves to the earmark, or to why the account cannot fund it.
    pub async fn earmark(&self, account: &str, hold: Hold) -> Result<Result<Earmark, Shortfall>, StoreError> {
        // A stopped writer could not store the task's end: refuse before the upstream is called.
        if !self.writer.running() {
            return Err(StoreError::unavailable("the store can no longer make writes durable"));
        }
        if let Some(decided) = self.earmarks.try_earmark(account, hold) {
            return Ok(decided);
        }
        let (account, earmarks) = (account.to_string(), self.earmarks.clone());
        self.queue(Commit::Deferred, move |tx: &Tx| {
            Ok(earmarks.earmark_from(&account, ledger::funds_in(tx, &account)?, hold))
        })
        .await
    }

    /// Stores a task that has ended, with its settlement (the charge of what it used from `earmark`), in one
    /// durable write. The earmark is released with it, or when the write does not happen.
    pub fn add_ended(&self, mut task: TaskRecord, earmark: Earmark) -> Pending<TaskRecord> {
        let earmarks = self.earmarks.clone();
        self.queue(Commit::Durable, move |tx: &Tx| {
            if !task.status.is_terminal() {
                return Err(StoreError::new(format!("task {} is stored once it ends, not before", task.task_id)));
            }
            settle(tx, &earmarks, &mut task, Some(earmark))?;
            tx.open_table(TASKS)?.insert(task.task_id.as_str(), encode(&task)?.as_slice())?;
            Ok(task)
        })
    }

    pub fn task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let tx = self.view()?;
        let table = tx.open_table(TASKS)?;
        table.get(task_id)?.map(|v| decode(v.value())).transpose()
    }

    /// The usage log's lines matching `filter`, oldest first: one per settled task, dated when it ended.
    pub fn usage(&self, filter: impl Fn(&Value) -> bool) -> Result<Vec<Value>, StoreError> {
        let tx = self.view()?;
        let mut lines = Vec::new();
        for row in tx.open_table(TASKS)?.iter()? {
            let task: TaskRecord = decode(row?.1.value())?;
            let Some(line) = UsageRecord::of(&task) else { continue };
            let line = serde_json::to_value(line)?;
            if filter(&line) {
                lines.push(line);
            }
        }
        lines.sort_by_key(|line| line["at_ms"].as_i64());
        Ok(lines)
    }

    /// Applies `change` if the task is still in one of `expected`, committed as `commit` asks; resolves to
    /// the new record, or `None` when the task moved on meanwhile (someone else won the race) or does not
    /// exist.
    pub fn change_task(
        &self,
        task: impl Into<TaskRef>,
        expected: &[TaskStatus],
        commit: Commit,
        change: impl FnOnce(&mut TaskRecord) + Send + 'static,
    ) -> Pending<Option<TaskRecord>> {
        let (task, expected, earmarks) = (task.into(), expected.to_vec(), self.earmarks.clone());
        self.queue(commit, move |tx: &Tx| {
            let (task_id, known) = match task {
                TaskRef::Id(id) => (id, None),
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
                // Settlement rides in the transaction that makes the task terminal: exactly once.
                settle(tx, &earmarks, &mut task, None)?;
            }
            tasks.insert(task_id.as_str(), encode(&task)?.as_slice())?;
            Ok(Some(task))
        })
    }

    /// Every task that has not reached a terminal state.
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

    /// The idempotency record stored under `key`.
    pub fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let tx = self.view()?;
        let table = tx.open_table(IDEMPOTENCY)?;
        table.get(key)?.map(|v| decode(v.value())).transpose()
    }
}

/// Settles `task`, which has just ended, inside `tx` ([`crate::billing::settle`]): appends its entries,
/// spending `spending` if given. An earmarked task's charge is journaled on its settlement, which the caller
/// writes in the same transaction.
fn settle(tx: &Tx, earmarks: &Arc<Book>, task: &mut TaskRecord, spending: Option<Earmark>) -> Result<(), StoreError> {
    let keep = match task.billing.as_ref() {
        Some(billing) if billing.entries_on_settlement() => Keep::OnSettlement,
        _ => Keep::Rows,
    };
    let Some(postings) = task.settle() else { return Ok(()) };
    let first = ledger::append(tx, earmarks, postings, spending, keep)?;
    if keep == Keep::OnSettlement
        && let Some(settlement) = task.billing.as_mut().and_then(|b| b.settlement.as_mut())
    {
        settlement.ledger_seq = first;
    }
    Ok(())
}
