//! Group commit: every write goes through one writer thread, which runs the writes waiting in its queue
//! in one redb transaction and commits them together, so concurrent requests share the cost of an fsync.
//! Writes in a batch run in arrival order and see each other, as if they ran one by one.
//!
//! A batch is committed to redb without an fsync (applied and visible at once) and its changes are
//! appended to the write-ahead log (`wal`); an fsync of the log, on the syncer's thread (`syncer`) while
//! the writer goes on with the next batch, is what makes it durable. A write is either
//! [`Commit::Durable`] (its caller hears back only once the log holding it is fsynced) or
//! [`Commit::Deferred`] (its caller hears back once it is applied; it reaches the disk with the next
//! fsync, which every code path that answers a client waits for). A batch of deferred writes only is
//! left uncommitted for the next batch to commit with its own (see [`DEFER_AT_MOST`]): usually the
//! durable write that ends the same request, so a request costs one redb commit and one log record, not
//! two. Every so often (and when the store closes) the writer checkpoints: a durable redb commit, whose
//! fsync finishes in the background (`data_file`), after which the log goes on in its other file.
//!
//! Async callers wait without a thread of their own ([`Pending`] is a future); the CLI and tools block.
//! A reader that must not show what is not durable yet awaits [`Writer::caught_up`].
//!
//! A write that fails fails its batch: the transaction is dropped (nothing of it is written, nor of the
//! deferred writes left open before it, whose requests then fail at their durable write) and every caller
//! in it gets the error. Writes fail only on storage errors or a broken invariant, which would
//! have failed their neighbours too. A failure to log a committed batch stops the writer: what readers
//! may have seen could not be made durable, so no later write is taken; so does a failed fsync of the log
//! or of the database.

use super::StoreError;
use super::data_file::Flushes;
use super::syncer::Syncer;
use super::tables::{CHECKPOINT, META};
use super::tx::Tx;
use super::wal::Wal;
use redb::{Database, Durability, WriteTransaction};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Most writes committed together.
const MAX_BATCH: usize = 1024;
/// How long deferred writes may stay applied but uncommitted, waiting for a batch to commit with. Readers
/// do not see them meanwhile; nothing needs to, as no client has heard of them (and [`Writer::caught_up`]
/// commits them at once for one that may have: an idempotent retry of a request still in flight).
const DEFER_AT_MOST: Duration = Duration::from_millis(2);
/// A checkpoint is due once the log holds this much...
const CHECKPOINT_BYTES: u64 = 64 << 20;
/// ...or this long after the last one. Each writes every page dirtied since (one redb flush for many
/// batches) and bounds the log a restart after a crash replays (and the data file's growth: redb reuses
/// no page an unsynced commit freed). It holds up every write queued behind it while it writes those
/// pages (its fsync is in the background), the longer the more was written since the last one (3-5 ms
/// once a second under the bench's 1k req/s), so frequent small ones keep the tail shortest. Unit tests
/// checkpoint only on close (unless they ask), so what they find on disk meanwhile is the log's doing.
pub(crate) const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(if cfg!(test) { 3_600_000 } else { 100 });

/// How soon a write must be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// On disk before the caller hears back.
    Durable,
    /// Applied and visible at once; on disk with the next durable commit. For state no response has
    /// claimed yet (a task record before its submission is acknowledged).
    Deferred,
}

pub(super) trait Job: Send {
    fn commit(&self) -> Commit;
    /// The writer's last write: see [`Writer::close`].
    fn closes(&self) -> bool {
        false
    }
    fn run(&mut self, tx: &Tx) -> Result<(), StoreError>;
    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>);
}

struct TypedJob<T, F> {
    commit: Commit,
    op: Option<F>,
    result: Option<T>,
    reply: Reply<T>,
}

impl<T: Send, F: FnOnce(&Tx) -> Result<T, StoreError> + Send> Job for TypedJob<T, F> {
    fn commit(&self) -> Commit {
        self.commit
    }

