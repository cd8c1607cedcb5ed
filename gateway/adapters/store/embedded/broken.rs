//! The store's one-way switch to "takes no more writes", shared by the writer, the syncer and the
//! checkpointer.

use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// Set once, for good, when the store cannot make writes durable (its log cannot be written, or redb's file
/// cannot take a checkpoint): read at once on every write, and awaited (without a wake-up per sync) by
/// whoever must stop the process.
pub(super) struct Broken {
    flag: AtomicBool,
    /// Why, for the refusals and the log: the first reason set.
    reason: std::sync::OnceLock<&'static str>,
    signal: watch::Sender<bool>,
}

impl Broken {
    pub(super) fn new() -> Broken {
        Broken { flag: AtomicBool::new(false), reason: std::sync::OnceLock::new(), signal: watch::channel(false).0 }
    }

    pub(super) fn set(&self, reason: &'static str) {
        let _ = self.reason.set(reason);
        self.flag.store(true, Ordering::Release);
        self.signal.send_replace(true);
    }

    pub(super) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    pub(super) fn reason(&self) -> &'static str {
        self.reason.get().copied().unwrap_or("the store stopped")
    }

    pub(super) async fn wait(&self) {
        let _ = self.signal.subscribe().wait_for(|broken| *broken).await;
    }
}
