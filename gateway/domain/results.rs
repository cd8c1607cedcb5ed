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

    /// Records an attempt at the copy made at `now_ms`, and says when to try again (`None`: no more, it is
    /// mirrored or given up). A failed copy uses an attempt and waits the schedule's next delay, failing for
    /// good once it has none left; a storage that cannot be written says nothing of the copy, which waits
    /// the first delay without using an attempt.
    pub fn record_attempt(&mut self, attempt: CopyAttempt, now_ms: i64, retry_delays_ms: &[u64]) -> Option<i64> {
        let after = |delay: u64| now_ms.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
        match attempt {
            CopyAttempt::StorageDown(error) => {
                self.error = Some(error);
                Some(after(retry_delays_ms.first().copied().unwrap_or(1_000)))
            }
            CopyAttempt::Copied(files) => {
                self.attempts = self.attempts.saturating_add(1);
                (self.state, self.files, self.error) = (MirrorState::Mirrored, files, None);
                None
            }
            CopyAttempt::Failed(error) => {
                self.attempts = self.attempts.saturating_add(1);
                self.error = Some(error);
                let delay = retry_delays_ms.get(self.attempts as usize - 1).copied().map(after);
                if delay.is_none() {
                    self.state = MirrorState::Failed;
                }
                delay
            }
        }
    }
}

/// What one attempt at a task's copy came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CopyAttempt {
    /// Every file copied.
    Copied(Vec<MirroredFile>),
    /// A file could not be copied (the upstream's URL failed, the storage refused it).
    Failed(String),
    /// The storage could not be reached.
    StorageDown(String),
}

#[cfg(test)]
mod tests {
    use super::{CopyAttempt, FailedItem, Mirror, MirrorState, MirroredFile};

    /// Each row: the attempts made, one a second from 1 s, against a schedule of two delays; the state,
    /// attempts used and next due time after the last.
    #[test]
    fn a_copy_retries_on_schedule_and_waits_out_a_storage_outage_without_using_attempts() {
        let file = MirroredFile { key: "k".into(), size: 1, content_type: "image/png".into(), sha256: "00".into() };
        let (copied, failed, down) = (
            CopyAttempt::Copied(vec![file]),
            CopyAttempt::Failed("the source answered 404".into()),
            CopyAttempt::StorageDown("no answer".into()),
        );
        let table: Vec<(Vec<&CopyAttempt>, MirrorState, u32, Option<i64>)> = vec![
            (vec![&copied], MirrorState::Mirrored, 1, None),
            (vec![&failed], MirrorState::Pending, 1, Some(1_000 + 10_000)),
            (vec![&failed, &failed], MirrorState::Pending, 2, Some(2_000 + 60_000)),
            (vec![&failed, &failed, &failed], MirrorState::Failed, 3, None),
            (vec![&down], MirrorState::Pending, 0, Some(1_000 + 10_000)),
            (vec![&down, &down, &down, &down], MirrorState::Pending, 0, Some(4_000 + 10_000)),
            (vec![&failed, &down, &failed, &copied], MirrorState::Mirrored, 3, None),
        ];
        for (attempts, state, used, next) in table {
            let mut mirror = Mirror {
                state: MirrorState::Pending,
                sources: Vec::new(),
                expires_ms: 0,
                files: Vec::new(),
                attempts: 0,
                error: None,
            };
            let mut due = None;
            for (i, attempt) in attempts.iter().enumerate() {
                due = mirror.record_attempt((*attempt).clone(), 1_000 * (i as i64 + 1), &[10_000, 60_000]);
            }
            let case = format!("{attempts:?}");
            assert_eq!((mirror.state, mirror.attempts, due), (state, used, next), "{case}");
            assert_eq!(mirror.error.is_none(), state == MirrorState::Mirrored, "{case}");
        }
    }

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
