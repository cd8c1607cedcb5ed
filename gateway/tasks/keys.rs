//! Query pacing: one rate limiter per upstream key. A region's keys add up their limits, and each query
//! goes out with the key whose turn it is, so no key ever asks more than the upstream allows it. Processes
//! sharing a store share the keys too: each paces a key at its share of the limit
//! ([`crate::store::Storage::poll_share`]), and queries nothing while it has none.

use crate::config::PollerConfig;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::cell::{Cell, RefCell};
use std::num::NonZeroU32;
use std::rc::Rc;
use std::time::Duration;

/// How often a process without a share looks again.
const NO_SHARE_WAIT: Duration = Duration::from_millis(100);

/// The keys of one region, each with its own limiter.
pub struct KeyRing {
    keys: usize,
    /// Queries per second per key, margin taken.
    per_second: f64,
    limiters: RefCell<Vec<Rc<DefaultDirectRateLimiter>>>,
    next: Cell<usize>,
}

impl KeyRing {
    /// `keys` limiters, each at `queries_per_second` less the configured margin, divided among `share`
    /// processes, with a burst of one (queries evenly spaced, never two at once).
    pub fn new(keys: usize, config: &PollerConfig, share: Option<u32>) -> KeyRing {
        let margin = f64::from(100 - config.query_margin_percent.min(90)) / 100.0;
        let per_second = f64::from(config.queries_per_second.max(1)) * margin;
        let ring = KeyRing { keys: keys.max(1), per_second, limiters: RefCell::default(), next: Cell::new(0) };
        ring.set_share(share);
        ring
    }

    /// Paces every key at `1 / share` of its rate from now on; none while `share` is `None`.
    pub fn set_share(&self, share: Option<u32>) {
        let limiters = match share {
            Some(share) => {
                let per_second = self.per_second / f64::from(share.max(1));
                let quota = Quota::with_period(Duration::from_secs_f64(1.0 / per_second))
                    .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
                    .allow_burst(NonZeroU32::MIN);
                (0..self.keys).map(|_| Rc::new(RateLimiter::direct(quota))).collect()
            }
            None => Vec::new(),
        };
        *self.limiters.borrow_mut() = limiters;
    }

    /// Waits until the key whose turn it is may make one query; returns its index.
    pub async fn acquire(&self) -> usize {
        loop {
            let turn = self.next.get();
            let limiter = self.limiters.borrow().get(turn).cloned();
            let Some(limiter) = limiter else {
                actix_web::rt::time::sleep(NO_SHARE_WAIT).await;
                continue;
            };
            self.next.set((turn + 1) % self.keys);
            limiter.until_ready().await;
            return turn;
        }
    }
}
