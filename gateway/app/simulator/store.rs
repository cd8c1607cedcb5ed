//! The simulator's tasks. A task's state is a function of its stored creation time, its hooks and a cancel
//! mark, so a restarted simulator answers for old tasks exactly where they would have been.
//!
//! Beside the tasks sits the list index (`index.rs`), kept in step by `put`, so a task list costs a binary
//! search and a page however many tasks the simulator holds.

use super::index::ListIndex;
use super::task::SimTask;
use redb::{Database, ReadableDatabase, TableDefinition};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::Mutex;

const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("sim_tasks");

/// Persisted in redb when the simulator has a data dir, else kept in memory; indexed for listing either way.
pub struct TaskStore {
    kept: Kept,
    index: Mutex<ListIndex>,
}

enum Kept {
    Disk(Database),
    Memory(Shards),
}

/// Tasks in memory, spread over [`Shards::COUNT`] maps by task id: a map grown by doubling moves every
/// task it holds under its lock, which at a few hundred thousand tasks held every create and query for
/// hundreds of milliseconds; a shard moves a 64th of them.
struct Shards(Vec<Mutex<HashMap<String, SimTask>>>);

impl Shards {
    const COUNT: usize = 64;

    fn new() -> Shards {
        Shards((0..Self::COUNT).map(|_| Mutex::default()).collect())
    }

    fn of(&self, task_id: &str) -> std::sync::MutexGuard<'_, HashMap<String, SimTask>> {
        let shard = foldhash::fast::FixedState::default().hash_one(task_id) as usize % Self::COUNT;
        self.0[shard].lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl TaskStore {
    pub fn open(dir: Option<&Path>) -> Result<TaskStore, String> {
        let Some(dir) = dir else {
            return Ok(TaskStore { kept: Kept::Memory(Shards::new()), index: Mutex::default() });
        };
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let db = Database::create(dir.join("simulator.redb")).map_err(|e| e.to_string())?;
        let tx = db.begin_write().map_err(|e| e.to_string())?;
        tx.open_table(TASKS).map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
        let store = TaskStore { kept: Kept::Disk(db), index: Mutex::default() };
        // The index lives in memory only: rebuilt from the tasks once, at start.
        let mut index = ListIndex::default();
        for task in store.all() {
            index.put(&task);
        }
        *store.index() = index;
        Ok(store)
    }

    /// The list index, for reading a page.
    pub fn index(&self) -> std::sync::MutexGuard<'_, ListIndex> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn put(&self, task: &SimTask) -> Result<(), String> {
        match &self.kept {
            Kept::Memory(shards) => {
                shards.of(&task.task_id).insert(task.task_id.clone(), task.clone());
            }
            Kept::Disk(db) => {
                let bytes = serde_json::to_vec(task).map_err(|e| e.to_string())?;
                let tx = db.begin_write().map_err(|e| e.to_string())?;
                tx.open_table(TASKS)
                    .map_err(|e| e.to_string())?
                    .insert(task.task_id.as_str(), bytes.as_slice())
                    .map_err(|e| e.to_string())?;
                tx.commit().map_err(|e| e.to_string())?;
            }
        }
        self.index().put(task);
        Ok(())
    }

    pub fn get(&self, task_id: &str) -> Option<SimTask> {
        match &self.kept {
            Kept::Memory(shards) => shards.of(task_id).get(task_id).cloned(),
            Kept::Disk(db) => {
                let tx = db.begin_read().ok()?;
                let table = tx.open_table(TASKS).ok()?;
                let value = table.get(task_id).ok()??;
                serde_json::from_slice(value.value()).ok()
            }
        }
    }

    fn all(&self) -> Vec<SimTask> {
        match &self.kept {
            Kept::Memory(shards) => {
                let mut all = Vec::new();
                for shard in &shards.0 {
                    all.extend(shard.lock().unwrap_or_else(|e| e.into_inner()).values().cloned());
                }
                all
            }
            Kept::Disk(db) => {
                let Ok(tx) = db.begin_read() else { return Vec::new() };
                let Ok(table) = tx.open_table(TASKS) else { return Vec::new() };
                let Ok(rows) = redb::ReadableTable::iter(&table) else { return Vec::new() };
                rows.filter_map(|r| r.ok()).filter_map(|(_, v)| serde_json::from_slice(v.value()).ok()).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: usize) -> SimTask {
        SimTask {
            task_id: format!("t{id}"),
            request_id: format!("r{id}"),
            model: "m".into(),
            region: "cn-beijing".into(),
            account: 0,
            created_ms: id as i64,
            pending_ms: 0,
            running_ms: Some(0),
            fail_code: None,
            cancelled_ms: None,
            input: serde_json::Value::Null,
            parameters: serde_json::Value::Null,
            hooks: Vec::new(),
        }
    }

    #[test]
    fn tasks_in_memory_are_found_by_id_whichever_shard_holds_them() {
        let store = TaskStore::open(None).unwrap_or_else(|e| panic!("{e}"));
        for id in 0..500 {
            store.put(&task(id)).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut cancelled = task(7);
        cancelled.cancelled_ms = Some(8);
        store.put(&cancelled).unwrap_or_else(|e| panic!("{e}"));
        for id in 0..500 {
            assert_eq!(store.get(&format!("t{id}")).map(|t| t.created_ms), Some(id as i64));
        }
        assert_eq!(store.get("t7").and_then(|t| t.cancelled_ms), Some(8));
        assert!(store.get("t500").is_none());
        assert_eq!(store.all().len(), 500);
        // Spread over the shards, not all in one.
        let Kept::Memory(shards) = &store.kept else { panic!("a store without a data dir is kept in memory") };
        let used = shards.0.iter().filter(|shard| !shard.lock().unwrap_or_else(|e| e.into_inner()).is_empty());
        assert!(used.count() > Shards::COUNT / 2);
    }
}
