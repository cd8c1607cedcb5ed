//! The write-ahead log: how a write becomes durable without redb flushing its B-tree pages.
//!
//! Every batch the writer publishes to the overlay is appended here as one record of the key/value changes
//! it made. The writer only stages a record in memory ([`LogFile`]); the syncer's write of what is staged,
//! synchronous and (where the filesystem takes it) direct, is what makes a batch durable: no page cache to
//! copy into and write back, one system call per group of batches. Every so often a checkpoint commits the
//! overlay's frozen layer to redb, durably, with the last record's sequence number, and the log goes on in
//! its other file, from that file's start. On open, the records after the checkpoint are replayed.
//!
//! Two files, because a checkpoint is committed in the background (`checkpointer`): until it is durable,
//! the records it holds must stay, so the log moves to the other file instead of starting over in this
//! one. The other file's records are in the checkpoint before, which was durable before this one started.
//! So the records after a durable checkpoint are always the chain that starts at the start of one file
//! and, if it ends there, goes on at the start of the other.
//!
//! A record is `len: u32, crc32(seq ++ changes): u32, seq: u64, changes`, little-endian. A file's chain
//! is its records from its start while each is whole, checks out and carries the next sequence number;
//! the first that does not (a torn tail, zeroes, or a record of an earlier cycle) ends it. Open replays,
//! then empties both files once a durable checkpoint holds what they held, so every record a file ever
//! holds is of this process, numbered above the stale ones after it. Replaying changes is idempotent.

use super::StoreError;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

const HEADER: usize = 16;
/// The unit of a direct write: its file offset, its length and its buffer's address are multiples of this.
const PAGE: usize = 4096;
/// Bytes of zeroes each file starts with. A synchronous write to a file that grew must also commit the
/// filesystem's journal, and on ext4 (ordered mode) that first writes out every other file's newly
/// allocated dirty pages: here, a checkpoint's pages in redb's file, which made such log syncs many times
/// slower. A file written within its size and allocated blocks needs no journal commit. A log file
/// outgrows this only if the writes of a checkpoint interval (see `CHECKPOINT_INTERVAL`), or of a checkpoint commit
/// that takes longer, do: about 1,400 synchronous requests' records (~3 KiB each).
const PREALLOCATED: usize = 4 << 20;
/// The log's two files, in the data dir.
pub(crate) const FILES: [&str; 2] = ["mediagate.wal.0", "mediagate.wal.1"];

/// The open log: which file the next record goes to, and where. Its writes to disk are the syncer's
/// ([`Wal::log_files`]).
pub(crate) struct Wal {
    /// For reading at open and emptying; records go through `log_files`.
    files: [File; 2],
    log_files: [Arc<LogFile>; 2],
    /// Which files are [`PREALLOCATED`] zeroes already, so starting over leaves them as they are.
    empty: [bool; 2],
    current: usize,
    offset: u64,
    next_seq: u64,
}

impl Wal {
    /// Opens (or creates) the log's files under `dir` and returns the log with the changes of every
    /// record after `checkpoint`, in order. The caller applies them, checkpoints durably and calls
    /// [`Wal::start_over`] before appending.
    pub(crate) fn open(dir: &Path, checkpoint: u64) -> Result<(Wal, Vec<Vec<u8>>), StoreError> {
        let open = |name: &str| -> Result<(File, Vec<u8>), StoreError> {
            let path = dir.join(name);
            let io = |e: std::io::Error| StoreError::new(format!("write-ahead log {}: {e}", path.display()));
            let mut file =
                File::options().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(io)?;
            Ok((file, bytes))
        };
        let (first, first_bytes) = open(FILES[0])?;
        let (second, second_bytes) = open(FILES[1])?;
        let log_files = [Arc::new(LogFile::open(&dir.join(FILES[0]))?), Arc::new(LogFile::open(&dir.join(FILES[1]))?)];
        let chains = [chain(&first_bytes), chain(&second_bytes)];
        let mut records = Vec::new();
        if let Some(start) = chains.iter().position(|chain| chain.first_seq == Some(checkpoint + 1)) {
            records.extend(chains[start].records.iter().copied());
            let next = &chains[1 - start];
            if next.first_seq == Some(checkpoint + 1 + records.len() as u64) {
                records.extend(next.records.iter().copied());
            }
        }
        let empty = |bytes: &[u8]| bytes.len() == PREALLOCATED && bytes.iter().all(|byte| *byte == 0);
        let wal = Wal {
            files: [first, second],
            log_files,
            empty: [empty(&first_bytes), empty(&second_bytes)],
            current: 0,
            offset: 0,
            next_seq: checkpoint + 1 + records.len() as u64,
        };
        Ok((wal, records.into_iter().map(<[u8]>::to_vec).collect()))
    }

