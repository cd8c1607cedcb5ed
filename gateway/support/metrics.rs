//! Prometheus metrics (`GET /metrics`): requests by route and status, latency, upstream calls and errors,
//! tasks by terminal state, poll lag.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    status: u16,
}

/// A kind named in the code (`create`, `success`, ...) is looked up without an allocation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: Cow<'static, str>,
}

impl KindLabels {
    fn of(kind: &'static str) -> KindLabels {
        KindLabels { kind: Cow::Borrowed(kind) }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegionLabels {
    region: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotLabels {
    region: &'static str,
    model: &'static str,
    key: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    model: &'static str,
    account: String,
}

/// One capacity pool as the render shows it: region, model code, `(used, cap)` per key, waiting per account.
pub type PoolFigures = (&'static str, &'static str, Vec<(u32, u32)>, Vec<(String, usize)>);

struct Metrics {
    registry: Registry,
    slots_used: Family<SlotLabels, Gauge>,
    slots_cap: Family<SlotLabels, Gauge>,
    queued: Family<QueueLabels, Gauge>,
    queue_wait: Histogram,
    failovers: Family<KindLabels, Counter>,
    requests: Family<RouteLabels, Counter>,
    latency: Family<KindLabels, Histogram>,
    upstream_calls: Family<KindLabels, Counter>,
    upstream_errors: Family<KindLabels, Counter>,
    upstream_connections: Family<RegionLabels, Counter>,
    tasks_finished: Family<KindLabels, Counter>,
    tasks_in_flight: Gauge,
    poll_lag: Histogram,
    usage_unusable: Counter,
    webhook_attempts: Family<KindLabels, Counter>,
    purged: Family<KindLabels, Counter>,
    mirrored_files: Family<KindLabels, Counter>,
    mirrored_bytes: Counter,
    stored_files: Gauge,
    stored_bytes: Gauge,
}

/// Running totals the console's overview samples over time (a Prometheus family cannot be read back).
#[derive(Default)]
pub struct Totals {
    /// Requests answered below 400, 4xx, and 5xx.
    pub requests: [AtomicU64; 3],
    pub tasks_succeeded: AtomicU64,
    pub tasks_unsucceeded: AtomicU64,
    pub upstream_calls: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub upstream_micros: AtomicU64,
    pub upstream_timed: AtomicU64,
    /// Task queries and list pages sent with each key: by region, by key index.
    pub key_queries: Mutex<std::collections::HashMap<String, Vec<u64>>>,
    /// Jobs sent to another key after a refused create, and after a transient failure.
    pub failovers: [AtomicU64; 2],
    /// The last waits for an upstream slot, in seconds (the console shows their p50 and p99).
    pub waits: Mutex<std::collections::VecDeque<f64>>,
}

/// How many of the last waits for a slot the console's percentiles are over.
pub const WAITS_KEPT: usize = 1000;

pub fn totals() -> &'static Totals {
    static TOTALS: OnceLock<Totals> = OnceLock::new();
    TOTALS.get_or_init(Totals::default)
}

/// One more query sent with key `key` of `region` by the poller.
pub fn key_query(region: &str, key: usize) {
    let mut queries = totals().key_queries.lock().unwrap_or_else(|e| e.into_inner());
    let keys = match queries.get_mut(region) {
        Some(keys) => keys,
        None => queries.entry(region.to_string()).or_default(),
    };
    if keys.len() <= key {
        keys.resize(key + 1, 0);
    }
    if let Some(count) = keys.get_mut(key) {
        *count += 1;
    }
}

/// How long an upstream call took to answer (or fail).
pub fn upstream_latency(elapsed: std::time::Duration) {
    let totals = totals();
    totals.upstream_micros.fetch_add(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX), Relaxed);
    totals.upstream_timed.fetch_add(1, Relaxed);
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut registry = Registry::with_prefix("mediagate");
        let requests = Family::<RouteLabels, Counter>::default();
        let latency = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        let upstream_calls = Family::<KindLabels, Counter>::default();
        let upstream_errors = Family::<KindLabels, Counter>::default();
        let upstream_connections = Family::<RegionLabels, Counter>::default();
        let tasks_finished = Family::<KindLabels, Counter>::default();
        let tasks_in_flight = Gauge::default();
        let poll_lag = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let usage_unusable = Counter::default();
        let webhook_attempts = Family::<KindLabels, Counter>::default();
        let purged = Family::<KindLabels, Counter>::default();
        registry.register(
            "purged",
            "Finished work retention removed, by kind: tasks (each leaving its usage line), deliveries, idempotency",
            purged.clone(),
        );
        let (mirrored_files, mirrored_bytes) = (Family::<KindLabels, Counter>::default(), Counter::default());
        let (stored_files, stored_bytes) = (Gauge::default(), Gauge::default());
        let (slots_used, slots_cap) = (Family::<SlotLabels, Gauge>::default(), Family::<SlotLabels, Gauge>::default());
        let queued = Family::<QueueLabels, Gauge>::default();
        let queue_wait = Histogram::new(exponential_buckets(0.01, 2.0, 16));
        let failovers = Family::<KindLabels, Counter>::default();
        registry.register("upstream_slots_used", "Tasks pending or running upstream per key (by index) and model code", slots_used.clone());
        registry.register("upstream_slots", "The cap on tasks pending or running upstream per key and model code", slots_cap.clone());
        registry.register("tasks_queued", "Tasks waiting for an upstream slot, by model code and client account", queued.clone());
        registry.register("queue_wait_seconds", "How long tasks waited for an upstream slot", queue_wait.clone());
        registry.register(
            "upstream_failovers",
            "Jobs sent to another upstream key: refused (a create refused or failed on one key) or transient (a task the upstream failed for its own reasons)",
            failovers.clone(),
        );
        registry.register(
            "result_files_mirrored",
            "Result files copied into the gateway's storage (outcome mirrored), or given up on after every retry (failed)",
            mirrored_files.clone(),
        );
        registry.register("result_bytes_mirrored", "Bytes of result files copied", mirrored_bytes.clone());
        registry.register("result_files_stored", "Result copies kept, as of the last sweep", stored_files.clone());
        registry.register("result_bytes_stored", "Bytes of result copies kept, as of the last sweep", stored_bytes.clone());
        registry.register(
            "webhook_attempts",
            "Webhook delivery attempts by outcome: delivered, retry (failed, another attempt is scheduled), failed (the last), disabled (410 Gone)",
            webhook_attempts.clone(),
        );
        registry.register(
            "upstream_usage_unusable",
            "Finished tasks whose upstream usage made no sense (negative, non-numeric, beyond the request), priced as quoted",
            usage_unusable.clone(),
        );
        registry.register("http_requests", "HTTP requests by route and status", requests.clone());
        registry.register("http_request_duration_seconds", "HTTP request latency by route", latency.clone());
        registry.register("upstream_calls", "Calls to the upstream by kind", upstream_calls.clone());
        registry.register("upstream_errors", "Failed upstream calls by kind", upstream_errors.clone());
        registry.register(
            "upstream_connections_opened",
            "Connections opened to each region's upstream (each a TLS handshake on https)",
            upstream_connections.clone(),
        );
        registry.register("tasks_finished", "Tasks that reached a terminal state, by state", tasks_finished.clone());
        registry.register(
            "tasks_in_flight",
            "Live tasks this process holds: polled by it, or being answered by its handlers",
            tasks_in_flight.clone(),
        );
        registry.register("poll_lag_seconds", "How late task checks run against their schedule", poll_lag.clone());
        Metrics {
            registry,
            slots_used,
            slots_cap,
            queued,
            queue_wait,
            failovers,
            requests,
            latency,
            upstream_calls,
            upstream_errors,
            upstream_connections,
            tasks_finished,
            tasks_in_flight,
            poll_lag,
            usage_unusable,
            webhook_attempts,
            purged,
            mirrored_files,
            mirrored_bytes,
            stored_files,
            stored_bytes,
        }
    })
}

