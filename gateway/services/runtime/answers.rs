//! Answers to task reads, and a bounded memory of the finished ones. A task that has reached a terminal
//! state never changes again (but for its results' copies, once), so its answer is rendered once and kept
//! (up to a byte budget) instead of being read from the store, decoded and rendered on every read.

use crate::domain::results::MirrorState;
use crate::domain::tasks::TaskRecord;
use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;
use std::sync::Arc;

/// The body of `GET /v1/tasks/{id}` for one task, and whose task it is.
pub struct TaskAnswer {
    pub account: String,
    pub body: Bytes,
    /// The body carries a projection computed at read time (equivalent usage), which no cache between the
    /// gateway and its client may keep.
    pub no_store: bool,
}

/// Finished tasks' answers, by task id, evicted by S3-FIFO once their bytes exceed the budget.
pub struct FinishedAnswers(Option<Cache<String, Arc<TaskAnswer>, ByBytes>>);

impl FinishedAnswers {
    /// Keeps up to `budget` bytes of answers; 0 keeps none.
    pub fn new(budget: u64) -> FinishedAnswers {
        const TYPICAL_ANSWER_BYTES: u64 = 1024;
        FinishedAnswers(
            (budget > 0)
                .then(|| Cache::with_weighter((budget / TYPICAL_ANSWER_BYTES).max(1) as usize, budget, ByBytes)),
        )
    }

    pub fn get(&self, task_id: &str) -> Option<Arc<TaskAnswer>> {
        self.0.as_ref()?.get(task_id)
    }

    /// Keeps the answer of `task` if it is finished, which the caller has made sure is durable, and its
    /// results will not change (no copy of them under way).
    pub fn keep(&self, task: &TaskRecord, answer: Arc<TaskAnswer>) {
        let settled = task.mirror.as_ref().is_none_or(|m| m.state != MirrorState::Pending);
        if let Some(cache) = &self.0
            && task.status.is_terminal()
            && settled
        {
            cache.insert(task.task_id.clone(), answer);
        }
    }
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<String, Arc<TaskAnswer>> for ByBytes {
    fn weight(&self, task_id: &String, answer: &Arc<TaskAnswer>) -> u64 {
        (task_id.len() + answer.account.len() + answer.body.len()) as u64
    }
}
