//! Group commit: every write goes through one writer thread, which runs the writes waiting in its queue
//! in one redb transaction and commits them together, so concurrent requests share the cost of a flush.
//! Writes in a batch run in arrival order and see each other, as if they ran one by one.
//!
//! A write is either [`Commit::Durable`] (its caller hears back only once it is on disk) or
//! [`Commit::Deferred`] (its caller hears back once it is applied and visible; it reaches the disk with the
//! next durable commit, which every code path that answers a client waits for). A batch holding any durable
//! write commits with `Durability::Immediate`, else with `Durability::None`, so deferred writes never cost
//! an fsync of their own. redb applies commits in order, so a durable commit also persists every deferred
//! one before it.
//!
//! Async callers wait without a thread of their own ([`Pending`] is a future); the CLI and tools block.
//!
//! A write that fails fails its batch: the transaction is dropped (nothing of it is written) and every
//! caller in it gets the error. Writes fail only on storage errors or a broken invariant, which would
//! have failed their neighbours too.

use super::StoreError;
use redb::{Database, Durability, WriteTransaction};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Most writes committed together.
const MAX_BATCH: usize = 1024;

/// How soon a write must be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// On disk before the caller hears back.
    Durable,
    /// Applied and visible at once; on disk with the next durable commit. For state no response has
    /// claimed yet (a task record before its submission is acknowledged).
    Deferred,
}

trait Job: Send {
    fn commit(&self) -> Commit;
    /// The writer's last write: see [`Writer::close`].
    fn closes(&self) -> bool {
        false
    }
    fn run(&mut self, tx: &WriteTransaction) -> Result<(), StoreError>;
    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>);
}

struct TypedJob<T, F> {
    commit: Commit,
    op: Option<F>,
    result: Option<T>,
    reply: Reply<T>,
}

impl<T: Send, F: FnOnce(&WriteTransaction) -> Result<T, StoreError> + Send> Job for TypedJob<T, F> {
    fn commit(&self) -> Commit {
        self.commit
    }

    fn run(&mut self, tx: &WriteTransaction) -> Result<(), StoreError> {
        let op = self.op.take().ok_or_else(|| StoreError::new("write ran twice"))?;
        self.result = Some(op(tx)?);
        Ok(())
    }

    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>) {
        let TypedJob { result, reply, .. } = *self;
        let answer = outcome.and_then(|()| result.ok_or_else(|| StoreError::new("write produced nothing")));
        let _ = match reply {
            Reply::Async(reply) => reply.send(answer).map_err(drop),
            Reply::Blocking(reply) => reply.send(answer).map_err(drop),
        };
    }
}

/// The last write: commits what is queued with redb's allocator state recorded (quick repair), so the next
/// open needs no full repair even if the process exits before the database handle drops.
struct Close(mpsc::SyncSender<Result<(), StoreError>>);

impl Job for Close {
    fn commit(&self) -> Commit {
        Commit::Durable
    }

    fn closes(&self) -> bool {
        true
    }

    fn run(&mut self, _: &WriteTransaction) -> Result<(), StoreError> {
        Ok(())
    }

    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>) {
        let _ = self.0.send(outcome);
    }
}

/// A queued write's outcome, to `.await`.
pub struct Pending<T>(Result<oneshot::Receiver<Result<T, StoreError>>, StoreError>);

impl<T: Send + 'static> IntoFuture for Pending<T> {
    type Output = Result<T, StoreError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.0?.await.map_err(|_| dropped())? })
    }
}

fn dropped() -> StoreError {
    StoreError::new("the store writer dropped a write")
}

/// Where a write's outcome goes: a future on the async paths, a blocked thread for the CLI and tools.
enum Reply<T> {
    Async(oneshot::Sender<Result<T, StoreError>>),
    Blocking(mpsc::SyncSender<Result<T, StoreError>>),
}

/// The handle every `Store` clone shares.
#[derive(Clone)]
pub(crate) struct Writer {
    shared: Arc<Shared>,
}

/// The queue and the thread behind it. When the last `Store` clone goes, the queue closes, the thread
/// finishes what is queued and exits, and dropping it waits for that: the thread holds the last handle to
/// the database, so redb closes the file cleanly (a file not closed cleanly is repaired, slowly, on the
/// next open).
struct Shared {
    queue: Option<mpsc::Sender<Box<dyn Job>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Writer {
    pub(crate) fn start(db: Arc<Database>) -> Result<Writer, StoreError> {
        let (queue, jobs) = mpsc::channel::<Box<dyn Job>>();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run(&db, &jobs))
            .map_err(|e| StoreError::new(format!("cannot start the store writer: {e}")))?;
        Ok(Writer { shared: Arc::new(Shared { queue: Some(queue), thread: Some(thread) }) })
    }

    /// Queues `op` for the next batch; the returned future resolves once the batch is committed as asked.
    pub(crate) fn queue<T, F>(&self, commit: Commit, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = TypedJob { commit, op: Some(op), result: None, reply: Reply::Async(reply) };
        Pending(self.enqueue(Box::new(job)).map(|()| answer))
    }

    /// Runs `op` in the next batch, blocking the calling thread until it is durable. Not for async workers.
    pub(crate) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        let job = TypedJob { commit: Commit::Durable, op: Some(op), result: None, reply: Reply::Blocking(reply) };
        self.enqueue(Box::new(job))?;
        answer.recv().map_err(|_| dropped())?
    }

    /// Commits every queued write and stops the writer (later writes fail): for a stopping process, which
    /// may exit before the last `Store` clone drops and closes the file.
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.enqueue(Box::new(Close(reply)))?;
        answer.recv().map_err(|_| dropped())?
    }

    fn enqueue(&self, job: Box<dyn Job>) -> Result<(), StoreError> {
        let stopped = || StoreError::new("the store writer has stopped");
        self.shared.queue.as_ref().ok_or_else(stopped)?.send(job).map_err(|_| stopped())
    }
}

fn run(db: &Database, jobs: &mpsc::Receiver<Box<dyn Job>>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let closing = batch.iter().any(|job| job.closes());
        let outcome = commit(db, &mut batch, closing);
        for job in batch {
            job.deliver(outcome.clone());
        }
        if closing {
            return;
        }
    }
}

/// Runs and commits one batch; `closing` records the allocator state for a fast next open.
fn commit(db: &Database, batch: &mut [Box<dyn Job>], closing: bool) -> Result<(), StoreError> {
    let mut tx = db.begin_write()?;
    let durable = batch.iter().any(|job| job.commit() == Commit::Durable);
    tx.set_durability(if durable { Durability::Immediate } else { Durability::None })?;
    tx.set_quick_repair(closing);
    for job in batch.iter_mut() {
        job.run(&tx)?;
    }
    tx.commit()?;
    Ok(())
}
