//! The store's own threads: the writer, the syncer and the checkpointer.

use super::StoreError;
use std::thread::JoinHandle;
use thread_priority::{
    NormalThreadSchedulePolicy, ThreadPriority, ThreadPriorityOsValue, ThreadSchedulePolicy,
    set_thread_priority_and_policy, thread_native_id,
};

/// Starts one of the store's threads as a batch thread (`SCHED_BATCH`): woken, it does not preempt the
/// thread answering requests, whose core it may share, but runs once that one waits or its time slice
/// ends, by when more work has queued for it. Each wake-up it skips saves two context switches, which
/// are dear in a virtual machine (what it saved is in bench/HISTORY.md).
pub(super) fn spawn<T: Send + 'static>(
    name: &str,
    run: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, StoreError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // The crate sets the niceness with the policy: 0, the default. Where either is refused the thread
            // runs on as it was, only less economically.
            let nice_default = ThreadPriority::Os(ThreadPriorityOsValue::default());
            let batch = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
            if let Err(e) = set_thread_priority_and_policy(thread_native_id(), nice_default, batch) {
                tracing::debug!(error = ?e, "a store thread keeps the default scheduling policy");
            }
            run()
        })
        .map_err(|e| StoreError::new(format!("cannot start the store's thread {name}: {e}")))
}
