//! The forwarding scenarios: the synchronous lanes side by side (simulator direct, bare forwarder floor,
//! mediagate; then the floor and mediagate again over HTTPS to a TLS simulator), then durable async
//! submissions and task reads on the plain gateway.

use crate::harness::{
    ADMIN_ENV, ROUNDS, UNCAPPED, UPSTREAM_KEY_ENV, context_switches, cpu_micros, create_key, free_port, gateway_config,
    http, median, met, rss_bytes, start, wait_listening,
};
use crate::loadgen::{Outcome, Request, closed_loop, fixed_rate, saturate};
use mediagate::domain::tasks::TaskStatus;
use std::time::{Duration, Instant};

/// Clients submitting at once in the async lane: durable commits are shared by the writes waiting together.
const SUBMIT_CONNECTIONS: usize = 64;
/// Clients at once for a sync lane's maximum throughput: each lane's best of these. A lane whose requests
/// wait for an fsync (the gateway's settlement) needs more of them in flight to saturate its core than
/// one that only forwards.
const SATURATING_CONNECTIONS: [usize; 2] = [16, 64];

struct Lane {
    name: &'static str,
    request: Request,
    /// The process whose CPU time is charged to this lane.
    pid: Option<u32>,
}

#[derive(Default)]
struct Figures {
    throughput: Vec<f64>,
    /// Clients at once in the round's best throughput.
    saturated_at: Vec<usize>,
    cpu_per_request: Vec<f64>,
    /// The process's context switches per request, in the same run.
    switches_per_request: Vec<f64>,
    p50_1conn: Vec<f64>,
    p99_1conn: Vec<f64>,
    p50_1k: Vec<f64>,
    p99_1k: Vec<f64>,
    p50_5k: Vec<f64>,
    p99_5k: Vec<f64>,
    /// RSS growth per request in flight, in KiB.
    memory_per_request: Vec<f64>,
    errors: u64,
}

/// Requests held in flight at once for the memory figure.
const MEMORY_CONNECTIONS: usize = 256;

/// What a lane's own process spent per request in one run.
struct ProcessCost {
    cpu_micros: f64,
    switches: f64,
}

fn measure(lane: &Lane, figures: &mut Figures) {
    let mut best: Option<(Outcome, usize, Option<ProcessCost>)> = None;
    let mut errors = 0;
    for connections in SATURATING_CONNECTIONS {
        let before = lane.pid.map(|pid| (cpu_micros(pid), context_switches(pid)));
        let max = saturate(&lane.request, connections, Duration::from_secs(4));
        let requests = max.requests.max(1) as f64;
        let costs = lane.pid.zip(before).map(|(pid, (cpu, switches))| ProcessCost {
            cpu_micros: (cpu_micros(pid) - cpu) / requests,
            switches: context_switches(pid).saturating_sub(switches) as f64 / requests,
        });
        errors += max.errors;
        if best.as_ref().is_none_or(|(b, _, _)| max.rate() > b.rate()) {
            best = Some((max, connections, costs));
        }
    }
    if let Some((max, connections, costs)) = best {
        figures.throughput.push(max.rate());
        figures.saturated_at.push(connections);
        if let Some(costs) = costs {
            figures.cpu_per_request.push(costs.cpu_micros);
            figures.switches_per_request.push(costs.switches);
        }
    }
    let one = closed_loop(&lane.request, 1, Duration::from_secs(2));
    figures.p50_1conn.push(one.p50);
    figures.p99_1conn.push(one.p99);
    let k1 = fixed_rate(&lane.request, 8, 1000.0, Duration::from_secs(3));
    figures.p50_1k.push(k1.p50);
    figures.p99_1k.push(k1.p99);
    let k5 = fixed_rate(&lane.request, 32, 5000.0, Duration::from_secs(3));
    figures.p50_5k.push(k5.p50);
    figures.p99_5k.push(k5.p99);
    errors += one.errors + k1.errors + k5.errors;
    if let Some(pid) = lane.pid {
        let (grown, wide) = rss_growth(pid, || saturate(&lane.request, MEMORY_CONNECTIONS, Duration::from_secs(3)));
        figures.memory_per_request.push(grown as f64 / 1024.0 / MEMORY_CONNECTIONS as f64);
        errors += wide.errors;
    }
    figures.errors += errors;
}

