//! How a task is shown to its client: the acceptance of a submission and the view a read answers.

use crate::domain::clock::local_time;
use crate::domain::results::MirrorState;
use crate::domain::tasks::{TaskRecord, TaskStatus};
use crate::services::runtime::Gateway;
use serde_json::{Value, json};

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
pub async fn queue_place(state: &Gateway, task: &TaskRecord) -> Option<Value> {
    if !task.waits_for_slot() {
        return None;
    }
    let model = crate::domain::catalog::ModelSpec::find(&task.model)?;
    let place = state.capacity.place(&task.task_id, model).await?;
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