    /// Empties both files (down to [`PREALLOCATED`] zeroes), once a durable checkpoint holds every record
    /// they held; the log starts at the first file's start.
    pub(crate) fn start_over(&mut self) -> Result<(), StoreError> {
        let zeroes = vec![0; PREALLOCATED];
        for (file, _) in self.files.iter().zip(self.empty).filter(|(_, empty)| !empty) {
            file.set_len(0).map_err(failed)?;
            file.write_all_at(&zeroes, 0).map_err(failed)?;
            file.sync_all().map_err(failed)?;
        }
        self.log_files.iter().for_each(|file| file.restart());
        (self.empty, self.current, self.offset) = ([true; 2], 0, 0);
        Ok(())
    }

    /// The sequence number of the last record appended (or replayed).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Bytes appended since the log last moved to a file.
    pub(crate) fn len(&self) -> u64 {
        self.offset
    }

    /// The file the next record goes to, as [`Wal::log_files`] orders them.
    pub(crate) fn current(&self) -> usize {
        self.current
    }

    /// The two files as the syncer writes them: a write covers every record staged in the file before it.
    pub(crate) fn log_files(&self) -> [Arc<LogFile>; 2] {
        self.log_files.clone()
    }

    /// Stages `record` in the current file (not on disk yet: see [`LogFile::write_out`]) and empties it for
    /// the next.
    pub(crate) fn append(&mut self, record: &mut Record) -> Result<(), StoreError> {
        let seq = self.next_seq;
        self.empty[self.current] = false;
        let (header, changes) = record.0.split_at_mut(HEADER);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(changes);
        header[..4].copy_from_slice(&u32::try_from(changes.len() + 8).map_err(too_large)?.to_le_bytes());
        header[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
        header[8..].copy_from_slice(&seq.to_le_bytes());
        self.log_files[self.current].stage(&record.0);
        self.offset += record.0.len() as u64;
        self.next_seq += 1;
        record.0.truncate(HEADER);
        Ok(())
    }

    /// Goes on at the other file's start, once a checkpoint of every record so far is under way and the
    /// checkpoint before it is durable (the other file's records are all in that one); returns the file
    /// left, whose last records may still need a sync. The old bytes stay until overwritten (so the file
    /// keeps its size and a sync needs no metadata update); a chain never reads past the first record
    /// that does not carry the next sequence number.
    pub(crate) fn switch(&mut self) -> usize {
        let left = self.current;
        (self.current, self.offset) = (1 - left, 0);
        self.log_files[self.current].restart();
        left
    }

    /// Writes out both files' staged records, as the syncer would.
    #[cfg(test)]
    fn write_out(&self) -> std::io::Result<()> {
        let mut scratch = Scratch::default();
        self.log_files.iter().try_for_each(|file| file.write_out(&mut scratch))
    }
}

/// One of the log's files as the syncer writes it: the records staged since its last write, from the start
/// of the page they begin in.
pub(crate) struct LogFile {
    /// Opened for synchronous writes (`O_DSYNC`: each is durable when it returns), and direct ones
    /// (`O_DIRECT`: no page cache) where the filesystem takes them.
    file: File,
    staged: Mutex<Staged>,
}

#[derive(Default)]
struct Staged {
    /// Counts the log's starts in this file: bytes written out from an earlier one do not trim newer ones.
    cycle: u64,
    /// The file offset of `bytes[0]`: a page boundary.
    offset: u64,
    bytes: Vec<u8>,
    /// How many of `bytes` are on disk already (the head of a page the next write rewrites).
    written: usize,
}

impl LogFile {
    fn open(path: &Path) -> Result<LogFile, StoreError> {
        let io = |e: std::io::Error| StoreError::new(format!("write-ahead log {}: {e}", path.display()));
        let open = |flags| File::options().read(true).write(true).custom_flags(flags).open(path).map_err(io);
        #[cfg(target_os = "linux")]
        if let Ok(file) = open(libc::O_DSYNC | libc::O_DIRECT) {
            // Some filesystems take the flag and refuse direct I/O itself: a read tells.
            let mut probe = Scratch::default();
            if file.read_at(probe.page_aligned(PAGE), 0).is_ok() {
                return Ok(LogFile { file, staged: Mutex::default() });
            }
        }
        tracing::info!(path = %path.display(), "no direct I/O on this filesystem: the log goes through the page cache");
        Ok(LogFile { file: open(libc::O_DSYNC)?, staged: Mutex::default() })
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, Staged> {
        self.staged.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a record after the ones staged.
    fn stage(&self, record: &[u8]) {
        self.staged().bytes.extend_from_slice(record);
    }

    /// The log starts over at the file's start: what was staged is dropped (a durable checkpoint holds it).
    /// Its room is kept: a cycle stages about as much as the last, and growing a buffer again each cycle
    /// cost copies and fresh pages.
    fn restart(&self) {
        let mut staged = self.staged();
        staged.cycle += 1;
        staged.bytes.clear();
        (staged.offset, staged.written) = (0, 0);
    }

    /// Writes what is staged, zero-padded to whole pages, and returns once it is durable. The page the staged
    /// bytes begin in is written whole again, its durable head unchanged: a write a crash tears leaves
    /// that head as it was whichever of its sectors landed.
    pub(crate) fn write_out(&self, scratch: &mut Scratch) -> std::io::Result<()> {
        let (cycle, offset, len, buffer) = {
            let staged = self.staged();
            let len = staged.bytes.len();
            if len == staged.written {
                return Ok(());
            }
            let buffer = scratch.page_aligned(len.next_multiple_of(PAGE));
            buffer[..len].copy_from_slice(&staged.bytes);
            buffer[len..].fill(0);
            (staged.cycle, staged.offset, len, buffer)
        };
        if super::faults::at(super::faults::Point::LogWrite)? == super::faults::Injected::Short {
            // A torn write: its first page reaches the file, then the disk is full.
            self.file.write_all_at(&buffer[..PAGE.min(buffer.len())], offset)?;
            return Err(super::faults::enospc());
        }
        self.file.write_all_at(buffer, offset)?;
        let mut staged = self.staged();
        if staged.cycle == cycle {
            // Whole pages are done; the last, partial one is written again with what follows it.
            let done = len / PAGE * PAGE;
            staged.bytes.drain(..done);
            staged.offset += done as u64;
            staged.written = len - done;
        }
        Ok(())
    }
}

/// A buffer whose usable part begins at a page boundary, for direct writes; kept from write to write.
#[derive(Default)]
pub(crate) struct Scratch(Vec<u8>);

impl Scratch {
    fn page_aligned(&mut self, len: usize) -> &mut [u8] {
        if self.0.len() < len + PAGE {
            self.0 = vec![0; (len + PAGE).next_power_of_two()];
        }
        let skip = (PAGE - self.0.as_ptr().addr() % PAGE) % PAGE;
        &mut self.0[skip..skip + len]
    }
}

/// A file's records from its start, while each follows the one before.
struct Chain<'a> {
    /// The first record's number; none without a record.
    first_seq: Option<u64>,
    records: Vec<&'a [u8]>,
}

fn chain(bytes: &[u8]) -> Chain<'_> {
    let mut records = Vec::new();
    let mut rest = bytes;
    let mut first_seq = None;
    while let Some(header) = rest.get(..HEADER) {
        let word = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        let (len, crc) = (word(0) as usize, word(4));
        let Some(body) = rest.get(8..8 + len).filter(|_| len >= 8) else { break };
        let seq = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
        if seq != first_seq.unwrap_or(seq) + records.len() as u64 || crc32fast::hash(body) != crc {
            break;
        }
        first_seq.get_or_insert(seq);
        records.push(&body[8..]);
        rest = &rest[8 + len..];
    }
    Chain { first_seq, records }
}

/// What replay would take from a log file holding `bytes` (its chain of records from the first, each
/// decoded into its changes): the number of changes. For the fuzzer; a damaged file reads as the records
/// before the damage.
pub(crate) fn replay_bytes(bytes: &[u8]) -> Result<usize, StoreError> {
    chain(bytes).records.iter().try_fold(0, |count, record| Ok(count + decode_changes(record)?.len()))
}

fn failed(e: std::io::Error) -> StoreError {
    StoreError::new(format!("write-ahead log: {e}"))
}

fn too_large(_: std::num::TryFromIntError) -> StoreError {
    StoreError::new("write-ahead log: a batch over 4 GiB")
}

/// A record being put together: room for the header [`Wal::append`] fills in, then its changes. The
/// writer keeps one from record to record, so the changes are written straight into a buffer that is
/// already large enough, and the file gets them without another copy.
pub(crate) struct Record(Vec<u8>);

impl Default for Record {
    fn default() -> Record {
        Record(vec![0; HEADER])
    }
}

/// Appends `bytes` after their `u32` length; returns where they lie.
fn length_prefixed(out: &mut Vec<u8>, bytes: &[u8]) -> Range<usize> {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    let at = out.len();
    out.extend_from_slice(bytes);
    at..out.len()
}

impl Record {
    /// No change yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.len() == HEADER
    }

