//! The write-ahead log: how a write becomes durable without redb flushing its B-tree pages.
//!
//! Every batch the writer commits to redb (non-durably: applied and visible, still in memory) is appended
//! here as one record of the key/value changes it made; an fsync of this file is what makes a batch
//! durable. Every so often the writer checkpoints: one durable redb commit that also stores the last
//! record's sequence number, after which the log is written again from its start. On open, the records
//! after the checkpoint are replayed.
//!
//! A record is `len: u32, crc32(seq ++ changes): u32, seq: u64, changes`, little-endian. Replay takes
//! records from the file's start while each is whole, checks out and carries the next sequence number;
//! the first that does not (a torn tail, zeroes, or a record of the cycle before the checkpoint) ends it.
//! Replaying changes is idempotent, which makes a crash between a checkpoint and the next record harmless.

use super::StoreError;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

const HEADER: usize = 16;

/// The open log: where the next record goes. Its fsyncs are the syncer's (`sync_handle`).
pub(crate) struct Wal {
    file: File,
    offset: u64,
    next_seq: u64,
    record: Vec<u8>,
}

impl Wal {
    /// Opens (or creates) the log and returns it with the changes of every record after `checkpoint`, in
    /// order. The caller applies them and checkpoints before appending: the log then starts over.
    pub(crate) fn open(path: &Path, checkpoint: u64) -> Result<(Wal, Vec<Vec<u8>>), StoreError> {
        let io = |e: std::io::Error| StoreError::new(format!("write-ahead log {}: {e}", path.display()));
        let mut file = File::options().read(true).write(true).create(true).truncate(false).open(path).map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let records = records_after(&bytes, checkpoint);
        let wal = Wal { file, offset: 0, next_seq: checkpoint + 1 + records.len() as u64, record: Vec::new() };
        Ok((wal, records.into_iter().map(<[u8]>::to_vec).collect()))
    }

    /// The sequence number of the last record appended (or replayed).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Bytes appended since the log last started over.
    pub(crate) fn len(&self) -> u64 {
        self.offset
    }

    /// A handle on the same file for fsyncs, which cover every record written before they start.
    pub(crate) fn sync_handle(&self) -> Result<File, StoreError> {
        self.file.try_clone().map_err(failed)
    }

    /// Writes one record (not yet fsynced).
    pub(crate) fn append(&mut self, changes: &[u8]) -> Result<(), StoreError> {
        let seq = self.next_seq;
        self.record.clear();
        self.record.extend_from_slice(&u32::try_from(changes.len() + 8).map_err(too_large)?.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(changes);
        self.record.extend_from_slice(&crc.finalize().to_le_bytes());
        self.record.extend_from_slice(&seq.to_le_bytes());
        self.record.extend_from_slice(changes);
        self.file.write_all_at(&self.record, self.offset).map_err(failed)?;
        self.offset += self.record.len() as u64;
        self.next_seq += 1;
        Ok(())
    }

    /// Starts over at the file's start, once a checkpoint holds every record. The old bytes stay until
    /// overwritten (so the file keeps its size and an fsync needs no metadata update); replay never reads
    /// past the first record that does not carry the next sequence number.
    pub(crate) fn restart(&mut self) {
        self.offset = 0;
    }
}

fn records_after(bytes: &[u8], checkpoint: u64) -> Vec<&[u8]> {
    let mut records = Vec::new();
    let mut rest = bytes;
    let mut expected = checkpoint + 1;
    while let Some(header) = rest.get(..HEADER) {
        let word = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        let (len, crc) = (word(0) as usize, word(4));
        let Some(body) = rest.get(8..8 + len).filter(|_| len >= 8) else { break };
        let seq = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
        if seq != expected || crc32fast::hash(body) != crc {
            break;
        }
        records.push(&body[8..]);
        rest = &rest[8 + len..];
        expected += 1;
    }
    records
}

fn failed(e: std::io::Error) -> StoreError {
    StoreError::new(format!("write-ahead log: {e}"))
}

fn too_large(_: std::num::TryFromIntError) -> StoreError {
    StoreError::new("write-ahead log: a batch over 4 GiB")
}

/// Appends `change` to a record's changes: `op: u8 (0 put, 1 remove), table: u8 len + name,
/// key: u32 len + bytes, value (put only): u32 len + bytes`.
pub(crate) fn encode_change(out: &mut Vec<u8>, table: &str, key: &[u8], value: Option<&[u8]>) {
    out.push(u8::from(value.is_none()));
    out.push(table.len() as u8);
    out.extend_from_slice(table.as_bytes());
    for bytes in std::iter::once(key).chain(value) {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
}

/// One change of a record, as [`encode_change`] wrote it.
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

    fn changes(key: &str) -> Vec<u8> {
        let mut out = Vec::new();
        encode_change(&mut out, "tasks", key.as_bytes(), Some(b"{}"));
        encode_change(&mut out, "in_flight", key.as_bytes(), None);
        out
    }

    fn keys(records: &[Vec<u8>]) -> Vec<String> {
        let first = |r: &Vec<u8>| String::from_utf8(decode_changes(r).unwrap()[0].key.to_vec()).unwrap();
        records.iter().map(first).collect()
    }

    #[test]
    fn changes_round_trip() {
        let bytes = changes("t1");
        let decoded = decode_changes(&bytes).unwrap();
        assert_eq!((decoded[0].table, decoded[0].key, decoded[0].value), ("tasks", &b"t1"[..], Some(&b"{}"[..])));
        assert_eq!((decoded[1].table, decoded[1].key, decoded[1].value), ("in_flight", &b"t1"[..], None));
        assert!(decode_changes(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn replay_takes_the_records_after_the_checkpoint_up_to_the_first_that_does_not_follow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (mut wal, replay) = Wal::open(&path, 0).unwrap();
        assert!(replay.is_empty());
        for key in ["a", "b", "c"] {
            wal.append(&changes(key)).unwrap();
        }
        assert_eq!(keys(&Wal::open(&path, 0).unwrap().1), ["a", "b", "c"]);
        // Checkpointed at 3, the log starts over with one shorter record: the old tail is never replayed.
        wal.restart();
        wal.append(&changes("d")).unwrap();
        assert_eq!(keys(&Wal::open(&path, 3).unwrap().1), ["d"]);
        // A checkpoint that holds the whole log leaves nothing; one taken before the restart reads stale
        // records, which do not carry the number it expects.
        assert!(Wal::open(&path, 4).unwrap().1.is_empty());
        assert!(Wal::open(&path, 1).unwrap().1.is_empty());
        // A torn or corrupt record ends the replay.
        let mut bytes = std::fs::read(&path).unwrap();
        let record = HEADER + changes("d").len();
        std::fs::write(&path, &bytes[..record - 1]).unwrap();
        assert!(Wal::open(&path, 3).unwrap().1.is_empty());
        bytes[HEADER] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Wal::open(&path, 3).unwrap().1.is_empty());
    }

    #[test]
    fn the_next_record_follows_the_replayed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (mut wal, _) = Wal::open(&path, 7).unwrap();
        wal.append(&changes("a")).unwrap();
        let (wal, replay) = Wal::open(&path, 7).unwrap();
        assert_eq!((replay.len(), wal.last_seq()), (1, 8));
    }
}
