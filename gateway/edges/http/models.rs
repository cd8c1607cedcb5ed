//! `GET /v1/models`, `GET /v1/models/{id}` and `GET /v1/models/{id}/schema`.

use crate::domain::catalog::{BillingRule, ModelSpec};
use crate::edges::http::auth::Caller;
use crate::edges::http::error::ApiError;
use crate::services::gateway::Gateway;
use actix_web::{HttpResponse, web};
use serde_json::{Value, json};

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(cfg, "/v1/models", vec![("GET", web::get().to(list))]);
    super::mount(cfg, "/v1/models/{model}", vec![("GET", web::get().to(get))]);
    super::mount(cfg, "/v1/models/{model}/schema", vec![("GET", web::get().to(schema))]);
}

async fn list(_: Caller, state: web::Data<Gateway>) -> HttpResponse {
    let data: Vec<Value> = state.registry.enabled_models().map(describe).collect();
    HttpResponse::Ok().json(json!({"object": "list", "data": data}))
}

async fn get(_: Caller, state: web::Data<Gateway>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(describe(state.registry.enabled(&id)?)))
}

async fn schema(_: Caller, state: web::Data<Gateway>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let model = state.registry.enabled(&id)?;
    Ok(HttpResponse::Ok().content_type("application/schema+json").body(model.published_schema))
}

/// The public view of a model record.
pub fn describe(model: &ModelSpec) -> Value {
    let limits: Value = serde_json::from_str(model.limits_json).unwrap_or_else(|_| json!({}));
    let billing = match model.billing {
        BillingRule::PerSecond { .. } => "per_second",
        BillingRule::PerImage { .. } => "per_image",
        BillingRule::PerCall { .. } => "per_call",
        BillingRule::PerToken { .. } => "per_token",
    };
    json!({
        "id": model.id,
        "object": "model",
        "created": 0,
        "owned_by": "mediagate",
        "type": model.media.as_str(),
        "operation": model.operation.as_str(),
        "endpoint": model.endpoint().path,
        "task_mode": model.task_mode.as_str(),
        "region": model.region,
        "summary": model.summary,
        "free_trial_only": model.free_trial_only,
        "billing_basis": billing,
        "limits": limits,
    })
}

/// A model's pricing rule as the back office sees it (micro-units).
pub fn billing_rule(model: &ModelSpec) -> Value {
    match model.billing {
        BillingRule::PerSecond { placeholder, tiers } => {
            let tiers: serde_json::Map<String, Value> =
                tiers.iter().map(|t| (t.tier.to_string(), json!({"audio": t.audio, "silent": t.silent}))).collect();
            json!({"basis": "per_second", "placeholder": placeholder, "tiers": tiers})
        }
        BillingRule::PerImage { placeholder, price } => {
            json!({"basis": "per_image", "placeholder": placeholder, "price": price})
        }
        BillingRule::PerCall { placeholder, price } => {
            json!({"basis": "per_call", "placeholder": placeholder, "price": price})
        }
        BillingRule::PerToken { placeholder, price } => json!({
            "basis": "per_token", "placeholder": placeholder,
            "input_per_million": price.input_per_million, "output_per_million": price.output_per_million,
        }),
    }
}
