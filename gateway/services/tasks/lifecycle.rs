//! A task's life as its handlers see it: a new record for an admitted submission, and its end, exactly once
//! (settled, its limits and upstream slot given back) whoever ends it.

use crate::domain::admission::Admitted;
use crate::domain::catalog::TaskMode;
use crate::domain::clock::{local_time, now_ms};
use crate::domain::tasks::{TaskError, TaskRecord, TaskStatus};
use crate::ports::storage::{Commit, Earmark, StoredTask, TaskRef};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;

/// A new task record for an admitted submission, not yet forwarded.
pub fn new_task(
    account: &str,
    key_prefix: &str,
    admitted: &Admitted,
    request_id: String,
    max_task_seconds: u64,
) -> TaskRecord {
    let now = now_ms();
    let model = admitted.model;
    let deadline = match max_task_seconds {
        0 => model.deadline_seconds,
        cap => model.deadline_seconds.min(cap),
    };
    TaskRecord {
        // Time-ordered (UUIDv7): new tasks land at the right edge of the store's B-trees, so a group commit
        // dirties a few pages instead of one leaf per task.
        task_id: crate::domain::clock::prefixed("task-", uuid::Uuid::now_v7()),
        request_id,
        account: account.to_string(),
        key_prefix: key_prefix.to_string(),
        model: model.id.into(),
        operation: model.operation.as_str().into(),
        media: model.media,
        status: if model.task_mode == TaskMode::Async { TaskStatus::Queued } else { TaskStatus::Running },
        created_at: local_time(now),
        created_ms: now,
        updated_ms: now,
        finished_ms: None,
        upstream_task_id: None,
        next_poll_ms: now,
        deadline_ms: now + (deadline as i64) * 1000,
        results: Vec::new(),
        usage: None,
        error: None,
        billing: None,
        callback_url: None,
        mirror: None,
        running_ms: None,
        measured: None,
        failed_items: Vec::new(),
        envelope: None,
        attempts: Vec::new(),
        // Under the span of the request that makes it, when traces are on.
        trace: crate::support::telemetry::traceparent(&tracing::Span::current()),
    }
}

/// A live task its handler will end: stored already, or written once, when it ends.
#[derive(Debug)]
pub enum OpenTask {
    Stored(TaskRef),
    /// Not stored yet: a synchronous task without an `Idempotency-Key`, whose money is earmarked in memory.
    Unwritten(Box<TaskRecord>, Earmark),
}

impl OpenTask {
    pub fn task_id(&self) -> &str {
        match self {
            OpenTask::Stored(task) => task.task_id(),
            OpenTask::Unwritten(task, _) => &task.task_id,
        }
    }

    /// A task this process polls, changed only while it holds the task's lease.
    pub fn polled(task_id: &str) -> OpenTask {
        OpenTask::Stored(TaskRef::Polled(task_id.to_string()))
    }
}

impl From<&str> for OpenTask {
    fn from(task_id: &str) -> OpenTask {
        OpenTask::Stored(task_id.into())
    }
}

impl From<Box<StoredTask>> for OpenTask {
    fn from(task: Box<StoredTask>) -> OpenTask {
        OpenTask::Stored(task.into())
    }
}

/// The error of a task whose submission a restart cut short: nothing was charged, and a retry with its
/// `Idempotency-Key` runs it.
pub const SUBMISSION_INTERRUPTED: &str = "submission_interrupted";
pub const SUBMISSION_INTERRUPTED_MESSAGE: &str = "The gateway restarted while submitting this task; nothing was charged. A retry with the same Idempotency-Key runs it.";
/// The error of a synchronous task whose client went away before its result: nothing was charged.
pub const CLIENT_DISCONNECTED: &str = "client_disconnected";

/// Whether `task` ended without doing its work, so that a retry of it should do the work.
pub fn did_no_work(task: &TaskRecord) -> bool {
    task.status.is_terminal()
        && task.upstream_task_id.is_none()
        && task.error.as_ref().is_some_and(|e| e.code == SUBMISSION_INTERRUPTED || e.code == CLIENT_DISCONNECTED)
}

/// Whether `task` is live without an upstream task id and the process that submitted it has stopped: its
/// submission was cut short, since no handler can be forwarding it.
pub async fn interrupted(state: &Gateway, task: &TaskRecord) -> Result<bool, ServiceError> {
    if task.status.is_terminal() || task.upstream_task_id.is_some() || task.waits_for_slot() {
        return Ok(false);
    }
    Ok(state.store.abandoned(task, state.started_ms).await?)
}

/// Ends a task whose submission was cut short (see [`interrupted`]), giving its hold back.
pub async fn end_interrupted(state: &Gateway, task_id: &str) -> Result<Option<TaskRecord>, ServiceError> {
    fail(state, task_id, SUBMISSION_INTERRUPTED, SUBMISSION_INTERRUPTED_MESSAGE).await
}

/// Ends a task as failed (compare-and-swap from any live state).
pub async fn fail(
    state: &Gateway,
    task: impl Into<OpenTask>,
    code: &str,
    message: &str,
) -> Result<Option<TaskRecord>, ServiceError> {
    let error = TaskError { code: code.to_string(), message: message.to_string() };
    finish(state, task, TaskStatus::Failed, move |t| t.error = Some(error)).await
}

/// Moves a live task to a terminal state exactly once, settling its money in the same write; `None` if it
/// had already ended.
pub async fn finish(
    state: &Gateway,
    task: impl Into<OpenTask>,
    status: TaskStatus,
    change: impl FnOnce(&mut TaskRecord) + Send + 'static,
) -> Result<Option<TaskRecord>, ServiceError> {
    let adoption = (status == TaskStatus::Success).then(|| state.copies.adoption()).flatten();
    let end = move |t: &mut TaskRecord| {
        let now = now_ms();
        t.status = status;
        t.updated_ms = now;
        t.finished_ms = Some(now);
        // Kept only while the task may be sent again.
        t.envelope = None;
        change(t);
        if let Some(adoption) = adoption {
            adoption.apply(t);
        }
    };
    let finished = match task.into() {
        OpenTask::Stored(task) => {
            let live = [TaskStatus::Queued, TaskStatus::Running];
            let task_id = task.task_id().to_string();
            let changed = state
                .store
                .change_task(task, &live, Commit::Durable, Box::new(end))
                .await
                .inspect_err(|_| state.poller.take_over(task_id))?;
            if let Some(task) = &changed {
                state.limits.release(&task.account);
            }
            changed
        }
        OpenTask::Unwritten(mut task, earmark) => {
            // No record is left for anything else to end: its slot is given back however the write goes, and
            // a task whose one write failed leaves nothing in flight either.
            let _slot = scopeguard::guard(task.account.clone(), |account| state.limits.release(&account));
            end(&mut task);
            Some(state.store.add_ended(*task, earmark).await?)
        }
    };
    if let Some(task) = &finished {
        crate::support::metrics::task_finished(task.status);
        if let Some(model) = crate::domain::catalog::ModelSpec::find(&task.model) {
            if let Some(key) = task.slot_key() {
                state.capacity.release(&task.task_id, model, key);
            } else if task.upstream_task_id.is_none() && model.task_mode == TaskMode::Async {
                // It may have ended waiting in line (a cancel).
                state.capacity.forget(&task.task_id, model);
            }
        }
    }
    Ok(finished)
}
