//! Reading an upstream task answer: its status, its result files, its usage, its failure.
//!
//! The upstream's success payloads differ per family (upstream-protocol.md section 5); result URLs are
//! collected from every place a family puts them, so no model is named here.

use crate::catalog::Media;
use crate::store::{TaskError, TaskResult, TaskStatus};
use serde_json::Value;

/// What one upstream answer says about a task.
#[derive(Debug)]
pub enum Observed {
    Pending,
    Running,
    Succeeded { results: Vec<TaskResult>, usage: Option<Value> },
    Failed(TaskError),
    Cancelled,
}

/// Result files stay downloadable this long after success.
pub const RESULT_TTL_HOURS: i64 = 24;

/// Interprets a `GET /tasks/{id}` answer.
pub fn observe(answer: &Value, media: Media) -> Observed {
    let output = answer.get("output").unwrap_or(&Value::Null);
    match output.get("task_status").and_then(Value::as_str).unwrap_or("UNKNOWN") {
        "PENDING" => Observed::Pending,
        "RUNNING" | "SUSPENDED" => Observed::Running,
        "SUCCEEDED" => Observed::Succeeded { results: results(output, media), usage: answer.get("usage").cloned() },
        "FAILED" => Observed::Failed(TaskError {
            code: output.get("code").and_then(Value::as_str).unwrap_or("UpstreamFailed").to_string(),
            message: output
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("The upstream failed the task.")
                .to_string(),
        }),
        "CANCELED" | "CANCELLED" => Observed::Cancelled,
        _ => Observed::Failed(TaskError {
            code: "UpstreamTaskUnknown".into(),
            message: "The upstream no longer knows this task (unknown or older than 24 hours).".into(),
        }),
    }
}

/// Every result URL of a success payload, in the upstream's order.
pub fn results(output: &Value, media: Media) -> Vec<TaskResult> {
    let list = |key: &str| output.get(key).and_then(Value::as_array).into_iter().flatten();
    let mut found: Vec<Option<&Value>> =
        vec![output.get("video_url"), output.get("output_image_url"), output.get("output_vis_image_url")];
    found.extend(list("results").map(|item| item.get("url")));
    found.extend(list("render_urls").map(Some));
    for choice in list("choices") {
        let content = choice.pointer("/message/content").and_then(Value::as_array);
        found.extend(content.into_iter().flatten().map(|item| item.get("image").or_else(|| item.get("image_url"))));
    }
    let urls = found.into_iter().flatten().filter_map(Value::as_str);
    let expires_at = super::local_time(super::now_ms() + RESULT_TTL_HOURS * 3_600_000);
    urls.into_iter()
        .map(|url| TaskResult {
            url: url.to_string(),
            kind: media.as_str().to_string(),
            expires_at: expires_at.clone(),
        })
        .collect()
}

/// The gateway state an observation moves a task to.
pub fn status_of(observed: &Observed) -> TaskStatus {
    match observed {
        Observed::Pending => TaskStatus::Queued,
        Observed::Running => TaskStatus::Running,
        Observed::Succeeded { .. } => TaskStatus::Success,
        Observed::Failed(_) => TaskStatus::Failed,
        Observed::Cancelled => TaskStatus::Cancelled,
    }
}
