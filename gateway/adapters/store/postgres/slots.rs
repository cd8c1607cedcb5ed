//! The upstream's running slots, shared by the replicas (`upstream_slots`): a row per task the upstream has
//! or is being sent (every such task is stored first, live), counted while the task is live and the replica
//! holding it beats. A take is one transaction under an
//! advisory lock per pool, so two replicas never both take a key's last slot.

use super::db_error;
use super::replicas::LEASE_MS;
use crate::domain::capacity::Pool;
use crate::ports::storage::StoreError;
use deadpool_postgres::Object;

fn row_id(holder: &str, key: usize) -> String {
    format!("{holder}/{key}")
}

pub(super) async fn take(
    client: &mut Object,
    replica: &str,
    pool: &str,
    caps: &[u32],
    tried: &[usize],
    holder: &str,
) -> Result<(Option<usize>, Vec<u32>), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 39))", &[&pool]).await.map_err(db_error)?;
    // Slots of replicas that stopped beating are free (their tasks are taken over by others, which adopt the
    // slots of those the upstream still has), and so are slots of tasks that have ended: a give-back whose
    // answer was lost (the database stopped as it committed) or that raced an adoption leaves such a row.
    let alive_since = crate::domain::clock::now_ms() - LEASE_MS;
    tx.execute(
        "DELETE FROM upstream_slots s WHERE pool = $1 AND (replica NOT IN (SELECT id FROM replicas WHERE seen_ms >= $2) \
         OR NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = split_part(s.holder, '/', 1) \
         AND t.status IN ('queued', 'running')))",
        &[&pool, &alive_since],
    )
    .await
    .map_err(db_error)?;
    let rows = tx
        .query("SELECT key, count(*) FROM upstream_slots WHERE pool = $1 GROUP BY key", &[&pool])
        .await
        .map_err(db_error)?;
    let mut slots = Pool::new(caps.to_vec());
    for row in rows {
        let (key, count): (i32, i64) = (row.get(0), row.get(1));
        (0..count).for_each(|_| slots.hold(usize::try_from(key).unwrap_or(usize::MAX)));
    }
    let taken = slots.take(tried);
    if let Some(key) = taken {
        tx.execute(
            "INSERT INTO upstream_slots (holder, pool, key, replica) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (holder) DO UPDATE SET replica = $4",
            &[&row_id(holder, key), &pool, &(key as i32), &replica],
        )
        .await
        .map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok((taken, slots.slots().map(|(used, _)| used).collect()))
}

pub(super) async fn give_back(client: &Object, holder: &str, key: usize) -> Result<(), StoreError> {
    client.execute("DELETE FROM upstream_slots WHERE holder = $1", &[&row_id(holder, key)]).await.map_err(db_error)?;
    Ok(())
}

pub(super) async fn adopt(
    client: &Object,
    replica: &str,
    pool: &str,
    holder: &str,
    key: usize,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO upstream_slots (holder, pool, key, replica) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (holder) DO UPDATE SET replica = $4",
            &[&row_id(holder, key), &pool, &(key as i32), &replica],
        )
        .await
        .map_err(db_error)?;
    Ok(())
}
