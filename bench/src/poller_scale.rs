//! Scenario `poller` (issue 5, poller at scale): 100k async video jobs in flight at once against the
//! simulator, whose keys each allow 20 task queries (or list calls) per second.
//!
//! The simulator (core 1) runs with `KEYS` keys per region plus one the bench keeps for reading results
//! afterwards, and a time scale that makes every job take tens of seconds; the gateway (core 0) has all
//! `KEYS`. The bench submits `TASKS` jobs at `SUBMIT_RATE` (see there), waits until every one is
//! terminal, and reports the gateway's peak RSS and CPU, the upstream queries per finished task, the most
//! queries any key made within one second, and the detection lag: the upstream's end time (from its task
//! list) against the gateway's settlement time (the usage log's `at_ms`: the task's `finished_ms`, set in
//! the transaction that makes it terminal), for a sample of tasks linked through the admin task view.
//!
//! Scenario `poller-replicas` runs the same jobs on three replicas sharing a local PostgreSQL (a throwaway
//! cluster, on core 0 with them), submitted to all three in turn: RSS per replica, and the same figures for
//! the three together (the keys' limits are shared, so the busiest key's peak is theirs together).

use crate::harness::{
    ADMIN_ENV, UNCAPPED, UPSTREAM_KEY_ENV, cpu_micros, create_key, free_port, gateway_config, http, met, percentile,
    rss_bytes, settlement_times, start, wait_listening,
};
use crate::loadgen::Connection;
use mediagate::adapters::upstream::client::compact_time;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Jobs in flight. The reported run uses 100k; `MEDIAGATE_BENCH_POLLER_TASKS` lowers it for a trial (and
/// `MEDIAGATE_BENCH_POLLER_SCALE` shortens the jobs).
const TASKS: usize = 100_000;
/// Upstream keys the gateway gets for the region.
const KEYS: usize = 128;
/// The upstream's limit per key: task queries and list calls per second.
const LIMIT: u64 = 20;
/// Simulated jobs stay PENDING 1 s and RUNNING 3 s times this: 240 s in all, longer than submitting them
/// takes here (even on a busy machine), so all of them are in flight at once.
const TIME_SCALE: f64 = 60.0;
const MIN_INTERVAL_MS: u64 = 1000;
const MAX_INTERVAL_MS: u64 = 5000;
const CONNECTIONS: usize = 8;
/// Jobs submitted per second. Each finished job costs one direct query for its result (the upstream's list
/// carries none), so the region's keys retire at most about KEYS x LIMIT x 0.9 (the margin) = 2,300 ended
/// jobs a second: jobs that end faster than that wait for a query whatever the poller does, and their lag
/// grows with the backlog. 1,600/s is 70% of that budget. `MEDIAGATE_BENCH_POLLER_RATE` changes it (0:
/// as fast as the gateway takes them).
const SUBMIT_RATE: f64 = 1600.0;
/// Tasks whose detection lag is measured (every n-th submitted).
const SAMPLE: usize = 5000;
const RSS_TARGET: u64 = 300 * 1024 * 1024;
/// Longest wait for the jobs to end once submitted, so the scenario stops by itself.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);
const ADMIN: &str = "bench-admin";
const BODY: &str = r#"{"model":"alpha2.6-t2v_t2v","prompt":"bench poller","duration":5}"#;

/// Where the gateways keep their state.
#[derive(Clone, Copy)]
enum Setup {
    /// One gateway on its embedded store.
    Embedded,
    /// This many replicas on one PostgreSQL.
    Postgres(usize),
}

/// What the run measured.
struct Figures {
    setup: Setup,
    tasks: usize,
    scale: f64,
    rate: f64,
    submitted: usize,
    submit_errors: usize,
    submit_seconds: f64,
    finished: u64,
    succeeded: u64,
    drain_seconds: f64,
    /// Each gateway's.
    rss_peaks: Vec<u64>,
    in_flight_peak: u64,
    store_bytes: u64,
    cpu_seconds: f64,
    queries: u64,
    /// The gateways' own count of list pages and task queries they sent (the simulator's `queries`
    /// counts both).
    lists: u64,
    task_queries: u64,
    max_per_second: u64,
    keys_used: usize,
    lags_ms: Vec<f64>,
}

pub fn run() -> String {
    run_with(Setup::Embedded)
}

pub fn run_replicas() -> String {
    run_with(Setup::Postgres(3))
}

fn run_with(setup: Setup) -> String {
    let tasks = std::env::var("MEDIAGATE_BENCH_POLLER_TASKS").ok().and_then(|n| n.parse().ok()).unwrap_or(TASKS);
    let scale: f64 =
        std::env::var("MEDIAGATE_BENCH_POLLER_SCALE").ok().and_then(|n| n.parse().ok()).unwrap_or(TIME_SCALE);
    let rate: f64 =
        std::env::var("MEDIAGATE_BENCH_POLLER_RATE").ok().and_then(|n| n.parse().ok()).unwrap_or(SUBMIT_RATE);
    let bin = crate::harness::bin_dir().join("mediagate");
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sim_addr = format!("127.0.0.1:{}", free_port());
    let (gateways_wanted, cluster) = match setup {
        Setup::Embedded => (1, None),
        Setup::Postgres(replicas) => (replicas, Some(crate::postgres::Cluster::start())),
    };
    let gw_addrs: Vec<String> = (0..gateways_wanted).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let gw_addr = gw_addrs[0].clone();
    let (keys_flag, limit_flag, scale_flag) = ((KEYS + 1).to_string(), LIMIT.to_string(), scale.to_string());
    let sim_args = [
        "simulate",
        "--listen",
        &sim_addr,
        "--time-scale",
        &scale_flag,
        "--key-prefix",
        "bench",
        "--concurrency",
        UNCAPPED,
    ];
    let sim_args: Vec<&str> = sim_args.into_iter().chain(["--keys", &keys_flag, "--query-qps", &limit_flag]).collect();
    let _sim = start(1, &bin, &sim_args, &[]);
    let data = tmp.path().join("gateway");
    let mut key = match setup {
        Setup::Embedded => create_key(&bin, "bench", &data),
        Setup::Postgres(_) => String::new(),
    };
    let mut poller = format!(
        "poller: {{queries_per_second: {LIMIT}, min_interval_ms: {MIN_INTERVAL_MS}, max_interval_ms: {MAX_INTERVAL_MS}}}\n"
    );
    if let Some(cluster) = &cluster {
        poller.push_str(&format!("store: {{url: '{}'}}\n", cluster.url()));
    }
    let upstream_keys: Vec<String> = (1..=KEYS).map(sim_key).collect();
    let gateways: Vec<crate::harness::Server> = gw_addrs
        .iter()
        .enumerate()
        .map(|(n, addr)| {
            let config = tmp.path().join(format!("config-{n}.yaml"));
            let dir = if n == 0 { data.clone() } else { data.join(n.to_string()) };
            std::fs::write(&config, gateway_config(addr, &dir, &format!("http://{sim_addr}"), &poller))
                .unwrap_or_else(|e| panic!("{e}"));
            let config_arg = config.display().to_string();
            start(
                0,
                &bin,
                &["serve", "--config", &config_arg],
                &[(UPSTREAM_KEY_ENV, &upstream_keys.join(",")), (ADMIN_ENV, ADMIN)],
            )
        })
        .collect();
    wait_listening(&sim_addr);
    for addr in &gw_addrs {
        wait_listening(addr);
    }
    let admin = format!("Bearer {ADMIN}");
    let json = ("Content-Type", "application/json");
    if key.is_empty() {
        http(&gw_addr, "POST", "/admin/v1/accounts", &[("Authorization", &admin), json], r#"{"name":"bench"}"#);
        let (_, body) =
            http(&gw_addr, "POST", "/admin/v1/accounts/bench/keys", &[("Authorization", &admin), json], "{}");
        key = serde_json::from_str::<Value>(&body).unwrap_or_default()["key"].as_str().unwrap_or_default().to_string();
        // Every replica counts the others before the jobs come.
        std::thread::sleep(Duration::from_secs(4));
    }
    let (status, _) = http(
        &gw_addr,
        "POST",
        "/admin/v1/accounts/bench/top-up",
        &[("Authorization", &admin), json],
        r#"{"amount": 1000000000000000}"#,
    );
    assert_eq!(status, 200, "top-up failed");

    let began_ms = now_ms();
    let rss_peaks: Arc<Vec<AtomicU64>> = Arc::new(gateways.iter().map(|_| AtomicU64::new(0)).collect());
    let in_flight_peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let pids: Vec<u32> = gateways.iter().map(|g| g.pid()).collect();
    let sampler = {
        let (rss, in_flight, sampling) = (rss_peaks.clone(), in_flight_peak.clone(), sampling.clone());
        let (pids, addrs) = (pids.clone(), gw_addrs.clone());
        std::thread::spawn(move || {
            for tick in 0u64.. {
                if !sampling.load(Ordering::Relaxed) {
                    break;
                }
                for (peak, pid) in rss.iter().zip(&pids) {
                    peak.fetch_max(rss_bytes(*pid), Ordering::Relaxed);
                }
                if tick % 10 == 0 {
                    let now = addrs.iter().map(|a| metric(a, "mediagate_tasks_in_flight ") as u64).sum();
                    in_flight.fetch_max(now, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let cpu = || pids.iter().map(|pid| cpu_micros(*pid)).sum::<f64>();
    let cpu_before = cpu();
    eprintln!("poller: submitting {tasks} jobs");
    let submit_start = Instant::now();
    let (ids, submit_errors) = submit(&gw_addrs, &key, tasks, rate);
    let submit_seconds = submit_start.elapsed().as_secs_f64();
    eprintln!("poller: {} accepted in {submit_seconds:.1} s; waiting for them to end", ids.len());
    let drain_start = Instant::now();
    let (finished, succeeded) = drain(&gw_addrs, ids.len() as u64);
    let drain_seconds = drain_start.elapsed().as_secs_f64();
    let cpu_seconds = (cpu() - cpu_before) / 1e6;
    let calls = |kind: &str| {
        let prefix = format!("mediagate_upstream_calls_total{{kind=\"{kind}\"}}");
        gw_addrs.iter().map(|a| metric(a, &prefix)).sum::<f64>() as u64
    };
    let (lists, task_queries) = (calls("list"), calls("query"));
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    let stats = get_json(&sim_addr, "/_sim/query-stats", "");
    let per_key = stats["per_key"].as_array().cloned().unwrap_or_default();
    eprintln!("poller: all ended; reading end times for the lag sample");
    let lags_ms = detection_lags(&sim_addr, &gw_addr, &ids, began_ms - 5000, now_ms() + 5000);
    let figures = Figures {
        setup,
        tasks,
        scale,
        rate,
        submitted: ids.len(),
        submit_errors,
        submit_seconds,
        finished,
        succeeded,
        drain_seconds,
        rss_peaks: rss_peaks.iter().map(|p| p.load(Ordering::Relaxed)).collect(),
        in_flight_peak: in_flight_peak.load(Ordering::Relaxed),
        store_bytes: std::fs::metadata(data.join("mediagate.redb")).map_or(0, |m| m.len()),
        cpu_seconds,
        queries: stats["queries"].as_u64().unwrap_or(0),
        lists,
        task_queries,
        max_per_second: stats["max_per_second"].as_u64().unwrap_or(0),
        keys_used: per_key.len(),
        lags_ms,
    };
    render(&figures)
}

/// The simulator's `n`-th key of the region (from 1).
fn sim_key(n: usize) -> String {
    if n == 1 { "bench-cn-beijing".into() } else { format!("bench-cn-beijing-{n}") }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn request(addr: &str, method: &str, path: &str, auth: &str, body: &str) -> Vec<u8> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
    if !auth.is_empty() {
        text.push_str(&format!("Authorization: Bearer {auth}\r\n"));
    }
    if !body.is_empty() {
        text.push_str("Content-Type: application/json\r\n");
    }
    text.push_str("\r\n");
    text.push_str(body);
    text.into_bytes()
}

/// Submits `count` jobs over `CONNECTIONS` connections spread over `addrs`, at `rate` per second in all (0:
/// back to back); returns the accepted task ids and the refusals.
fn submit(addrs: &[String], key: &str, count: usize, rate: f64) -> (Vec<String>, usize) {
    let (start, gap) =
        (Instant::now(), Duration::from_secs_f64(if rate > 0.0 { CONNECTIONS as f64 / rate } else { 0.0 }));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let addr = addrs[c % addrs.len()].clone();
            let bytes = request(&addr, "POST", "/v1/videos/generations", key, BODY);
            let share = count / CONNECTIONS + usize::from(c < count % CONNECTIONS);
            std::thread::spawn(move || {
                let (mut ids, mut errors) = (Vec::with_capacity(share), 0usize);
                let mut conn = Connection::open(&addr).ok();
                // Connection c sends its n-th job at (n + c / CONNECTIONS) gaps: evenly spread in all.
                let offset = gap * c as u32 / CONNECTIONS as u32;
                for n in 0..share as u32 {
                    std::thread::sleep((start + offset + gap * n).saturating_duration_since(Instant::now()));
                    let answer = conn.as_mut().map(|c| c.call(&bytes));
                    match answer {
                        Some(Ok((200, body))) => {
                            let value: Value = serde_json::from_slice(&body).unwrap_or_default();
                            match value["task_id"].as_str() {
                                Some(id) => ids.push(id.to_string()),
                                None => errors += 1,
                            }
                        }
                        Some(Ok(_)) => errors += 1,
                        _ => {
                            errors += 1;
                            conn = Connection::open(&addr).ok();
                        }
                    }
                }
                (ids, errors)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(count);
    let mut errors = 0;
    for t in threads {
        if let Ok((ids, e)) = t.join() {
            all.extend(ids);
            errors += e;
        }
    }
    (all, errors)
}

/// Waits until the gateways' metrics count `count` finished tasks in all (or `DRAIN_LIMIT`); returns the
/// finished and successful counts.
fn drain(addrs: &[String], count: u64) -> (u64, u64) {
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut last_print = Instant::now();
    let total = |prefix: &str| addrs.iter().map(|a| metric(a, prefix)).sum::<f64>() as u64;
    loop {
        let all = total("mediagate_tasks_finished_total{");
        if all >= count || Instant::now() > deadline {
            return (all, total("mediagate_tasks_finished_total{kind=\"success\"}"));
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!("poller: {all}/{count} ended");
            last_print = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The sum of the gateway's metric lines starting with `prefix`.
fn metric(addr: &str, prefix: &str) -> f64 {
    let (_, text) = http(addr, "GET", "/metrics", &[], "");
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

fn get_json(addr: &str, path: &str, auth: &str) -> Value {
    let auth = format!("Bearer {auth}");
    let headers: &[(&str, &str)] = if auth.len() > 7 { &[("Authorization", &auth)] } else { &[] };
    let (_, body) = http(addr, "GET", path, headers, "");
    serde_json::from_str(&body).unwrap_or_default()
}

/// Detection lag (ms) of every `ids.len() / SAMPLE`-th task: gateway settlement time minus upstream end.
fn detection_lags(sim: &str, gateway: &str, ids: &[String], from_ms: i64, to_ms: i64) -> Vec<f64> {
    let ended = upstream_end_times(sim, from_ms, to_ms);
    let settled = settlement_times(gateway, ADMIN, "?account=bench");
    let step = (ids.len() / SAMPLE).max(1);
    let Ok(mut conn) = Connection::open(gateway) else { return Vec::new() };
    let mut lags: Vec<f64> = ids
        .iter()
        .step_by(step)
        .filter_map(|id| {
            let (_, body) = conn.call(&request(gateway, "GET", &format!("/admin/v1/tasks/{id}"), ADMIN, "")).ok()?;
            let task: Value = serde_json::from_slice(&body).ok()?;
            let upstream_end = ended.get(task["upstream_task_id"].as_str()?)?;
            Some((settled.get(id.as_str())? - upstream_end) as f64)
        })
        .collect();
    lags.sort_by(|a, b| a.total_cmp(b));
    lags
}

/// Upstream task id -> end time (epoch ms), from the simulator's own task list, read with the key the
/// gateway does not have and paced under its limit (after the query stats were taken).
fn upstream_end_times(sim: &str, from_ms: i64, to_ms: i64) -> HashMap<String, i64> {
    let compact = |ms: i64| compact_time(ms, false);
    let key = sim_key(KEYS + 1);
    let mut ended = HashMap::new();
    let Ok(mut conn) = Connection::open(sim) else { return ended };
    for page in 1.. {
        let path = format!(
            "/cn-beijing/api/v1/tasks?start_time={}&end_time={}&page_no={page}&page_size=1000",
            compact(from_ms),
            compact(to_ms + 1000)
        );
        std::thread::sleep(Duration::from_millis(1000 / (LIMIT - 4)));
        let Ok((200, body)) = conn.call(&request(sim, "GET", &path, &key, "")) else { break };
        let value: Value = serde_json::from_slice(&body).unwrap_or_default();
        let data = value["data"].as_array().cloned().unwrap_or_default();
        for item in &data {
            if let (Some(id), Some(end)) = (item["task_id"].as_str(), item["end_time"].as_i64()) {
                ended.insert(id.to_string(), end);
            }
        }
        if data.is_empty() || page >= value["total_page"].as_u64().unwrap_or(0) {
            break;
        }
    }
    ended
}

/// Queries per task a task-by-task poller would make on this schedule for a job of `job_ms`.
fn task_by_task_queries(job_ms: u64) -> u64 {
    let clamp = |ms: u64| ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS);
    // First look at a quarter of the model's expected 120 s, then every fifth of the task's age.
    let mut at = clamp(120_000 / 4);
    let mut queries = 1;
    while at < job_ms {
        at += clamp(at / 5);
        queries += 1;
    }
    queries
}

fn render(f: &Figures) -> String {
    let lag = |p: f64| percentile(&f.lags_ms, p) / 1000.0;
    let per_task = f.queries as f64 / f.finished.max(1) as f64;
    let job_ms = (4000.0 * f.scale) as u64;
    let all_ended = f.finished >= f.submitted as u64 && f.submitted == f.tasks;
    let rss_peak = f.rss_peaks.iter().copied().max().unwrap_or(0);
    let lag_ok = !f.lags_ms.is_empty() && lag(0.99) * 1000.0 <= MAX_INTERVAL_MS as f64;
    let mut out = format!(
        "## Poller at scale{} (`alpha2.6-t2v_t2v`, {} jobs, {KEYS} upstream keys at {LIMIT} queries/s each)\n\n\
         Simulator time scale {} (each job {} s: {} s PENDING, {} s RUNNING); poller intervals {MIN_INTERVAL_MS}..{MAX_INTERVAL_MS} ms, \
         list pages of 1000. Jobs submitted over {CONNECTIONS} connections {}.\n\n",
        match f.setup {
            Setup::Embedded => String::new(),
            Setup::Postgres(n) => format!(", {n} replicas on one PostgreSQL"),
        },
        f.tasks,
        f.scale,
        job_ms / 1000,
        job_ms / 4000,
        job_ms * 3 / 4000,
        if f.rate > 0.0 {
            format!("at {:.0}/s (under the keys' query budget: each ended job costs one query)", f.rate)
        } else {
            "as fast as the gateway took them".into()
        },
    );
    out.push_str("| figure | value | target |\n|---|---|---|\n");
    out.push_str(&format!(
        "| jobs accepted / refused | {} / {} ({:.0}/s over {:.1} s) | all accepted: {} |\n",
        f.submitted,
        f.submit_errors,
        f.submitted as f64 / f.submit_seconds.max(0.001),
        f.submit_seconds,
        met(f.submitted == f.tasks)
    ));
    out.push_str(&format!(
        "| jobs ended (success) | {} ({}), {:.1} s after the last submission | all ended: {} |\n",
        f.finished,
        f.succeeded,
        f.drain_seconds,
        met(all_ended)
    ));
    out.push_str(&format!(
        "| jobs in flight at once (peak) | {} | {}: {} |\n",
        f.in_flight_peak,
        f.tasks,
        met(f.in_flight_peak >= f.tasks as u64)
    ));
    let per_replica: Vec<String> =
        f.rss_peaks.iter().map(|rss| format!("{:.0}", *rss as f64 / (1024.0 * 1024.0))).collect();
    out.push_str(&format!(
        "| gateway RSS peak, MB (store file at the end) | {} ({:.0} MB) | < 300 MB: {} |\n",
        per_replica.join(" / "),
        f.store_bytes as f64 / (1024.0 * 1024.0),
        met(rss_peak < RSS_TARGET)
    ));
    out.push_str(&format!(
        "| gateway CPU | {:.1} s ({:.0} us per job) | |\n",
        f.cpu_seconds,
        f.cpu_seconds * 1e6 / f.tasks.max(1) as f64
    ));
    out.push_str(&format!(
        "| upstream queries per finished job (lists + task queries) | {per_task:.2} ({} in all) | task by task would need {} |\n",
        f.queries,
        task_by_task_queries(job_ms)
    ));
    out.push_str(&format!(
        "| of which list pages / task queries, per finished job | {:.2} / {:.2} | |\n",
        f.lists as f64 / f.finished.max(1) as f64,
        f.task_queries as f64 / f.finished.max(1) as f64
    ));
    out.push_str(&format!(
        "| most queries one key made in one second | {} (over {} keys) | <= {LIMIT}: {} |\n",
        f.max_per_second,
        f.keys_used,
        met(f.max_per_second <= LIMIT && f.queries > 0)
    ));
    out.push_str(&format!(
        "| detection lag p50 / p99 / max ({} sampled jobs) | {:.2} / {:.2} / {:.2} s | p99 <= one poll interval ({:.0} s): {} |\n",
        f.lags_ms.len(),
        lag(0.5),
        lag(0.99),
        lag(1.0),
        MAX_INTERVAL_MS as f64 / 1000.0,
        met(lag_ok)
    ));
    out.push('\n');
    out
}
