//! The write-ahead log's reader, on arbitrary file contents: a torn, truncated or corrupted log must read
//! as the records before the damage, never panic and never hand replay a record that fails its checksum.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let _ = mediagate::adapters::store::embedded::replay_log_bytes(bytes);
});
