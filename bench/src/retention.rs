//! Scenario `retention` (issue 41): many days of steady traffic on a compressed clock, and the store's size
//! through them. Retention keeps finished work `KEEP` (standing in for 90 days), so once the first tasks
//! pass it the store stops growing by whole tasks: each purged task leaves its usage line and its ledger
//! entries, which billing keeps. Run on the embedded store (the data dir's bytes on disk) and on one
//! replica over a local PostgreSQL (the tables' and indexes' bytes).

use crate::harness::{ADMIN_ENV, UPSTREAM_KEY_ENV, free_port, gateway_config, http, start, wait_listening};
use crate::loadgen::{Request, fixed_rate};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Requests per second: each a synchronous image job, a task ended at once.
const RATE: f64 = 200.0;
/// How long retention keeps finished work, in seconds: the compressed clock's 90 days.
const KEEP: u64 = 20;
/// How long the traffic lasts: nine times `KEEP`.
const SECONDS: u64 = 180;
/// How often the store's size is read.
const SAMPLE_EVERY: u64 = 15;
const ADMIN: &str = "bench-admin";

pub fn run() -> String {
    let mut report = format!(
        "## Retention: a store's size under steady traffic\n\n{RATE:.0} synchronous jobs a second for {SECONDS} s, \
         retention {KEEP} s for tasks, deliveries and idempotency records (standing in for 90 days). Bytes per \
         job: the store's growth over each stretch, divided by the jobs made in it.\n\n"
    );
    report.push_str(&scenario(None));
    let cluster = crate::postgres::Cluster::start();
    report.push_str(&scenario(Some(&cluster)));
    report
}

fn scenario(cluster: Option<&crate::postgres::Cluster>) -> String {
    let bin = crate::harness::bin_dir().join("mediagate");
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sim_addr = format!("127.0.0.1:{}", free_port());
    let _sim = start(
        1,
        &bin,
        &[
            "simulate",
            "--listen",
            &sim_addr,
            "--time-scale",
            "0",
            "--key-prefix",
            "bench",
            "--concurrency",
            "1000000000",
        ],
        &[],
    );
    let addr = format!("127.0.0.1:{}", free_port());
    let data = tmp.path().join("gateway");
    let mut extra = format!(
        "results: {{mirror: false}}\nretention: {{tasks: {KEEP}s, deliveries: {KEEP}s, idempotency: {KEEP}s}}\n"
    );
    if let Some(cluster) = cluster {
        extra.push_str(&format!("store: {{url: '{}'}}\n", cluster.url()));
    }
    let config = tmp.path().join("config.yaml");
    std::fs::write(&config, gateway_config(&addr, &data, &format!("http://{sim_addr}"), &extra))
        .unwrap_or_else(|e| panic!("{e}"));
    let config_arg = config.display().to_string();
    let _gateway = start(
        0,
        &bin,
        &["serve", "--config", &config_arg],
        &[(UPSTREAM_KEY_ENV, "bench-cn-beijing"), (ADMIN_ENV, ADMIN)],
    );
    wait_listening(&sim_addr);
    wait_listening(&addr);
    let key = account(&addr);
    let request = Request::new(
        &addr,
        "POST",
        "/v1/images/generations",
        &[("Authorization", &format!("Bearer {key}")), ("Content-Type", "application/json")],
        r#"{"model":"beta-image-2.0-pro_t2i","prompt":"bench","n":1}"#,
    );
    let load = std::thread::spawn(move || fixed_rate(&request, 8, RATE, Duration::from_secs(SECONDS)));
    let began = Instant::now();
    // The whole store, and the part that is billing history (on PostgreSQL; the embedded store's file is one).
    let size = || match cluster {
        None => (dir_bytes(&data), 0),
        Some(cluster) => table_bytes(cluster),
    };
    let mut samples = vec![(0.0, size(), 0.0)];
    while began.elapsed() < Duration::from_secs(SECONDS) {
        std::thread::sleep(Duration::from_secs(SAMPLE_EVERY));
        let at = began.elapsed().as_secs_f64();
        samples.push((at, size(), metric(&addr, "mediagate_purged_total{kind=\"tasks\"} ")));
    }
    let outcome = load.join().unwrap_or_else(|_| panic!("the load thread failed"));
    let store =
        if cluster.is_some() { "one replica on PostgreSQL (tables and indexes)" } else { "embedded store (data dir)" };
    let mut out = format!(
        "### {store}\n\n{} jobs answered ({} errors).\n\n| at, s | store, MB | of it billing history, MB | tasks purged so far | \
         bytes per job since the last line (all / billing history) |\n|---|---|---|---|---|\n",
        outcome.requests, outcome.errors
    );
    for pair in samples.windows(2) {
        let ((t0, (b0, h0), _), (t1, (b1, h1), purged)) = (pair[0], pair[1]);
        let jobs = (t1 - t0) * RATE;
        let per_job = |a: u64, b: u64| (b as f64 - a as f64) / jobs;
        let history = if cluster.is_some() { format!("{:.1}", h1 as f64 / 1e6) } else { "-".into() };
        out.push_str(&format!(
            "| {t1:.0} | {:.1} | {history} | {purged:.0} | {:.0} / {} |\n",
            b1 as f64 / 1e6,
            per_job(b0, b1),
            if cluster.is_some() { format!("{:.0}", per_job(h0, h1)) } else { "-".into() }
        ));
    }
    out.push('\n');
    out
}

fn account(addr: &str) -> String {
    let admin = format!("Bearer {ADMIN}");
    let json = ("Content-Type", "application/json");
    http(addr, "POST", "/admin/v1/accounts", &[("Authorization", &admin), json], r#"{"name":"bench"}"#);
    let top_up = r#"{"amount": 1000000000000000}"#;
    http(addr, "POST", "/admin/v1/accounts/bench/top-up", &[("Authorization", &admin), json], top_up);
    let (_, body) = http(addr, "POST", "/admin/v1/accounts/bench/keys", &[("Authorization", &admin), json], "{}");
    serde_json::from_str::<Value>(&body).unwrap_or_default()["key"].as_str().unwrap_or_default().to_string()
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Bytes of the gateway's tables, with their indexes and TOAST: every table, and those of the billing
/// history (the ledger and the purged tasks' usage lines), which retention keeps.
fn table_bytes(cluster: &crate::postgres::Cluster) -> (u64, u64) {
    let out = cluster.psql(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0), \
         coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relname IN ('ledger', 'usage_lines')), 0) \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND n.nspname = 'public'",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sizes = text.trim().split('|').map(|n| n.parse().unwrap_or(0));
    (sizes.next().unwrap_or(0), sizes.next().unwrap_or(0))
}

fn metric(addr: &str, prefix: &str) -> f64 {
    let (_, text) = http(addr, "GET", "/metrics", &[], "");
    text.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}
