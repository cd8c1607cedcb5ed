//! The audit trail and the named operators on PostgreSQL. An entry is inserted in the transaction of the
//! change it records ([`append`]); the table's trigger refuses any update or delete.

use super::db_error;
use crate::adapters::store::{decode, encode};
use crate::domain::audit::{Action, Actor, AuditEntry, AuditFilter, Change, OperatorRecord};
use crate::domain::clock::now_ms;
use crate::ports::storage::{Refusal, StoreError};
use deadpool_postgres::{GenericClient, Object};

/// Appends `change` to the trail, inside the caller's transaction. The entry is stored without its number,
/// which is the row's `seq` (given at commit order's near enough: numbers are unique and increasing).
pub(super) async fn append(tx: &impl GenericClient, change: Change) -> Result<(), StoreError> {
    let entry = change.entry(0, now_ms());
    let action = entry.action.as_str();
    tx.execute(
        "INSERT INTO audit_log (at_ms, operator, action, account, entry) VALUES ($1, $2, $3, $4, $5)",
        &[&entry.at_ms, &entry.operator, &action, &entry.account, &encode(&entry)?],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(super) async fn add_operator(client: &mut Object, record: OperatorRecord, by: &Actor) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let inserted = tx
        .execute(
            "INSERT INTO operators (name, token_hash, record) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
            &[&record.name, &record.token_hash, &encode(&record)?],
        )
        .await
        .map_err(db_error)?;
    if inserted == 0 {
        let message = format!("The operator name `{}` is taken: names are never reused.", record.name);
        return Err(StoreError::refused(Refusal::Conflict, message));
    }
    let change = Change::new(by, Action::OperatorCreate, None).target(&record.name);
    append(&tx, change.values(serde_json::Value::Null, record.shown())).await?;
    tx.commit().await.map_err(db_error)
}

pub(super) async fn revoke_operator(
    client: &mut Object,
    name: &str,
    now_ms: i64,
    by: &Actor,
) -> Result<Option<OperatorRecord>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let row =
        tx.query_opt("SELECT record FROM operators WHERE name = $1 FOR UPDATE", &[&name]).await.map_err(db_error)?;
    let Some(mut record) = row.map(|row| decode::<OperatorRecord>(row.get(0))).transpose()? else {
        return Ok(None);
    };
    if !record.live() {
        return Ok(None);
    }
    let before = record.shown();
    record.revoked_at_ms = Some(now_ms);
    tx.execute("UPDATE operators SET record = $2 WHERE name = $1", &[&name, &encode(&record)?])
        .await
        .map_err(db_error)?;
    append(&tx, Change::new(by, Action::OperatorRevoke, None).target(name).values(before, record.shown())).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(Some(record))
}

pub(super) async fn operators(client: &Object) -> Result<Vec<OperatorRecord>, StoreError> {
    let rows = client.query("SELECT record FROM operators ORDER BY name", &[]).await.map_err(db_error)?;
    rows.iter().map(|row| decode(row.get(0))).collect()
}

pub(super) async fn operator_by_token(client: &Object, token_hash: &str) -> Result<Option<OperatorRecord>, StoreError> {
    let row = client
        .query_opt("SELECT record FROM operators WHERE token_hash = $1", &[&token_hash])
        .await
        .map_err(db_error)?;
    row.map(|row| decode(row.get(0))).transpose()
}

/// The entries `filter` keeps, oldest first: the indexed columns narrow the read, the filter decides.
pub(super) async fn entries(client: &Object, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
    let after = i64::try_from(filter.after.unwrap_or(0)).unwrap_or(i64::MAX);
    let (since, until) = (filter.since.unwrap_or(i64::MIN), filter.until.unwrap_or(i64::MAX));
    let action = filter.action.map(Action::as_str);
    // Every filter but `via` is in the statement, so without one the database can stop at the page.
    let limit = if filter.via.is_none() { i64::try_from(filter.limit).unwrap_or(i64::MAX) } else { i64::MAX };
    let rows = client
        .query(
            "SELECT seq, entry FROM audit_log WHERE seq > $1 AND at_ms BETWEEN $2 AND $3 \
             AND ($4::text IS NULL OR account = $4) AND ($5::text IS NULL OR operator = $5) \
             AND ($6::text IS NULL OR action = $6) ORDER BY seq LIMIT $7",
            &[&after, &since, &until, &filter.account, &filter.operator, &action, &limit],
        )
        .await
        .map_err(db_error)?;
    let mut kept = Vec::new();
    for row in rows {
        let mut entry: AuditEntry = decode(row.get(1))?;
        entry.seq = u64::try_from(row.get::<_, i64>(0)).unwrap_or_default();
        if filter.keeps(&entry) {
            kept.push(entry);
            if kept.len() == filter.limit {
                break;
            }
        }
    }
    Ok(kept)
}
