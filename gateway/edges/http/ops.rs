//! Unauthenticated operational routes: health, readiness, the OpenAPI document.

use crate::domain::catalog::OPENAPI_JSON;
use actix_web::{HttpResponse, web};

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(cfg, "/healthz", vec![("GET", web::get().to(healthz))]);
    super::mount(cfg, "/readyz", vec![("GET", web::get().to(readyz))]);
    super::mount(cfg, "/openapi.json", vec![("GET", web::get().to(openapi))]);
    super::mount(cfg, "/metrics", vec![("GET", web::get().to(metrics))]);
}

/// Alive while the store can make writes durable: a gateway whose disk failed must be restarted (it stops
/// by itself too), and a liveness probe says so.
async fn healthz(state: web::Data<crate::services::runtime::Gateway>) -> HttpResponse {
    if state.store.writable() {
        HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
    } else {
        HttpResponse::ServiceUnavailable().json(serde_json::json!({"status": "storage unavailable"}))
    }
}

/// Ready once the store is open and the catalog compiled (before the server binds), while the store can
/// be read and can make writes durable.
async fn readyz(state: web::Data<crate::services::runtime::Gateway>) -> HttpResponse {
    match state.store.task("readiness-probe").await {
        Ok(_) if state.store.writable() => HttpResponse::Ok().json(serde_json::json!({"status": "ready"})),
        _ => HttpResponse::ServiceUnavailable().json(serde_json::json!({"status": "storage unavailable"})),
    }
}

async fn metrics(state: web::Data<crate::services::runtime::Gateway>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(crate::support::metrics::render(state.poller.holds(), &state.capacity.snapshot()))
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(OPENAPI_JSON)
}
