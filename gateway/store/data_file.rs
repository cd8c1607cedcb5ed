//! redb's file, with the fsync of a checkpoint taken off the writer's thread.
//!
//! A checkpoint (a durable redb commit) writes the pages dirtied since the last one and fsyncs the file;
//! the fsync took ~10 ms here, and every write queued behind the checkpoint waited for it. This backend
//! makes an fsync a barrier kept in the background: `sync_data` starts the fsync on a thread of its own
//! and returns, and the next write or resize of the file waits until it is done. The file therefore goes
//! through the same states on disk as with redb's own fsyncs, only later: a crash finds it as a crash
//! during that fsync would have, which redb recovers from (to the last commit whose fsync completed).
//!
//! redb takes a checkpoint as durable once its commit returns; the store does not, and takes it as
//! durable only once [`Flushes::settled`] says so, or once the next checkpoint has committed (its writes
//! waited for this one's fsync).

use super::StoreError;
use redb::StorageBackend;
use redb::backends::FileBackend;
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The database file: redb's own backend, whose fsyncs run in the background.
#[derive(Debug)]
pub(super) struct DataFile {
    file: Arc<FileBackend>,
    flushes: Flushes,
}

/// The state of the background fsyncs, shared with the writer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Flushes(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<FlushState>,
    /// Notified when an fsync is done.
    done: Condvar,
}

#[derive(Debug, Default)]
struct FlushState {
    /// An fsync is under way; nothing may be written until it is done.
    owed: bool,
    /// An fsync failed: what was written before it may not be on disk, so nothing more is written.
    failed: Option<String>,
}

impl DataFile {
    pub(super) fn new(file: std::fs::File) -> Result<(DataFile, Flushes), redb::DatabaseError> {
        let flushes = Flushes::default();
        Ok((DataFile { file: Arc::new(FileBackend::new(file)?), flushes: flushes.clone() }, flushes))
    }
}

impl Flushes {
    fn state(&self) -> MutexGuard<'_, FlushState> {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until no fsync is under way: everything written to the database so far is on disk.
    pub(crate) fn settled(&self) -> Result<(), StoreError> {
        self.wait().map_err(|e| StoreError::new(e.to_string()))
    }

    /// Waits until no fsync is under way; an error if one failed.
    fn wait(&self) -> io::Result<()> {
        let state = self.0.done.wait_while(self.state(), |state| state.owed).unwrap_or_else(PoisonError::into_inner);
        match &state.failed {
            Some(e) => Err(io::Error::other(format!("an earlier fsync of the database failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Whether an fsync failed: nothing written to the database since can be counted on.
    pub(crate) fn failed(&self) -> bool {
        self.state().failed.is_some()
    }

    fn done(&self, outcome: io::Result<()>) {
        let mut state = self.state();
        state.owed = false;
        if let Err(e) = outcome {
            tracing::error!(error = %e, "the database fsync failed; the store takes no more writes");
            state.failed = Some(e.to_string());
        }
        self.0.done.notify_all();
    }
}

impl StorageBackend for DataFile {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.flushes.wait()?;
        self.file.set_len(len)
    }

    /// Starts an fsync in the background. One already under way covers this one too: nothing was written
    /// since it started.
    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.flushes.state();
        if state.owed {
            return Ok(());
        }
        if let Some(e) = &state.failed {
            return Err(io::Error::other(e.clone()));
        }
        state.owed = true;
        drop(state);
        let (file, flushes) = (self.file.clone(), self.flushes.clone());
        let started = std::thread::Builder::new().name("store-flush".into()).spawn(move || {
            let outcome = file.sync_data();
            flushes.done(outcome);
        });
        if started.is_err() {
            self.flushes.done(self.file.sync_data());
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.flushes.wait()?;
        self.file.write(offset, data)
    }

    /// redb's last call: the file is left with every fsync done.
    fn close(&self) -> io::Result<()> {
        let settled = self.flushes.wait();
        self.file.close()?;
        settled
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.file.query_lock_range(start, end)
    }
}
