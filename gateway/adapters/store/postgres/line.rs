//! The line of jobs waiting for an upstream slot, shared by the replicas (`slot_line`): whichever replica
//! sees a slot free hands it to the job next across all of them, by the start tags of
//! `domain::capacity` (fair across accounts, first come first served within one). A job joins and leaves
//! the line, and a slot is handed from it, under the pool's lock (`slots::lock_pool`), which takes of the
//! pool's slots also hold: the line's order and the slots' counts change together.
//!
//! A task in line is any replica's to send; a synchronous call only its own replica's, whose client waits
//! for it. Each pool keeps its clock (the tag of the job served last) and each account's next start tag.

use super::db_error;
use super::replicas::alive_since;
use super::slots::{clear_stale, counted, hold, lock_pool, row_id};
use crate::domain::capacity::{start_tag, tag_again};
use crate::domain::clock::now_ms;
use crate::ports::storage::{InLine, StoreError, Turn};
use deadpool_postgres::Object;

fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn keys_of(tried: Vec<i32>) -> Vec<usize> {
    tried.into_iter().filter_map(|k| usize::try_from(k).ok()).collect()
}

/// Puts `job` in its pool's line, unless it is there already, or another live replica holds a slot for it
/// (it is sending it: this replica claimed the task from one that stopped just as the other took its turn).
/// A slot of this replica's is one it is giving back; one of a replica that stopped, one it never used.
pub(super) async fn join(client: &mut Object, replica: &str, job: &InLine) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    // Not waiting for the disk, which would hold the pool's lock through the flush: the task is durably
    // `queued` already, and one a crash leaves in no line is put back by its lease holder's next check
    // (`dispatch::rejoin_lost`).
    tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await.map_err(db_error)?;
    lock_pool(&tx, &job.pool).await?;
    let holders: Vec<String> = (0..job.keys).map(|key| row_id(&job.holder, key)).collect();
    let present = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM slot_line WHERE holder = $1) \
             OR EXISTS (SELECT 1 FROM upstream_slots s JOIN replicas r ON r.id = s.replica \
             WHERE s.holder = ANY($2) AND s.replica <> $3 AND r.seen_ms >= $4)",
            &[&job.holder, &holders, &replica, &alive_since()],
        )
        .await
        .map_err(db_error)?;
    if present.get::<_, bool>(0) {
        return tx.commit().await.map_err(db_error);
    }
    let now = tx
        .query_opt("SELECT now FROM slot_line_clocks WHERE pool = $1", &[&job.pool])
        .await
        .map_err(db_error)?
        .map_or(0, |row| from_db(row.get(0)));
    let tag = if job.again {
        let first = tx
            .query_one("SELECT min(tag) FROM slot_line WHERE pool = $1 AND account = $2", &[&job.pool, &job.account])
            .await
            .map_err(db_error)?;
        tag_again(first.get::<_, Option<i64>>(0).map(from_db), now)
    } else {
        let next = tx
            .query_opt(
                "SELECT next_tag FROM slot_line_accounts WHERE pool = $1 AND account = $2",
                &[&job.pool, &job.account],
            )
            .await
            .map_err(db_error)?;
        let (tag, next) = start_tag(next.map(|row| from_db(row.get(0))), now, job.weight);
        tx.execute(
            "INSERT INTO slot_line_accounts (pool, account, next_tag) VALUES ($1, $2, $3) \
             ON CONFLICT (pool, account) DO UPDATE SET next_tag = EXCLUDED.next_tag",
            &[&job.pool, &job.account, &to_db(next)],
        )
        .await
        .map_err(db_error)?;
        tag
    };
    let tried: Vec<i32> = job.tried.iter().map(|k| i32::try_from(*k).unwrap_or(i32::MAX)).collect();
    let call_replica = job.call.then_some(replica);
    // A job waiting again goes before its account's others of the same tag.
    let arrival: Option<i64> = job.again.then_some(0);
    tx.execute(
        "INSERT INTO slot_line (holder, pool, account, tag, arrival, tried, deadline_ms, since_ms, replica) \
         VALUES ($1, $2, $3, $4, COALESCE($5, nextval('slot_line_arrival_seq')), $6, $7, $8, $9)",
        &[
            &job.holder,
            &job.pool,
            &job.account,
            &to_db(tag),
            &arrival,
            &tried,
            &job.deadline_ms,
            &now_ms(),
            &call_replica,
        ],
    )
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}

