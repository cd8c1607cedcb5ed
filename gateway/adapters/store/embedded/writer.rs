//! Group commit: every write goes through one writer thread, which runs the writes waiting in its queue
//! as one batch, so concurrent requests share the cost of a log sync. Writes in a batch run in arrival
//! order and see each other, as if they ran one by one.
//!
//! A batch never touches redb's file: its changes are appended to the write-ahead log (`wal`) as one
//! record and published to the in-memory overlay (`overlay`), where every reader sees them at once; the
//! log's sync (a synchronous write of what it staged, on the syncer's thread (`syncer`) while the writer
//! goes on with the next batch) is what makes it durable. A write is either [`Commit::Durable`] (its
//! caller hears back only once the log holding it is synced) or [`Commit::Deferred`] (its caller hears
//! back once it is published; it reaches the disk with the next sync, which every code path that answers
//! a client waits for). A batch of deferred writes only is published but left out of the log for up to
//! [`DEFER_AT_MOST`], for the next batch to log with its own: usually the durable write that ends the same
//! request, so a request costs one log record. Every [`CHECKPOINT_INTERVAL`] the writer freezes the
//! overlay's newest layer for the checkpointer (`checkpointer`), which commits it to redb on its own
//! thread, and the log goes on in its other file.
//!
//! Async callers wait without a thread of their own ([`Pending`] is a future); the CLI and tools block.
//! A reader that must not show what is not durable yet awaits [`Writer::caught_up`].
//!
//! A write that fails fails alone: its changes are undone and its caller gets the error, while the rest
//! of its batch goes on. A failure to log a batch stops the writer (what readers may have seen could
//! not be made durable, so no later write is taken); so does a failed sync of the log.

use super::broken::Broken;
use super::checkpointer::Checkpointer;
use super::job::Job;
use super::overlay::{Changes, Overlay, View};
use super::syncer::Syncer;
use super::tx::Tx;
use super::wal::{Record, Wal};
use super::{Commit, StoreError};
use redb::Database;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Most writes committed together.
const MAX_BATCH: usize = 1024;
/// How long deferred writes may stay published but out of the log, waiting for a batch to be logged with.
/// A reader that shows what it read waits for them to be logged and synced ([`Writer::caught_up`]).
const DEFER_AT_MOST: Duration = Duration::from_millis(2);
/// A checkpoint is due once the log holds this much since the last one (the overlay's newest layer holds
/// at most those changes)...
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// ...or this long after the last one. Each is one durable redb commit of every key changed since (a key
/// changed many times is written once), and bounds the overlay's memory and the log a restart after a
/// crash replays. Short is cheaper: a small overlay keeps every read and publish in cache, and a small
/// commit's fsync holds up the log's syncs for less (the intervals measured are in bench/HISTORY.md). Unit
/// tests checkpoint only on close (unless they ask), so what they find on disk meanwhile is the log's doing.
pub(crate) const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(if cfg!(test) { 3_600_000 } else { 10 });
/// How often a due checkpoint is looked at again while the one before is still being committed.
const CHECKPOINT_POLL: Duration = Duration::from_millis(5);

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

/// A queued write's outcome, to `.await` (a future of its own: awaiting it allocates nothing).
pub struct Pending<T>(Option<Result<oneshot::Receiver<Result<T, StoreError>>, StoreError>>);

impl<T> Future for Pending<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        match self.0.as_mut() {
            Some(Ok(reply)) => Pin::new(reply).poll(cx).map(|answer| answer.map_err(|_| dropped())?),
            Some(Err(_)) => match self.0.take() {
                Some(Err(refused)) => std::task::Poll::Ready(Err(refused)),
                _ => std::task::Poll::Ready(Err(dropped())),
            },
            None => std::task::Poll::Ready(Err(dropped())),
        }
    }
}

fn dropped() -> StoreError {
    StoreError::unavailable("the store writer stopped before the write was done")
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
    /// The last record logged. Set before its changes are published, so a reader that sees them reads at
    /// least its number.
    visible: AtomicU64,
    /// The last record a sync is coming for (one holding a durable write). Set before `visible`.
    syncing: AtomicU64,
    /// Deferred writes are published but not logged yet. Set before they are published.
    open: AtomicBool,
    /// The log, or redb's file, could not be written: nothing more can be made durable, so no write is
    /// taken (each is refused at once as `unavailable`). Set by the syncer, the checkpointer or the writer;
    /// it stays set.
    broken: Arc<Broken>,
}