pub fn request(route: &str, status: u16, seconds: f64) {
    let class = match status {
        0..400 => 0,
        400..500 => 1,
        _ => 2,
    };
    totals().requests[class].fetch_add(1, Relaxed);
    let m = metrics();
    m.requests.get_or_create(&RouteLabels { route: route.to_string(), status }).inc();
    m.latency.get_or_create(&KindLabels { kind: route.to_string().into() }).observe(seconds);
}

pub fn upstream_call(kind: &'static str) {
    totals().upstream_calls.fetch_add(1, Relaxed);
    metrics().upstream_calls.get_or_create(&KindLabels::of(kind)).inc();
}

pub fn upstream_error(kind: &'static str) {
    totals().upstream_errors.fetch_add(1, Relaxed);
    metrics().upstream_errors.get_or_create(&KindLabels::of(kind)).inc();
}

pub fn upstream_connection_opened(region: &'static str) {
    metrics().upstream_connections.get_or_create(&RegionLabels { region }).inc();
}

/// Live tasks this process's handlers hold: synchronous calls, and acceptances not yet handed to a poller.
static HANDLED: AtomicI64 = AtomicI64::new(0);

/// A live task a handler holds, counted in flight here until it is dropped.
pub struct Handled(());

impl Drop for Handled {
    fn drop(&mut self) {
        HANDLED.fetch_sub(1, Relaxed);
    }
}

