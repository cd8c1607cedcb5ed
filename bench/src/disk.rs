//! Scenario `disk`: what one durable write costs on this machine's disk, the floor under a synchronous
//! request's latency (its answer waits for an fsync of the store's log). 2,000 appends of a log-record-sized
//! buffer, each followed by `fdatasync`, in a file beside the bench's stores.

use crate::harness::percentile;
use std::io::Write;
use std::time::Instant;

const SYNCS: usize = 2000;
const RECORD_BYTES: usize = 300;

pub fn run() -> String {
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap_or_else(|e| panic!("{e}"));
    let mut file = std::fs::File::create(dir.path().join("log")).unwrap_or_else(|e| panic!("{e}"));
    let record = [b'x'; RECORD_BYTES];
    let mut micros: Vec<f64> = (0..SYNCS)
        .map(|_| {
            file.write_all(&record).unwrap_or_else(|e| panic!("{e}"));
            let start = Instant::now();
            file.sync_data().unwrap_or_else(|e| panic!("{e}"));
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    format!(
        "## Disk (`fdatasync` after a {RECORD_BYTES}-byte append, {SYNCS} times)\n\n\
         | p50 | p99 | max |\n|---|---|---|\n| {:.0} us | {:.0} us | {:.0} us |\n\n",
        percentile(&micros, 0.5),
        percentile(&micros, 0.99),
        percentile(&micros, 1.0)
    )
}