impl Writer {
    /// Starts the writer (and its syncer and checkpointer) on a store whose log holds nothing beyond its
    /// durable checkpoint, publishing to `overlay`. It checkpoints at least `checkpoint_every`.
    pub(crate) fn start(
        db: Arc<Database>,
        overlay: Arc<Overlay>,
        wal: Wal,
        checkpoint_every: Duration,
    ) -> Result<Writer, StoreError> {
        let (queue, jobs) = mpsc::channel::<Box<dyn Job>>();
        let last = wal.last_seq();
        let broken = Arc::new(Broken::new());
        let progress = Arc::new(Progress {
            visible: AtomicU64::new(last),
            syncing: AtomicU64::new(last),
            open: AtomicBool::new(false),
            broken: broken.clone(),
        });
        let (durable_tx, durable) = watch::channel(last);
        let syncer = Syncer::start(&wal, durable_tx, broken.clone())?;
        let checkpointer = Checkpointer::start(db.clone(), overlay.clone(), broken)?;
        let thread = {
            let progress = progress.clone();
            super::threads::spawn("store-writer", move || {
                let writing = Writing {
                    db: &db,
                    overlay: &overlay,
                    wal,
                    progress: &progress,
                    syncer,
                    checkpointer,
                    checkpoint_every,
                    view: None,
                    last_checkpoint: Instant::now(),
                    unlogged: Record::default(),
                    staged: Changes::default(),
                    unlogged_since: Instant::now(),
                };
                run(writing, &jobs);
            })?
        };
        Ok(Writer { shared: Arc::new(Shared { queue: Some(queue), thread: Some(thread) }), progress, durable })
    }

    /// Queues `op` for the next batch; the returned future resolves once it is published, or durable, as `commit` asks.
    pub(crate) fn queue<T, F>(&self, commit: Commit, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = TypedJob { commit, op: Some(op), result: None, reply: Reply::Async(reply) };
        Pending(Some(self.enqueue(Box::new(job)).map(|()| answer)))
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

    /// Resolves once every write published so far is durable: for answers that show stored state, which
    /// must not show what a crash could still undo. Immediate when nothing is pending; otherwise it waits
    /// for the sync under way, or asks for one (which also logs deferred writes not logged yet).
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

    /// Whether the writer still takes writes (it stops for good once its log cannot be written).
    pub(crate) fn running(&self) -> bool {
        !self.progress.broken.is_set() && self.durable.has_changed().is_ok()
    }

    /// Resolves once the store can no longer make writes durable (never, while it can, or once it closed
    /// cleanly).
    pub(crate) async fn broken(&self) {
        self.progress.broken.wait().await
    }

    /// Commits every queued write, checkpoints and stops the writer (later writes fail): for a stopping
    /// process, which may exit before the last `Store` clone drops and closes the file.
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.enqueue(Box::new(Close(reply)))?;
        answer.recv().map_err(|_| dropped())?
    }

    fn enqueue(&self, job: Box<dyn Job>) -> Result<(), StoreError> {
        let stopped = || StoreError::unavailable("the store can no longer make writes durable; it takes no more");
        if self.progress.broken.is_set() {
            return Err(stopped());
        }
        self.shared.queue.as_ref().ok_or_else(stopped)?.send(job).map_err(|_| stopped())
    }
}

/// What the writer thread works with.
struct Writing<'a> {
    db: &'a Database,
    overlay: &'a Overlay,
    wal: Wal,
    progress: &'a Progress,
    syncer: Syncer,
    checkpointer: Checkpointer,
    checkpoint_every: Duration,
    last_checkpoint: Instant,
    /// The writes' view of the store: kept from batch to batch (its newest layer is the one they are
    /// published to) until a freeze.
    view: Option<View>,
    /// Deferred writes published but not logged yet (see [`DEFER_AT_MOST`]), and since when; the next
    /// batch's changes are added to the same record.
    unlogged: Record,
    /// Where a batch stages its changes: empty between batches, its room kept.
    staged: Changes,
    unlogged_since: Instant,
}

fn run(mut writing: Writing<'_>, jobs: &mpsc::Receiver<Box<dyn Job>>) {
    loop {
        let wait = writing.idle_for();
        let first = match jobs.recv_timeout(wait) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if writing.progress.broken.is_set() {
                    let broken = StoreError::unavailable(writing.progress.broken.reason());
                    return writing.stop(&broken, jobs);
                }
                if let Err(e) = writing.log_unlogged() {
                    return writing.stop(&e, jobs);
                }
                writing.checkpoint_if_due();
                continue;
            }
            // Every handle is gone: leave a checkpointed store behind.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Err(e) = writing.close() {
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
        if writing.progress.broken.is_set() {
            let broken = StoreError::unavailable(writing.progress.broken.reason());
            deliver(batch, &Err(broken.clone()));
            return writing.stop(&broken, jobs);
        }
        let closes = batch.iter().any(|job| job.closes());
        let batch = match writing.apply(batch) {
            Ok(batch) => batch,
            Err(e) => return writing.stop(&e, jobs),
        };
        if closes {
            let outcome = writing.close();
            drop(writing); // the syncs under way finish and their writes hear back first
            deliver(batch, &outcome);
            return;
        }
        let (durable, deferred): (Vec<_>, Vec<_>) = batch.into_iter().partition(|job| job.commit() == Commit::Durable);
        deliver(deferred, &Ok(()));
        if !durable.is_empty() && !writing.syncer.sync(writing.wal.current(), writing.wal.last_seq(), durable) {
            return writing.stop(&StoreError::unavailable("the store's log syncer stopped"), jobs);
        }
        writing.checkpoint_if_due();
    }
}

fn deliver(batch: Vec<Box<dyn Job>>, outcome: &Result<(), StoreError>) {
    for job in batch {
        job.deliver(outcome.clone());
    }
}