/// Hands a free slot of `pool` to the job next in its line (a task, or one of `replica`'s calls), in one
/// transaction: the job leaves the line, its slot is counted, and the pool's clock moves to its tag.
pub(super) async fn take_next(
    client: &mut Object,
    replica: &str,
    pool: &str,
    caps: &[u32],
) -> Result<Option<Turn>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    // Not waiting for the disk: the job is sent only after a later write that does (its attempt, recorded
    // before the create), and the log is flushed in order, so a turn a crash loses was never acted on.
    tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await.map_err(db_error)?;
    lock_pool(&tx, pool).await?;
    let now = now_ms();
    // A call leaves the line when it stops waiting; one whose replica stopped first is cleared here.
    tx.execute(
        "DELETE FROM slot_line WHERE pool = $1 AND replica IS NOT NULL \
         AND (deadline_ms < $2 OR replica NOT IN (SELECT id FROM replicas WHERE seen_ms >= $3))",
        &[&pool, &now, &alive_since()],
    )
    .await
    .map_err(db_error)?;
    let Some(next) = tx
        .query_opt(
            "SELECT holder, tag, tried, replica IS NOT NULL, since_ms FROM slot_line \
             WHERE pool = $1 AND (replica IS NULL OR replica = $2) ORDER BY tag, arrival LIMIT 1",
            &[&pool, &replica],
        )
        .await
        .map_err(db_error)?
    else {
        tx.commit().await.map_err(db_error)?;
        return Ok(None);
    };
    let (holder, tag, tried, call, since_ms): (String, i64, Vec<i32>, bool, i64) =
        (next.get(0), next.get(1), next.get(2), next.get(3), next.get(4));
    let tried = keys_of(tried);
    let mut slots = counted(&tx, pool, caps).await?;
    let mut key = slots.take_after(&tried);
    if key.is_none() {
        clear_stale(&tx, pool).await?;
        slots = counted(&tx, pool, caps).await?;
        key = slots.take_after(&tried);
    }
    let Some(key) = key else {
        tx.commit().await.map_err(db_error)?;
        return Ok(None);
    };
    hold(&tx, replica, &[row_id(&holder, key)], &[pool], &[i32::try_from(key).unwrap_or(i32::MAX)]).await?;
    tx.execute("DELETE FROM slot_line WHERE holder = $1", &[&holder]).await.map_err(db_error)?;
    tx.execute(
        "INSERT INTO slot_line_clocks (pool, now) VALUES ($1, $2) \
         ON CONFLICT (pool) DO UPDATE SET now = GREATEST(slot_line_clocks.now, EXCLUDED.now)",
        &[&pool, &tag],
    )
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    let used = slots.slots().map(|(used, _)| used).collect();
    Ok(Some(Turn { holder, key, tried, call, waited_ms: now - since_ms, used }))
}

pub(super) async fn leave(client: &Object, holder: &str) -> Result<(), StoreError> {
    client.execute("DELETE FROM slot_line WHERE holder = $1", &[&holder]).await.map_err(db_error)?;
    Ok(())
}

pub(super) async fn ahead(client: &Object, pool: &str, holder: &str) -> Result<Option<usize>, StoreError> {
    let row = client
        .query_opt(
            "SELECT (SELECT count(*) FROM slot_line l WHERE l.pool = $1 AND (l.tag, l.arrival) < (me.tag, me.arrival)) \
             FROM slot_line me WHERE me.holder = $2",
            &[&pool, &holder],
        )
        .await
        .map_err(db_error)?;
    Ok(row.map(|row| usize::try_from(row.get::<_, i64>(0)).unwrap_or(usize::MAX)))
}

pub(super) async fn overdue(client: &Object, now_ms: i64) -> Result<Vec<(String, String)>, StoreError> {
    let rows = client
        .query("DELETE FROM slot_line WHERE replica IS NULL AND deadline_ms <= $1 RETURNING pool, holder", &[&now_ms])
        .await
        .map_err(db_error)?;
    Ok(rows.into_iter().map(|row| (row.get(0), row.get(1))).collect())
}

pub(super) async fn depths(client: &Object) -> Result<Vec<(String, String, usize)>, StoreError> {
    let rows = client
        .query("SELECT pool, account, count(*) FROM slot_line GROUP BY pool, account", &[])
        .await
        .map_err(db_error)?;
    Ok(rows
        .into_iter()
        .map(|row| (row.get(0), row.get(1), usize::try_from(row.get::<_, i64>(2)).unwrap_or(usize::MAX)))
        .collect())
}

pub(super) async fn missing(client: &Object, waiting: &[(String, usize)]) -> Result<Vec<String>, StoreError> {
    let (mut tasks, mut rows) = (Vec::new(), Vec::new());
    for (task, keys) in waiting {
        for key in 0..*keys {
            tasks.push(task.as_str());
            rows.push(row_id(task, key));
        }
    }
    let rows = client
        .query(
            "WITH asked AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(task, slot)) \
             SELECT task FROM asked a WHERE NOT EXISTS (SELECT 1 FROM slot_line l WHERE l.holder = a.task) \
             EXCEPT \
             SELECT task FROM asked a JOIN upstream_slots s ON s.holder = a.slot \
             JOIN replicas r ON r.id = s.replica AND r.seen_ms >= $3",
            &[&tasks, &rows, &alive_since()],
        )
        .await
        .map_err(db_error)?;
    Ok(rows.into_iter().map(|row| row.get(0)).collect())
}
