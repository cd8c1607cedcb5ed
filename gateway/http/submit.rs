//! `POST` on the submit endpoints: one generic handler for all of them, mounted by the generated route table.

use crate::admission::admit;
use crate::catalog::EndpointSpec;
use crate::error::{ApiError, ErrorCode};
use crate::http::auth::Caller;
use crate::http::request_id;
use crate::state::AppState;
use actix_web::{HttpResponse, web};
use serde_json::Value;

pub async fn submit(
    endpoint: web::Data<&'static EndpointSpec>,
    caller: Caller,
    state: web::Data<AppState>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let endpoint: &'static EndpointSpec = endpoint.get_ref();
    request_id::set(&request_id::generate(match endpoint.media {
        crate::catalog::Media::Video => "vid-",
        crate::catalog::Media::Image => "img-",
    }));
    let admitted = admit(&state.registry, endpoint, body.into_inner())?;
    let _ = (caller, admitted);
    Err(ApiError::new(
        ErrorCode::upstream_unavailable,
        "No upstream is configured for this model's region.",
    )
    .with_retry_after(60))
}
