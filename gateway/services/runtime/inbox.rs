//! The poller's inbox: tasks handed to it by the use cases that start them (and those it must look up
//! again), drained by the poller (`services::tasks::poller`) on its own turns.

use crate::domain::tasks::TaskRecord;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Handle for scheduling tasks; cheap to share.
///
/// Scheduled tasks wait in an inbox the poller drains on its own turns (at least once per sweep) instead of
/// waking it per task: a task's first query is at least a sweep away, and a busy submit path would
/// otherwise pay a cross-thread wake-up per submission.
pub struct Poller {
    inbox: Mutex<Vec<TaskRecord>>,
    /// Live tasks whose last write failed (their handler could not end them): read again once the store
    /// answers, and then polled like any other.
    lost: Mutex<Vec<String>>,
    /// Live tasks leased to this process, read back from the store: tracked if the poller lacks one.
    leased: Mutex<Vec<TaskRecord>>,
    /// How many tasks the poller tracked at the end of its last turn.
    tracked: AtomicUsize,
    started: AtomicBool,
}

impl Poller {
    /// A poller that will resume `in_flight` (the store's unfinished tasks at start-up) once it runs.
    pub fn new(in_flight: Vec<TaskRecord>) -> Poller {
        tracing::info!(tasks = in_flight.len(), "poller resuming in-flight tasks");
        Poller {
            inbox: Mutex::new(in_flight),
            lost: Mutex::default(),
            leased: Mutex::default(),
            tracked: AtomicUsize::new(0),
            started: AtomicBool::new(false),
        }
    }

    /// Asks the poller to look at `task` at its `next_poll_ms`.
    pub fn schedule(&self, task: TaskRecord) {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).push(task);
    }

    /// Live tasks this poller holds: those it tracks and those waiting in its inbox.
    pub fn holds(&self) -> usize {
        let waiting = self.inbox.lock().unwrap_or_else(|e| e.into_inner()).len();
        self.tracked.load(Ordering::Relaxed) + waiting
    }

    pub(crate) fn take_scheduled(&self) -> Vec<TaskRecord> {
        std::mem::take(&mut *self.inbox.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Asks the poller to take over a live task its handler could not write (the store failed, and the write
    /// may or may not have been made): if it is stored and live, it is polled, or without an upstream task id
    /// ends as interrupted, its hold given back.
    pub fn take_over(&self, task_id: String) {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).push(task_id);
    }

    pub(crate) fn take_lost(&self) -> Vec<String> {
        std::mem::take(&mut *self.lost.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Live tasks leased to this process, read back from the store, for the poller to track if it lacks one.
    pub(crate) fn add_leased(&self, tasks: Vec<TaskRecord>) {
        self.leased.lock().unwrap_or_else(|e| e.into_inner()).extend(tasks);
    }

    /// How many tasks the poller tracked at the end of its last turn.
    pub(crate) fn set_tracked(&self, count: usize) {
        self.tracked.store(count, Ordering::Relaxed);
    }

    /// True the first time: the poller runs once per process.
    pub(crate) fn start(&self) -> bool {
        !self.started.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn take_leased(&self) -> Vec<TaskRecord> {
        std::mem::take(&mut *self.leased.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
