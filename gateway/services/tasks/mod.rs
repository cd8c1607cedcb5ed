//! Tasks: creating one for an admitted submission, forwarding it, reading it back, cancelling it. The
//! poller (in `poller`) owns every task between acceptance and its terminal state.

pub mod answers;
pub mod dispatch;
mod keys;
pub mod poller;
mod sweep;
mod tracker;

use crate::domain::admission::Admitted;
use crate::domain::catalog::TaskMode;
use crate::domain::clock::{local_time, now_ms};
use crate::domain::errors::{Code, Problem};
use crate::domain::results::MirrorState;
use crate::domain::tasks::{TaskError, TaskRecord, TaskStatus};
use crate::ports::storage::{Commit, Earmark, StoredTask, TaskRef};
use crate::ports::upstream::{Refusal, UpstreamError};
use crate::services::Gateway;
use crate::services::errors::ServiceError;
use serde_json::{Value, json};

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

/// The acceptance object of an asynchronous submission (`TaskAcceptance` in the OpenAPI).
pub fn acceptance(task: &TaskRecord) -> Value {
    let mut out = json!({
        "task_id": task.task_id,
        "request_id": task.request_id,
        "status": TaskStatus::Queued.as_str(),
        "message": format!("Task accepted. Poll GET /v1/tasks/{} until status is success, failed, timeout or cancelled.", task.task_id),
        "created_at": task.created_at,
    });
    if let Some(quote) = quote_view(task) {
        out["quote"] = quote;
    }
    out
}

/// The price the task was quoted at submission (and held): `{amount, units}`.
fn quote_view(task: &TaskRecord) -> Option<Value> {
    let billing = task.billing.as_ref()?;
    Some(json!({"amount": billing.quoted, "units": billing.units}))
}

