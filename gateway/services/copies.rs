//! Result mirroring: each file of a succeeded task is copied from the upstream into the gateway's own
//! storage (`files`), so results outlive the upstream's signed URLs.
//!
//! The write that makes a task `success` marks its mirroring pending (`runtime::copies::Adoption`) and swaps
//! its result URLs for the gateway's signed links (`runtime::links`), and the store queues the copy in that
//! same write. The worker
//! here takes due copies, streams each file in (hashing it on the way), and writes down the files (size,
//! content type, SHA-256), or retries with backoff; a copy that never succeeds gives the results their
//! upstream URLs back, and the task says so. Mirroring never touches billing. The sweeper deletes copies
//! past their expiry and reports what is stored.

use crate::domain::catalog::ModelSpec;
use crate::domain::clock::now_ms;
use crate::domain::errors::{Code, Problem};
use crate::domain::results::{CopyAttempt, Mirror, MirrorState, MirroredFile};
use crate::domain::tasks::TaskRecord;
use crate::ports::files::{ByteStream, FileError, PutError};
use crate::ports::upstream::Fetched;
use crate::services::runtime::Gateway;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How often due copies are looked for.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// Copies under way at once, at most.
const COPIES_AT_ONCE: usize = 16;
/// How long the queue keeps a copy taken by a process from the others; renewed while the copy runs, so a
/// copy cut short by a crash is taken again this long after.
const LEASE_MS: i64 = 30_000;
/// How often the leases of the copies under way are renewed.
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often expired copies are deleted.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// Copies due results and sweeps expired copies until the process ends. Call once, on the actix system.
/// With mirroring switched off the copies already queued are still made: their tasks' links promise them.
pub async fn run(state: Arc<Gateway>) {
    tokio::task::spawn_local(sweep(state.clone()));
    let under_way: Rc<RefCell<HashSet<String>>> = Rc::default();
    tokio::task::spawn_local(renew(state.clone(), under_way.clone()));
    // A copy that ends makes room for the next at once: copies keep pace with the tasks that end, rather
    // than COPIES_AT_ONCE per look.
    let room_made = Rc::new(tokio::sync::Notify::new());
    loop {
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            () = room_made.notified() => {}
        }
        let room = COPIES_AT_ONCE.saturating_sub(under_way.borrow().len());
        if room == 0 {
            continue;
        }
        let due = match state.store.due_mirrors(now_ms(), LEASE_MS, room).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the result copies due");
                continue;
            }
        };
        for task in due {
            if under_way.borrow_mut().insert(task.task_id.clone()) {
                let (state, under_way, room_made) = (state.clone(), under_way.clone(), room_made.clone());
                tokio::task::spawn_local(async move {
                    let task_id = task.task_id.clone();
                    let span = crate::support::telemetry::step("job.copy", task.trace.as_deref());
                    attempt(&state, task).instrument(span).await;
                    under_way.borrow_mut().remove(&task_id);
                    room_made.notify_one();
                });
            }
        }
    }
}

/// Keeps the copies under way leased to this process.
async fn renew(state: Arc<Gateway>, under_way: Rc<RefCell<HashSet<String>>>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let task_ids: Vec<String> = under_way.borrow().iter().cloned().collect();
        if !task_ids.is_empty()
            && let Err(e) = state.store.renew_mirrors(task_ids, now_ms().saturating_add(LEASE_MS)).await
        {
            tracing::warn!(error = %e, "could not renew the leases of the result copies under way");
        }
    }
}

