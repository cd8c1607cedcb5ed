//! Webhook settings and deliveries in the embedded store. A pending delivery is also listed in
//! `PENDING_DELIVERIES`, so finding the due ones never scans the delivered.

use super::tables::{DELIVERIES, PENDING_DELIVERIES, WEBHOOK_SETTINGS};
use super::{Commit, Store, StoreError, TaskRecord, Tx, decode, encode};
use crate::store::{Delivery, DeliveryFilter, DeliveryState, SettingsChange, WebhookSettings};

/// Queues the delivery of `task`'s end, if it has an endpoint, in the write that ends it.
pub(super) fn enqueue(tx: &Tx, task: &TaskRecord) -> Result<(), StoreError> {
    let settings: Option<WebhookSettings> =
        tx.open_table(WEBHOOK_SETTINGS)?.get(task.account.as_str())?.map(|v| decode(v.value())).transpose()?;
    if let Some(delivery) = Delivery::for_ended(task, settings.as_ref(), crate::clock::now_ms()) {
        save(tx, &delivery)?;
    }
    Ok(())
}

fn save(tx: &Tx, delivery: &Delivery) -> Result<(), StoreError> {
    tx.open_table(DELIVERIES)?.insert(delivery.id.as_str(), encode(delivery)?.as_slice())?;
    let mut pending = tx.open_table(PENDING_DELIVERIES)?;
    match delivery.state {
        DeliveryState::Pending => pending.insert(delivery.id.as_str(), ()),
        _ => pending.remove(delivery.id.as_str()),
    }
}

impl Store {
    pub fn webhook_settings(&self, account: &str) -> Result<Option<WebhookSettings>, StoreError> {
        let view = self.view()?;
        let table = view.open_table(WEBHOOK_SETTINGS)?;
        table.get(account)?.map(|v| decode(v.value())).transpose()
    }

    pub async fn change_webhook_settings(
        &self,
        account: &str,
        change: SettingsChange,
    ) -> Result<WebhookSettings, StoreError> {
        let account = account.to_string();
        self.queue(Commit::Durable, move |tx: &Tx| {
            let mut table = tx.open_table(WEBHOOK_SETTINGS)?;
            let mut settings: WebhookSettings =
                table.get(account.as_str())?.map(|v| decode(v.value())).transpose()?.unwrap_or_default();
            change(&mut settings);
            table.insert(account.as_str(), encode(&settings)?.as_slice())?;
            Ok(settings)
        })
        .await
    }

    /// Pending deliveries due by `now_ms`, oldest due first (one process attempts them all: no lease).
    pub fn due_deliveries(&self, now_ms: i64, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        let view = self.view()?;
        let (pending, deliveries) = (view.open_table(PENDING_DELIVERIES)?, view.open_table(DELIVERIES)?);
        let mut due = Vec::new();
        for row in pending.iter()? {
            let (id, _) = row?;
            if let Some(stored) = deliveries.get(id.value())? {
                let delivery: Delivery = decode(stored.value())?;
                if delivery.next_attempt_ms <= now_ms {
                    due.push(delivery);
                }
            }
        }
        due.sort_by_key(|d| d.next_attempt_ms);
        due.truncate(limit);
        Ok(due)
    }

    pub async fn save_delivery(&self, delivery: Delivery) -> Result<(), StoreError> {
        self.queue(Commit::Durable, move |tx: &Tx| save(tx, &delivery)).await
    }

    pub fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        let view = self.view()?;
        let table = view.open_table(DELIVERIES)?;
        table.get(id)?.map(|v| decode(v.value())).transpose()
    }

    /// The deliveries `filter` keeps, newest first (ids are time-ordered).
    pub fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        let view = self.view()?;
        let mut kept = Vec::new();
        for row in view.open_table(DELIVERIES)?.iter()? {
            let delivery: Delivery = decode(row?.1.value())?;
            if filter.keeps(&delivery) {
                kept.push(delivery);
            }
        }
        kept.sort_by(|a, b| b.id.cmp(&a.id));
        kept.truncate(filter.limit);
        Ok(kept)
    }
}
