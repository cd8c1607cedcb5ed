//! Group commit: every write goes through one writer thread, which runs the writes waiting in its queue
//! in one redb transaction and commits them with one durable commit. A caller gets its result only after
//! that commit, so nothing is acknowledged before it is on disk, while concurrent requests share the cost
//! of the flush. Writes in a batch run in arrival order and see each other, as if they ran one by one.
//!
//! A write that fails fails its batch: the transaction is dropped (nothing of it is written) and every
//! caller in it gets the error. Writes fail only on storage errors or a broken invariant, which would
//! have failed their neighbours too.

use super::StoreError;
use redb::{Database, WriteTransaction};
use std::sync::Arc;
use std::sync::mpsc;

/// Most writes committed together.
const MAX_BATCH: usize = 1024;

trait Job: Send {
    fn run(&mut self, tx: &WriteTransaction) -> Result<(), StoreError>;
    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>);
}

struct TypedJob<T, F> {
    op: Option<F>,
    result: Option<T>,
    reply: mpsc::SyncSender<Result<T, StoreError>>,
}

impl<T: Send, F: FnOnce(&WriteTransaction) -> Result<T, StoreError> + Send> Job for TypedJob<T, F> {
    fn run(&mut self, tx: &WriteTransaction) -> Result<(), StoreError> {
        let op = self.op.take().ok_or_else(|| StoreError::new("write ran twice"))?;
        self.result = Some(op(tx)?);
        Ok(())
    }

    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>) {
        let TypedJob { result, reply, .. } = *self;
        let answer = outcome.and_then(|()| result.ok_or_else(|| StoreError::new("write produced nothing")));
        let _ = reply.send(answer);
    }
}

/// The handle every `Store` clone shares.
#[derive(Clone)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    pub(crate) fn start(db: Arc<Database>) -> Result<Writer, StoreError> {
        let (queue, jobs) = mpsc::channel::<Box<dyn Job>>();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run(&db, &jobs))
            .map_err(|e| StoreError::new(format!("cannot start the store writer: {e}")))?;
        Ok(Writer { queue })
    }

    /// Runs `op` in the next batch and returns its result once the batch is durable.
    pub(crate) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        self.queue
            .send(Box::new(TypedJob { op: Some(op), result: None, reply }))
            .map_err(|_| StoreError::new("the store writer has stopped"))?;
        answer.recv().map_err(|_| StoreError::new("the store writer dropped a write"))?
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
        let outcome = commit(db, &mut batch);
        for job in batch {
            job.deliver(outcome.clone());
        }
    }
}

fn commit(db: &Database, batch: &mut [Box<dyn Job>]) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    for job in batch.iter_mut() {
        job.run(&tx)?;
    }
    tx.commit()?;
    Ok(())
}
