//! `GET /v1/tasks/{task_id}` and `POST /v1/tasks/{task_id}/cancel`, scoped to the caller's account.

use crate::error::ApiError;
use crate::http::auth::Caller;
use crate::state::AppState;
use crate::tasks;
use crate::tasks::answers::TaskAnswer;
use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use std::sync::Arc;

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(cfg, "/v1/tasks/{task_id}", vec![("GET", web::get().to(get))]);
    super::mount(cfg, "/v1/tasks/{task_id}/cancel", vec![("POST", web::post().to(cancel))]);
}

async fn get(caller: Caller, state: web::Data<AppState>, task_id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    if let Some(answer) = state.finished.get(&task_id).filter(|answer| answer.account == caller.account()) {
        return Ok(respond(&answer));
    }
    let task = tasks::owned_task(&state, caller.account(), &task_id).await?;
    // What was read may be applied but not yet durable (its fsync under way): show it no sooner.
    state.store.caught_up().await?;
    let answer = Arc::new(TaskAnswer::render(&task).map_err(ApiError::internal)?);
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
    state: web::Data<AppState>,
    task_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let task = tasks::cancel(&state, caller.account(), &task_id).await?;
    Ok(HttpResponse::Ok().json(tasks::view(&task)))
}
