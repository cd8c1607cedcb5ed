//! The log's writes to disk, on a thread of their own: the writer commits and stages the next batch while
//! the last one reaches the disk, and every batch waiting when a write starts shares it (one synchronous
//! write per log file the waiting batches are in: two only just after the log moved to its other file).

use super::StoreError;
use super::broken::Broken;
use super::job::Job;
use super::wal::{LogFile, Scratch, Wal};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use tokio::sync::watch;

/// The writer's handle. Dropping it waits until every sync asked for is done and its writes heard back.
pub(super) struct Syncer {
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

/// Make the log durable up to record `upto`, which is in log file `file`, then answer `jobs`.
struct Request {
    file: usize,
    upto: u64,
    jobs: Vec<Box<dyn Job>>,
}

impl Syncer {
    /// Starts the thread; it publishes the last durable record's number on `durable`, and sets `broken`
    /// (then stops) if a write fails.
    pub(super) fn start(wal: &Wal, durable: watch::Sender<u64>, broken: Arc<Broken>) -> Result<Syncer, StoreError> {
        let files = wal.log_files();
        let (requests, queue) = mpsc::channel();
        let thread = super::threads::spawn("store-syncer", move || run(&files, &queue, &durable, &broken))?;
        Ok(Syncer { requests: Some(requests), thread: Some(thread) })
    }

    /// Asks for log file `file` to be on disk up to record `upto`; `jobs` hear back once it is. Asked
    /// in log order: every record before `upto` is durable once this is. False if the syncer has stopped
    /// (the jobs then hear that their write was dropped).
    pub(super) fn sync(&self, file: usize, upto: u64, jobs: Vec<Box<dyn Job>>) -> bool {
        self.requests.as_ref().is_some_and(|requests| requests.send(Request { file, upto, jobs }).is_ok())
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(files: &[Arc<LogFile>; 2], queue: &mpsc::Receiver<Request>, durable: &watch::Sender<u64>, broken: &Broken) {
    let mut scratch = Scratch::default();
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        group.extend(queue.try_iter());
        let upto = group.iter().map(|request| request.upto).max().unwrap_or_default();
        let outcome = files
            .iter()
            .enumerate()
            .filter(|(index, _)| group.iter().any(|request| request.file == *index))
            .try_for_each(|(_, file)| file.write_out(&mut scratch))
            .map_err(|e| StoreError::unavailable(format!("write-ahead log write: {e}")));
        match &outcome {
            Ok(()) => {
                durable.send_if_modified(|last| {
                    let advanced = upto > *last;
                    *last = upto.max(*last);
                    advanced
                });
            }
            Err(e) => {
                tracing::error!(error = %e, "the store could not write its log to disk; it takes no more writes");
                broken.set("the store could not write its log to disk");
            }
        }
        for job in group.into_iter().flat_map(|request| request.jobs) {
            job.deliver(outcome.clone());
        }
        if outcome.is_err() {
            return;
        }
    }
}
