//! Result mirroring, as a task records it: the copies of its result files in the gateway's own object
//! storage. A task that succeeds with results is marked pending in the write that ends it, and every
//! backend queues such a task in that same write (`Mirror::queued`), so a crash never loses the copy.

use crate::domain::tasks::{TaskRecord, TaskResult};
use serde::{Deserialize, Serialize};

/// Where a task's copies stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorState {
    /// Not copied yet; the result links stream from the upstream meanwhile.
    Pending,
    /// Every file is in the gateway's storage.
    Mirrored,
    /// The copy could not be made: the results point at the upstream's files again.
    Failed,
}

impl MirrorState {
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorState::Pending => "pending",
            MirrorState::Mirrored => "mirrored",
            MirrorState::Failed => "failed",
        }
    }
}

/// One result file as copied.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MirroredFile {
    /// Its object's path in the storage.
    pub key: String,
    pub size: u64,
    pub content_type: String,
    /// Lowercase hex.
    pub sha256: String,
}

/// A task's mirroring.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Mirror {
    pub state: MirrorState,
    /// The results as the upstream gave them (its URLs and their expiry).
    pub sources: Vec<TaskResult>,
    /// When the gateway's copies (and its result links) expire (epoch ms).
    pub expires_ms: i64,
    /// Once mirrored: each result's file, in the results' order.
    #[serde(default)]
    pub files: Vec<MirroredFile>,
    #[serde(default)]
    pub attempts: u32,
    /// Why the last attempt failed.
    #[serde(default)]
    pub error: Option<String>,
}

impl Mirror {
    /// Whether the write ending `task` queues its copy.
    pub fn queued(task: &TaskRecord) -> bool {
        task.status.is_terminal() && task.mirror.as_ref().is_some_and(|m| m.state == MirrorState::Pending)
    }

    /// The file of result `index`, once mirrored.
    pub fn file(&self, index: usize) -> Option<&MirroredFile> {
        (self.state == MirrorState::Mirrored).then(|| self.files.get(index)).flatten()
    }
}