    /// Where the next change goes, to [`Record::truncate`] back to.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Drops the changes from `len` on.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.0.truncate(len.max(HEADER));
    }

    /// Appends a change: `op: u8 (0 put, 1 remove), table: u8 len + name, key: u32 len + bytes, value (put
    /// only): u32 len + bytes`. Returns where its key lies, for [`Record::bytes`].
    pub(crate) fn push(&mut self, table: &str, key: &[u8], value: Option<&[u8]>) -> Range<usize> {
        let out = &mut self.0;
        out.push(u8::from(value.is_none()));
        out.push(table.len() as u8);
        out.extend_from_slice(table.as_bytes());
        let key = length_prefixed(out, key);
        if let Some(value) = value {
            length_prefixed(out, value);
        }
        key
    }

    /// Bytes the record holds, as [`Record::push`] placed them.
    pub(crate) fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self.0[range]
    }

    /// The changes, as [`decode_changes`] reads them.
    #[cfg(test)]
    fn changes(&self) -> &[u8] {
        &self.0[HEADER..]
    }
}

/// One change of a record, as [`Record::push`] wrote it.
pub(crate) struct Change<'a> {
    pub table: &'a str,
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

/// The changes of one record, in order; an error if the record is malformed (its checksum matched, so
/// only a bug writes such a record).
pub(crate) fn decode_changes(bytes: &[u8]) -> Result<Vec<Change<'_>>, StoreError> {
    let mut cursor = Cursor(bytes);
    let mut changes = Vec::new();
    while !cursor.0.is_empty() {
        let remove = cursor.take(1)?[0] == 1;
        let name_len = cursor.take(1)?[0] as usize;
        let table = std::str::from_utf8(cursor.take(name_len)?).map_err(|_| malformed())?;
        let key = cursor.sized()?;
        let value = if remove { None } else { Some(cursor.sized()?) };
        changes.push(Change { table, key, value });
    }
    Ok(changes)
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let (head, tail) = self.0.split_at_checked(n).ok_or_else(malformed)?;
        self.0 = tail;
        Ok(head)
    }

    fn sized(&mut self) -> Result<&'a [u8], StoreError> {
        let len = self.take(4)?;
        self.take(u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize)
    }
}

