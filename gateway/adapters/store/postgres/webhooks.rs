//! Webhook settings and deliveries on PostgreSQL. A due delivery is leased to the replica that attempts
//! it, so one attempt is under way at a time whichever replicas run.

use super::{audit, db_error};
use crate::adapters::store::{decode, encode};
use crate::domain::audit::{Action, Actor, Change, webhook_view};
use crate::domain::deliveries::{Delivery, DeliveryFilter, WebhookSettings};
use crate::domain::tasks::TaskRecord;
use crate::ports::storage::{SettingsChange, StoreError};
use deadpool_postgres::{GenericClient, Object};
use std::collections::HashMap;

/// How long a replica has for an attempt (the endpoint has 15 s to answer) before another may make it: a
/// delivery whose replica died is sent again this long after it was taken.
const LEASE_MS: i64 = 20_000;

/// Queues the deliveries of the ends of `ended`, inside the transaction that ends them.
pub(super) async fn enqueue(tx: &impl GenericClient, ended: &[&TaskRecord]) -> Result<(), StoreError> {
    if ended.is_empty() {
        return Ok(());
    }
    let accounts: Vec<&str> = ended.iter().map(|t| t.account.as_str()).collect();
    let rows = tx
        .query("SELECT account, record FROM webhook_settings WHERE account = ANY($1)", &[&accounts])
        .await
        .map_err(db_error)?;
    let settings: HashMap<String, WebhookSettings> =
        rows.iter().map(|row| Ok((row.get(0), decode(row.get(1))?))).collect::<Result<_, StoreError>>()?;
    let now = crate::domain::clock::now_ms();
    let deliveries: Vec<Delivery> =
        ended.iter().filter_map(|task| Delivery::for_ended(task, settings.get(&task.account), now)).collect();
    insert(tx, &deliveries).await
}

