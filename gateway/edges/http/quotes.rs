//! `POST /v1/quotes`: what a job would cost the caller's account, checked as its submission would be, with
//! nothing run, stored or held.
//!
//! A route of its own rather than `?dry_run=true` on the submit routes: a client whose query string is lost
//! on the way (a proxy, an SDK, an older gateway that ignored it) would run and pay for the job it meant to
//! price, and a quote answers in a shape of its own.

use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::quotes;
use crate::services::runtime::Gateway;
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(cfg, "/v1/quotes", vec![("POST", web::post().to(quote))]);
}

/// The body: a submission's body as `request`, and the submit route it would go to (the model's own when
/// left out).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuoteRequest {
    endpoint: Option<String>,
    request: Option<Value>,
}

async fn quote(caller: Caller, state: web::Data<Gateway>, body: web::Json<Value>) -> Result<HttpResponse, ApiError> {
    // Read by hand so that a misspelt member is named as such, not as a body that is no JSON.
    let asked: QuoteRequest = serde_json::from_value(body.into_inner()).map_err(|e| {
        ApiError::invalid_parameter(
            "request",
            format!("A quote's body is `{{\"endpoint\": \"/v1/…\", \"request\": {{…}}}}`: {e}."),
        )
    })?;
    let Some(request) = asked.request else {
        return Err(ApiError::invalid_parameter(
            "request",
            "`request` is required: the body the job would be submitted with.",
        ));
    };
    let endpoint = quotes::endpoint(asked.endpoint.as_deref())?;
    let quote = quotes::quote(&state, caller.account(), endpoint, request).await?;
    Ok(HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(quote))
}