    fn run(&mut self, tx: &Tx) -> Result<(), StoreError> {
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

/// The last write: checkpoints what is queued with redb's allocator state recorded (quick repair), so the
/// next open replays nothing and needs no full repair even if the process exits before the database
/// handle drops.
struct Close(mpsc::SyncSender<Result<(), StoreError>>);

impl Job for Close {
    fn commit(&self) -> Commit {
        Commit::Durable
    }

    fn closes(&self) -> bool {
        true
    }

    fn run(&mut self, _: &Tx) -> Result<(), StoreError> {
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
    progress: Arc<Progress>,
    /// The sequence number of the last log record known durable; closed when the writer stops.
    durable: watch::Receiver<u64>,
}

/// The queue and the thread behind it. When the last `Store` clone goes, the queue closes, the thread
/// finishes what is queued, checkpoints and exits, and dropping it waits for that: the thread holds the
/// last handle to the database, so redb closes the file cleanly (a file not closed cleanly is repaired,
/// slowly, on the next open).
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

/// How far the writer has got, by log sequence number, for [`Writer::caught_up`].
struct Progress {
    /// The last batch applied. Set before its redb commit, so a reader that sees a batch's changes reads
    /// at least its number.
    visible: AtomicU64,
    /// The last batch an fsync is coming for (one holding a durable write). Set before `visible`.
    syncing: AtomicU64,
    /// Deferred writes are applied in a transaction not yet committed. Set before they hear back.
    open: AtomicBool,
}

impl Writer {
    /// Starts the writer on a store whose log holds nothing beyond its durable checkpoint; `flushes` are
    /// the database file's background fsyncs. It checkpoints at least `checkpoint_every`.
    pub(crate) fn start(
        db: Arc<Database>,
        wal: Wal,
        flushes: Flushes,
        checkpoint_every: Duration,
    ) -> Result<Writer, StoreError> {
        let (queue, jobs) = mpsc::channel::<Box<dyn Job>>();
        let last = wal.last_seq();
        let progress = Arc::new(Progress {
            visible: AtomicU64::new(last),
            syncing: AtomicU64::new(last),
            open: AtomicBool::new(false),
        });
        let (durable_tx, durable) = watch::channel(last);
        let syncer = Syncer::start(&wal, durable_tx)?;
        let thread = {
            let progress = progress.clone();
            std::thread::Builder::new()
                .name("store-writer".into())
                .spawn(move || run(&db, wal, &jobs, &progress, syncer, &flushes, checkpoint_every))
                .map_err(|e| StoreError::new(format!("cannot start the store writer: {e}")))?
        };
        Ok(Writer { shared: Arc::new(Shared { queue: Some(queue), thread: Some(thread) }), progress, durable })
    }

    /// Queues `op` for the next batch; the returned future resolves once the batch is committed as asked.
    pub(crate) fn queue<T, F>(&self, commit: Commit, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = TypedJob { commit, op: Some(op), result: None, reply: Reply::Async(reply) };
        Pending(self.enqueue(Box::new(job)).map(|()| answer))
    }

    /// Runs `op` in the next batch, blocking the calling thread until it is durable. Not for async workers.
    pub(crate) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        let job = TypedJob { commit: Commit::Durable, op: Some(op), result: None, reply: Reply::Blocking(reply) };
        self.enqueue(Box::new(job))?;
        answer.recv().map_err(|_| dropped())?
    }

    /// Resolves once every write applied so far is committed and durable: for answers that show stored
    /// state, which must not show what a crash could still undo. Immediate when nothing is pending;
    /// otherwise it waits for the fsync under way, or asks for one (and a commit) if only deferred writes
    /// are pending.
    pub(crate) async fn caught_up(&self) -> Result<(), StoreError> {
        if self.progress.open.load(Ordering::Acquire) {
            return self.queue(Commit::Durable, |_| Ok(())).await;
        }
        let visible = self.progress.visible.load(Ordering::Acquire);
        if *self.durable.borrow() >= visible {
            return Ok(());
        }
        if self.progress.syncing.load(Ordering::Acquire) < visible {
            return self.queue(Commit::Durable, |_| Ok(())).await;
        }
        self.durable.clone().wait_for(|durable| *durable >= visible).await.map(drop).map_err(|_| dropped())
    }

    /// Commits every queued write, checkpoints and stops the writer (later writes fail): for a stopping
    /// process, which may exit before the last `Store` clone drops and closes the file.
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

fn run(
    db: &Database,
    mut wal: Wal,
    jobs: &mpsc::Receiver<Box<dyn Job>>,
    progress: &Progress,
    syncer: Syncer,
    flushes: &Flushes,
    checkpoint_every: Duration,
) {
    let mut last_checkpoint = Instant::now();
    let mut checkpoint_if_due = |wal: &mut Wal| {
        if wal.len() >= CHECKPOINT_BYTES || (wal.len() > 0 && last_checkpoint.elapsed() >= checkpoint_every) {
            checkpoint_and_switch(db, wal, &syncer);
            last_checkpoint = Instant::now();
        }
    };
    let mut open: Option<Open> = None;
    loop {
        let wait = open.as_ref().map_or(checkpoint_every, |open| DEFER_AT_MOST.saturating_sub(open.since.elapsed()));
        let first = match jobs.recv_timeout(wait) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(open) = open.take()
                    && let Err(e) = commit_open(db, &mut wal, open, &syncer, progress)
                {
                    tracing::error!(error = %e, "the store could not log a committed batch; it takes no more writes");
                    return;
                }
                checkpoint_if_due(&mut wal);
                continue;
            }
            // Every handle is gone: leave a checkpointed store behind.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let outcome = match open.take() {
                    Some(open) => commit_open(db, &mut wal, open, &syncer, progress),
                    None => Ok(()),
                };
                if let Err(e) = outcome.and_then(|()| final_checkpoint(db, &wal, flushes)) {
                    tracing::error!(error = %e, "final store checkpoint failed; the log keeps every write");
                }
                return;
            }
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if syncer.failed() || flushes.failed() {
            deliver(batch, &Err(StoreError::new("the store could not fsync its files; it takes no more writes")));
            return;
        }
        let closes = batch.iter().any(|job| job.closes());
        let outcome = match apply(db, &mut wal, open.take(), &mut batch, progress, !closes) {
            Ok(Some(left)) => {
                open = Some(left);
                deliver(batch, &Ok(()));
                continue;
            }
            Ok(None) => Ok(batch.iter().any(|job| job.commit() == Commit::Durable)),
            Err(e) => Err(e),
        };
        if closes {
            // The checkpoint makes everything durable, whatever fsync is still under way.
            let outcome = outcome.map_err(Failed::into_error).and_then(|_| final_checkpoint(db, &wal, flushes));
            drop(syncer); // the fsyncs under way finish and their writes hear back first
            deliver(batch, &outcome);
            return;
        }
        match outcome {
            Ok(must_sync) => {
                let (durable, deferred) = batch.into_iter().partition(|job| job.commit() == Commit::Durable);
                deliver(deferred, &Ok(()));
                if must_sync && !syncer.sync(wal.current(), wal.last_seq(), durable) {
                    tracing::error!("the store's log syncer stopped; it takes no more writes");
                    return;
                }
                checkpoint_if_due(&mut wal);
            }
            Err(Failed::Batch(e)) => {
                // Its number may be used up by an empty record that a reader waits on.
                syncer.sync(wal.current(), wal.last_seq(), Vec::new());
                deliver(batch, &Err(e));
            }
            Err(Failed::Log(e)) => {
                tracing::error!(error = %e, "the store could not log a committed batch; it takes no more writes");
                deliver(batch, &Err(e));
                return;
            }
        }
    }
}

