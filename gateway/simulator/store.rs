//! The simulator's tasks. A task's state is a function of its stored creation time, its hooks and a cancel
//! mark, so a restarted simulator answers for old tasks exactly where they would have been.

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("sim_tasks");

/// What the simulator remembers of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimTask {
    pub task_id: String,
    pub request_id: String,
    pub model: String,
    pub region: String,
    pub created_ms: i64,
    /// Milliseconds spent PENDING, then RUNNING; `None` runs forever.
    pub pending_ms: i64,
    pub running_ms: Option<i64>,
    pub fail_code: Option<String>,
    pub cancelled_ms: Option<i64>,
    /// The request, for the success payload (prompt, duration, resolution, n, ...).
    pub input: serde_json::Value,
    pub parameters: serde_json::Value,
    pub hooks: Vec<String>,
}

/// Persisted in redb when the simulator has a data dir, else kept in memory.
pub enum TaskStore {
    Disk(Database),
    Memory(Mutex<HashMap<String, SimTask>>),
}

impl TaskStore {
    pub fn open(dir: Option<&Path>) -> Result<TaskStore, String> {
        let Some(dir) = dir else { return Ok(TaskStore::Memory(Mutex::new(HashMap::new()))) };
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let db = Database::create(dir.join("simulator.redb")).map_err(|e| e.to_string())?;
        let tx = db.begin_write().map_err(|e| e.to_string())?;
        tx.open_table(TASKS).map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
        Ok(TaskStore::Disk(db))
    }

    pub fn put(&self, task: &SimTask) -> Result<(), String> {
        match self {
            TaskStore::Memory(map) => {
                map.lock().unwrap_or_else(|e| e.into_inner()).insert(task.task_id.clone(), task.clone());
                Ok(())
            }
            TaskStore::Disk(db) => {
                let bytes = serde_json::to_vec(task).map_err(|e| e.to_string())?;
                let tx = db.begin_write().map_err(|e| e.to_string())?;
                tx.open_table(TASKS)
                    .map_err(|e| e.to_string())?
                    .insert(task.task_id.as_str(), bytes.as_slice())
                    .map_err(|e| e.to_string())?;
                tx.commit().map_err(|e| e.to_string())
            }
        }
    }

    pub fn get(&self, task_id: &str) -> Option<SimTask> {
        match self {
            TaskStore::Memory(map) => map.lock().unwrap_or_else(|e| e.into_inner()).get(task_id).cloned(),
            TaskStore::Disk(db) => {
                let tx = db.begin_read().ok()?;
                let table = tx.open_table(TASKS).ok()?;
                let value = table.get(task_id).ok()??;
                serde_json::from_slice(value.value()).ok()
            }
        }
    }

    pub fn all(&self) -> Vec<SimTask> {
        match self {
            TaskStore::Memory(map) => map.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect(),
            TaskStore::Disk(db) => {
                let Ok(tx) = db.begin_read() else { return Vec::new() };
                let Ok(table) = tx.open_table(TASKS) else { return Vec::new() };
                let Ok(rows) = redb::ReadableTable::iter(&table) else { return Vec::new() };
                rows.filter_map(|r| r.ok()).filter_map(|(_, v)| serde_json::from_slice(v.value()).ok()).collect()
            }
        }
    }
}
