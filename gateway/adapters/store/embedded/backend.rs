//! redb's storage: its file, with the pages a commit writes gathered into runs. redb hands its backend one
//! page per call, in no order (its write buffer is striped by offset). Held in memory until the commit's
//! `sync_data`, adjacent pages reach the file with one call each, and reads see them meanwhile: a fraction
//! of the system calls a page per call would make.

use super::faults;
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};
use std::collections::BTreeMap;
use std::io;
use std::ops::{Bound, Range};
use std::sync::{RwLock, RwLockWriteGuard};

/// Writes held at most (4 MiB of 4 KiB pages): a big commit (a log replay, a bulk load) goes out in runs of
/// this many as it is written rather than held whole. A checkpoint here writes about fifty, in ten runs.
const MOST_PENDING: usize = 1024;

#[derive(Debug)]
pub(crate) struct GatheringBackend {
    file: FileBackend,
    pending: RwLock<Pending>,
}

/// Written and not yet on the file. The buffers keep their room from one commit to the next.
#[derive(Debug, Default)]
struct Pending {
    /// Each write by file offset, none overlapping another: where its bytes lie in `bytes`.
    writes: BTreeMap<u64, Range<usize>>,
    bytes: Vec<u8>,
    /// The writes joined in offset order as they go out, so a run of adjacent ones is one call.
    joined: Vec<u8>,
}

impl Pending {
    /// Where the last write ends.
    fn end(&self) -> u64 {
        self.writes.last_key_value().map_or(0, |(offset, range)| offset + range.len() as u64)
    }

    /// The writes that overlap `offset..until`, in offset order.
    fn overlapping(&self, offset: u64, until: u64) -> impl Iterator<Item = (u64, &[u8])> {
        let first = self.writes.range(..=offset).next_back().map_or(offset, |(start, _)| *start);
        self.writes
            .range(first..until)
            .map(|(start, range)| (*start, &self.bytes[range.clone()]))
            .filter(move |(start, bytes)| start + bytes.len() as u64 > offset)
    }
}

impl GatheringBackend {
    pub(crate) fn new(file: FileBackend) -> GatheringBackend {
        GatheringBackend { file, pending: RwLock::default() }
    }

    /// Writes what is pending, each run of adjacent writes with one call, the highest offsets first: redb's
    /// header, at the start of the file, lands after the pages it points to, as when every write was made
    /// at once.
    fn write_out(&self, pending: &mut Pending) -> io::Result<()> {
        let Pending { writes, bytes, joined } = pending;
        // The writes in offset order, joined; each run of adjacent ones is its file offset and its part.
        joined.clear();
        let mut runs: Vec<(u64, Range<usize>)> = Vec::new();
        for (offset, range) in writes.iter() {
            let at = joined.len();
            joined.extend_from_slice(&bytes[range.clone()]);
            match runs.last_mut() {
                Some((start, run)) if *start + run.len() as u64 == *offset => run.end = joined.len(),
                _ => runs.push((*offset, at..joined.len())),
            }
        }
        for (start, run) in runs.into_iter().rev() {
            if faults::at(faults::Point::StoreWrite)? == faults::Injected::Short {
                self.file.write(start, &joined[run.start..run.start + run.len() / 2])?;
                return Err(faults::enospc());
            }
            self.file.write(start, &joined[run])?;
        }
        writes.clear();
        bytes.clear();
        Ok(())
    }

    fn pending(&self) -> io::Result<RwLockWriteGuard<'_, Pending>> {
        self.pending.write().map_err(|_| poisoned())
    }
}

fn poisoned() -> io::Error {
    io::Error::other("a write to the store file panicked")
}

impl StorageBackend for GatheringBackend {
    fn len(&self) -> Result<u64, io::Error> {
        let pending = self.pending.read().map_err(|_| poisoned())?;
        Ok(self.file.len()?.max(pending.end()))
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        // Held across the file's read, so a sync cannot move pending bytes to the file in between.
        let pending = self.pending.read().map_err(|_| poisoned())?;
        let until = offset + out.len() as u64;
        if pending.overlapping(offset, until).next().is_none() {
            return self.file.read(offset, out);
        }
        let on_file = self.file.len()?;
        if until > on_file {
            // Past the file's end only where pending writes lie; the rest of that reads as zeros.
            if pending.end() < until {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the store file"));
            }
            out.fill(0);
        }
        if offset < on_file {
            let head = (on_file.min(until) - offset) as usize;
            self.file.read(offset, &mut out[..head])?;
        }
        for (start, bytes) in pending.overlapping(offset, until) {
            let (from, to) = (start.max(offset), (start + bytes.len() as u64).min(until));
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&bytes[(from - start) as usize..(to - start) as usize]);
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut pending = self.pending()?;
        if pending.end() > len {
            self.write_out(&mut pending)?;
        }
        self.file.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.write_out(&mut *self.pending()?)?;
        if faults::at(faults::Point::StoreSync)? == faults::Injected::Short {
            return Err(faults::enospc());
        }
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut pending = self.pending()?;
        let pending = &mut *pending;
        let until = offset + data.len() as u64;
        if let Some((start, range)) = pending.writes.range(..until).next_back()
            && start + range.len() as u64 > offset
        {
            if *start == offset && range.len() == data.len() {
                pending.bytes[range.clone()].copy_from_slice(data);
                return Ok(());
            }
            // Over part of another pending write: what is pending goes out first, so this one wins.
            self.write_out(pending)?;
        }
        let at = pending.bytes.len();
        pending.bytes.extend_from_slice(data);
        pending.writes.insert(offset, at..pending.bytes.len());
        if pending.writes.len() >= MOST_PENDING {
            self.write_out(pending)?;
        }
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.write_out(&mut *self.pending()?)?;
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::GatheringBackend;
    use redb::StorageBackend;
    use redb::backends::FileBackend;

    fn read(backend: &GatheringBackend, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        backend.read(offset, &mut out).unwrap();
        out
    }

    #[test]
    fn writes_held_for_the_sync_read_back_as_written_before_and_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        let file = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let backend = GatheringBackend::new(FileBackend::new(file).unwrap());
        backend.set_len(16).unwrap();
        // Out of order, in two runs (0..8 and 12..20, past the file's end), one write replaced whole.
        backend.write(4, b"efgh").unwrap();
        backend.write(12, b"mnopqrst").unwrap();
        backend.write(0, b"abcd").unwrap();
        backend.write(4, b"EFGH").unwrap();
        assert_eq!(backend.len().unwrap(), 20);
        let expected = b"abcdEFGH\0\0\0\0mnopqrst";
        assert_eq!(read(&backend, 0, 20), expected);
        assert_eq!(read(&backend, 5, 9), &expected[5..14]);
        assert!(backend.read(10, &mut [0; 11]).is_err(), "past the end");
        assert_eq!(std::fs::read(&path).unwrap(), [0; 16], "nothing on the file before the sync");
        backend.sync_data().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(read(&backend, 0, 20), expected);
        // A write over part of a pending one sends that one out first, so the later bytes win.
        backend.write(0, b"wxyz").unwrap();
        backend.write(2, b"YZ").unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[..4], b"wxyz");
        assert_eq!(read(&backend, 0, 8), b"wxYZEFGH");
        // Shrinking the file through a pending write sends it out first: it is cut as a direct one would be.
        backend.set_len(3).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"wxY");
        backend.close().unwrap();
    }
}
