//! Tasks, their idempotency records and their holds. A task's full record is its MessagePack bytes
//! (`record`); the columns beside it are what queries select on, written from the record in the same
//! statement.

use super::replicas::Replica;
use super::{db_error, ledger};
use crate::adapters::store::{decode, encode};
use crate::domain::billing::books::{hold_postings, plan_hold};
use crate::domain::listing::{ListPosition, TaskQuery};
use crate::domain::tasks::{Hold, IdempotencyRecord, TaskRecord, TaskStatus};
use crate::domain::usage_log::UsageFilter;
use crate::ports::storage::{Forwarded, IdempotencyClaim, Inserted, StoreError, StoredTask, TaskChange};
use deadpool_postgres::{Object, Transaction};

/// Writes a task's row from its record: the columns queries select on, and the record itself. A new task
/// is leased to `new_for`, the replica submitting it.
async fn write(tx: &Transaction<'_>, task: &TaskRecord, new_for: Option<&str>) -> Result<(), StoreError> {
    let query = match new_for {
        Some(_) => {
            "INSERT INTO tasks (task_id, account, status, created_ms, ended_ms, upstream_task_id, next_poll_ms, \
             record, lease_owner, submitted_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)"
        }
        None => {
            "UPDATE tasks SET account = $2, status = $3, created_ms = $4, ended_ms = $5, upstream_task_id = $6, \
             next_poll_ms = $7, record = $8 WHERE task_id = $1"
        }
    };
    let statement = tx.prepare_cached(query).await.map_err(db_error)?;
    let ended = task.status.is_terminal().then(|| task.ended_ms());
    let (status, record) = (task.status.as_str(), encode(task)?);
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &task.task_id,
        &task.account,
        &status,
        &task.created_ms,
        &ended,
        &task.upstream_task_id,
        &task.next_poll_ms,
        &record,
    ];
    if let Some(replica) = &new_for {
        params.push(replica);
    }
    tx.execute(&statement, &params).await.map_err(db_error)?;
    Ok(())
}

/// A task to add, and what it must get past.
pub(super) struct New {
    pub task: TaskRecord,
    pub idempotency: Option<IdempotencyClaim>,
    pub hold: Option<Hold>,
    /// Unfinished tasks the account may have.
    pub cap: i32,
}

