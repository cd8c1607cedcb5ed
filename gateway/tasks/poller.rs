//! The poller: owns every in-flight task until it reaches a terminal state.
//!
//! Tasks wait in a min-heap keyed by their next due time. The interval grows with a task's age (a job that
//! has run for minutes will not finish in the next second), queries are rate-limited per region to the
//! upstream's per-key limit times the region's keys, transient errors back off without failing the task,
//! and a task past its model's deadline ends in `timeout`. On start the heap is refilled from the store's
//! in-flight index, so a restart resumes every task.

use super::results::{Observed, observe, status_of};
use super::{fail, finish, now_ms};
use crate::catalog::ModelSpec;
use crate::config::PollerConfig;
use crate::state::AppState;
use crate::store::{TaskError, TaskStatus};
use crate::upstream::client;
use actix_web::web;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// A task without an upstream id this long after creation was interrupted mid-submission.
const ORPHAN_AFTER_MS: i64 = 60_000;

/// Handle for scheduling tasks; cheap to share.
pub struct Poller {
    tx: mpsc::UnboundedSender<(i64, String)>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<(i64, String)>>>,
}

impl Default for Poller {
    fn default() -> Poller {
        let (tx, rx) = mpsc::unbounded_channel();
        Poller { tx, rx: Mutex::new(Some(rx)) }
    }
}

impl Poller {
    /// Asks the poller to look at `task_id` at `due_ms`.
    pub fn schedule(&self, task_id: &str, due_ms: i64) {
        let _ = self.tx.send((due_ms, task_id.to_string()));
    }
}

/// The first query waits for part of the model's expected run time.
pub fn first_interval_ms(model: &ModelSpec, config: &PollerConfig) -> i64 {
    let expected = model.expected_seconds as i64 * 1000;
    (expected / 4).clamp(config.min_interval_ms as i64, config.max_interval_ms as i64)
}

/// Later queries: a fifth of the task's age, within the configured bounds.
fn next_interval_ms(age_ms: i64, config: &PollerConfig) -> i64 {
    (age_ms / 5).clamp(config.min_interval_ms as i64, config.max_interval_ms as i64)
}

/// Runs until the process ends. Call once, on the actix system.
pub async fn run(state: web::Data<AppState>) {
    let Some(mut rx) = state.poller.rx.lock().ok().and_then(|mut r| r.take()) else {
        return;
    };
    let limiters = region_limiters(&state);
    let mut heap: BinaryHeap<Reverse<(i64, String)>> = BinaryHeap::new();
    match state.store.in_flight() {
        Ok(tasks) => {
            tracing::info!(tasks = tasks.len(), "poller resuming in-flight tasks");
            heap.extend(tasks.into_iter().map(|t| Reverse((t.next_poll_ms, t.task_id))));
        }
        Err(e) => tracing::error!(error = %e, "poller could not read in-flight tasks"),
    }
    // The latest due time per task: a heap entry with an older due time is stale and skipped, so a task
    // scheduled twice (start-up load and a fresh forward) is still checked by one loop only.
    let mut due_of: HashMap<String, i64> = HashMap::new();
    for Reverse((due, id)) in heap.iter() {
        due_of.insert(id.clone(), *due);
    }
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Option<i64>)>();
    let mut busy: HashSet<String> = HashSet::new();
    loop {
        let now = now_ms();
        while heap.peek().is_some_and(|Reverse((due, _))| *due <= now) {
            let Some(Reverse((due, id))) = heap.pop() else { break };
            if due_of.get(&id) != Some(&due) || !busy.insert(id.clone()) {
                continue;
            }
            crate::metrics::poll_lag(now - due);
            let (state, limiters, done) = (state.clone(), limiters.clone(), done_tx.clone());
            actix_web::rt::spawn(async move {
                let next = check(&state, &limiters, &id).await;
                let _ = done.send((id, next));
            });
        }
        let wait = heap.peek().map_or(500, |Reverse((due, _))| (due - now_ms()).clamp(5, 500));
        tokio::select! {
            received = rx.recv() => match received {
                Some((due, id)) => {
                    due_of.insert(id.clone(), due);
                    heap.push(Reverse((due, id)));
                }
                None => return,
            },
            finished = done_rx.recv() => if let Some((id, next)) = finished {
                busy.remove(&id);
                match next {
                    Some(due) => {
                        due_of.insert(id.clone(), due);
                        heap.push(Reverse((due, id)));
                    }
                    None => {
                        due_of.remove(&id);
                    }
                }
            },
            _ = actix_web::rt::time::sleep(std::time::Duration::from_millis(wait as u64)) => {}
        }
    }
}

