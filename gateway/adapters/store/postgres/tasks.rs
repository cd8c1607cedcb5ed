//! Tasks, their idempotency records and their holds. A task's full record is its MessagePack bytes
//! (`record`); the columns beside it are what queries select on, written from the record in the same
//! statement.

use super::{db_error, ledger};
use crate::adapters::store::{decode, encode};
use crate::domain::billing::books::{hold_postings, plan_hold};
use crate::domain::listing::{ListPosition, TaskQuery};
use crate::domain::tasks::{Hold, IdempotencyRecord, TaskRecord};
use crate::domain::usage_log::UsageFilter;
use crate::ports::storage::{IdempotencyClaim, Inserted, StoreError, StoredTask};
use deadpool_postgres::{Object, Transaction};
use std::collections::HashMap;

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
#[derive(Clone)]
pub(super) struct New {
    pub task: TaskRecord,
    pub idempotency: Option<IdempotencyClaim>,
    pub hold: Option<Hold>,
    /// Unfinished tasks the account may have.
    pub cap: i32,
}

/// Stores a new task with its idempotency record and its hold, inside the caller's transaction (the group
/// commit's, `adds.rs`, under a savepoint of its own). When the answer is not `Stored` (the key is taken by
/// a task it may not replace, the account has as many unfinished tasks as it may, or cannot fund the hold),
/// the caller rolls back what this wrote.
pub(super) async fn add(tx: &Transaction<'_>, new: New, replica: &str) -> Result<Inserted, StoreError> {
    let New { task: mut new, idempotency, hold, cap } = new;
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
            Some(_) => ledger::lock_funds(tx, &[new.account.as_str()]).await.map(Some),
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
                tokio::try_join!(ledger::insert_entries(tx, postings.iter()), ledger::store_funds(tx, pots)).map(|_| ())
            }
            None => Ok(()),
        }
    };
    tokio::try_join!(money, write(tx, &new, Some(replica)))?;
    if new.status.is_terminal() {
        super::webhooks::enqueue(tx, &[&new]).await?;
        super::mirrors::enqueue(tx, &[&new]).await?;
    }
    Ok(Inserted::Stored(Box::new(StoredTask { record: new, bytes: Vec::new() })))
}

