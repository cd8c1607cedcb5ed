//! Checkpoints, on a thread of their own: a frozen overlay layer is committed to redb, durably, in one
//! transaction that also records the number of the last log record it holds; then the layer is dropped.
//! The writer freezes the next layer only once this one is durable (see `writer`), so that the log file
//! holding the records before it can be written over.

use super::StoreError;
use super::broken::Broken;
use super::overlay::{Changes, Layer, Overlay};
use super::tables::{ALL, CHECKPOINT, META};
use redb::Database;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

/// Changes applied between two yields of the CPU. The HTTP worker preempts this batch thread when woken, so
/// a yield is for the store's other batch threads, chiefly the syncer; yielding more often cost the sync
/// lane CPU in context switches and shortened no tail (bench/HISTORY.md).
const CHUNK: usize = 1024;

/// The writer's handle. Dropping it waits for the checkpoint under way. A checkpoint is under way while
/// the overlay holds a frozen layer ([`Overlay::checkpointing`]).
pub(super) struct Checkpointer {
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

struct Request {
    layer: Arc<Layer>,
    /// The last log record the layer holds.
    seq: u64,
    /// The store's last checkpoint: tried once, its outcome sent back.
    closing: Option<mpsc::SyncSender<Result<(), StoreError>>>,
}

impl Checkpointer {
    /// Starts the thread; a checkpoint that fails sets `broken` (the store takes no more writes then, and
    /// its log replays on the next start).
    pub(super) fn start(
        db: Arc<Database>,
        overlay: Arc<Overlay>,
        broken: Arc<Broken>,
    ) -> Result<Checkpointer, StoreError> {
        let (requests, queue) = mpsc::channel::<Request>();
        let thread = super::threads::spawn("store-checkpoint", move || run(&db, &overlay, &queue, &broken))?;
        Ok(Checkpointer { requests: Some(requests), thread: Some(thread) })
    }

    /// Starts committing `layer`, frozen after log record `seq`.
    pub(super) fn start_one(&self, layer: Arc<Layer>, seq: u64) {
        self.send(Request { layer, seq, closing: None });
    }

    /// Commits `layer` after every checkpoint asked for before it, with redb's allocator state recorded
    /// (so the next open needs no repair); returns once it is durable.
    pub(super) fn close(&self, layer: Arc<Layer>, seq: u64) -> Result<(), StoreError> {
        let (reply, outcome) = mpsc::sync_channel(1);
        self.send(Request { layer, seq, closing: Some(reply) });
        outcome.recv().map_err(|_| StoreError::new("the store checkpointer stopped"))?
    }

    fn send(&self, request: Request) {
        if let Some(requests) = &self.requests
            && requests.send(request).is_err()
        {
            tracing::error!("the store checkpointer has stopped; the log keeps every write");
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Commits each layer asked for and drops it from the overlay once committed. A checkpoint that fails
/// breaks the store, as a log that cannot be written does: redb refuses every later write once one of its
/// writes failed, until the file is opened again, and the layer cannot be dropped uncommitted. The gateway
/// then stops, and its restart replays the log into redb's file (or fails at once while there is no room).
fn run(db: &Database, overlay: &Overlay, queue: &mpsc::Receiver<Request>, broken: &Broken) {
    for Request { layer, seq, closing } in queue {
        let outcome = if broken.is_set() {
            Err(StoreError::unavailable(CANNOT_CHECKPOINT))
        } else {
            commit(db, &layer.changes(), seq, closing.is_some())
        };
        match &outcome {
            Ok(()) => overlay.release(),
            Err(e) => {
                tracing::error!(error = %e, "store checkpoint failed; the log keeps every acknowledged write");
                broken.set(CANNOT_CHECKPOINT);
            }
        }
        if let Some(reply) = closing {
            let _ = reply.send(outcome);
        }
    }
}

const CANNOT_CHECKPOINT: &str = "the store could not write its checkpoint to disk";

/// Commits `changes` to redb, durably, as holding the log up to record `seq`. `closing` also records
/// redb's allocator state.
pub(super) fn commit(db: &Database, changes: &Changes, seq: u64, closing: bool) -> Result<(), StoreError> {
    let mut tx = db.begin_write()?;
    tx.set_quick_repair(closing);
    for (id, table) in ALL.iter().enumerate() {
        for chunk in changes.sorted(id).chunks(CHUNK) {
            table.apply(&tx, chunk)?;
            // The threads answering requests share this core: let them in after each full chunk (a
            // table with a few changes is applied in less than a yield costs).
            if chunk.len() == CHUNK {
                std::thread::yield_now();
            }
        }
    }
    tx.open_table(META)?.insert(CHECKPOINT, seq)?;
    tx.commit()?;
    Ok(())
}
