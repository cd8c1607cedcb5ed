//! `GET /v1/tasks`, `GET /v1/tasks/{task_id}` and `POST /v1/tasks/{task_id}/cancel`, scoped to the caller's
//! account.

use crate::domain::listing::{ListPosition, TaskQuery};
use crate::domain::tasks::TaskStatus;
use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::runtime::Gateway;
use crate::services::runtime::answers::TaskAnswer;
use crate::services::tasks;
use crate::services::tasks::answers::{answer, render};
use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(cfg, "/v1/tasks", vec![("GET", web::get().to(list))]);
    super::mount(cfg, "/v1/tasks/{task_id}", vec![("GET", web::get().to(get))]);
    super::mount(cfg, "/v1/tasks/{task_id}/cancel", vec![("POST", web::post().to(cancel))]);
}

async fn get(caller: Caller, state: web::Data<Gateway>, task_id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    if let Some(answer) = state.finished.get(&task_id).filter(|answer| answer.account == caller.account()) {
        return Ok(respond(&answer));
    }
    let task = tasks::cancel::owned_task(&state, caller.account(), &task_id).await?;
    // What was read may be applied but not yet durable (its fsync under way): show it no sooner.
    state.store.caught_up().await?;
    if let Some(place) = tasks::views::queue_place(&state, &task).await {
        let (mut body, _) = answer(&task);
        body["queue"] = place;
        return Ok(HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(body));
    }
    let answer = Arc::new(render(&task).map_err(ApiError::internal)?);
    state.finished.keep(&task, answer.clone());
    Ok(respond(&answer))
}

fn respond(answer: &TaskAnswer) -> HttpResponse {
    let mut response = HttpResponse::Ok();
    response.content_type(ContentType::json());
    // Image tasks on success carry the equivalent-usage projection; it is computed here, never stored.
    if answer.no_store {
        response.insert_header(("Cache-Control", "no-store"));
    }
    response.body(answer.body.clone())
}

async fn cancel(
    caller: Caller,
    state: web::Data<Gateway>,
    task_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let task = tasks::cancel::cancel(&state, caller.account(), &task_id).await?;
    Ok(HttpResponse::Ok().json(tasks::views::view(&task)))
}

/// Most tasks one page of `GET /v1/tasks` lists, and how many it lists unless asked.
const PAGE_LIMIT: usize = 100;
const PAGE_DEFAULT: usize = 20;

/// `GET /v1/tasks`'s query, as sent: each value is checked on its own, so an error names its parameter.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<String>,
    after: Option<String>,
    status: Option<String>,
    model: Option<String>,
    created_since: Option<String>,
    created_until: Option<String>,
}

/// The caller's tasks, newest first, a page at a time: `{data, has_more, last_id}`; the next page is asked
/// with `after=last_id`.
async fn list(
    caller: Caller,
    state: web::Data<Gateway>,
    params: web::Query<ListParams>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let limit = match params.limit.as_deref() {
        None => PAGE_DEFAULT,
        Some(limit) => limit.parse().ok().filter(|n| (1..=PAGE_LIMIT).contains(n)).ok_or_else(|| {
            ApiError::invalid_parameter(
                "limit",
                format!("`limit` is a whole number from 1 to {PAGE_LIMIT}; got `{limit}`."),
            )
        })?,
    };
    let status =
        params.status.as_deref().map(|s| crate::edges::web::one_of("status", s, &TaskStatus::ALL, TaskStatus::as_str));
    let status = status.transpose()?;
    let epoch_ms = |name: &'static str, value: Option<&str>| {
        value
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::invalid_parameter(name, format!("`{name}` is epoch milliseconds; got `{v}`."))
                })
            })
            .transpose()
    };
    let created_since = epoch_ms("created_since", params.created_since.as_deref())?;
    let created_until = epoch_ms("created_until", params.created_until.as_deref())?;
    let after = match &params.after {
        None => None,
        Some(task_id) => match state.store.task(task_id).await? {
            Some(task) if task.account == caller.account() => Some(ListPosition::of(&task)),
            _ => return Err(ApiError::invalid_parameter("after", format!("No task `{task_id}` to list after."))),
        },
    };
    let query = TaskQuery {
        account: caller.account().to_string(),
        after,
        status,
        model: params.model,
        created_since,
        created_until,
        // One more than the page tells whether another page follows.
        limit: limit + 1,
    };
    let mut tasks = state.store.list_tasks(query).await?;
    state.store.caught_up().await?;
    let has_more = tasks.len() > limit;
    tasks.truncate(limit);
    let last_id = tasks.last().map(|task| task.task_id.clone());
    let (data, projected): (Vec<serde_json::Value>, Vec<bool>) = tasks.iter().map(answer).unzip();
    let mut response = HttpResponse::Ok();
    if projected.contains(&true) {
        response.insert_header(("Cache-Control", "no-store"));
    }
    Ok(response.json(json!({"data": data, "has_more": has_more, "last_id": last_id})))
}
