//! Task records. Every status change is a compare-and-swap inside one write transaction, so a task reaches
//! exactly one terminal state however many pollers, cancels and restarts race for it.

use super::{IDEMPOTENCY, IN_FLIGHT, Store, StoreError, TASKS, decode, encode};
use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
        matches!(
            self,
            TaskStatus::Success | TaskStatus::Failed | TaskStatus::Timeout | TaskStatus::Cancelled
        )
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
    pub kind: String,
    pub expires_at: String,
}

/// Why a task failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// What an `Idempotency-Key` was first used for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex.
    pub body_hash: String,
    pub task_id: String,
}

/// A task as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: String,
    pub request_id: String,
    pub account: String,
    pub key_prefix: String,
    pub model: String,
    pub operation: String,
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
    #[serde(default)]
    pub polls: u32,
    pub deadline_ms: i64,
    #[serde(default)]
    pub results: Vec<TaskResult>,
    /// The upstream's `usage`, as it came.
    #[serde(default)]
    pub usage: Option<Value>,
    #[serde(default)]
    pub error: Option<TaskError>,
    /// Billing state of the task (hold, settlement), owned by the billing module.
    #[serde(default)]
    pub billing: Value,
}

impl Store {
    /// Stores a new task, and its idempotency record when there is one, in one transaction. If the
    /// idempotency key is already taken nothing is written and the existing record is returned.
    pub fn insert_task(
        &self,
        task: &TaskRecord,
        idempotency: Option<(&str, &IdempotencyRecord)>,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let tx = self.db().begin_write()?;
        {
            if let Some((key, record)) = idempotency {
                let mut table = tx.open_table(IDEMPOTENCY)?;
                let existing: Option<IdempotencyRecord> =
                    table.get(key)?.map(|v| decode(v.value())).transpose()?;
                if let Some(existing) = existing {
                    return Ok(Some(existing));
                }
                table.insert(key, encode(record)?.as_slice())?;
            }
            tx.open_table(TASKS)?
                .insert(task.task_id.as_str(), encode(task)?.as_slice())?;
            if !task.status.is_terminal() {
                tx.open_table(IN_FLIGHT)?
                    .insert(task.task_id.as_str(), ())?;
            }
        }
        tx.commit()?;
        Ok(None)
    }

    pub fn task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let tx = self.db().begin_read()?;
        let table = tx.open_table(TASKS)?;
        table.get(task_id)?.map(|v| decode(v.value())).transpose()
    }

    /// Applies `change` if the task is still in one of `expected`; returns the new record, or `None` when the
    /// task moved on meanwhile (someone else won the race) or does not exist.
    pub fn update_task(
        &self,
        task_id: &str,
        expected: &[TaskStatus],
        change: impl FnOnce(&mut TaskRecord),
    ) -> Result<Option<TaskRecord>, StoreError> {
        let tx = self.db().begin_write()?;
        let updated = {
            let mut tasks = tx.open_table(TASKS)?;
            let current: Option<TaskRecord> =
                tasks.get(task_id)?.map(|v| decode(v.value())).transpose()?;
            match current {
                Some(mut task) if expected.contains(&task.status) => {
                    change(&mut task);
                    tasks.insert(task_id, encode(&task)?.as_slice())?;
                    if task.status.is_terminal() {
                        tx.open_table(IN_FLIGHT)?.remove(task_id)?;
                    }
                    Some(task)
                }
                _ => None,
            }
        };
        tx.commit()?;
        Ok(updated)
    }

    /// Every task that has not reached a terminal state.
    pub fn in_flight(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let tx = self.db().begin_read()?;
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
        let tx = self.db().begin_read()?;
        let table = tx.open_table(IDEMPOTENCY)?;
        table.get(key)?.map(|v| decode(v.value())).transpose()
    }
}
