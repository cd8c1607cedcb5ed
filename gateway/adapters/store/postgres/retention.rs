//! Retention on PostgreSQL: finished work past its time, removed in small batches, one replica at a time
//! (the pass takes a transaction-scoped advisory lock, or purges nothing). Deliveries and idempotency
//! records go by their ids, which are time-ordered (UUIDv7); tasks by their end, each checked in full (a
//! copy of its results still served keeps it), and each leaves its usage line.

use super::db_error;
use crate::adapters::store::{decode, encode};
use crate::domain::clock::prefixed_at;
use crate::domain::retention::Retention;
use crate::domain::tasks::TaskRecord;
use crate::domain::usage_log::UsageLine;
use crate::ports::storage::{Purged, StoreError};
use deadpool_postgres::Object;

/// Tasks read at most per pass, purgeable or not.
const SCANNED_AT_MOST: usize = 20_000;

pub(super) async fn purge(
    client: &mut Object,
    retention: &Retention,
    now_ms: i64,
    limit: usize,
) -> Result<Purged, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let locked: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock(hashtextextended('mediagate retention', 41))", &[])
        .await
        .map_err(db_error)?
        .get(0);
    if !locked {
        return Ok(Purged::default());
    }
    let batch = i64::try_from(limit).unwrap_or(i64::MAX);
    let deliveries = tx
        .execute(
            "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries WHERE id < $1 AND state <> 'pending' \
             ORDER BY id LIMIT $2)",
            &[&prefixed_at("msg_", retention.deliveries_created_before(now_ms)), &batch],
        )
        .await
        .map_err(db_error)?;
    let idempotency = tx
        .execute(
            "DELETE FROM idempotency WHERE key IN (SELECT key FROM idempotency WHERE task_id < $1 LIMIT $2)",
            &[&prefixed_at("task-", retention.idempotency_created_before(now_ms)), &batch],
        )
        .await
        .map_err(db_error)?;
    // Tasks in the order they ended, a page at a time after the last one read, until a batch is found.
    let ended_before = now_ms.saturating_sub(retention.tasks_ms);
    let (mut after, mut scanned, mut lines) = ((i64::MIN, String::new()), 0, Vec::new());
    while lines.len() < limit && scanned < SCANNED_AT_MOST {
        let rows = tx
            .query(
                "SELECT ended_ms, task_id, record FROM tasks t WHERE ended_ms < $1 AND (ended_ms, task_id) > ($2, $3) \
                 AND status NOT IN ('queued', 'running') \
                 AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.task_id = t.task_id AND d.state = 'pending') \
                 ORDER BY ended_ms, task_id LIMIT $4 FOR UPDATE SKIP LOCKED",
                &[&ended_before, &after.0, &after.1, &batch],
            )
            .await
            .map_err(db_error)?;
        let Some(last) = rows.last() else { break };
        after = (last.get(0), last.get(1));
        scanned += rows.len();
        for row in &rows {
            let task: TaskRecord = decode(row.get(2))?;
            if retention.purges_task(&task, now_ms) && lines.len() < limit {
                lines.push((task.task_id.clone(), task.account.clone(), UsageLine::of(&task)));
            }
        }
    }
    let ids: Vec<&str> = lines.iter().map(|(id, _, _)| id.as_str()).collect();
    let tasks = tx.execute("DELETE FROM tasks WHERE task_id = ANY($1)", &[&ids]).await.map_err(db_error)?;
    tx.execute("DELETE FROM deliveries WHERE task_id = ANY($1)", &[&ids]).await.map_err(db_error)?;
    tx.execute("DELETE FROM idempotency WHERE task_id = ANY($1)", &[&ids]).await.map_err(db_error)?;
    let kept: Vec<(&str, &str, &UsageLine)> =
        lines.iter().filter_map(|(id, account, line)| Some((id.as_str(), account.as_str(), line.as_ref()?))).collect();
    let (line_ids, accounts): (Vec<&str>, Vec<&str>) = kept.iter().map(|(id, account, _)| (*id, *account)).unzip();
    let at: Vec<i64> = kept.iter().map(|(_, _, line)| line.at_ms).collect();
    let encoded = kept.iter().map(|(_, _, line)| encode(*line)).collect::<Result<Vec<_>, _>>()?;
    tx.execute(
        "INSERT INTO usage_lines (task_id, account, at_ms, line) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) ON CONFLICT (task_id) DO NOTHING",
        &[&line_ids, &accounts, &at, &encoded],
    )
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(Purged { tasks: count(tasks), deliveries: count(deliveries), idempotency: count(idempotency) })
}

/// The usage lines of purged tasks `account` (or any) had, ended within `[since, until]`.
pub(super) async fn usage_lines(
    client: &Object,
    account: Option<&str>,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<UsageLine>, StoreError> {
    let rows = client
        .query(
            "SELECT line FROM usage_lines WHERE ($1::text IS NULL OR account = $1) \
             AND ($2::bigint IS NULL OR at_ms >= $2) AND ($3::bigint IS NULL OR at_ms <= $3) ORDER BY at_ms",
            &[&account, &since, &until],
        )
        .await
        .map_err(db_error)?;
    rows.iter().map(|row| decode(row.get(0))).collect()
}