/// Runs `load` while sampling `pid`'s RSS; returns the peak growth over the RSS before, in bytes.
fn rss_growth(pid: u32, load: impl FnOnce() -> Outcome) -> (u64, Outcome) {
    let before = rss_bytes(pid);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_bytes(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        })
    };
    let outcome = load();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap_or(before);
    (peak.saturating_sub(before), outcome)
}

/// Runs the sync and async figures; returns their report sections.
pub fn run() -> String {
    let bin = crate::harness::bin_dir();
    let mediagate = bin.join("mediagate");
    let forwarder = bin.join("bare-forwarder");
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (sim_port, gw_port, bare_port) = (free_port(), free_port(), free_port());
    let sim_addr = format!("127.0.0.1:{sim_port}");
    let gw_addr = format!("127.0.0.1:{gw_port}");
    let bare_addr = format!("127.0.0.1:{bare_port}");

    let _sim = start(
        1,
        &mediagate,
        &["simulate", "--listen", &sim_addr, "--time-scale", "0", "--key-prefix", "bench", "--concurrency", UNCAPPED],
        &[],
    );
    // The TLS lanes' simulator: its own port and CA; both TLS servers trust the CA through SSL_CERT_FILE.
    let (tls_sim_addr, tls_gw_addr, tls_bare_addr) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let ca = tmp.path().join("simulator-ca.pem");
    let ca_arg = ca.display().to_string();
    let tls_sim_args = [
        "simulate",
        "--listen",
        &tls_sim_addr,
        "--time-scale",
        "0",
        "--key-prefix",
        "bench",
        "--concurrency",
        UNCAPPED,
        "--tls",
        "--ca-out",
        &ca_arg,
    ];
    let _tls_sim = start(1, &mediagate, &tls_sim_args, &[]);
    wait_listening(&tls_sim_addr);
    wait_for_file(&ca);

    let gateway_env = [(UPSTREAM_KEY_ENV, "bench-cn-beijing"), (ADMIN_ENV, "bench-admin")];
    let mut gateways = Vec::new();
    let mut keys = Vec::new();
    for (name, addr, sim_base) in [
        ("gateway", &gw_addr, format!("http://{sim_addr}")),
        ("tls-gateway", &tls_gw_addr, format!("https://{tls_sim_addr}")),
    ] {
        let data = tmp.path().join(name);
        keys.push(create_key(&mediagate, "bench", &data));
        let config = tmp.path().join(format!("{name}.yaml"));
        // Result copies off: the lanes measure the request path (a copy is background work that the floor
        // does not do, and a backlog of copies left by one round would load the next).
        let config_text = gateway_config(addr, &data, &sim_base, "results: {mirror: false}\n");
        std::fs::write(&config, config_text).unwrap_or_else(|e| panic!("{e}"));
        let config_arg = config.display().to_string();
        let env = [&gateway_env[..], &[("SSL_CERT_FILE", ca_arg.as_str())]].concat();
        gateways.push(start(0, &mediagate, &["serve", "--config", &config_arg], &env));
    }
    let path = "/cn-beijing/api/v1/services/aigc/multimodal-generation/generation";
    let bare = start(0, &forwarder, &[&bare_addr, &format!("http://{sim_addr}{path}"), "bench-cn-beijing"], &[]);
    let tls_bare = start(
        0,
        &forwarder,
        &[&tls_bare_addr, &format!("https://{tls_sim_addr}{path}"), "bench-cn-beijing"],
        &[("SSL_CERT_FILE", ca_arg.as_str())],
    );
    for addr in [&sim_addr, &gw_addr, &bare_addr, &tls_gw_addr, &tls_bare_addr] {
        wait_listening(addr);
    }
    for addr in [&gw_addr, &tls_gw_addr] {
        top_up(addr);
    }
    let envelope = r#"{"model":"beta-image-2.0-pro","input":{"messages":[{"role":"user","content":[{"text":"bench"}]}]},"parameters":{"n":1}}"#;
    let (auth, tls_auth) = (format!("Bearer {}", keys[0]), format!("Bearer {}", keys[1]));
    let json = ("Content-Type", "application/json");
    let image = r#"{"model":"beta-image-2.0-pro_t2i","prompt":"bench","n":1}"#;
    let lanes = [
        Lane {
            name: "direct to simulator",
            request: Request::new(
                &sim_addr,
                "POST",
                "/cn-beijing/api/v1/services/aigc/multimodal-generation/generation",
                &[("Authorization", "Bearer bench-cn-beijing"), json],
                envelope,
            ),
            pid: None,
        },
        Lane {
            name: "bare forwarder (floor)",
            request: Request::new(&bare_addr, "POST", "/forward", &[json], envelope),
            pid: Some(bare.pid()),
        },
        Lane {
            name: "mediagate",
            request: Request::new(&gw_addr, "POST", "/v1/images/generations", &[("Authorization", &auth), json], image),
            pid: Some(gateways[0].pid()),
        },
        Lane {
            name: "bare forwarder, HTTPS upstream (TLS floor)",
            request: Request::new(&tls_bare_addr, "POST", "/forward", &[json], envelope),
            pid: Some(tls_bare.pid()),
        },
        Lane {
            name: "mediagate, HTTPS upstream",
            request: Request::new(
                &tls_gw_addr,
                "POST",
                "/v1/images/generations",
                &[("Authorization", &tls_auth), json],
                image,
            ),
            pid: Some(gateways[1].pid()),
        },
    ];
    let mut figures: Vec<Figures> = lanes.iter().map(|_| Figures::default()).collect();
    for round in 0..ROUNDS {
        eprintln!("sync round {}/{ROUNDS}", round + 1);
        for (lane, f) in lanes.iter().zip(figures.iter_mut()) {
            measure(lane, f);
        }
    }

    // Async: durable submissions, then task reads.
    let submit = Request::new(
        &gw_addr,
        "POST",
        "/v1/videos/generations",
        &[("Authorization", &auth), json],
        r#"{"model":"alpha2.6-t2v_t2v","prompt":"bench","duration":5}"#,
    );
    let mut submits = Vec::new();
    let mut submit_p50 = Vec::new();
    let mut submit_p99 = Vec::new();
    let mut reads = Vec::new();
    let id = first_task_id(&gw_addr, &auth);
    wait_finished(&gw_addr, &auth, &id);
    let read = Request::new(&gw_addr, "GET", &format!("/v1/tasks/{id}"), &[("Authorization", &auth)], "");
    for round in 0..ROUNDS {
        eprintln!("async round {}/{ROUNDS}", round + 1);
        let s = saturate(&submit, SUBMIT_CONNECTIONS, Duration::from_secs(4));
        submits.push(s.rate());
        submit_p50.push(s.p50);
        submit_p99.push(s.p99);
    }
    for round in 0..ROUNDS {
        eprintln!("read round {}/{ROUNDS}", round + 1);
        reads.push(saturate(&read, 16, Duration::from_secs(4)).rate());
    }

    let handshakes = Handshakes {
        connections: metric(&tls_gw_addr, "mediagate_upstream_connections_opened_total{region=\"cn-beijing\"}"),
        requests: metric(
            &tls_gw_addr,
            "mediagate_http_requests_total{route=\"/v1/images/generations\",status=\"200\"}",
        ),
    };
    render(&lanes, &figures, (median(submits), median(submit_p50), median(submit_p99)), median(reads), handshakes)
}

