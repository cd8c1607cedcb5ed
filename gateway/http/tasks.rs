//! `GET /v1/tasks/{task_id}` and `POST /v1/tasks/{task_id}/cancel`, scoped to the caller's account.

use crate::error::ApiError;
use crate::http::auth::Caller;
use crate::state::AppState;
use crate::tasks;
use actix_web::{HttpResponse, web};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/tasks/{task_id}", web::get().to(get)).route("/v1/tasks/{task_id}/cancel", web::post().to(cancel));
}

async fn get(caller: Caller, state: web::Data<AppState>, task_id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let task = tasks::owned_task(&state, &caller, &task_id)?;
    // What was read may be applied but not yet durable (its fsync under way): show it no sooner.
    state.store.caught_up().await?;
    let mut body = tasks::view(&task);
    // Image tasks on success carry the equivalent-usage projection; it is computed here, never stored.
    match tasks::equivalent_usage(&task) {
        Some(projection) => {
            body["equivalent_usage"] = projection;
            Ok(HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(body))
        }
        None => Ok(HttpResponse::Ok().json(body)),
    }
}

async fn cancel(
    caller: Caller,
    state: web::Data<AppState>,
    task_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let task = tasks::cancel(&state, &caller, &task_id).await?;
    Ok(HttpResponse::Ok().json(tasks::view(&task)))
}