/// Forwards an async task whose record is already stored (deferred), on a key with a free slot, and
/// records the upstream's task id; with no key free, the task waits in line, durably. A refused forward
/// ends the task as `failed` before the client hears of it.
pub async fn forward_async(
    state: &Gateway,
    task: Box<StoredTask>,
    admitted: &Admitted,
) -> Result<TaskRecord, ServiceError> {
    let model = admitted.model;
    let task_id = task.record.task_id.clone();
    let Some(key) = state.capacity.take(model, &[], false, &task_id).await else {
        return dispatch::wait_for_slot(state, task.into(), model, &admitted.envelope).await;
    };
    let started_ms = now_ms();
    match dispatch::send(state, model, &admitted.envelope, key, &task_id).await {
        dispatch::Sent::Taken { key, created } => {
            let Some(upstream_id) = created.task_id else {
                state.capacity.give_back(model, key, &task_id);
                fail(state, task_id.as_str(), "UpstreamMalformed", "no task id in the upstream's answer").await?;
                return Err(UpstreamError::Malformed("no task id".into()).into());
            };
            // Durable: it also persists the task and its hold, written deferred before the forward. The body
            // is kept while the task is live, to send it again should the upstream fail it for its own reasons.
            let envelope = String::from_utf8_lossy(&admitted.envelope).into_owned();
            dispatch::taken(state, task.into(), model, key, started_ms, upstream_id, Some(envelope))
                .await?
                .ok_or_else(|| Problem::internal("task vanished after forward").into())
        }
        dispatch::Sent::NoKey => dispatch::wait_for_slot(state, task.into(), model, &admitted.envelope).await,
        dispatch::Sent::Failed(error) => {
            fail(state, task_id.as_str(), &error.code(), &error.detail()).await?;
            Err(error.into())
        }
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

/// The client's view of a task.
pub fn view(task: &TaskRecord) -> Value {
    let mut out = json!({
        "task_id": task.task_id,
        "request_id": task.request_id,
        "status": task.status.as_str(),
        "model": task.model,
        "operation": task.operation,
        "type": task.media.as_str(),
        "created_at": task.created_at,
        "updated_at": local_time(task.updated_ms),
    });
    if let Some(finished) = task.finished_ms {
        out["finished_at"] = local_time(finished).into();
    }
    if !task.results.is_empty() {
        out["results"] = results_view(task);
    }
    if !task.failed_items.is_empty() {
        out["failed_results"] = json!(task.failed_items);
    }
    if let Some(mirror) = &task.mirror {
        out["mirror"] = json!({"status": mirror.state.as_str()});
        if let (MirrorState::Failed, Some(error)) = (mirror.state, &mirror.error) {
            out["mirror"]["error"] = error.as_str().into();
        }
    }
    if let Some(usage) = &task.usage {
        out["usage"] = usage.to_value();
    }
    if let Some(error) = &task.error {
        out["error"] = json!(error);
    }
    if let Some(quote) = quote_view(task) {
        out["quote"] = quote;
    }
    if let Some(settlement) = task.billing.as_ref().and_then(crate::domain::billing::summary) {
        out["settlement"] = settlement;
    }
    if let Some(trace_id) = task.trace.as_deref().and_then(crate::support::telemetry::trace_id) {
        out["trace_id"] = trace_id.into();
    }
    if task.attempts.len() > 1 {
        // Sent more than once (failed upstream for its own reasons): each sending, by key index.
        let attempts = task.attempts.iter().map(|a| {
            let mut attempt = json!({"key": a.key, "started_at": local_time(a.started_ms)});
            if let Some(code) = &a.failed {
                attempt["failed"] = code.as_str().into();
            }
            attempt
        });
        out["attempts"] = Value::Array(attempts.collect());
    }
    out
}

/// Where a task waiting for an upstream slot stands: `{position, ahead_of_you_seconds_estimate}`, the
/// position counting from 1.
pub fn queue_place(state: &Gateway, task: &TaskRecord) -> Option<Value> {
    if !task.waits_for_slot() {
        return None;
    }
    let model = crate::domain::catalog::ModelSpec::find(&task.model)?;
    let place = state.capacity.place(&task.task_id, model)?;
    Some(json!({"position": place.ahead + 1, "ahead_of_you_seconds_estimate": place.estimate_seconds}))
}

/// A task's results, each with its copy's size, content type and SHA-256 once mirrored.
fn results_view(task: &TaskRecord) -> Value {
    let results = task.results.iter().enumerate().map(|(index, result)| {
        let mut out = json!(result);
        if let Some(file) = task.mirror.as_ref().and_then(|m| m.file(index)) {
            out["size"] = file.size.into();
            out["content_type"] = file.content_type.as_str().into();
            out["sha256"] = file.sha256.as_str().into();
        }
        out
    });
    Value::Array(results.collect())
}

/// `equivalent_usage` of a task query: image tasks on `success` only.
pub fn equivalent_usage(task: &TaskRecord) -> Option<Value> {
    if task.status != TaskStatus::Success || task.media != crate::domain::catalog::Media::Image {
        return None;
    }
    let model = crate::domain::catalog::ModelSpec::find(&task.model)?;
    let billing = task.billing.as_ref()?;
    let list_price = billing.settlement.as_ref()?.list_price;
    let tokens =
        crate::domain::billing::equivalent::tokens(model, list_price, billing.baseline, task.measured.as_ref())?;
    Some(crate::domain::billing::equivalent::object(tokens))
}

/// `account`'s task, or a 404 that looks the same whether it is missing or someone else's.
pub async fn owned_task(state: &Gateway, account: &str, task_id: &str) -> Result<TaskRecord, ServiceError> {
    match state.store.task(task_id).await? {
        Some(task) if task.account == account => Ok(task),
        _ => Err(Problem::new(Code::task_not_found, format!("No task `{task_id}`.")).with_param("task_id").into()),
    }
}

/// Cancels a task the upstream has not started; anything later is a 409.
pub async fn cancel(state: &Gateway, account: &str, task_id: &str) -> Result<TaskRecord, ServiceError> {
    let task = owned_task(state, account, task_id).await?;
    let not_cancellable = |status: TaskStatus| {
        Problem::new(
            Code::task_not_cancellable,
            format!("Task `{task_id}` {}; only a queued task can be cancelled.", status.described()),
        )
        .with_param("task_id")
    };
    if task.status != TaskStatus::Queued {
        return Err(not_cancellable(task.status).into());
    }
    if let Some(upstream_id) = &task.upstream_task_id {
        let model =
            crate::domain::catalog::ModelSpec::find(&task.model).ok_or_else(|| Problem::internal("unknown model"))?;
        match state.upstream.cancel(model.region, task.upstream_key().unwrap_or_default(), upstream_id).await {
            Ok(()) => {}
            Err(UpstreamError::Answered { refusal: Refusal::NotCancellable, .. }) => {
                return Err(not_cancellable(TaskStatus::Running).into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let cancelled = finish(state, task_id, TaskStatus::Cancelled, |t| {
        t.error = Some(TaskError { code: "cancelled".into(), message: "Cancelled by the client.".into() });
    })
    .await?;
    match cancelled {
        Some(task) => Ok(task),
        None => {
            // The poller may have recorded the upstream's CANCELED first; that is this cancel's outcome too.
            let task = owned_task(state, account, task_id).await?;
            if task.status == TaskStatus::Cancelled { Ok(task) } else { Err(not_cancellable(task.status).into()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::local_time;

    #[test]
    fn local_time_matches_chronos_format() {
        for ms in [0, 1_700_000_000_123, 1_795_000_000_999, 951_782_400_000, -1] {
            let expected = chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S").to_string());
            assert_eq!(Some(local_time(ms)), expected, "{ms}");
            // Again, from the recent seconds kept, and another millisecond of the same second.
            assert_eq!(Some(local_time(ms)), expected, "{ms}");
            assert_eq!(Some(local_time(ms - ms.rem_euclid(1000))), expected, "{ms}");
        }
    }
}
