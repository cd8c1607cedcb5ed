//! A task's results: its result files, and their copies in the gateway's own object storage. A task that
//! succeeds with results is marked pending in the write that ends it, and every backend queues such a task
//! in that same write (`TaskRecord::copy_queued`), so a crash never loses the copy.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// One result file of a finished task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskResult {
    pub url: String,
    #[serde(rename = "type")]
    pub kind: Cow<'static, str>,
    pub expires_at: String,
}

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
    /// The file of result `index`, once mirrored.
    pub fn file(&self, index: usize) -> Option<&MirroredFile> {
        (self.state == MirrorState::Mirrored).then(|| self.files.get(index)).flatten()
    }
}
