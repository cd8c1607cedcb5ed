//! Webhook settings and deliveries in the embedded store. A pending delivery is also listed in
//! `DELIVERIES_DUE` by when it is next attempted, so finding the due ones reads only those.

use super::tables::{DELIVERIES, DELIVERIES_DUE, WEBHOOK_SETTINGS};
use super::{Commit, Store, StoreError, TaskRecord, Tx, audit, decode, encode};
use crate::domain::audit::{Action, Actor, Change, webhook_view};
use crate::domain::deliveries::{Delivery, DeliveryFilter, DeliveryState, WebhookSettings};
use crate::ports::storage::Deliveries;
use crate::ports::storage::SettingsChange;

/// Queues the delivery of `task`'s end, if it has an endpoint, in the write that ends it.
pub(super) fn enqueue(tx: &Tx, task: &TaskRecord) -> Result<(), StoreError> {
    let settings: Option<WebhookSettings> =
        tx.open_table(WEBHOOK_SETTINGS)?.get(task.account.as_str())?.map(|v| decode(v.value())).transpose()?;
    if let Some(delivery) = Delivery::for_ended(task, settings.as_ref(), crate::domain::clock::now_ms()) {
        save(tx, &delivery, None)?;
    }
    Ok(())
}

/// The delivery `id` as stored.
fn stored(tx: &Tx, id: &str) -> Result<Option<Delivery>, StoreError> {
    tx.open_table(DELIVERIES)?.get(id)?.map(|v| decode(v.value())).transpose()
}

/// Writes `delivery` over `before` (as stored, if it was), keeping `DELIVERIES_DUE` in step.
pub(super) fn save(tx: &Tx, delivery: &Delivery, before: Option<&Delivery>) -> Result<(), StoreError> {
    let id = delivery.id.as_str();
    tx.open_table(DELIVERIES)?.insert(id, encode(delivery)?.as_slice())?;
    let mut due = tx.open_table(DELIVERIES_DUE)?;
    if let Some(before) = before.filter(|before| before.state == DeliveryState::Pending) {
        due.remove((before.next_attempt_ms, id))?;
    }
    if delivery.state == DeliveryState::Pending {
        due.insert((delivery.next_attempt_ms, id), ())?;
    }
    Ok(())
}

impl Store {
    /// Writes what `change` makes of the delivery `id` as stored, in one durable write; `None` if there is none.
    async fn change_delivery(
        &self,
        id: String,
        change: impl FnOnce(Delivery) -> Delivery + Send + 'static,
    ) -> Result<Option<Delivery>, StoreError> {
        self.queue(Commit::Durable, move |tx: &Tx| {
            let Some(before) = stored(tx, &id)? else { return Ok(None) };
            let delivery = change(before.clone());
            save(tx, &delivery, Some(&before))?;
            Ok(Some(delivery))
        })
        .await
    }
}

#[async_trait::async_trait]
impl Deliveries for Store {
    async fn webhook_settings(&self, account: &str) -> Result<Option<WebhookSettings>, StoreError> {
        let view = self.view()?;
        let table = view.open_table(WEBHOOK_SETTINGS)?;
        table.get(account)?.map(|v| decode(v.value())).transpose()
    }

    async fn change_webhook_settings(
        &self,
        account: &str,
        change: SettingsChange,
        audited: Option<(&Actor, Action)>,
    ) -> Result<WebhookSettings, StoreError> {
        let account = account.to_string();
        let audited = audited.map(|(actor, action)| (actor.clone(), action));
        self.queue(Commit::Durable, move |tx: &Tx| {
            let mut table = tx.open_table(WEBHOOK_SETTINGS)?;
            let mut settings: WebhookSettings =
                table.get(account.as_str())?.map(|v| decode(v.value())).transpose()?.unwrap_or_default();
            let before = webhook_view(&settings);
            change(&mut settings);
            table.insert(account.as_str(), encode(&settings)?.as_slice())?;
            if let Some((actor, action)) = audited {
                let change = Change::new(&actor, action, Some(&account));
                audit::append(tx, change.values(before, webhook_view(&settings)))?;
            }
            Ok(settings)
        })
        .await
    }

    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        // One process attempts them all: no lease. `DELIVERIES_DUE` lists the pending ones by when they are due.
        let view = self.view()?;
        let (by_time, deliveries) = (view.open_table(DELIVERIES_DUE)?, view.open_table(DELIVERIES)?);
        let mut due = Vec::new();
        for row in by_time.iter()? {
            let (key, _) = row?;
            let (next_attempt_ms, id) = key.value();
            if next_attempt_ms > now_ms || due.len() == limit {
                break;
            }
            if let Some(stored) = deliveries.get(id)? {
                due.push(decode(stored.value())?);
            }
        }
        Ok(due)
    }

    async fn save_delivery(&self, attempted: Delivery) -> Result<(), StoreError> {
        let id = attempted.id.clone();
        self.change_delivery(id, move |stored| attempted.after_attempt(&stored)).await.map(drop)
    }

    async fn replay_delivery(&self, id: &str, now_ms: i64, by: &Actor) -> Result<Option<Delivery>, StoreError> {
        let (id, by) = (id.to_string(), by.clone());
        self.queue(Commit::Durable, move |tx: &Tx| {
            let Some(before) = stored(tx, &id)? else { return Ok(None) };
            let mut delivery = before.clone();
            delivery.replay(now_ms);
            save(tx, &delivery, Some(&before))?;
            audit::append(tx, Change::replayed(&by, &before, &delivery))?;
            Ok(Some(delivery))
        })
        .await
    }

    async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        let view = self.view()?;
        let table = view.open_table(DELIVERIES)?;
        table.get(id)?.map(|v| decode(v.value())).transpose()
    }

    async fn deliveries(&self, filter: DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        let view = self.view()?;
        let mut kept = Vec::new();
        for row in view.open_table(DELIVERIES)?.iter()? {
            let delivery: Delivery = decode(row?.1.value())?;
            if filter.keeps(&delivery) {
                kept.push(delivery);
            }
        }
        // Ids are time-ordered: by id, descending, is newest first.
        kept.sort_by(|a, b| b.id.cmp(&a.id));
        kept.truncate(filter.limit);
        Ok(kept)
    }
}
