//! Query pacing: one rate limiter per upstream key. A region's keys add up their limits, and each query
//! goes out with the key whose turn it is, so no key ever asks more than the upstream allows it.

use crate::config::PollerConfig;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::cell::Cell;
use std::num::NonZeroU32;
use std::time::Duration;

/// The keys of one region, each with its own limiter.
pub struct KeyRing {
    limiters: Vec<DefaultDirectRateLimiter>,
    next: Cell<usize>,
}

impl KeyRing {
    /// `keys` limiters, each at `queries_per_second` less the configured margin, with a burst of one (queries
    /// evenly spaced, never two at once).
    pub fn new(keys: usize, config: &PollerConfig) -> KeyRing {
        let share = f64::from(100 - config.query_margin_percent.min(90)) / 100.0;
        let per_second = f64::from(config.queries_per_second.max(1)) * share;
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / per_second))
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::MIN);
        KeyRing { limiters: (0..keys.max(1)).map(|_| RateLimiter::direct(quota)).collect(), next: Cell::new(0) }
    }

    /// Waits until the key whose turn it is may make one query; returns its index.
    pub async fn acquire(&self) -> usize {
        let turn = self.next.get();
        self.next.set((turn + 1) % self.limiters.len().max(1));
        if let Some(limiter) = self.limiters.get(turn) {
            limiter.until_ready().await;
        }
        turn
    }
}