type Limiters = std::sync::Arc<BTreeMap<String, DefaultDirectRateLimiter>>;

fn region_limiters(state: &AppState) -> Limiters {
    let per_key = state.config.poller.queries_per_second.max(1);
    let limiters = state
        .upstreams
        .regions()
        .map(|(region, upstream)| {
            let rate = NonZeroU32::new(per_key * upstream.key_count().max(1) as u32).unwrap_or(NonZeroU32::MIN);
            // Burst of one: the query rate never exceeds the limit even momentarily.
            (region.clone(), RateLimiter::direct(Quota::per_second(rate).allow_burst(NonZeroU32::MIN)))
        })
        .collect();
    std::sync::Arc::new(limiters)
}

/// Looks at one task once; returns when to look again, or `None` once it has ended.
async fn check(state: &web::Data<AppState>, limiters: &Limiters, task_id: &str) -> Option<i64> {
    let config = &state.config.poller;
    let task = match state.store.task(task_id) {
        Ok(Some(task)) if !task.status.is_terminal() => task,
        Ok(_) => return None,
        Err(e) => {
            tracing::error!(task_id, error = %e, "poller could not read task");
            return Some(now_ms() + config.max_interval_ms as i64);
        }
    };
    let now = now_ms();
    if now >= task.deadline_ms {
        let error = TaskError {
            code: "timeout".into(),
            message: "The task did not finish before its model's deadline.".into(),
        };
        let _ = finish(state, task_id, TaskStatus::Timeout, move |t| t.error = Some(error)).await;
        return None;
    }
    let Some(upstream_id) = task.upstream_task_id.clone() else {
        if now - task.created_ms > ORPHAN_AFTER_MS {
            let _ = fail(
                state,
                task_id,
                "submission_interrupted",
                "The gateway stopped while submitting this task; nothing was charged.",
            )
            .await;
            return None;
        }
        return Some(task.created_ms + ORPHAN_AFTER_MS + 1);
    };
    let Some(model) = ModelSpec::find(&task.model) else {
        let _ = fail(state, task_id, "model_removed", "The task's model is no longer in the spec.").await;
        return None;
    };
    let Ok(upstream) = state.upstreams.region(model.region) else {
        return Some(now + config.max_interval_ms as i64);
    };
    if let Some(limiter) = limiters.get(model.region) {
        limiter.until_ready().await;
    }
    crate::metrics::upstream_call("query");
    let answer = match client::query(upstream, &upstream_id).await {
        Ok(answer) => answer,
        Err(e) => {
            // Never fail a task over a query error: ask again later; the deadline bounds the wait.
            crate::metrics::upstream_error("query");
            tracing::warn!(task_id, error = %e, "task query failed; will retry");
            return Some(now_ms() + next_interval_ms(now_ms() - task.created_ms, config).max(2000));
        }
    };
    let observed = observe(&answer, model.media);
    failpoint_before_settle(&observed);
    let status = status_of(&observed);
    let next = now_ms() + next_interval_ms(now_ms() - task.created_ms, config);
    match observed {
        Observed::Pending => Some(next),
        Observed::Running if task.status == TaskStatus::Running => Some(next),
        Observed::Running => {
            let store = state.store.clone();
            let id = task_id.to_string();
            let _ = web::block(move || {
                store.update_task(&id, &[TaskStatus::Queued], move |t| {
                    t.status = TaskStatus::Running;
                    t.next_poll_ms = next;
                    t.updated_ms = now_ms();
                })
            })
            .await;
            Some(next)
        }
        Observed::Succeeded { results, usage } => {
            let _ = finish(state, task_id, status, move |t| {
                t.results = results;
                t.usage = usage;
            })
            .await;
            None
        }
        Observed::Failed(error) => {
            let _ = finish(state, task_id, status, move |t| t.error = Some(error)).await;
            None
        }
        Observed::Cancelled => {
            let error = TaskError { code: "cancelled".into(), message: "The upstream cancelled the task.".into() };
            let _ = finish(state, task_id, status, move |t| t.error = Some(error)).await;
            None
        }
    }
}

/// `MEDIAGATE_FAILPOINT=before-settle` aborts the process after the upstream reported a terminal state and
/// before the store records it: the crash window that exactly-once settlement must survive (tested).
fn failpoint_before_settle(observed: &Observed) {
    let terminal = !matches!(observed, Observed::Pending | Observed::Running);
    if terminal && std::env::var("MEDIAGATE_FAILPOINT").is_ok_and(|f| f == "before-settle") {
        std::process::abort();
    }
}
