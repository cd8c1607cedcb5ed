//! Reading one of an account's tasks, and cancelling it.

use super::lifecycle::finish;
use crate::domain::errors::{Code, Problem};
use crate::domain::tasks::{TaskError, TaskRecord, TaskStatus};
use crate::ports::upstream::{Refusal, UpstreamError};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;

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
