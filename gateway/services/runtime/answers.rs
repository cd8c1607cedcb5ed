//! Answers to task reads, and a bounded memory of the finished ones. A task that has reached a terminal
//! state never changes again (but for its results' copies, once), so its answer is rendered once and kept
//! (up to a byte budget) instead of being read from the store, decoded and rendered on every read.

use crate::domain::clock::now_ms;
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
    /// When its task ended (epoch ms), if it has: a kept answer is not served past its task's retention.
    pub ended_ms: Option<i64>,
}

/// Finished tasks' answers, by task id, evicted by S3-FIFO once their bytes exceed the budget.
pub struct FinishedAnswers {
    cache: Option<Cache<String, Arc<TaskAnswer>, ByBytes>>,
    /// How long a finished task is kept (retention): past it, the task may be purged from the store (by
    /// any replica), and its answer is read from the store again.
    kept_ms: i64,
}

impl FinishedAnswers {
    /// Keeps up to `budget` bytes of answers (0 keeps none) of tasks retention keeps `kept_ms`.
    pub fn new(budget: u64, kept_ms: i64) -> FinishedAnswers {
        const TYPICAL_ANSWER_BYTES: u64 = 1024;
        let cache = (budget > 0)
            .then(|| Cache::with_weighter((budget / TYPICAL_ANSWER_BYTES).max(1) as usize, budget, ByBytes));
        FinishedAnswers { cache, kept_ms }
    }

    pub fn get(&self, task_id: &str) -> Option<Arc<TaskAnswer>> {
        let answer = self.cache.as_ref()?.get(task_id)?;
        let purgeable = answer.ended_ms.is_some_and(|ended| ended < now_ms().saturating_sub(self.kept_ms));
        (!purgeable).then_some(answer)
    }

    /// Keeps the answer of `task` if it is finished, which the caller has made sure is durable, and its
    /// results will not change (no copy of them under way).
    pub fn keep(&self, task: &TaskRecord, answer: Arc<TaskAnswer>) {
        let settled = task.mirror.as_ref().is_none_or(|m| m.state != MirrorState::Pending);
        if let Some(cache) = &self.cache
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