fn deliver(batch: Vec<Box<dyn Job>>, outcome: &Result<(), StoreError>) {
    for job in batch {
        job.deliver(outcome.clone());
    }
}

/// Why a batch failed: before the log knew of it (nothing of it remains), or after it was applied and
/// could not be logged (what readers saw cannot be made durable: the writer stops).
enum Failed {
    Batch(StoreError),
    Log(StoreError),
}

impl Failed {
    fn into_error(self) -> StoreError {
        match self {
            Failed::Batch(e) | Failed::Log(e) => e,
        }
    }
}

impl<E: Into<StoreError>> From<E> for Failed {
    fn from(e: E) -> Failed {
        Failed::Batch(e.into())
    }
}

/// Deferred writes applied and answered, not committed yet (see [`DEFER_AT_MOST`]).
struct Open {
    tx: WriteTransaction,
    changes: Vec<u8>,
    since: Instant,
}

/// Runs one batch, in the transaction left open if there is one, and commits it to redb without an fsync
/// and logs its changes, unless `may_stay_open` and the batch holds deferred writes only: then it returns
/// the transaction, still open.
fn apply(
    db: &Database,
    wal: &mut Wal,
    open: Option<Open>,
    batch: &mut [Box<dyn Job>],
    progress: &Progress,
    may_stay_open: bool,
) -> Result<Option<Open>, Failed> {
    let Open { tx, changes, since } = match open {
        Some(open) => open,
        None => {
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::None)?;
            Open { tx, changes: Vec::new(), since: Instant::now() }
        }
    };
    let logged = Tx::new(&tx, changes);
    if let Err(e) = batch.iter_mut().try_for_each(|job| job.run(&logged)) {
        progress.open.store(false, Ordering::Release); // dropping the transaction undoes what it held
        return Err(Failed::Batch(e));
    }
    let changes = logged.into_changes();
    let must_sync = batch.iter().any(|job| job.commit() == Commit::Durable);
    if !must_sync && may_stay_open && !changes.is_empty() && since.elapsed() < DEFER_AT_MOST {
        progress.open.store(true, Ordering::Release);
        return Ok(Some(Open { tx, changes, since }));
    }
    commit(wal, tx, &changes, must_sync, progress)?;
    Ok(None)
}