impl Writing<'_> {
    /// What was published could not be made durable: no later write is taken. Every write queued is
    /// refused now, and later ones at once (`Writer::enqueue`), so nothing waits for a writer that is gone.
    fn stop(self, e: &StoreError, jobs: &mpsc::Receiver<Box<dyn Job>>) {
        tracing::error!(error = %e, "the store cannot make writes durable; it takes no more writes");
        self.progress.broken.set("the store could not write its log to disk");
        deliver(jobs.try_iter().collect(), &Err(StoreError::unavailable(e.reason())));
    }

    /// How long to wait for a write before there is something else to do.
    fn idle_for(&self) -> Duration {
        if !self.unlogged.is_empty() {
            DEFER_AT_MOST.saturating_sub(self.unlogged_since.elapsed())
        } else if self.wal.len() == 0 {
            self.checkpoint_every
        } else {
            // Once due, ask again now and then until the checkpoint before is done.
            self.checkpoint_every.saturating_sub(self.last_checkpoint.elapsed()).max(CHECKPOINT_POLL)
        }
    }

    /// Runs a batch: each write in a view of the store with the writes before it staged; a write that
    /// fails is undone and hears back at once. Then logs the batch (with the deferred writes before it)
    /// and publishes it, unless it holds deferred writes only, which are published and left unlogged for
    /// up to [`DEFER_AT_MOST`]. Returns the writes that succeeded; an error only if the log failed.
    fn apply(&mut self, batch: Vec<Box<dyn Job>>) -> Result<Vec<Box<dyn Job>>, StoreError> {
        let view = match self.view.take() {
            Some(view) => view,
            None => match self.overlay.view(self.db) {
                Ok(view) => view,
                Err(e) => {
                    deliver(batch, &Err(e));
                    return Ok(Vec::new());
                }
            },
        };
        if self.unlogged.is_empty() {
            self.unlogged_since = Instant::now();
        }
        let tx = Tx::new(&view, std::mem::take(&mut self.staged), std::mem::take(&mut self.unlogged));
        let mut done = Vec::with_capacity(batch.len());
        for mut job in batch {
            let mark = tx.mark();
            match job.run(&tx) {
                Ok(()) => done.push(job),
                Err(e) => {
                    tx.roll_back(&mark);
                    job.deliver(Err(e));
                }
            }
        }
        (self.staged, self.unlogged) = tx.finish();
        self.view = Some(view);
        let durable = done.iter().any(|job| job.commit() == Commit::Durable);
        let must_log = durable || done.iter().any(|job| job.closes());
        let changed = !self.staged.is_empty();
        if changed && !must_log && self.unlogged_since.elapsed() < DEFER_AT_MOST {
            self.progress.open.store(true, Ordering::Release);
            self.overlay.publish(&mut self.staged);
            return Ok(done);
        }
        if must_log || changed {
            if durable && !self.unlogged.is_empty() {
                self.progress.syncing.store(self.wal.last_seq() + 1, Ordering::Release);
            }
            self.log_unlogged()?;
        }
        if changed {
            self.overlay.publish(&mut self.staged);
        }
        Ok(done)
    }

    /// Logs the writes left unlogged, if any, as one record (no sync: the durable write that asked, or the
    /// next one, covers them).
    fn log_unlogged(&mut self) -> Result<(), StoreError> {
        if self.unlogged.is_empty() {
            return Ok(());
        }
        self.wal.append(&mut self.unlogged)?;
        self.progress.visible.store(self.wal.last_seq(), Ordering::Release);
        self.progress.open.store(false, Ordering::Release);
        Ok(())
    }

    /// Freezes the overlay's newest layer for the checkpointer and moves the log to its other file, when
    /// a checkpoint is due and the last one is durable: the other file's records are all in that one.
    fn checkpoint_if_due(&mut self) {
        let due = self.wal.len() >= CHECKPOINT_BYTES
            || (self.wal.len() > 0 && self.last_checkpoint.elapsed() >= self.checkpoint_every);
        if !due || self.overlay.checkpointing() {
            return;
        }
        // Deferred writes not logged yet stay unlogged, for the next record, in the other file: the layer
        // frozen holds them too, so the checkpoint also commits them, and replaying them after it changes
        // nothing. The left file then usually ends in a durable write's record, whose sync is coming.
        self.view = None; // it holds the layer frozen, not the one that takes the writes from now on
        self.checkpointer.start_one(self.overlay.freeze(), self.wal.last_seq());
        self.last_checkpoint = Instant::now();
        let left = self.wal.switch();
        // Its last record may be of deferred writes no sync was asked for yet (none is coming for it), and
        // later records are durable only once it is.
        if self.progress.syncing.load(Ordering::Acquire) < self.wal.last_seq() {
            self.syncer.sync(left, self.wal.last_seq(), Vec::new());
        }
    }

    /// The store's last checkpoint: every write so far committed to redb, durably.
    fn close(&mut self) -> Result<(), StoreError> {
        self.log_unlogged()?;
        self.checkpointer.close(self.overlay.freeze(), self.wal.last_seq())
    }
}