/// One attempt at copying a task's results, and what came of it written down.
async fn attempt(state: &Gateway, task: TaskRecord) {
    // Queued only with its mirroring pending, and taken off the queue in the write that settles it.
    let Some(mut mirror) = task.mirror.clone().filter(|m| m.state == MirrorState::Pending) else { return };
    // A copy about to be made, after the write that ended its task: the crash window a queued copy must
    // survive (tested).
    crate::support::failpoint::reached("before-mirror");
    let mut results = task.results.clone();
    let attempt = copy_all(state, &task, &mirror).await;
    match &attempt {
        CopyAttempt::Copied(files) => {
            let bytes: u64 = files.iter().map(|f| f.size).sum();
            crate::support::metrics::results_mirrored(files.len() as u64, bytes);
            tracing::info!(task_id = task.task_id, files = files.len(), bytes, "results mirrored");
        }
        CopyAttempt::Failed(error) => {
            tracing::warn!(task_id = task.task_id, attempt = mirror.attempts + 1, error, "could not mirror results");
        }
        CopyAttempt::StorageDown(error) => {
            tracing::warn!(
                task_id = task.task_id,
                error,
                "the result storage cannot be written; the copy waits for it"
            );
        }
    }
    let retry_ms = mirror.record_attempt(attempt, now_ms(), &state.settings.copy_retry_delays_ms);
    if mirror.state == MirrorState::Failed {
        crate::support::metrics::results_mirror_failed(mirror.sources.len() as u64);
        // Given up: the task's results point at the upstream's own URLs again, while they last.
        results.clone_from(&mirror.sources);
    }
    // Not written (the store is down): the copy stays queued, and is made again once its lease ends.
    if let Err(e) = state.store.save_mirror(&task.task_id, mirror, results, retry_ms).await {
        tracing::warn!(task_id = task.task_id, error = %e, "could not record a result copy; it will be made again");
    }
}

/// Copies every result file; what came of it (never `Copied` with a file missing).
async fn copy_all(state: &Gateway, task: &TaskRecord, mirror: &Mirror) -> CopyAttempt {
    let files = &state.copies.files;
    let mut copied = Vec::with_capacity(mirror.sources.len());
    for (index, source) in mirror.sources.iter().enumerate() {
        let fetched = match fetch(state, task, &source.url, None).await {
            Ok(fetched) if (200..300).contains(&fetched.status) => fetched,
            Ok(fetched) => {
                return CopyAttempt::Failed(format!("result {index}: the upstream answered {}", fetched.status));
            }
            Err(e) => return CopyAttempt::Failed(e),
        };
        let content_type = fetched.content_type.unwrap_or_else(|| default_content_type(&source.kind).to_string());
        let path = files.path(&task.task_id, index, mirror.expires_ms);
        let stored = match files.put(&path, &content_type, fetched.body).await {
            Ok(stored) => stored,
            Err(PutError::Source(e) | PutError::Refused(e)) => {
                return CopyAttempt::Failed(format!("result {index}: {e}"));
            }
            Err(PutError::Unavailable(e)) => return CopyAttempt::StorageDown(format!("result {index}: {e}")),
        };
        copied.push(MirroredFile { key: path, size: stored.size, content_type, sha256: stored.sha256 });
    }
    CopyAttempt::Copied(copied)
}

/// One of `task`'s result files as the upstream of its model's region serves it (its `range`, if asked).
pub async fn fetch(state: &Gateway, task: &TaskRecord, url: &str, range: Option<&str>) -> Result<Fetched, String> {
    let region = ModelSpec::find(&task.model).map(|m| m.region).ok_or("The task's model is no longer served.")?;
    state.upstream.fetch(region, url, range).await.map_err(|e| format!("no answer from the upstream: {e}"))
}

/// A result's stored copy, or the bytes `first..=last` of it.
pub async fn read(state: &Gateway, file: &MirroredFile, range: Option<(u64, u64)>) -> Result<ByteStream, Problem> {
    state.copies.files.get(&file.key, range).await.map_err(|e| match e {
        FileError::NotFound => Problem::new(Code::result_expired, "The result's copy is no longer stored."),
        // Logged whole, answered without the storage's details (paths, buckets): a retry may succeed.
        FileError::Unavailable(detail) => Problem {
            detail: Some(format!("a result's copy cannot be read: {detail}")),
            ..Problem::new(Code::storage_unavailable, "The result's copy cannot be read right now; retry later.")
                .with_retry_after(5)
        },
    })
}

/// The content type of a result whose upstream named none, by its kind.
pub fn default_content_type(kind: &str) -> &'static str {
    if kind == "video" { "video/mp4" } else { "image/png" }
}

/// Deletes expired copies every so often, and reports what is stored.
async fn sweep(state: Arc<Gateway>) {
    let files = &state.copies.files;
    loop {
        match files.sweep(now_ms()).await {
            Ok((objects, bytes)) => crate::support::metrics::results_stored(objects, bytes),
            Err(e) => tracing::warn!(error = %e, "could not delete expired result copies"),
        }
        tokio::time::sleep(SWEEP_EVERY).await;
    }
}
