//! What the use cases are told by the deployment's config: how the poller paces the upstream, the
//! accounts' limits, the webhooks' schedule and the billing baseline. The binary reads them from the config
//! file (`app::config`), where each is a section.

use crate::domain::polling::PollSchedule;
use crate::domain::retention::Retention;
use serde::Deserialize;

/// The settings every use case reads, handed over by the binary.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub poller: PollerConfig,
    pub limits: LimitsConfig,
    pub webhooks: WebhooksConfig,
    pub billing: BillingConfig,
    /// Caps every model's deadline (seconds); 0 keeps the spec's deadlines.
    pub max_task_seconds: u64,
    /// Times a task the upstream failed for its own reasons is sent again.
    pub transient_retries: u32,
    /// Where replicas share the store, the upstream's slots are counted in it.
    pub shared_upstream_slots: bool,
    /// Wait before each retry of a failed result copy (milliseconds).
    pub copy_retry_delays_ms: Vec<u64>,
    /// How long finished work is kept.
    pub retention: Retention,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollerConfig {
    /// Task queries per second per upstream key (list calls count as queries too).
    pub queries_per_second: u32,
    /// Shortest and longest pause between two queries about one task, in milliseconds.
    pub min_interval_ms: u64,
    pub max_interval_ms: u64,
    /// Each key is paced this many percent below `queries_per_second`, so that network jitter bunching a
    /// key's queries never shows the upstream more than its limit within one second.
    pub query_margin_percent: u32,
    /// How often due tasks are gathered into list calls (milliseconds; never more than `min_interval_ms`).
    /// Each gathering also takes the tasks due before the next one.
    pub sweep_interval_ms: u64,
    /// Tasks per page of the upstream's task list; a page costs one query however many tasks it holds.
    pub list_page_size: u64,
    /// A task list's creation-time window is widened by this much on each side (milliseconds), for the
    /// upstream's clock and the forwarding delay; a task still missing from the list gets a direct query.
    pub list_clock_skew_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Unfinished tasks one account may have.
    pub max_in_flight_per_account: usize,
    /// Requests per second per key, with a burst of the same size.
    pub requests_per_second_per_key: u32,
}

impl PollerConfig {
    /// The bounds the poller spaces its looks at one task within.
    pub fn schedule(&self) -> PollSchedule {
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        PollSchedule { min_interval_ms: ms(self.min_interval_ms), max_interval_ms: ms(self.max_interval_ms) }
    }
}

impl Default for PollerConfig {
    fn default() -> PollerConfig {
        PollerConfig {
            queries_per_second: 20,
            min_interval_ms: 1000,
            max_interval_ms: 15000,
            query_margin_percent: 10,
            sweep_interval_ms: 500,
            list_page_size: 1000,
            list_clock_skew_ms: 2000,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> LimitsConfig {
        LimitsConfig { max_in_flight_per_account: 1000, requests_per_second_per_key: 200 }
    }
}

/// Deliveries of task ends to clients' endpoints (Standard Webhooks).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Whether deliveries are sent; when off, they are still queued, and sent once it is on again.
    pub enabled: bool,
    /// Accept endpoints at private, loopback and link-local addresses (tests, private networks).
    pub allow_private_callbacks: bool,
    /// Wait before each retry after a failed attempt (milliseconds): the specification's example schedule
    /// by default, about a day in all. After the last, the delivery has failed.
    pub retry_delays_ms: Vec<u64>,
    /// How long a rotated-out secret keeps signing (seconds), so receivers can switch at their pace.
    pub old_secret_seconds: u64,
}

impl Default for WebhooksConfig {
    fn default() -> WebhooksConfig {
        const MINUTE: u64 = 60_000;
        WebhooksConfig {
            enabled: true,
            allow_private_callbacks: false,
            retry_delays_ms: vec![
                5_000,
                5 * MINUTE,
                30 * MINUTE,
                120 * MINUTE,
                300 * MINUTE,
                600 * MINUTE,
                600 * MINUTE,
            ],
            old_secret_seconds: 24 * 3600,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    /// The equivalent-usage baseline: micro-units per million output tokens. Each task freezes the value in
    /// force when it is submitted, so changing it later recomputes nothing.
    pub equivalent_micros_per_million_tokens: u64,
}

impl Default for BillingConfig {
    fn default() -> BillingConfig {
        BillingConfig { equivalent_micros_per_million_tokens: 10_000_000 }
    }
}
