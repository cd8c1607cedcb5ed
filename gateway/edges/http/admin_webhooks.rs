//! The admin API's webhook routes: an account's secret (rotated, shown once) and default endpoint, and the
//! deliveries with their attempts, any of which can be sent again.

use super::admin::{Admin, account_exists};
use crate::domain::clock::now_ms;
use crate::domain::deliveries::{Delivery, DeliveryFilter, DeliveryState, WebhookSettings};
use crate::domain::errors::Code;
use crate::edges::http::error::ApiError;
use crate::services::deliveries::{callbacks, signing};
use crate::services::gateway::Gateway;
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
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (secret, settings) = rotate(&state, &account).await?;
    let retiring: Vec<i64> = settings.secrets.iter().filter_map(|s| s.retires_ms).collect();
    Ok(HttpResponse::Ok().json(json!({
        "account": account.as_str(),
        "secret": secret,
        "note": "Shown once; store it now. Until the old secret retires, both sign every delivery.",
        "old_secrets_retire_at_ms": retiring,
    })))
}

/// A new webhook secret for the account (the plain secret, shown once) and its settings after.
pub async fn rotate(state: &Gateway, account: &str) -> Result<(String, WebhookSettings), ApiError> {
    account_exists(state, account).await?;
    let secret = signing::new_secret();
    let now = now_ms();
    let keep_ms = i64::try_from(state.settings.webhooks.old_secret_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let retire_ms = now.saturating_add(keep_ms);
    let new = secret.clone();
    let settings = state
        .store
        .change_webhook_settings(account, Box::new(move |s: &mut WebhookSettings| s.rotate(new, now, retire_ms)))
        .await?;
    Ok((secret, settings))
}

/// The account's newest webhook secret, made now if it has none (every account has one from its creation),
/// and whether it was made now (then it is shown once).
pub async fn first_secret(state: &Gateway, account: &str) -> Result<(String, bool), ApiError> {
    let made = signing::new_secret();
    let (now, new) = (now_ms(), made.clone());
    let settings = state
        .store
        .change_webhook_settings(account, Box::new(move |s: &mut WebhookSettings| s.adopt_first(new, now)))
        .await?;
    let newest = settings.secrets.first().map_or_else(|| made.clone(), |s| s.secret.clone());
    let fresh = newest == made;
    Ok((newest, fresh))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointBody {
    /// Where the account's task ends go; `null` for nowhere.
    url: Option<String>,
}

/// The account's default endpoint: tasks submitted without a `callback_url` end there.
async fn set_endpoint(
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<EndpointBody>,
) -> Result<HttpResponse, ApiError> {
    let settings = set_default_endpoint(&state, &account, body.into_inner().url).await?;
    Ok(HttpResponse::Ok().json(json!({"account": account.as_str(), "endpoint": settings.endpoint})))
}

/// Where the account's task ends go when a task names no `callback_url`; `None` for nowhere.
pub async fn set_default_endpoint(
    state: &Gateway,
    account: &str,
    url: Option<String>,
) -> Result<WebhookSettings, ApiError> {
    account_exists(state, account).await?;
    if let Some(url) = &url {
        let unsigned = state.store.webhook_settings(account).await?.is_none_or(|s| s.secrets.is_empty());
        if unsigned {
            let message =
                format!("Account `{account}` has no webhook secret to sign deliveries with; rotate one first.");
            return Err(ApiError::invalid_parameter("url", message));
        }
        callbacks::check(url, state.settings.webhooks.allow_private_callbacks)
            .await
            .map_err(|message| ApiError::invalid_parameter("url", message))?;
    }
    let endpoint = url.clone();
    let settings = state
        .store
        .change_webhook_settings(
            account,
            Box::new(move |s: &mut WebhookSettings| {
                // Set again, an endpoint that was gone is taken as back.
                s.disabled.retain(|gone| Some(gone) != endpoint.as_ref());
                s.endpoint = endpoint;
            }),
        )
        .await?;
    Ok(settings)
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
    let wanted = query.state.as_deref().map(|s| super::one_of("state", s, &DeliveryState::ALL, DeliveryState::as_str));
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

async fn replay(_: Admin, state: web::Data<Gateway>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(replay_delivery(&state, &id).await?))
}

/// Sends a delivery again, now, with the same `webhook-id`, whatever became of it (its attempts are kept).
pub async fn replay_delivery(state: &Gateway, id: &str) -> Result<Delivery, ApiError> {
    state
        .store
        .replay_delivery(id, now_ms())
        .await?
        .ok_or_else(|| ApiError::new(Code::not_found, format!("No delivery `{id}`.")).with_param("id"))
}
