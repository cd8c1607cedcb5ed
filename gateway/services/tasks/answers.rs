//! Answers to task reads, rendered (the finished ones are kept: `runtime::answers`).

use super::views::{equivalent_usage, view};
use crate::domain::tasks::TaskRecord;
use crate::services::runtime::answers::TaskAnswer;

/// A task as `GET /v1/tasks/{id}` answers it (its view with the equivalent usage), and whether it carries a
/// projection computed at read time.
pub fn answer(task: &TaskRecord) -> (serde_json::Value, bool) {
    let mut body = view(task);
    let projection = equivalent_usage(task);
    let no_store = projection.is_some();
    if let Some(projection) = projection {
        body["equivalent_usage"] = projection;
    }
    (body, no_store)
}

/// The answer to a read of `task`.
pub fn render(task: &TaskRecord) -> Result<TaskAnswer, serde_json::Error> {
    let (body, no_store) = answer(task);
    let body = serde_json::to_vec(&body)?.into();
    Ok(TaskAnswer { account: task.account.clone(), body, no_store, ended_ms: task.finished_ms })
}