/// Commits deferred writes left open that no batch came to commit with; an error if they could not be
/// logged (the writer stops).
fn commit_open(
    db: &Database,
    wal: &mut Wal,
    open: Open,
    syncer: &Syncer,
    progress: &Progress,
) -> Result<(), StoreError> {
    match apply(db, wal, Some(open), &mut [], progress, false) {
        Ok(_) => Ok(()),
        // Nothing of it is written (their requests fail at their durable write); a reader may wait on its
        // number.
        Err(Failed::Batch(e)) => {
            tracing::error!(error = %e, "the store could not commit deferred writes");
            syncer.sync(wal.current(), wal.last_seq(), Vec::new());
            Ok(())
        }
        Err(Failed::Log(e)) => Err(e),
    }
}

/// Commits `tx` to redb without an fsync and logs `changes`.
fn commit(
    wal: &mut Wal,
    tx: WriteTransaction,
    changes: &[u8],
    must_sync: bool,
    progress: &Progress,
) -> Result<(), Failed> {
    if changes.is_empty() {
        progress.open.store(false, Ordering::Release);
        tx.abort()?;
        return Ok(());
    }
    let seq = wal.last_seq() + 1;
    if must_sync {
        progress.syncing.store(seq, Ordering::Release);
    }
    progress.visible.store(seq, Ordering::Release);
    let committed = tx.commit();
    progress.open.store(false, Ordering::Release);
    match committed {
        Ok(()) => wal.append(changes).map_err(Failed::Log),
        // The failed batch still uses up its number (as an empty record, which `run` has fsynced at once),
        // so a reader that read the number is not left waiting for it.
        Err(e) => {
            wal.append(&[]).map_err(Failed::Log)?;
            Err(Failed::Batch(e.into()))
        }
    }
}

/// A checkpoint while running, after which the log goes on in its other file. A failed one is retried
/// when next due; the log keeps every write meanwhile.
fn checkpoint_and_switch(db: &Database, wal: &mut Wal, syncer: &Syncer) {
    match checkpoint(db, wal, false) {
        Ok(()) => {
            // This checkpoint's commit wrote only once the last one's fsync was done (`data_file`): the
            // other file's records are durable in that one, and the log can go on over them.
            let left = wal.switch();
            // Its last records may be deferred writes no fsync was asked for yet; later records are
            // durable only once they are.
            syncer.sync(left, wal.last_seq(), Vec::new());
        }
        Err(e) => tracing::error!(error = %e, "store checkpoint failed; the log keeps every write"),
    }
}

/// Commits to redb, durably, everything applied, with the log's last sequence number; the commit's fsync
/// finishes in the background (see `data_file`). `closing` also records redb's allocator state, so the
/// next open needs no repair.
pub(crate) fn checkpoint(db: &Database, wal: &Wal, closing: bool) -> Result<(), StoreError> {
    let mut tx = db.begin_write()?;
    tx.set_quick_repair(closing);
    tx.open_table(META)?.insert(CHECKPOINT, wal.last_seq())?;
    tx.commit()?;
    Ok(())
}

/// The checkpoint of a closing store, on disk when this returns.
fn final_checkpoint(db: &Database, wal: &Wal, flushes: &Flushes) -> Result<(), StoreError> {
    checkpoint(db, wal, true)?;
    flushes.settled()
}