/// Tops up the bench account of the gateway at `addr` with more than any run spends.
fn top_up(addr: &str) {
    let top_up = Request::new(
        addr,
        "POST",
        "/admin/v1/accounts/bench/top-up",
        &[("Authorization", "Bearer bench-admin"), ("Content-Type", "application/json")],
        r#"{"amount": 1000000000000000}"#,
    );
    let funded = closed_loop(&top_up, 1, Duration::from_millis(1));
    assert!(funded.requests >= 1, "top-up failed");
}

/// Waits (up to 10 s) for `path` to exist: the TLS simulator writes its CA once it has made it.
fn wait_for_file(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.is_file() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A sample's value from the gateway's `/metrics` (0 when absent).
fn metric(addr: &str, sample: &str) -> f64 {
    let (_, text) = http(addr, "GET", "/metrics", &[], "");
    text.lines().find_map(|line| line.strip_prefix(sample).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// Upstream connections the TLS gateway opened (each a TLS handshake) against the requests it answered.
struct Handshakes {
    connections: f64,
    requests: f64,
}

/// Waits (up to 30 s) until task `id` has finished, for the read lane: the poller first asks about a task
/// after a quarter of its model's expected run time (15 s here).
fn wait_finished(addr: &str, auth: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let finished = || {
        let (_, body) = http(addr, "GET", &format!("/v1/tasks/{id}"), &[("Authorization", auth)], "");
        let task: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        serde_json::from_value::<TaskStatus>(task["status"].clone()).is_ok_and(TaskStatus::is_terminal)
    };
    while !finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Submits one task and returns its id, for the read lane.
fn first_task_id(addr: &str, auth: &str) -> String {
    let body = r#"{"model":"alpha2.6-t2v_t2v","prompt":"bench read","duration":5}"#;
    let (_, answer) = http(
        addr,
        "POST",
        "/v1/videos/generations",
        &[("Authorization", auth), ("Content-Type", "application/json")],
        body,
    );
    let value: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
    value["task_id"].as_str().unwrap_or_default().to_string()
}

/// The median of `values` with `decimals`, or `-` when nothing was measured.
fn optional(values: &[f64], decimals: usize) -> String {
    if values.is_empty() { "-".to_string() } else { format!("{:.decimals$}", median(values.to_vec())) }
}

fn render(lanes: &[Lane], figures: &[Figures], submit: (f64, f64, f64), reads: f64, tls: Handshakes) -> String {
    let mut out = String::new();
    out.push_str("## Sync forward (`beta-image-2.0-pro_t2i`, simulator instant mode)\n\n");
    out.push_str("| lane | max req/s | at conns | CPU us/req | context switches/req | p50 1 conn | p99 1 conn | p50 @1k/s | p99 @1k/s | p50 @5k/s | p99 @5k/s | KiB per in-flight request | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (lane, f) in lanes.iter().zip(figures) {
        // Measured only for the lanes with a process of their own.
        let (cpu, memory) = (optional(&f.cpu_per_request, 0), optional(&f.memory_per_request, 1));
        let switches = optional(&f.switches_per_request, 2);
        out.push_str(&format!(
            "| {} | {:.0} | {} | {cpu} | {switches} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {memory} | {} |\n",
            lane.name,
            median(f.throughput.clone()),
            f.saturated_at.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
            median(f.p50_1conn.clone()),
            median(f.p99_1conn.clone()),
            median(f.p50_1k.clone()),
            median(f.p99_1k.clone()),
            median(f.p50_5k.clone()),
            median(f.p99_5k.clone()),
            f.errors,
        ));
    }
    let (direct, bare, gateway, tls_bare, tls_gateway) =
        (&figures[0], &figures[1], &figures[2], &figures[3], &figures[4]);
    let ratios = |gateway: &Figures, floor: &Figures| {
        let throughput = median(gateway.throughput.clone()) / median(floor.throughput.clone()).max(1.0);
        let cpu = median(gateway.cpu_per_request.clone()) / median(floor.cpu_per_request.clone()).max(1.0);
        (throughput, cpu)
    };
    let (ratio, cpu_ratio) = ratios(gateway, bare);
    let added_p99 = median(gateway.p99_1k.clone()) - median(direct.p99_1k.clone());
    out.push_str(&format!(
        "\nmediagate / bare forwarder throughput: {ratio:.2} (target >= 0.50: {}); CPU per request ratio: {cpu_ratio:.2} (target <= 2.0: {}); \
         added p99 at 1k req/s: {:.0} us (target <= 1000: {}).\n",
        met(ratio >= 0.5),
        met(cpu_ratio <= 2.0),
        added_p99,
        met(added_p99 <= 1000.0),
    ));
    let (ratio, cpu_ratio) = ratios(tls_gateway, tls_bare);
    out.push_str(&format!(
        "\nHTTPS upstream: mediagate / bare forwarder throughput: {ratio:.2} (target >= 0.50: {}); CPU per request ratio: \
         {cpu_ratio:.2} (target <= 2.0: {}); upstream connections opened (TLS handshakes): {:.0} for {:.0} requests.\n",
        met(ratio >= 0.5),
        met(cpu_ratio <= 2.0),
        tls.connections,
        tls.requests,
    ));
    out.push_str(&format!(
        "\n## Async (`alpha2.6-t2v_t2v`)\n\n| figure | value | target |\n|---|---|---|\n\
         | durable submissions/s ({SUBMIT_CONNECTIONS} conns) | {:.0} | >= 5000: {} |\n| submit p50 / p99 (us) | {:.0} / {:.0} | |\n\
         | `GET /v1/tasks/{{id}}` reads/s (a finished task, 16 conns, the async lane's jobs in flight) | {reads:.0} | >= 30000: {} |\n",
        submit.0,
        met(submit.0 >= 5000.0),
        submit.1,
        submit.2,
        met(reads >= 30000.0),
    ));
    out
}
