//! `GET /v1/models`, `GET /v1/models/{id}` and `GET /v1/models/{id}/schema`.

use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::models;
use crate::services::runtime::Gateway;
use actix_web::http::header;
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
    let etag = format!("\"{}\"", model.schema_version);
    if let Some(unchanged) = super::not_modified(&req, &etag) {
        return Ok(unchanged);
    }
    Ok(HttpResponse::Ok()
        .content_type("application/schema+json")
        .insert_header((header::ETAG, etag))
        .body(model.published_schema))
}
