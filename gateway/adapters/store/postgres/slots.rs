//! The upstream's running slots, shared by the replicas (`upstream_slots`): a row per task the upstream has
//! or is being sent (every such task is stored first, live), counted while the task is live and the replica
//! holding it beats, with a count per pool and key beside the rows (`upstream_slot_counts`). Rows and counts
//! change only under the pool's advisory lock, held until the commit, so two replicas never both take a
//! key's last slot. The group writer (`slot_writer.rs`) takes and gives back through these.

use super::db_error;
use super::replicas::LEASE_MS;
use crate::domain::capacity::Pool;
use crate::ports::storage::StoreError;
use deadpool_postgres::{Object, Transaction};

pub(super) fn row_id(holder: &str, key: usize) -> String {
    format!("{holder}/{key}")
}

/// Writes the slots `holders` hold (on `pools` and `keys`, one each) as `replica`'s, counting those new to
/// their pool's key; the caller holds their pools' locks.
pub(super) async fn hold(
    tx: &Transaction<'_>,
    replica: &str,
    holders: &[String],
    pools: &[&str],
    keys: &[i32],
) -> Result<(), StoreError> {
    if holders.is_empty() {
        return Ok(());
    }
    tx.execute(
        "WITH held AS (INSERT INTO upstream_slots (holder, pool, key, replica) \
             SELECT h, p, k, $4 FROM unnest($1::text[], $2::text[], $3::int[]) AS u(h, p, k) \
             ON CONFLICT (holder) DO UPDATE SET replica = EXCLUDED.replica \
             RETURNING pool, key, xmax = 0 AS fresh) \
         INSERT INTO upstream_slot_counts (pool, key, used) \
         SELECT pool, key, count(*) FROM held WHERE fresh GROUP BY pool, key \
         ON CONFLICT (pool, key) DO UPDATE SET used = upstream_slot_counts.used + EXCLUDED.used",
        &[&holders, &pools, &keys, &replica],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Whether jobs wait in `pool`'s line (`line.rs`).
pub(super) async fn line_waits(tx: &Transaction<'_>, pool: &str) -> Result<bool, StoreError> {
    let row =
        tx.query_one("SELECT EXISTS (SELECT 1 FROM slot_line WHERE pool = $1)", &[&pool]).await.map_err(db_error)?;
    Ok(row.get(0))
}

/// Holds the pool's lock until the transaction ends: takes of its slots and its line go one at a time.
pub(super) async fn lock_pool(tx: &Transaction<'_>, pool: &str) -> Result<(), StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 39))", &[&pool]).await.map_err(db_error)?;
    Ok(())
}

/// Clears the pool's slots of replicas that stopped beating (their tasks are taken over by others, which
/// adopt the slots of those the upstream still has) and of tasks that have ended (a give-back lost with the
/// database's last moments, or one that raced an adoption): done when they would keep a task waiting.
pub(super) async fn clear_stale(tx: &Transaction<'_>, pool: &str) -> Result<(), StoreError> {
    let alive_since = crate::domain::clock::now_ms() - LEASE_MS;
    let cleared = tx.execute(
        "DELETE FROM upstream_slots s WHERE pool = $1 AND (replica NOT IN (SELECT id FROM replicas WHERE seen_ms >= $2) \
         OR NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = split_part(s.holder, '/', 1) \
         AND t.status IN ('queued', 'running')))",
        &[&pool, &alive_since],
    )
    .await
    .map_err(db_error)?;
    if cleared == 0 {
        return Ok(());
    }
    // Counted again from the rows left.
    tx.execute(
        "WITH counted AS (SELECT key, count(*)::int AS n FROM upstream_slots WHERE pool = $1 GROUP BY key) \
         UPDATE upstream_slot_counts c SET used = COALESCE((SELECT n FROM counted WHERE counted.key = c.key), 0) \
         WHERE c.pool = $1",
        &[&pool],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// The pool's slots in use on each key, as its counts keep them (a row per key, kept with the slots' rows:
/// counting the rows on each take read every running task's).
pub(super) async fn counted(tx: &Transaction<'_>, pool: &str, caps: &[u32]) -> Result<Pool, StoreError> {
    let rows =
        tx.query("SELECT key, used FROM upstream_slot_counts WHERE pool = $1", &[&pool]).await.map_err(db_error)?;
    let mut slots = Pool::new(caps.to_vec());
    for row in rows {
        let (key, used): (i32, i32) = (row.get(0), row.get(1));
        (0..used).for_each(|_| slots.hold(usize::try_from(key).unwrap_or(usize::MAX)));
    }
    Ok(slots)
}

pub(super) async fn adopt(
    client: &mut Object,
    replica: &str,
    pool: &str,
    holder: &str,
    key: usize,
) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    lock_pool(&tx, pool).await?;
    hold(&tx, replica, &[row_id(holder, key)], &[pool], &[i32::try_from(key).unwrap_or(i32::MAX)]).await?;
    tx.commit().await.map_err(db_error)
}