/// Stores new tasks without an `Idempotency-Key`, together, with a few statements for all of them (the
/// group commit's common case, `adds.rs`): each is counted against its account's unfinished tasks and its
/// hold decided over its account's locked pots in order, as [`add`] decides one; those refused are left
/// out. Their accounts' rows must be locked already (the group locks them first).
pub(super) async fn add_all(
    tx: &Transaction<'_>,
    news: Vec<New>,
    replica: &str,
) -> Result<Vec<Result<Inserted, StoreError>>, StoreError> {
    let accounts: Vec<&str> = news.iter().map(|n| n.task.account.as_str()).collect();
    let rows =
        tx.query("SELECT name, in_flight FROM accounts WHERE name = ANY($1)", &[&accounts]).await.map_err(db_error)?;
    let mut in_flight: HashMap<String, i32> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let holding: Vec<&str> = news.iter().filter(|n| n.hold.is_some()).map(|n| n.task.account.as_str()).collect();
    let mut pots = if holding.is_empty() { Default::default() } else { ledger::lock_funds(tx, &holding).await? };
    let (mut outcomes, mut postings, mut stored, mut counted) =
        (Vec::with_capacity(news.len()), Vec::new(), Vec::new(), HashMap::<String, i32>::new());
    for New { task: mut new, hold, cap, .. } in news {
        let live = !new.status.is_terminal();
        if live {
            // An account without a row cannot be counted: refused as a full one, as `add`'s update refuses it.
            let count = in_flight.get(&new.account).copied().unwrap_or(cap);
            if count >= cap {
                outcomes.push(Ok(Inserted::TooManyTasks(usize::try_from(cap).unwrap_or_default())));
                continue;
            }
        }
        if let Some(hold) = hold {
            let funds = pots.get(&new.account).copied().unwrap_or_default();
            let split = match plan_hold(&funds, hold.amount, hold.trial_only) {
                Ok(split) => split,
                Err(shortfall) => {
                    outcomes.push(Ok(Inserted::Shortfall(shortfall)));
                    continue;
                }
            };
            let held = hold_postings(&new.account, &new.task_id, &new.model, &split);
            let mut moved = pots.clone();
            if let Some(refused) = held.iter().find_map(|p| ledger::move_pots(&mut moved, p).err()) {
                outcomes.push(Err(refused));
                continue;
            }
            pots = moved;
            postings.extend(held);
            if let Some(billing) = new.billing.as_mut() {
                billing.hold = split;
            }
        }
        if live {
            *in_flight.entry(new.account.clone()).or_default() += 1;
            *counted.entry(new.account.clone()).or_default() += 1;
        }
        outcomes.push(Ok(Inserted::Stored(Box::new(StoredTask { record: new.clone(), bytes: Vec::new() }))));
        stored.push(new);
    }
    if !postings.is_empty() {
        tokio::try_join!(ledger::insert_entries(tx, postings.iter()), ledger::store_funds(tx, &pots))?;
    }
    let (names, counts): (Vec<&str>, Vec<i32>) = counted.iter().map(|(a, n)| (a.as_str(), *n)).unzip();
    let count = async {
        if names.is_empty() {
            return Ok(());
        }
        tx.execute(
            "UPDATE accounts SET in_flight = in_flight + u.n FROM unnest($1::text[], $2::int[]) AS u(name, n) \
             WHERE accounts.name = u.name",
            &[&names, &counts],
        )
        .await
        .map(drop)
        .map_err(db_error)
    };
    tokio::try_join!(count, insert_all(tx, &stored, replica))?;
    let ended: Vec<&TaskRecord> = stored.iter().filter(|t| t.status.is_terminal()).collect();
    if !ended.is_empty() {
        super::webhooks::enqueue(tx, &ended).await?;
        super::mirrors::enqueue(tx, &ended).await?;
    }
    Ok(outcomes)
}

/// Inserts new tasks' rows, leased to `replica`, with one statement.
async fn insert_all(tx: &Transaction<'_>, tasks: &[TaskRecord], replica: &str) -> Result<(), StoreError> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = tasks.iter().map(|t| t.task_id.as_str()).collect();
    let accounts: Vec<&str> = tasks.iter().map(|t| t.account.as_str()).collect();
    let statuses: Vec<&str> = tasks.iter().map(|t| t.status.as_str()).collect();
    let created: Vec<i64> = tasks.iter().map(|t| t.created_ms).collect();
    let ended: Vec<Option<i64>> = tasks.iter().map(|t| t.status.is_terminal().then(|| t.ended_ms())).collect();
    let upstream: Vec<Option<&str>> = tasks.iter().map(|t| t.upstream_task_id.as_deref()).collect();
    let next_poll: Vec<i64> = tasks.iter().map(|t| t.next_poll_ms).collect();
    let records = tasks.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
    tx.execute(
        "INSERT INTO tasks (task_id, account, status, created_ms, ended_ms, upstream_task_id, next_poll_ms, record, \
         lease_owner, submitted_by) SELECT u.*, $9, $9 FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], \
         $5::bigint[], $6::text[], $7::bigint[], $8::bytea[]) AS u",
        &[&ids, &accounts, &statuses, &created, &ended, &upstream, &next_poll, &records, &replica],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(super) async fn get(client: &Object, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
    let statement = client.prepare_cached("SELECT record FROM tasks WHERE task_id = $1").await.map_err(db_error)?;
    let row = client.query_opt(&statement, &[&task_id]).await.map_err(db_error)?;
    row.map(|row| decode(row.get(0))).transpose()
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