/// Inserts deliveries as they are.
pub(super) async fn insert(tx: &impl GenericClient, deliveries: &[Delivery]) -> Result<(), StoreError> {
    if deliveries.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
    let accounts: Vec<&str> = deliveries.iter().map(|d| d.account.as_str()).collect();
    let tasks: Vec<&str> = deliveries.iter().map(|d| d.task_id.as_str()).collect();
    let states: Vec<&str> = deliveries.iter().map(|d| d.state.as_str()).collect();
    let next: Vec<i64> = deliveries.iter().map(|d| d.next_attempt_ms).collect();
    let records = deliveries.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
    tx.execute(
        "INSERT INTO deliveries (id, account, task_id, state, next_attempt_ms, record) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bytea[])",
        &[&ids, &accounts, &tasks, &states, &next, &records],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(super) async fn settings(client: &Object, account: &str) -> Result<Option<WebhookSettings>, StoreError> {
    let row = client
        .query_opt("SELECT record FROM webhook_settings WHERE account = $1", &[&account])
        .await
        .map_err(db_error)?;
    row.map(|row| decode(row.get(0))).transpose()
}

pub(super) async fn change_settings(
    client: &mut Object,
    account: &str,
    change: SettingsChange,
    audited: Option<(&Actor, Action)>,
) -> Result<WebhookSettings, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let empty = encode(&WebhookSettings::default())?;
    tx.execute(
        "INSERT INTO webhook_settings (account, record) VALUES ($1, $2) ON CONFLICT (account) DO NOTHING",
        &[&account, &empty],
    )
    .await
    .map_err(db_error)?;
    let row = tx
        .query_one("SELECT record FROM webhook_settings WHERE account = $1 FOR UPDATE", &[&account])
        .await
        .map_err(db_error)?;
    let mut settings: WebhookSettings = decode(row.get(0))?;
    let before = webhook_view(&settings);
    change(&mut settings);
    tx.execute("UPDATE webhook_settings SET record = $2 WHERE account = $1", &[&account, &encode(&settings)?])
        .await
        .map_err(db_error)?;
    if let Some((actor, action)) = audited {
        let change = Change::new(actor, action, Some(account)).values(before, webhook_view(&settings));
        audit::append(&tx, change).await?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(settings)
}

pub(super) async fn due(client: &Object, now_ms: i64, limit: usize) -> Result<Vec<Delivery>, StoreError> {
    let rows = client
        .query(
            "UPDATE deliveries SET lease_until_ms = $2 WHERE id IN (SELECT id FROM deliveries \
             WHERE state = 'pending' AND next_attempt_ms <= $1 AND lease_until_ms <= $1 \
             ORDER BY next_attempt_ms LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING record",
            &[&now_ms, &(now_ms + LEASE_MS), &i64::try_from(limit).unwrap_or(i64::MAX)],
        )
        .await
        .map_err(db_error)?;
    let mut due = rows.iter().map(|row| decode::<Delivery>(row.get(0))).collect::<Result<Vec<_>, _>>()?;
    due.sort_by_key(|d| d.next_attempt_ms);
    Ok(due)
}

/// Writes what an attempt made of a delivery over the stored one, and ends this replica's lease.
pub(super) async fn save(client: &mut Object, attempted: Delivery) -> Result<(), StoreError> {
    let id = attempted.id.clone();
    change(client, &id, true, move |stored| attempted.after_attempt(&stored), None).await.map(drop)
}

/// Makes a delivery due now; a lease on it stays, so an attempt under way is not doubled by another replica.
pub(super) async fn replay(
    client: &mut Object,
    id: &str,
    now_ms: i64,
    by: &Actor,
) -> Result<Option<Delivery>, StoreError> {
    let replayed = move |mut delivery: Delivery| {
        delivery.replay(now_ms);
        delivery
    };
    change(client, id, false, replayed, Some(by)).await
}

/// Writes what `change` makes of the delivery `id`, locked meanwhile (ending its lease if `end_lease`);
/// `None` if there is none.
async fn change(
    client: &mut Object,
    id: &str,
    end_lease: bool,
    change: impl FnOnce(Delivery) -> Delivery,
    replayed_by: Option<&Actor>,
) -> Result<Option<Delivery>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let locked = tx.query_opt("SELECT record FROM deliveries WHERE id = $1 FOR UPDATE", &[&id]).await;
    let Some(row) = locked.map_err(db_error)? else { return Ok(None) };
    let before: Delivery = decode(row.get(0))?;
    let delivery = change(before.clone());
    if let Some(actor) = replayed_by {
        audit::append(&tx, Change::replayed(actor, &before, &delivery)).await?;
    }
    tx.execute(
        "UPDATE deliveries SET state = $2, next_attempt_ms = $3, record = $4, \
         lease_until_ms = CASE WHEN $5 THEN 0 ELSE lease_until_ms END WHERE id = $1",
        &[&delivery.id, &delivery.state.as_str(), &delivery.next_attempt_ms, &encode(&delivery)?, &end_lease],
    )
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    Ok(Some(delivery))
}

pub(super) async fn get(client: &Object, id: &str) -> Result<Option<Delivery>, StoreError> {
    let row = client.query_opt("SELECT record FROM deliveries WHERE id = $1", &[&id]).await.map_err(db_error)?;
    row.map(|row| decode(row.get(0))).transpose()
}

pub(super) async fn list(client: &Object, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
    let rows = client
        .query(
            "SELECT record FROM deliveries WHERE ($1::text IS NULL OR account = $1) \
             AND ($2::text IS NULL OR task_id = $2) AND ($3::text IS NULL OR state = $3) ORDER BY id DESC LIMIT $4",
            &[
                &filter.account,
                &filter.task_id,
                &filter.state.map(|s| s.as_str()),
                &i64::try_from(filter.limit).unwrap_or(i64::MAX),
            ],
        )
        .await
        .map_err(db_error)?;
    rows.iter().map(|row| decode(row.get(0))).collect()
}
