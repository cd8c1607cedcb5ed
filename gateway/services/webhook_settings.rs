//! An account's webhook settings: its signing secrets (rotated, the new one shown once) and default
//! endpoint, and the deliveries an operator sends again.

use crate::domain::audit::{Action, Actor};
use crate::domain::clock::now_ms;
use crate::domain::deliveries::{Delivery, WebhookSettings};
use crate::domain::errors::{Code, Problem};
use crate::services::accounts;
use crate::services::deliveries::{callbacks, signing};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;

/// A new webhook secret for the account (the plain secret, shown once) and its settings after.
pub async fn rotate_secret(
    state: &Gateway,
    account: &str,
    by: &Actor,
) -> Result<(String, WebhookSettings), ServiceError> {
    accounts::account_exists(state, account).await?;
    let secret = signing::new_secret();
    let now = now_ms();
    let keep_ms = i64::try_from(state.settings.webhooks.old_secret_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let retire_ms = now.saturating_add(keep_ms);
    let new = secret.clone();
    let settings = state
        .store
        .change_webhook_settings(
            account,
            Box::new(move |s: &mut WebhookSettings| s.rotate(new, now, retire_ms)),
            Some((by, Action::WebhookSecretRotate)),
        )
        .await?;
    Ok((secret, settings))
}

/// Where the account's task ends go when a task names no `callback_url`; `None` for nowhere.
pub async fn set_default_endpoint(
    state: &Gateway,
    account: &str,
    url: Option<String>,
    by: &Actor,
) -> Result<WebhookSettings, ServiceError> {
    accounts::account_exists(state, account).await?;
    if let Some(url) = &url {
        let unsigned = state.store.webhook_settings(account).await?.is_none_or(|s| s.secrets.is_empty());
        if unsigned {
            let message =
                format!("Account `{account}` has no webhook secret to sign deliveries with; rotate one first.");
            return Err(Problem::invalid_parameter("url", message).into());
        }
        callbacks::check(url, state.settings.webhooks.allow_private_callbacks)
            .await
            .map_err(|message| Problem::invalid_parameter("url", message))?;
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
            Some((by, Action::WebhookEndpointSet)),
        )
        .await?;
    Ok(settings)
}

/// Sends a delivery again, now, with the same `webhook-id`, whatever became of it (its attempts are kept).
pub async fn replay_delivery(state: &Gateway, id: &str, by: &Actor) -> Result<Delivery, ServiceError> {
    state
        .store
        .replay_delivery(id, now_ms(), by)
        .await?
        .ok_or_else(|| Problem::new(Code::not_found, format!("No delivery `{id}`.")).with_param("id").into())
}
