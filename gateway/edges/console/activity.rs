//! What this replica did lately, for the overview: the running totals (`metrics::totals`) sampled every
//! [`SAMPLE_EVERY`] into a ring of the last hour, charted per minute as differences between samples.

use crate::support::metrics::totals;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// An hour of samples.
const KEPT: usize = 360;
const MINUTE_MS: i64 = 60_000;

/// The totals at one moment.
#[derive(Clone, Default)]
pub struct Sample {
    pub at_ms: i64,
    /// Below 400, 4xx, 5xx.
    pub requests: [u64; 3],
    pub succeeded: u64,
    pub unsucceeded: u64,
    pub upstream_calls: u64,
    pub upstream_errors: u64,
    pub upstream_micros: u64,
    pub upstream_timed: u64,
    pub key_queries: HashMap<String, Vec<u64>>,
}

impl Sample {
    /// The totals now.
    pub fn now() -> Sample {
        let t = totals();
        Sample {
            at_ms: crate::domain::clock::now_ms(),
            requests: [t.requests[0].load(Relaxed), t.requests[1].load(Relaxed), t.requests[2].load(Relaxed)],
            succeeded: t.tasks_succeeded.load(Relaxed),
            unsucceeded: t.tasks_unsucceeded.load(Relaxed),
            upstream_calls: t.upstream_calls.load(Relaxed),
            upstream_errors: t.upstream_errors.load(Relaxed),
            upstream_micros: t.upstream_micros.load(Relaxed),
            upstream_timed: t.upstream_timed.load(Relaxed),
            key_queries: t.key_queries.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

static HISTORY: Mutex<VecDeque<Sample>> = Mutex::new(VecDeque::new());

/// Samples until the process ends. Call once.
pub async fn run() {
    loop {
        record(Sample::now());
        actix_web::rt::time::sleep(SAMPLE_EVERY).await;
    }
}

fn record(sample: Sample) {
    let mut history = HISTORY.lock().unwrap_or_else(|e| e.into_inner());
    if history.len() == KEPT {
        history.pop_front();
    }
    history.push_back(sample);
}

/// The samples kept, oldest first, and one taken now.
pub fn history() -> Vec<Sample> {
    let mut samples: Vec<Sample> = HISTORY.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
    samples.push(Sample::now());
    samples
}

/// The last sample at or before `at_ms` (the first one if none is that old).
fn at(samples: &[Sample], at_ms: i64) -> Option<&Sample> {
    samples.iter().rev().find(|s| s.at_ms <= at_ms).or_else(|| samples.first())
}

/// How much each of `counts` grew in each of the last `minutes` minutes up to the newest sample, labelled
/// `HH:MM`.
pub fn per_minute(samples: &[Sample], minutes: i64, counts: impl Fn(&Sample) -> Vec<u64>) -> Vec<(String, Vec<i64>)> {
    let Some(newest) = samples.last() else { return Vec::new() };
    (0..minutes)
        .rev()
        .map(|back| {
            let end = newest.at_ms - back * MINUTE_MS;
            let grew = match (at(samples, end - MINUTE_MS), at(samples, end)) {
                (Some(from), Some(to)) => counts(to)
                    .iter()
                    .zip(counts(from))
                    .map(|(now, before)| i64::try_from(now.saturating_sub(before)).unwrap_or(i64::MAX))
                    .collect(),
                _ => Vec::new(),
            };
            (crate::domain::clock::local_time(end).chars().skip(11).take(5).collect(), grew)
        })
        .collect()
}

/// The newest sample and the one a minute before it: what changed in the last minute.
pub fn last_minute(samples: &[Sample]) -> Option<(&Sample, &Sample)> {
    let newest = samples.last()?;
    Some((at(samples, newest.at_ms - MINUTE_MS)?, newest))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample(at_ms: i64, succeeded: u64) -> Sample {
        Sample { at_ms, succeeded, ..Sample::default() }
    }

    #[test]
    fn counts_grow_per_minute_between_samples() {
        let samples: Vec<Sample> = (0..=18).map(|n| sample(n * 10_000, n as u64 * 2)).collect();
        let minutes = per_minute(&samples, 3, |s| vec![s.succeeded]);
        assert_eq!(minutes.iter().map(|(_, n)| n[0]).collect::<Vec<_>>(), [12, 12, 12]);
        let (from, to) = last_minute(&samples).unwrap();
        assert_eq!(to.succeeded - from.succeeded, 12);
        // Before the first sample nothing is known to have happened.
        assert_eq!(per_minute(&samples[..1], 2, |s| vec![s.succeeded]).iter().map(|(_, n)| n[0]).sum::<i64>(), 0);
    }
}
