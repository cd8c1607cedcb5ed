//! Filling an empty database with what another store holds ([`crate::ports::storage::Export`]), in one transaction.

use super::db_error;
use super::ledger::name_of;
use crate::adapters::store::encode;
use crate::ports::storage::{Export, Refusal, StoreError};
use deadpool_postgres::Object;

/// Writes `export` into the database, which must hold no account, key, entry or task: a refused import
/// writes nothing. The entries keep their numbers; live tasks are free for the first replica to claim.
pub(super) async fn import(client: &mut Object, export: &Export) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let row = tx
        .query_one(
            "SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM api_keys) + (SELECT count(*) FROM ledger) \
             + (SELECT count(*) FROM tasks) + (SELECT count(*) FROM idempotency)",
            &[],
        )
        .await
        .map_err(db_error)?;
    if row.get::<_, i64>(0) > 0 {
        return Err(StoreError::refused(Refusal::Conflict, "the database is not empty: a copy goes into an empty one"));
    }
    for account in &export.accounts {
        tx.execute(
            "INSERT INTO accounts (name, created_at, plan, queue_weight) VALUES ($1, $2, $3, $4)",
            &[
                &account.name,
                &account.created_at,
                &account.plan,
                &account.queue_weight.map(|w| i32::try_from(w).unwrap_or(i32::MAX)),
            ],
        )
        .await
        .map_err(db_error)?;
    }
    for (hash, key) in &export.keys {
        tx.execute(
            "INSERT INTO api_keys (hash, account, prefix, created_at, revoked) VALUES ($1, $2, $3, $4, $5)",
            &[&hash.as_slice(), &key.account, &key.prefix, &key.created_at, &key.revoked],
        )
        .await
        .map_err(db_error)?;
    }
    for entry in &export.entries {
        let seq = i64::try_from(entry.seq).map_err(|_| StoreError::new("an entry number past i64"))?;
        tx.execute(
            "INSERT INTO ledger (seq, account, kind, pot, delta, task_id, at_ms, note) OVERRIDING SYSTEM VALUE \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &seq,
                &entry.account,
                &name_of(&entry.kind)?,
                &name_of(&entry.pot)?,
                &entry.delta,
                &entry.task_id,
                &entry.at_ms,
                &entry.note,
            ],
        )
        .await
        .map_err(db_error)?;
    }
    tx.execute(
        "SELECT setval(pg_get_serial_sequence('ledger', 'seq'), GREATEST((SELECT max(seq) FROM ledger), 1))",
        &[],
    )
    .await
    .map_err(db_error)?;
    for (account, funds) in &export.funds {
        tx.execute(
            "INSERT INTO funds (account, free_trial, plan, balance) VALUES ($1, $2, $3, $4)",
            &[account, &funds.free_trial, &funds.plan, &funds.balance],
        )
        .await
        .map_err(db_error)?;
    }
    for task in &export.tasks {
        let ended = task.status.is_terminal().then(|| task.ended_ms());
        tx.execute(
            "INSERT INTO tasks (task_id, account, status, created_ms, ended_ms, upstream_task_id, next_poll_ms, record, \
             lease_owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)",
            &[&task.task_id, &task.account, &task.status.as_str(), &task.created_ms, &ended, &task.upstream_task_id, &task.next_poll_ms, &encode(task)?],
        )
        .await
        .map_err(db_error)?;
    }
    // Copies still waiting are queued again, as the write ending their tasks queued them.
    super::mirrors::enqueue(&tx, &export.tasks.iter().collect::<Vec<_>>()).await?;
    tx.execute(
        "UPDATE accounts SET in_flight = (SELECT count(*) FROM tasks \
         WHERE tasks.account = accounts.name AND status IN ('queued', 'running'))",
        &[],
    )
    .await
    .map_err(db_error)?;
    for (key, record) in &export.idempotency {
        tx.execute(
            "INSERT INTO idempotency (key, body_hash, task_id) VALUES ($1, $2, $3)",
            &[key, &record.body_hash, &record.task_id],
        )
        .await
        .map_err(db_error)?;
    }
    for (model, enabled) in &export.switches {
        tx.execute("INSERT INTO model_switches (model, enabled) VALUES ($1, $2)", &[model, enabled])
            .await
            .map_err(db_error)?;
    }
    for (account, settings) in &export.webhook_settings {
        tx.execute("INSERT INTO webhook_settings (account, record) VALUES ($1, $2)", &[account, &encode(settings)?])
            .await
            .map_err(db_error)?;
    }
    super::webhooks::insert(&tx, &export.deliveries).await?;
    for line in &export.usage_lines {
        tx.execute(
            "INSERT INTO usage_lines (task_id, account, at_ms, line) VALUES ($1, $2, $3, $4)",
            &[&line.task_id, &line.account, &line.at_ms, &encode(line)?],
        )
        .await
        .map_err(db_error)?;
    }
    for operator in &export.operators {
        tx.execute(
            "INSERT INTO operators (name, token_hash, record) VALUES ($1, $2, $3)",
            &[&operator.name, &operator.token_hash, &encode(operator)?],
        )
        .await
        .map_err(db_error)?;
    }
    // The trail keeps its numbers; the sequence goes on after the last.
    for entry in &export.audit {
        let seq = i64::try_from(entry.seq).map_err(|_| StoreError::new("an audit entry's number is out of range"))?;
        tx.execute(
            "INSERT INTO audit_log (seq, at_ms, operator, action, account, entry) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&seq, &entry.at_ms, &entry.operator, &entry.action.as_str(), &entry.account, &encode(entry)?],
        )
        .await
        .map_err(db_error)?;
    }
    tx.execute("SELECT setval('audit_log_seq_seq', coalesce((SELECT max(seq) FROM audit_log), 0) + 1, false)", &[])
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}
