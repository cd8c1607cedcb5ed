//! Per-account and per-key limits: unfinished tasks per account, requests per second per key. Both answer
//! 429 with `Retry-After`.

use crate::domain::errors::{Code, Problem};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;

pub struct Limits {
    /// Whether they are kept here; else the store keeps them, across every process sharing it, and these
    /// let everything through.
    local: bool,
    max_in_flight: usize,
    in_flight: Mutex<HashMap<String, usize>>,
    /// By key hash.
    rate: DefaultKeyedRateLimiter<[u8; 32]>,
}

impl Limits {
    pub fn new(config: &crate::services::runtime::settings::LimitsConfig, local: bool) -> Limits {
        let rate = NonZeroU32::new(config.requests_per_second_per_key).unwrap_or(NonZeroU32::MIN);
        Limits {
            local,
            max_in_flight: config.max_in_flight_per_account,
            in_flight: Mutex::new(HashMap::new()),
            rate: RateLimiter::keyed(Quota::per_second(rate)),
        }
    }

    /// Counts the in-flight tasks found at start-up.
    pub fn restore(&self, accounts: impl IntoIterator<Item = String>) {
        if !self.local {
            return;
        }
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        for account in accounts {
            *counts.entry(account).or_default() += 1;
        }
    }

    /// One request by the key with this hash.
    pub fn request(&self, key_hash: [u8; 32]) -> Result<(), Problem> {
        if !self.local {
            return Ok(());
        }
        self.rate.check_key(&key_hash).map_err(|_| rate_limited())
    }

    /// Reserves an in-flight slot for `account`; release it with [`Limits::release`].
    pub fn reserve(&self, account: &str) -> Result<(), Problem> {
        if !self.local {
            return Ok(());
        }
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        // The account's name is copied only the first time it is counted.
        let count = match counts.get_mut(account) {
            Some(count) => count,
            None => counts.entry(account.to_string()).or_default(),
        };
        if *count >= self.max_in_flight {
            return Err(too_many_tasks(*count));
        }
        *count += 1;
        Ok(())
    }

    /// Gives back a slot [`Limits::reserve`] reserved.
    pub fn release(&self, account: &str) {
        if !self.local {
            return;
        }
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(account) {
            *count = count.saturating_sub(1);
        }
    }
}

/// The answer to a task past its account's limit on unfinished tasks.
pub fn too_many_tasks(count: usize) -> Problem {
    Problem::new(
        Code::too_many_tasks,
        format!("The account has {count} unfinished tasks, the most allowed; wait for some to finish."),
    )
    .with_retry_after(5)
}

/// The answer to a request past its key's rate.
pub fn rate_limited() -> Problem {
    Problem::new(Code::rate_limited, "Too many requests for this API key; slow down.").with_retry_after(1)
}