/// Stores a new task with its idempotency record and its hold, in one transaction; nothing is written if
/// the key is taken (by a task it may not replace), the account has as many unfinished tasks as it may, or
/// it cannot fund the hold.
pub(super) async fn add(client: &mut Object, new: New, replica: &str) -> Result<Inserted, StoreError> {
    let New { task: mut new, idempotency, hold, cap } = new;
    let tx = client.transaction().await.map_err(db_error)?;
    if let Some(claim) = &idempotency {
        let record = &claim.record;
        // Waits for another transaction inserting the same key, and sees its row if it commits.
        let claimed = tx
            .execute(
                "INSERT INTO idempotency (key, body_hash, task_id) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING",
                &[&claim.key, &record.body_hash, &record.task_id],
            )
            .await
            .map_err(db_error)?;
        if claimed == 0 {
            let row = tx
                .query_one("SELECT body_hash, task_id FROM idempotency WHERE key = $1 FOR UPDATE", &[&claim.key])
                .await
                .map_err(db_error)?;
            let existing = IdempotencyRecord { body_hash: row.get(0), task_id: row.get(1) };
            if claim.replacing.as_deref() != Some(existing.task_id.as_str()) {
                return Ok(Inserted::Duplicate(existing));
            }
            tx.execute(
                "UPDATE idempotency SET body_hash = $2, task_id = $3 WHERE key = $1",
                &[&claim.key, &record.body_hash, &record.task_id],
            )
            .await
            .map_err(db_error)?;
        }
    }
    // The account's rows are locked from here to the commit, so the statements on them go out together.
    let count = async {
        if new.status.is_terminal() {
            return Ok(true);
        }
        let counted = tx
            .prepare_cached("UPDATE accounts SET in_flight = in_flight + 1 WHERE name = $1 AND in_flight < $2")
            .await
            .map_err(db_error)?;
        Ok::<_, StoreError>(tx.execute(&counted, &[&new.account, &cap]).await.map_err(db_error)? == 1)
    };
    let funds = async {
        match hold {
            Some(_) => ledger::lock_funds(&tx, &[new.account.as_str()]).await.map(Some),
            None => Ok(None),
        }
    };
    let (counted, pots) = tokio::try_join!(count, funds)?;
    if !counted {
        return Ok(Inserted::TooManyTasks(usize::try_from(cap).unwrap_or_default()));
    }
    let mut held = None;
    if let (Some(hold), Some(mut pots)) = (hold, pots) {
        // The money decision: the account's pots locked, billing's funding order over what they hold.
        let funds = pots.get(&new.account).copied().unwrap_or_default();
        let split = match plan_hold(&funds, hold.amount, hold.trial_only) {
            Ok(split) => split,
            Err(shortfall) => return Ok(Inserted::Shortfall(shortfall)),
        };
        let postings = hold_postings(&new.account, &new.task_id, &new.model, &split);
        for posting in &postings {
            ledger::move_pots(&mut pots, posting)?;
        }
        if let Some(billing) = new.billing.as_mut() {
            billing.hold = split;
        }
        held = Some((postings, pots));
    }
    let money = async {
        match &held {
            Some((postings, pots)) => {
                tokio::try_join!(ledger::insert_entries(&tx, postings.iter()), ledger::store_funds(&tx, pots))
                    .map(|_| ())
            }
            None => Ok(()),
        }
    };
    tokio::try_join!(money, write(&tx, &new, Some(replica)))?;
    if new.status.is_terminal() {
        super::webhooks::enqueue(&tx, &[&new]).await?;
        super::mirrors::enqueue(&tx, &[&new]).await?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(Inserted::Stored(Box::new(StoredTask { record: new, bytes: Vec::new() })))
}

pub(super) async fn get(client: &Object, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
    let statement = client.prepare_cached("SELECT record FROM tasks WHERE task_id = $1").await.map_err(db_error)?;
    let row = client.query_opt(&statement, &[&task_id]).await.map_err(db_error)?;
    row.map(|row| decode(row.get(0))).transpose()
}

/// Records the upstream's acceptance of a queued task `replica` submitted (`change` sets its upstream task
/// id), and hands the task to the replica whose turn its creation time falls in, if that is another one.
pub(super) async fn forwarded(
    client: &mut Object,
    task_id: &str,
    replica: &Replica,
    change: TaskChange,
) -> Result<Option<Forwarded>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let statement =
        tx.prepare_cached("SELECT record FROM tasks WHERE task_id = $1 FOR UPDATE").await.map_err(db_error)?;
    let Some(row) = tx.query_opt(&statement, &[&task_id]).await.map_err(db_error)? else { return Ok(None) };
    let mut task: TaskRecord = decode(row.get(0))?;
    if task.status != TaskStatus::Queued {
        return Ok(None);
    }
    change(&mut task);
    if task.status.is_terminal() {
        return Err(StoreError::new("a forward's change may not end its task (task changes settle an end)"));
    }
    write(&tx, &task, None).await?;
    let poller = replica.poller_for(task.created_ms);
    let polled_here = poller == replica.id;
    if !polled_here {
        let statement = tx
            .prepare_cached("UPDATE tasks SET lease_owner = $2, handed_over = true WHERE task_id = $1")
            .await
            .map_err(db_error)?;
        tx.execute(&statement, &[&task_id, &&*poller]).await.map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(Some(Forwarded { task, polled_here }))
}

pub(super) async fn idempotency(client: &Object, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
    let statement =
        client.prepare_cached("SELECT body_hash, task_id FROM idempotency WHERE key = $1").await.map_err(db_error)?;
    let row = client.query_opt(&statement, &[&key]).await.map_err(db_error)?;
    Ok(row.map(|row| IdempotencyRecord { body_hash: row.get(0), task_id: row.get(1) }))
}

/// The account's tasks `query` selects, newest first. Position, time and status are selected in SQL
/// (`tasks_by_account`); the model is in the record only, so rows are read in batches until enough pass.
pub(super) async fn list(client: &Object, query: &TaskQuery) -> Result<Vec<TaskRecord>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT record FROM tasks WHERE account = $1 AND (created_ms, task_id) < ($2, $3) AND created_ms >= $4 \
             AND ($5::text IS NULL OR status = $5) ORDER BY created_ms DESC, task_id DESC LIMIT $6",
        )
        .await
        .map_err(db_error)?;
    let (since, status) = (query.created_since.unwrap_or(i64::MIN), query.status.map(|s| s.as_str()));
    let batch = i64::try_from(query.limit.clamp(1, 1000)).unwrap_or(1000);
    let (mut upper, mut listed) = (query.upper_bound(), Vec::new());
    loop {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&query.account, &upper.created_ms, &upper.task_id, &since, &status, &batch];
        let rows = client.query(&statement, &params).await.map_err(db_error)?;
        for row in &rows {
            let task: TaskRecord = decode(row.get(0))?;
            upper = ListPosition::of(&task);
            if query.keeps(&task) {
                listed.push(task);
                if listed.len() >= query.limit {
                    return Ok(listed);
                }
            }
        }
        if (rows.len() as i64) < batch {
            return Ok(listed);
        }
    }
}

/// The usage lines `filter` keeps: the ended tasks it may keep are selected in SQL, the rest is its rule.
pub(super) async fn usage(client: &Object, filter: &UsageFilter) -> Result<Vec<serde_json::Value>, StoreError> {
    let rows = client
        .query(
            "SELECT record FROM tasks WHERE ended_ms IS NOT NULL AND ($1::text IS NULL OR account = $1) \
             AND ($2::bigint IS NULL OR ended_ms >= $2) AND ($3::bigint IS NULL OR ended_ms <= $3) ORDER BY ended_ms",
            &[&filter.account, &filter.since, &filter.until],
        )
        .await
        .map_err(db_error)?;
    let tasks: Vec<TaskRecord> = rows.iter().map(|row| decode(row.get(0))).collect::<Result<_, _>>()?;
    let purged = super::retention::usage_lines(client, filter.account.as_deref(), filter.since, filter.until).await?;
    Ok(filter.lines(&tasks, purged)?)
}
