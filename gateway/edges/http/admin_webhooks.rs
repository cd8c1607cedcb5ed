//! The admin API's webhook routes: an account's secret (rotated, shown once) and default endpoint, and the
//! deliveries with their attempts, any of which can be sent again.

use super::auth::Admin;
use crate::domain::deliveries::{DeliveryFilter, DeliveryState};
use crate::edges::web::error::ApiError;
use crate::services::runtime::Gateway;
use crate::services::webhook_settings;
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    use super::mount;
    mount(cfg, "/accounts/{account}/webhook-secret", vec![("POST", web::post().to(rotate_secret))]);
    mount(cfg, "/accounts/{account}/webhook-endpoint", vec![("POST", web::post().to(set_endpoint))]);
    mount(cfg, "/webhooks/deliveries", vec![("GET", web::get().to(deliveries))]);
    mount(cfg, "/webhooks/deliveries/{id}/replay", vec![("POST", web::post().to(replay))]);
}

/// A new secret signs every delivery from now on; the one it replaces signs too, until it retires.
async fn rotate_secret(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (secret, settings) = webhook_settings::rotate_secret(&state, &account, &by).await?;
    let retiring: Vec<i64> = settings.secrets.iter().filter_map(|s| s.retires_ms).collect();
    Ok(HttpResponse::Ok().json(json!({
        "account": account.as_str(),
        "secret": secret,
        "note": "Shown once; store it now. Until the old secret retires, both sign every delivery.",
        "old_secrets_retire_at_ms": retiring,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointBody {
    /// Where the account's task ends go; `null` for nowhere.
    url: Option<String>,
}

/// The account's default endpoint: tasks submitted without a `callback_url` end there.
async fn set_endpoint(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<EndpointBody>,
) -> Result<HttpResponse, ApiError> {
    let settings = webhook_settings::set_default_endpoint(&state, &account, body.into_inner().url, &by).await?;
    Ok(HttpResponse::Ok().json(json!({"account": account.as_str(), "endpoint": settings.endpoint})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveryQuery {
    account: Option<String>,
    task_id: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
}

/// Deliveries, newest first, with their attempts.
async fn deliveries(
    _: Admin,
    state: web::Data<Gateway>,
    query: web::Query<DeliveryQuery>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let wanted = query
        .state
        .as_deref()
        .map(|s| crate::edges::web::one_of("state", s, &DeliveryState::ALL, DeliveryState::as_str));
    let wanted = wanted.transpose()?;
    let filter = DeliveryFilter {
        account: query.account,
        task_id: query.task_id,
        state: wanted,
        limit: query.limit.unwrap_or(100).clamp(1, 1000),
    };
    let deliveries = state.store.deliveries(filter).await?;
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok().json(json!({"deliveries": deliveries})))
}

async fn replay(Admin(by): Admin, state: web::Data<Gateway>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(webhook_settings::replay_delivery(&state, &id, &by).await?))
}
