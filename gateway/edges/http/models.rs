//! `GET /v1/models`, `GET /v1/models/{id}` and `GET /v1/models/{id}/schema`.

use crate::edges::web::error::ApiError;
use crate::services::Gateway;
use crate::services::auth::Caller;
use crate::services::models;
use actix_web::http::header::{self, EntityTag};
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(cfg, "/v1/models", vec![("GET", web::get().to(list))]);
    super::mount(cfg, "/v1/models/{model}", vec![("GET", web::get().to(get))]);
    super::mount(cfg, "/v1/models/{model}/schema", vec![("GET", web::get().to(schema))]);
}

async fn list(_: Caller, state: web::Data<Gateway>) -> HttpResponse {
    let data: Vec<Value> = state.registry.enabled_models().map(models::describe).collect();
    HttpResponse::Ok().json(json!({"object": "list", "data": data}))
}

async fn get(_: Caller, state: web::Data<Gateway>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(models::describe(state.registry.enabled(&id)?)))
}

/// The model's published schema, with its version as the `ETag`: `If-None-Match` with it answers 304.
async fn schema(
    _: Caller,
    state: web::Data<Gateway>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = state.registry.enabled(&id)?;
    let etag = EntityTag::new_strong(model.schema_version.to_string());
    let unchanged = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|asked| asked.split(',').any(|tag| tag.trim() == etag.to_string() || tag.trim() == "*"));
    if unchanged {
        return Ok(HttpResponse::NotModified().insert_header(header::ETag(etag)).finish());
    }
    Ok(HttpResponse::Ok()
        .content_type("application/schema+json")
        .insert_header(header::ETag(etag))
        .body(model.published_schema))
}
