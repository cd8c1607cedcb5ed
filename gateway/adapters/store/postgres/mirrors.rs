//! Result mirroring on PostgreSQL: the queue of tasks whose results wait to be copied, taken a few at a
//! time by whichever replica asks, each set aside while it copies them.

use super::db_error;
use crate::adapters::store::{decode, encode};
use crate::domain::results::Mirror;
use crate::domain::results::TaskResult;
use crate::domain::tasks::TaskRecord;
use crate::ports::storage::StoreError;
use deadpool_postgres::{GenericClient, Object};

/// Queues the copies the ends of `ended` ask for, inside the transaction that ends them.
pub(super) async fn enqueue(tx: &impl GenericClient, ended: &[&TaskRecord]) -> Result<(), StoreError> {
    let (ids, due): (Vec<&str>, Vec<i64>) =
        ended.iter().filter(|t| t.copy_queued()).map(|t| (t.task_id.as_str(), t.ended_ms())).unzip();
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO pending_mirrors (task_id, due_ms) SELECT * FROM unnest($1::text[], $2::bigint[]) \
         ON CONFLICT (task_id) DO NOTHING",
        &[&ids, &due],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(super) async fn due(
    client: &Object,
    now_ms: i64,
    lease_ms: i64,
    limit: usize,
) -> Result<Vec<TaskRecord>, StoreError> {
    let rows = client
        .query(
            "WITH taken AS (UPDATE pending_mirrors SET due_ms = $2 WHERE task_id IN (SELECT task_id \
             FROM pending_mirrors WHERE due_ms <= $1 ORDER BY due_ms LIMIT $3 FOR UPDATE SKIP LOCKED) \
             RETURNING task_id) SELECT record FROM tasks JOIN taken USING (task_id)",
            &[&now_ms, &now_ms.saturating_add(lease_ms), &i64::try_from(limit).unwrap_or(i64::MAX)],
        )
        .await
        .map_err(db_error)?;
    rows.iter().map(|row| decode(row.get(0))).collect()
}

pub(super) async fn renew(client: &Object, task_ids: &[String], until_ms: i64) -> Result<(), StoreError> {
    client
        .execute("UPDATE pending_mirrors SET due_ms = $2 WHERE task_id = ANY($1)", &[&task_ids, &until_ms])
        .await
        .map_err(db_error)?;
    Ok(())
}

pub(super) async fn save(
    client: &mut Object,
    task_id: &str,
    mirror: Mirror,
    results: Vec<TaskResult>,
    retry_ms: Option<i64>,
) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let row =
        tx.query_opt("SELECT record FROM tasks WHERE task_id = $1 FOR UPDATE", &[&task_id]).await.map_err(db_error)?;
    let Some(row) = row else { return Ok(()) };
    let mut task: TaskRecord = decode(row.get(0))?;
    task.mirror = Some(mirror);
    task.results = results;
    tx.execute("UPDATE tasks SET record = $2 WHERE task_id = $1", &[&task_id, &encode(&task)?])
        .await
        .map_err(db_error)?;
    match retry_ms {
        Some(at) => tx.execute("UPDATE pending_mirrors SET due_ms = $2 WHERE task_id = $1", &[&task_id, &at]).await,
        None => tx.execute("DELETE FROM pending_mirrors WHERE task_id = $1", &[&task_id]).await,
    }
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    Ok(())
}
