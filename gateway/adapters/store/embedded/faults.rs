//! Faults injected under the store, to test what the gateway does when its disk fails.
//!
//! `MEDIAGATE_STORE_FAULTS=FILE` names a file read again at every fault point, so a test can start and end
//! a fault while the gateway runs (a disk filling up, then space freed). Each line is `POINT KIND [P]`:
//! - POINT: `log-write` (the write-ahead log's synchronous write), `store-write` (redb's page writes) or
//!   `store-sync` (redb's sync);
//! - KIND: `enospc`, `eio`, or `short` (part of the bytes reach the file, then ENOSPC: a torn write);
//! - P: the chance that a call fails, from 0 to 1 (1 when absent), for failures at random points.
//!
//! Unset (every real deployment), a fault point costs one load of a value initialised once.

use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    LogWrite,
    StoreWrite,
    StoreSync,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::LogWrite => "log-write",
            Point::StoreWrite => "store-write",
            Point::StoreSync => "store-sync",
        }
    }
}

/// What a fault point does to its call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Injected {
    /// Nothing: the call goes ahead.
    None,
    /// Write only part of the bytes, then fail with ENOSPC.
    Short,
}

fn plan_file() -> Option<&'static PathBuf> {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    FILE.get_or_init(|| std::env::var_os("MEDIAGATE_STORE_FAULTS").map(PathBuf::from)).as_ref()
}

/// The fault planned for `point` now: an error to return instead of the call, a short write, or nothing.
pub(crate) fn at(point: Point) -> io::Result<Injected> {
    let Some(file) = plan_file() else { return Ok(Injected::None) };
    let plan = std::fs::read_to_string(file).unwrap_or_default();
    for line in plan.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some(point.name()) {
            continue;
        }
        let kind = words.next().unwrap_or_default();
        let chance = words.next().and_then(|p| p.parse::<f64>().ok()).unwrap_or(1.0);
        if rand::random::<f64>() >= chance {
            continue;
        }
        return match kind {
            "enospc" => Err(enospc()),
            "eio" => Err(io::Error::from_raw_os_error(libc::EIO)),
            "short" => Ok(Injected::Short),
            _ => Ok(Injected::None),
        };
    }
    Ok(Injected::None)
}

pub(crate) fn enospc() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}