fn malformed() -> StoreError {
    StoreError::new("write-ahead log: a malformed record")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn changes(key: &str) -> Record {
        let mut record = Record::default();
        record.push("tasks", key.as_bytes(), Some(b"{}"));
        record.push("in_flight", key.as_bytes(), None);
        record
    }

    fn keys(records: &[Vec<u8>]) -> Vec<String> {
        let first = |r: &Vec<u8>| String::from_utf8(decode_changes(r).unwrap()[0].key.to_vec()).unwrap();
        records.iter().map(first).collect()
    }

    #[test]
    fn changes_round_trip() {
        let record = changes("t1");
        let bytes = record.changes();
        let decoded = decode_changes(bytes).unwrap();
        assert_eq!((decoded[0].table, decoded[0].key, decoded[0].value), ("tasks", &b"t1"[..], Some(&b"{}"[..])));
        assert_eq!((decoded[1].table, decoded[1].key, decoded[1].value), ("in_flight", &b"t1"[..], None));
        assert!(decode_changes(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn replay_takes_the_chain_after_the_checkpoint_across_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, replay) = Wal::open(dir.path(), 0).unwrap();
        assert!(replay.is_empty());
        wal.start_over().unwrap();
        for key in ["a", "b", "c"] {
            wal.append(&mut changes(key)).unwrap();
        }
        assert!(Wal::open(dir.path(), 0).unwrap().1.is_empty(), "staged, not on disk yet");
        wal.write_out().unwrap();
        assert_eq!(keys(&Wal::open(dir.path(), 0).unwrap().1), ["a", "b", "c"]);
        // Checkpointed at 3, the log goes on in the other file: a checkpoint at 3 replays only what
        // follows, one still at 0 (its sync did not finish) the first file and then the second.
        assert_eq!(wal.switch(), 0);
        wal.append(&mut changes("d")).unwrap();
        wal.write_out().unwrap();
        assert_eq!(keys(&Wal::open(dir.path(), 3).unwrap().1), ["d"]);
        assert_eq!(keys(&Wal::open(dir.path(), 0).unwrap().1), ["a", "b", "c", "d"]);
        // Checkpointed at 4, back in the first file over its first record: the old ones after it are of an
        // earlier cycle and never replayed, nor is the second file, whose chain starts before the checkpoint.
        assert_eq!(wal.switch(), 1);
        wal.append(&mut changes("e")).unwrap();
        wal.write_out().unwrap();
        assert_eq!(keys(&Wal::open(dir.path(), 4).unwrap().1), ["e"]);
        assert_eq!(keys(&Wal::open(dir.path(), 3).unwrap().1), ["d", "e"]);
        assert!(Wal::open(dir.path(), 5).unwrap().1.is_empty());
        assert!(Wal::open(dir.path(), 1).unwrap().1.is_empty());
        // A torn or corrupt record ends the replay.
        let path = dir.path().join(FILES[0]);
        let mut bytes = std::fs::read(&path).unwrap();
        let record = changes("e").len();
        std::fs::write(&path, &bytes[..record - 1]).unwrap();
        assert!(Wal::open(dir.path(), 4).unwrap().1.is_empty());
        bytes[HEADER] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Wal::open(dir.path(), 4).unwrap().1.is_empty());
    }

    #[test]
    fn records_written_out_a_piece_at_a_time_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), 0).unwrap();
        wal.start_over().unwrap();
        // Records of about 3 KiB: each write out ends mid-page, and the next one writes that page again.
        let big = |key: &str| {
            let mut record = Record::default();
            record.push("tasks", key.as_bytes(), Some(&[7; 3000]));
            record
        };
        let written: Vec<String> = (0..9).map(|i| format!("k{i}")).collect();
        for (i, key) in written.iter().enumerate() {
            wal.append(&mut big(key)).unwrap();
            if i % 2 == 0 {
                wal.write_out().unwrap();
            }
        }
        wal.write_out().unwrap();
        let (_, records) = Wal::open(dir.path(), 0).unwrap();
        assert_eq!(keys(&records), written);
        assert!(records.iter().all(|r| decode_changes(r).unwrap()[0].value == Some(&[7; 3000][..])));
    }

    #[test]
    fn the_next_record_follows_the_replayed_ones_and_starting_over_empties_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), 7).unwrap();
        wal.append(&mut changes("a")).unwrap();
        wal.write_out().unwrap();
        let (mut wal, replay) = Wal::open(dir.path(), 7).unwrap();
        assert_eq!((replay.len(), wal.last_seq()), (1, 8));
        wal.start_over().unwrap();
        assert!(Wal::open(dir.path(), 7).unwrap().1.is_empty());
        let emptied = std::fs::read(dir.path().join(FILES[0])).unwrap();
        assert!(emptied.len() == PREALLOCATED && emptied.iter().all(|byte| *byte == 0));
    }
}
