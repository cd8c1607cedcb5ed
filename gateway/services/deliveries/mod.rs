//! Webhooks: every task end with an endpoint (the submission's `callback_url`, else its account's) is
//! delivered as a Standard Webhooks message. The store queues the delivery in the write that ends the task;
//! the dispatcher here takes the due ones, signs and sends each, and writes down the attempt and the next
//! one (the configured schedule) or the end: delivered on a 2xx, disabled on a 410 (the endpoint too),
//! failed after the last retry. A delivery is sent at least once: one cut short by a crash is sent again,
//! with the same `webhook-id`.

pub mod callbacks;
pub mod signing;

use crate::domain::clock::now_ms;
use crate::domain::deliveries::{Delivery, Outcome};
use crate::ports::storage::StoreError;
use crate::services::runtime::Gateway;
use crate::services::tasks::answers::answer;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How often due deliveries are looked for.
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// Attempts under way at once, at most.
const ATTEMPTS_AT_ONCE: usize = 64;
/// How long a delivery whose attempt could not be written waits before it is attempted again.
const UNRECORDED_PAUSE: Duration = Duration::from_secs(30);

/// Sends due deliveries until the process ends. Call once, on the actix system.
pub async fn run(state: Arc<Gateway>) {
    let under_way: Rc<RefCell<HashSet<String>>> = Rc::default();
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let room = ATTEMPTS_AT_ONCE.saturating_sub(under_way.borrow().len());
        if !state.settings.webhooks.enabled || room == 0 {
            continue;
        }
        let due = match state.store.due_deliveries(now_ms(), room).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the deliveries due");
                continue;
            }
        };
        for delivery in due {
            if under_way.borrow_mut().insert(delivery.id.clone()) {
                let (state, under_way) = (state.clone(), under_way.clone());
                tokio::task::spawn_local(async move {
                    let id = delivery.id.clone();
                    let span = crate::support::telemetry::step("job.webhook", delivery.trace.as_deref());
                    if !attempt(&state, delivery).instrument(span).await {
                        // Still due in the store: held back here, not sent again every look.
                        tokio::time::sleep(UNRECORDED_PAUSE).await;
                    }
                    under_way.borrow_mut().remove(&id);
                });
            }
        }
    }
}

/// One attempt: sends the delivery, then writes down what came of it; whether that was written.
async fn attempt(state: &Gateway, mut delivery: Delivery) -> bool {
    // A delivery about to be sent, after the write that ended its task: the crash window a queued delivery
    // must survive (tested).
    crate::support::failpoint::reached("before-delivery");
    let at_ms = now_ms();
    let answer = send(state, &delivery, at_ms).await;
    let outcome = delivery.record_attempt(at_ms, answer, &state.settings.webhooks.retry_delays_ms);
    if outcome == Outcome::Disabled {
        let url = delivery.url.clone();
        let disable = Box::new(move |s: &mut crate::domain::deliveries::WebhookSettings| {
            if !s.disabled.contains(&url) {
                s.disabled.push(url);
            }
        });
        if let Err(e) = state.store.change_webhook_settings(&delivery.account, disable, None).await {
            tracing::warn!(error = %e, url = delivery.url, "could not disable a gone endpoint");
        }
    }
    let (outcome, status) = (outcome.as_str(), delivery.attempts.last().and_then(|a| a.status));
    crate::support::metrics::webhook_attempt(outcome);
    tracing::info!(delivery = delivery.id, task_id = delivery.task_id, status, outcome, "webhook attempt");
    // Not written (the store is down): the delivery stays due, and is attempted again.
    match state.store.save_delivery(delivery).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not record a webhook attempt; it will be made again");
            false
        }
    }
}

/// Signs and posts the delivery's message; the endpoint's status, or why there is none.
async fn send(state: &Gateway, delivery: &Delivery, at_ms: i64) -> Result<u16, String> {
    let failed = |e: StoreError| e.to_string();
    let task = state.store.task(&delivery.task_id).await.map_err(failed)?.ok_or("the task is gone")?;
    let settings = state.store.webhook_settings(&delivery.account).await.map_err(failed)?.unwrap_or_default();
    let secrets: Vec<&str> = settings.signing_secrets(at_ms).collect();
    if secrets.is_empty() {
        return Err(format!(
            "account `{}` has no webhook secret yet (mediagate admin webhook rotate)",
            delivery.account
        ));
    }
    let (data, _) = answer(&task);
    let timestamp = chrono::DateTime::from_timestamp_millis(at_ms).unwrap_or_default();
    let message = serde_json::json!({
        "type": delivery.event,
        "timestamp": timestamp.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    });
    let body = serde_json::to_vec(&message).map_err(|e| e.to_string())?;
    let seconds = at_ms.div_euclid(1000);
    let signature = signing::signature(secrets.into_iter(), &delivery.id, seconds, &body)?;
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("user-agent", concat!("mediagate/", env!("CARGO_PKG_VERSION")).to_string()),
        ("webhook-id", delivery.id.clone()),
        ("webhook-timestamp", seconds.to_string()),
        ("webhook-signature", signature),
    ];
    // The receiver can join the job's trace (W3C trace context), when traces are on.
    if let Some(traceparent) = crate::support::telemetry::traceparent(&tracing::Span::current()) {
        headers.push(("traceparent", traceparent));
    }
    state.webhooks.post(&delivery.url, headers, body).await
}
