//! Result mirroring in the embedded store: the tasks whose results wait to be copied, with when each is
//! next tried, in `PENDING_MIRRORS`, so finding the due ones never scans the finished tasks.

use super::tables::{PENDING_MIRRORS, TASKS};
use super::{Commit, Store, StoreError, TaskRecord, Tx, decode, encode};
use crate::domain::results::Mirror;
use crate::domain::results::TaskResult;
use crate::ports::storage::Copies;

/// Queues the copy of `task`'s results, if its end asks for one, in the write that ends it.
pub(super) fn enqueue(tx: &Tx, task: &TaskRecord) -> Result<(), StoreError> {
    if task.copy_queued() {
        tx.open_table(PENDING_MIRRORS)?.insert(task.task_id.as_str(), task.ended_ms())?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl Copies for Store {
    async fn due_mirrors(&self, now_ms: i64, lease_ms: i64, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        // Looked for without a write first: the writer is woken only when a copy is due.
        let any_due = {
            let view = self.view()?;
            let pending = view.open_table(PENDING_MIRRORS)?;
            pending.iter()?.any(|row| row.is_ok_and(|(_, due_ms)| due_ms.value() <= now_ms))
        };
        if !any_due {
            return Ok(Vec::new());
        }
        // The lease need not be durable: a crash only makes the copies due again sooner.
        self.queue(Commit::Deferred, move |tx: &Tx| {
            let mut pending = tx.open_table(PENDING_MIRRORS)?;
            let mut due = Vec::new();
            for row in pending.iter()? {
                let (task_id, due_ms) = row?;
                if due_ms.value() <= now_ms {
                    due.push(task_id.value().to_string());
                    if due.len() == limit {
                        break;
                    }
                }
            }
            let tasks = tx.open_table(TASKS)?;
            let mut records = Vec::with_capacity(due.len());
            for task_id in due {
                pending.insert(task_id.as_str(), now_ms.saturating_add(lease_ms))?;
                if let Some(stored) = tasks.get(task_id.as_str())? {
                    records.push(decode::<TaskRecord>(stored.value())?);
                }
            }
            Ok(records)
        })
        .await
    }

    async fn renew_mirrors(&self, task_ids: Vec<String>, until_ms: i64) -> Result<(), StoreError> {
        self.queue(Commit::Deferred, move |tx: &Tx| {
            let mut pending = tx.open_table(PENDING_MIRRORS)?;
            for task_id in &task_ids {
                if pending.get(task_id.as_str())?.is_some() {
                    pending.insert(task_id.as_str(), until_ms)?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn save_mirror(
        &self,
        task_id: &str,
        mirror: Mirror,
        results: Vec<TaskResult>,
        retry_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        let task_id = task_id.to_string();
        self.queue(Commit::Durable, move |tx: &Tx| {
            let mut tasks = tx.open_table(TASKS)?;
            let Some(mut task) = tasks.get(task_id.as_str())?.map(|v| decode::<TaskRecord>(v.value())).transpose()?
            else {
                return Ok(());
            };
            task.mirror = Some(mirror);
            task.results = results;
            tasks.insert(task_id.as_str(), encode(&task)?.as_slice())?;
            let mut pending = tx.open_table(PENDING_MIRRORS)?;
            match retry_ms {
                Some(at) => pending.insert(task_id.as_str(), at),
                None => pending.remove(task_id.as_str()),
            }
        })
        .await
    }
}
