//! Query pacing: one schedule per upstream key. A region's keys add up their limits, and each query goes
//! out with the key free soonest, or with the key that created its task (each key is one upstream account,
//! which sees only its own tasks), so no key ever asks more than the upstream allows it. Processes sharing a
//! store share the keys too: each paces a key at its share of the limit
//! ([`crate::ports::storage::Storage::poll_share`]), and queries nothing while it has none.
//!
//! A query reserves its key's next free moment when it asks, and waits for it: queries go out in the order
//! they asked, evenly spaced per key. (Limiters that every waiter polls again when a moment frees up hand
//! it to whichever wakes first, and under a backlog some query waits for minutes.)

use crate::services::runtime::settings::PollerConfig;
use std::cell::{Cell, RefCell};
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};

/// How often a process without a share looks again.
const NO_SHARE_WAIT: Duration = Duration::from_millis(100);
/// How far ahead queries may reserve their moments. Short: a process's share may drop (another joins)
/// while its queries wait, and those already reserved go out at the old pace; a joining process waits
/// longer than this before it queries (`JOIN_WAIT` in the PostgreSQL store).
const RESERVED_AHEAD: Duration = Duration::from_secs(1);

/// The keys of one region, each with the moment its next query may go.
pub struct KeyRing {
    /// The region, for the per-key counts the console shows.
    region: String,
    /// Queries per second per key, margin taken, before the share.
    per_second: f64,
    /// Time between two queries of one key at this process's share; `None` without a share.
    period: Cell<Option<Duration>>,
    next_free: RefCell<Vec<Instant>>,
}

impl KeyRing {
    /// `keys` schedules, each at `queries_per_second` less the configured margin, divided among `share`
    /// processes.
    pub fn new(region: &str, keys: usize, config: &PollerConfig, share: Option<u32>) -> KeyRing {
        let margin = f64::from(100 - config.query_margin_percent.min(90)) / 100.0;
        let per_second = f64::from(config.queries_per_second.max(1)) * margin;
        let next_free = RefCell::new(vec![Instant::now(); keys.max(1)]);
        let ring = KeyRing { region: region.to_string(), per_second, period: Cell::new(None), next_free };
        ring.set_share(share);
        ring
    }

    /// Paces every key at `1 / share` of its rate from now on; none while `share` is `None`.
    pub fn set_share(&self, share: Option<u32>) {
        let period = share.map(|share| Duration::from_secs_f64(f64::from(share.max(1)) / self.per_second));
        self.period.set(period);
    }

    /// Queries worth keeping under way: what the keys send in [`RESERVED_AHEAD`], at least one per key.
    pub fn queries_ahead(&self) -> usize {
        let keys = self.next_free.borrow().len();
        let per_second = self.period.get().map_or(0.0, |period| keys as f64 / period.as_secs_f64());
        ((per_second * RESERVED_AHEAD.as_secs_f64()).ceil() as usize).max(keys)
    }

    /// Reserves the next free moment of key `key` (or, for `None`, of the key free soonest) and waits for
    /// it; returns the key's index.
    pub async fn acquire(&self, key: Option<usize>) -> usize {
        loop {
            let Some(period) = self.period.get() else {
                sleep(NO_SHARE_WAIT).await;
                continue;
            };
            let (key, at) = {
                let mut next_free = self.next_free.borrow_mut();
                let keys = next_free.len();
                let chosen = match key {
                    Some(key) => next_free.get_mut(key % keys).map(|free| (key % keys, free)),
                    None => next_free.iter_mut().enumerate().min_by_key(|(_, free)| **free),
                };
                let Some((key, free)) = chosen else { return 0 };
                let at = (*free).max(Instant::now());
                *free = at + period;
                (key, at)
            };
            sleep_until(at).await;
            crate::support::metrics::key_query(&self.region, key);
            return key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(queries_per_second: u32) -> PollerConfig {
        PollerConfig { queries_per_second, query_margin_percent: 0, ..PollerConfig::default() }
    }

    #[actix_web::test]
    async fn queries_go_out_in_order_spread_over_the_keys() {
        let ring = KeyRing::new("test", 2, &config(10), Some(1));
        let start = Instant::now();
        let mut keys = Vec::new();
        for _ in 0..6 {
            keys.push(ring.acquire(None).await);
        }
        // Two keys at 10 per second each: six queries take two periods after the first pair.
        assert_eq!(keys.iter().filter(|k| **k == 0).count(), 3);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert_eq!(ring.queries_ahead(), 20);
    }

    #[actix_web::test]
    async fn a_share_slows_every_key() {
        let ring = KeyRing::new("test", 1, &config(10), Some(2));
        assert_eq!(ring.queries_ahead(), 5);
        ring.set_share(None);
        assert_eq!(ring.queries_ahead(), 1);
        ring.set_share(Some(1));
        let start = Instant::now();
        for _ in 0..3 {
            ring.acquire(None).await;
        }
        assert!(start.elapsed() >= Duration::from_millis(200));
    }

    #[actix_web::test]
    async fn a_query_for_one_accounts_task_waits_for_that_key() {
        let ring = KeyRing::new("test", 2, &config(10), Some(1));
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(ring.acquire(Some(1)).await, 1);
        }
        // Key 0 stays free while key 1 is paced.
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert_eq!(ring.acquire(None).await, 0);
    }
}
