//! Unauthenticated operational routes: health, readiness, the OpenAPI document.

use crate::catalog::OPENAPI_JSON;
use actix_web::{HttpResponse, web};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/openapi.json", web::get().to(openapi))
        .route("/metrics", web::get().to(metrics));
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// Ready once the store is open and the catalog compiled, which is before the server binds.
async fn readyz(state: web::Data<crate::state::AppState>) -> HttpResponse {
    match state.store.task("readiness-probe") {
        Ok(_) => HttpResponse::Ok().json(serde_json::json!({"status": "ready"})),
        Err(_) => HttpResponse::ServiceUnavailable().json(serde_json::json!({"status": "store unavailable"})),
    }
}

async fn metrics() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(crate::metrics::render())
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(OPENAPI_JSON)
}