/// Counts an accepted task in flight here while its handler holds it.
pub fn task_handled() -> Handled {
    HANDLED.fetch_add(1, Relaxed);
    Handled(())
}

/// Live tasks this process holds: those its handlers hold and the `polled` its poller holds. Each replica
/// counts its own, so the figures of several replicas add up to the deployment's and none goes negative.
pub fn in_flight(polled: usize) -> i64 {
    HANDLED.load(Relaxed).max(0).saturating_add(i64::try_from(polled).unwrap_or(i64::MAX))
}

pub fn task_finished(status: crate::domain::tasks::TaskStatus) {
    let ended = match status {
        crate::domain::tasks::TaskStatus::Success => &totals().tasks_succeeded,
        _ => &totals().tasks_unsucceeded,
    };
    ended.fetch_add(1, Relaxed);
    let m = metrics();
    m.tasks_finished.get_or_create(&KindLabels::of(status.as_str())).inc();
}

pub fn usage_unusable() {
    metrics().usage_unusable.inc();
}

pub fn webhook_attempt(outcome: &'static str) {
    metrics().webhook_attempts.get_or_create(&KindLabels::of(outcome)).inc();
}

/// What one retention pass removed.
pub fn purged(tasks: usize, deliveries: usize, idempotency: usize) {
    let m = metrics();
    for (kind, count) in [("tasks", tasks), ("deliveries", deliveries), ("idempotency", idempotency)] {
        m.purged.get_or_create(&KindLabels::of(kind)).inc_by(count as u64);
    }
}

pub fn results_mirrored(files: u64, bytes: u64) {
    let m = metrics();
    m.mirrored_files.get_or_create(&KindLabels::of("mirrored")).inc_by(files);
    m.mirrored_bytes.inc_by(bytes);
}

pub fn results_mirror_failed(files: u64) {
    metrics().mirrored_files.get_or_create(&KindLabels::of("failed")).inc_by(files);
}

pub fn results_stored(files: u64, bytes: u64) {
    let m = metrics();
    m.stored_files.set(i64::try_from(files).unwrap_or(i64::MAX));
    m.stored_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

pub fn poll_lag(ms: i64) {
    metrics().poll_lag.observe(ms.max(0) as f64 / 1000.0);
}

pub fn queue_wait(waited: std::time::Duration) {
    metrics().queue_wait.observe(waited.as_secs_f64());
    let mut waits = totals().waits.lock().unwrap_or_else(|e| e.into_inner());
    if waits.len() == WAITS_KEPT {
        waits.pop_front();
    }
    waits.push_back(waited.as_secs_f64());
}

/// A job sent to another key: `refused` or `transient`.
pub fn failover(kind: &'static str) {
    totals().failovers[usize::from(kind == "transient")].fetch_add(1, Relaxed);
    metrics().failovers.get_or_create(&KindLabels::of(kind)).inc();
}

/// The text exposition format, with `polled` the live tasks this process's poller holds and `pools` its
/// upstream capacity.
pub fn render(polled: usize, pools: &[PoolFigures]) -> String {
    let mut out = String::new();
    let m = metrics();
    m.tasks_in_flight.set(in_flight(polled));
    m.queued.clear();
    for (region, model, slots, waiting) in pools {
        for (key, (used, cap)) in slots.iter().enumerate() {
            let labels = SlotLabels { region, model, key: key as u32 };
            m.slots_used.get_or_create(&labels).set(i64::from(*used));
            m.slots_cap.get_or_create(&labels).set(i64::from(*cap));
        }
        for (account, depth) in waiting {
            m.queued.get_or_create(&QueueLabels { model, account: account.clone() }).set(*depth as i64);
        }
    }
    let _ = prometheus_client::encoding::text::encode(&mut out, &m.registry);
    out
}
