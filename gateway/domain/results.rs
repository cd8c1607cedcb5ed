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

/// An item of a result list the upstream could not make: the task succeeds with the others, and the client
/// is told which one failed and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FailedItem {
    /// Its place in the list the upstream answered (from 0), counting the items made.
    pub index: usize,
    pub code: String,
    pub message: String,
}

impl FailedItem {
    /// The images a success left out of its list: those past the `delivered` of the `asked`.
    pub fn left_out(asked: usize, delivered: usize) -> Vec<FailedItem> {
        let message =
            format!("The upstream delivered {delivered} of the {asked} images asked for; this one was not made.");
        (delivered..asked)
            .map(|index| FailedItem { index, code: "NotDelivered".into(), message: message.clone() })
            .collect()
    }
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

#[cfg(test)]
mod tests {
    use super::FailedItem;

    #[test]
    fn the_images_a_success_left_out_are_named_from_where_the_list_stops() {
        for (asked, delivered, indexes) in
            [(3, 2, vec![2]), (4, 1, vec![1, 2, 3]), (2, 2, vec![]), (1, 2, vec![]), (0, 1, vec![])]
        {
            let missing = FailedItem::left_out(asked, delivered);
            assert_eq!(
                missing.iter().map(|m| m.index).collect::<Vec<_>>(),
                indexes,
                "{asked} asked, {delivered} delivered"
            );
            assert!(
                missing
                    .iter()
                    .all(|m| m.code == "NotDelivered" && m.message.contains(&format!("{delivered} of the {asked}")))
            );
        }
    }
}
