//! Scenario `restart` (issue 5): time from process start to ready with 1M finished tasks and 10k in flight
//! in the store (target: under 1 s).
//!
//! The store is filled through the gateway's own `Store`, so the file is in the real on-disk format; the
//! in-flight tasks are jobs the simulator holds (and keeps running), so the gateway polls them as it would
//! a real upstream's. Every timed start gets a fresh copy of the file, because a running gateway writes to
//! it (queued tasks become running) and each start must see the same store. Starts of a store holding only
//! accounts and one task alternate with the full ones, so the process's own start-up cost is measured beside
//! the store's.

use crate::harness::{
    ADMIN_ENV, ROUNDS, Server, UNCAPPED, UPSTREAM_KEY_ENV, bin_dir, call, free_port, gateway_config, median, met,
    rss_bytes, start, wait_listening,
};
use mediagate::adapters::store::embedded::Store;
use mediagate::domain::billing::books::Pot;
use mediagate::domain::billing::{TaskBilling, pricing};
use mediagate::domain::catalog::{MODELS, Media, ModelSpec, TaskMode};
use mediagate::domain::clock::local_time;
use mediagate::domain::results::TaskResult;
use mediagate::domain::tasks::{TaskError, TaskRecord, TaskStatus};
use mediagate::domain::usage::{Measured, Reading};
use mediagate::ports::storage::{Commit, Lifecycle, Tasks};
use serde_json::{Map, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const FINISHED: usize = 1_000_000;
const IN_FLIGHT: usize = 10_000;
/// Tasks are spread over this many accounts, each with a key, as a real tenant mix would be.
const ACCOUNTS: usize = 50;
/// Threads generating and queueing tasks (the store's one writer thread applies them).
const FILL_THREADS: usize = 2;
/// Tasks each fill thread keeps queued: the writer applies up to 1024 queued writes per transaction.
const FILL_WINDOW: usize = 1024;
/// The fill queues its tasks as deferred writes (applied without an fsync of their own, as the submit
/// path writes a new task) and makes them durable every this many tasks per thread, so redb can reuse
/// the pages earlier commits freed.
const FILL_DURABLE_EVERY: usize = 32 * FILL_WINDOW;
const TARGET: Duration = Duration::from_secs(1);
/// Longest wait for one start, so the scenario ends even if a gateway never gets ready.
const START_LIMIT: Duration = Duration::from_secs(180);
/// How long each gateway works before it is stopped, so a restart follows writes as it would in production.
const RUN_BEFORE_STOP: Duration = Duration::from_secs(3);
/// What the clients send meanwhile: a synchronous image, so every request is a durable write (hold, then
/// settlement) and the in-flight count stays as filled.
const SUBMISSION: &str = r#"{"model":"beta-image-2.0-pro_t2i","prompt":"restart bench","n":1}"#;
/// Clients submitting back to back while the gateway works, so its store writer is busy when it is stopped.
const CLIENTS: usize = 2;
const STORE_FILE: &str = "mediagate.redb";

/// A filled data dir, kept for every start of this bench run.
struct Filled {
    dir: PathBuf,
    account: String,
    /// Key of the account that owns `task_id`.
    key: String,
    /// A finished (successful) task to read after the start.
    task_id: String,
    took: Duration,
}

/// What one start measured.
struct Start {
    ready: Duration,
    first_read: Duration,
    rss: u64,
    /// The gateway's `tasks_in_flight` gauge after the start (set from the store's in-flight index).
    in_flight: f64,
}

/// splitmix64: deterministic, so every bench run fills the same mix.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// 32 hex digits, the shape of a simple UUID.
    fn id(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}

/// A task as `tasks::new_task` makes it, with the billing the submit handler adds.
fn new_task(rng: &mut Rng, model: &'static ModelSpec, account: &str, key: &str, created_ms: i64) -> TaskRecord {
    let (quoted, units) = pricing::quote(model, &Map::new());
    let billing = TaskBilling {
        quoted,
        units,
        hold: vec![(Pot::Balance, quoted)],
        baseline: 10_000_000,
        ..TaskBilling::default()
    };
    let prefix = if model.media == Media::Video { "vid-" } else { "img-" };
    TaskRecord {
        task_id: format!("task-{}", rng.id()),
        request_id: format!("{prefix}{}", rng.id()),
        account: account.to_string(),
        key_prefix: key.chars().take(8).collect(),
        model: model.id.into(),
        operation: model.operation.as_str().into(),
        media: model.media,
        status: if model.task_mode == TaskMode::Async { TaskStatus::Queued } else { TaskStatus::Running },
        created_at: local_time(created_ms),
        created_ms,
        updated_ms: created_ms,
        finished_ms: None,
        upstream_task_id: None,
        next_poll_ms: created_ms,
        deadline_ms: created_ms + model.deadline_seconds as i64 * 1000,
        results: Vec::new(),
        usage: None,
        error: None,
        billing: Some(billing),
        callback_url: None,
        mirror: None,
        running_ms: None,
        measured: None,
        failed_items: Vec::new(),
        envelope: None,
        attempts: Vec::new(),
        trace: None,
    }
}

/// A task finished some time in the last 30 days: 85% success, 8% failed, 4% timeout, 3% cancelled, its
/// settlement computed by the gateway's own `billing::settle`.
fn finished_task(rng: &mut Rng, model: &'static ModelSpec, account: &str, key: &str, now: i64) -> TaskRecord {
    let created = now - 60_000 - rng.below(30 * 86_400_000) as i64;
    let mut task = new_task(rng, model, account, key, created);
    let upstream_id = rng.id();
    if model.task_mode == TaskMode::Async {
        task.upstream_task_id = Some(upstream_id.clone());
    }
    let roll = rng.below(100);
    let (status, took_ms) = match roll {
        0..85 => (TaskStatus::Success, model.expected_seconds as i64 * 1000),
        85..93 => (TaskStatus::Failed, 5_000),
        93..97 => (TaskStatus::Timeout, model.deadline_seconds as i64 * 1000),
        _ => (TaskStatus::Cancelled, 2_000),
    };
    let finished = created + took_ms + rng.below(20_000) as i64;
    task.status = status;
    task.updated_ms = finished;
    task.finished_ms = Some(finished);
    task.next_poll_ms = finished;
    match status {
        TaskStatus::Success => {
            let expires = local_time(finished + 86_400_000);
            // The usage report as the upstream sends it, and what the gateway measures in it.
            let (count, ext, usage, measured) = match model.media {
                Media::Video => {
                    let usage = json!({"duration": 5, "size": "1280*720", "input_video_duration": 0,
                        "output_video_duration": 5, "video_count": 1, "SR": 720});
                    let measured = Measured {
                        seconds: Reading::Count(5.0),
                        input_video_seconds: Reading::Count(0.0),
                        resolution: Some("720P".into()),
                        ..Measured::NOTHING
                    };
                    (1, "mp4", usage, measured)
                }
                Media::Image => {
                    let n = task.billing.as_ref().and_then(|b| b.units.images).unwrap_or(1);
                    let usage = json!({"image_count": n, "width": 1024, "height": 1024});
                    (n, "png", usage, Measured { images: Reading::Count(n), ..Measured::NOTHING })
                }
            };
            task.measured = Some(measured);
            task.results = (0..count)
                .map(|i| TaskResult {
                    // The length of a signed object-store URL, as upstreams hand them out.
                    url: format!(
                        "https://upstream-cn.example/results/{upstream_id}/output-{i}.{ext}?Expires={}\
                         &OSSAccessKeyId=LTAI5tQZd8AoCkW8u9xk3p2a&Signature={}",
                        finished / 1000 + 86_400,
                        &rng.id()[..28]
                    ),
                    kind: model.media.as_str().into(),
                    expires_at: expires.clone(),
                })
                .collect();
            task.usage = Some(usage.into());
        }
        TaskStatus::Failed => {
            let code = ["DataInspectionFailed", "InternalError", "InvalidParameter"][rng.below(3) as usize];
            task.error = Some(TaskError { code: code.into(), message: "The upstream failed the task.".into() });
        }
        TaskStatus::Timeout => {
            task.error = Some(TaskError {
                code: "timeout".into(),
                message: "The task did not finish before its model's deadline.".into(),
            });
        }
        _ => {
            task.error = Some(TaskError { code: "cancelled".into(), message: "Cancelled by the client.".into() });
        }
    }
    // The ledger postings it returns are not stored: `add_task` with no hold writes the task alone (see the
    // report's note on what the store file lacks). Settled, each task is a line of the usage log.
    let _ = task.settle();
    task
}

/// A task the upstream accepted as `upstream`: 40% still queued, 60% running, all due for a poll.
fn live_task(rng: &mut Rng, model: &'static ModelSpec, account: &str, key: &str, upstream: &Upstream) -> TaskRecord {
    let mut task = new_task(rng, model, account, key, upstream.created_ms);
    task.upstream_task_id = Some(upstream.id.clone());
    task.status = if rng.below(10) < 4 { TaskStatus::Queued } else { TaskStatus::Running };
    task.updated_ms = upstream.created_ms;
    task
}

/// A task the simulator holds.
struct Upstream {
    id: String,
    created_ms: i64,
}

/// The model of every in-flight task, and the upstream request that creates its job in the simulator;
/// `sim:never` keeps that job RUNNING, so the gateway polls it for the whole scenario.
const LIVE_MODEL: &str = "alpha2.6-t2v_t2v";
const LIVE_PATH: &str = "/cn-beijing/api/v1/services/aigc/video-generation/video-synthesis";
const LIVE_BODY: &str = concat!(
    r#"{"model":"alpha2.6-t2v","input":{"prompt":"restart bench sim:never"},"#,
    r#""parameters":{"size":"1280*720","duration":5}}"#
);

/// Creates `count` jobs in the simulator, so the store's in-flight tasks are ones their upstream knows
/// (tasks it did not know would all be failed by the first poll, and a restart would find none in flight).
fn upstream_jobs(sim_addr: &str, count: usize) -> Result<Vec<Upstream>, String> {
    let headers = [
        ("Authorization", "Bearer bench-cn-beijing"),
        ("X-Upstream-Async", "enable"),
        ("Content-Type", "application/json"),
    ];
    (0..count)
        .map(|_| {
            let created_ms = mediagate::domain::clock::now_ms();
            let (status, answer) = call(sim_addr, "POST", LIVE_PATH, &headers, LIVE_BODY, Duration::from_secs(10));
            let id = serde_json::from_str::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v.pointer("/output/task_id").and_then(|t| t.as_str()).map(String::from));
            match (status, id) {
                (200, Some(id)) => Ok(Upstream { id, created_ms }),
                _ => Err(format!("the simulator answered a create with {status}: {answer}")),
            }
        })
        .collect()
}

/// Fills `dir` with `finished` tasks and one in-flight task per upstream job, over `ACCOUNTS` accounts, then
/// closes the store cleanly.
fn fill(dir: &Path, finished: usize, live: &[Upstream]) -> Result<Filled, String> {
    let began = Instant::now();
    let store = Store::open(dir).map_err(|e| e.to_string())?;
    let keys = actix_web::rt::System::new().block_on(async {
        let mut keys = Vec::new();
        for a in 0..ACCOUNTS {
            let account = format!("acct-{a:03}");
            let key = store.create_key(&account).await.map_err(|e| e.to_string())?;
            keys.push((account, key));
        }
        Ok::<_, String>(keys)
    })?;
    let all: Vec<&'static ModelSpec> = MODELS.iter().collect();
    let live_model = ModelSpec::find(LIVE_MODEL).ok_or("the catalog lost the in-flight tasks' model")?;
    let total = finished + live.len();
    let now = mediagate::domain::clock::now_ms();
    let threads = FILL_THREADS.min(total.max(1));
    let found: Vec<Result<Option<String>, String>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in 0..threads {
            let (store, keys, all) = (store.clone(), &keys, &all);
            let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                let runtime = actix_web::rt::Runtime::new().map_err(|e| e.to_string())?;
                runtime.block_on(async move {
                    let mut rng = Rng(0x5EED_0000 + t as u64);
                    let mut readable = None;
                    let mut queued = Vec::with_capacity(FILL_WINDOW);
                    let mut since_durable = 0;
                    // Strided, so the in-flight tasks (the highest indices) are inserted last, as they were.
                    for i in (t..total).step_by(threads) {
                        let (account, key) = &keys[i % ACCOUNTS];
                        let task = if i < finished {
                            let model = all[rng.below(all.len() as u64) as usize];
                            finished_task(&mut rng, model, account, key, now)
                        } else {
                            live_task(&mut rng, live_model, account, key, &live[i - finished])
                        };
                        if readable.is_none() && i % ACCOUNTS == 0 && task.status == TaskStatus::Success {
                            readable = Some(task.task_id.clone());
                        }
                        // Spawned, so the window's writes are all queued at once and the writer batches them.
                        let adding = store.clone();
                        queued.push(actix_web::rt::spawn(async move {
                            adding.add_task(task, None, None, Commit::Deferred).await
                        }));
                        if queued.len() == FILL_WINDOW {
                            for pending in queued.drain(..) {
                                pending.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
                            }
                            since_durable += FILL_WINDOW;
                            if since_durable >= FILL_DURABLE_EVERY {
                                store.caught_up().await.map_err(|e| e.to_string())?;
                                since_durable = 0;
                            }
                        }
                    }
                    for pending in queued {
                        pending.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
                    }
                    store.caught_up().await.map_err(|e| e.to_string())?;
                    Ok(readable)
                })
            });
            handles.push(spawned.map_err(|e| e.to_string()));
        }
        handles
            .into_iter()
            .map(|h| h.and_then(|h| h.join().unwrap_or_else(|_| Err("a fill thread panicked".into()))))
            .collect()
    });
    let mut task_id = None;
    for result in found {
        task_id = task_id.or(result?);
    }
    drop(store);
    close_cleanly(&dir.join(STORE_FILE))?;
    let (account, key) = keys.into_iter().next().ok_or("no account")?;
    Ok(Filled {
        dir: dir.to_path_buf(),
        account,
        key,
        task_id: task_id.ok_or("no successful task was stored")?,
        took: began.elapsed(),
    })
}

/// Waits for the store writer thread to let go of the file (it closes the database when the last `Store`
/// handle drops), then opens and closes it once more so the copy every start gets is cleanly closed.
fn close_cleanly(path: &Path) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match redb::Database::open(path) {
            Ok(db) => return db.close().map_err(|e| e.to_string()),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("reopen {}: {e}", path.display())),
        }
    }
}

/// Whether redb finds the file cleanly closed (`false`: the next open must repair it), `None` if unknown.
fn closed_cleanly(path: &Path) -> Option<bool> {
    match redb::ReadOnlyDatabase::open(path) {
        Ok(_) => Some(true),
        Err(redb::DatabaseError::RepairAborted) => Some(false),
        Err(_) => None,
    }
}

/// A fresh copy of the filled store in `to`, flushed so that write-back does not run during the start.
fn fresh_copy(filled: &Filled, to: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    let target = to.join(STORE_FILE);
    std::fs::copy(filled.dir.join(STORE_FILE), &target).map_err(|e| e.to_string())?;
    std::fs::File::open(&target).and_then(|f| f.sync_all()).map_err(|e| e.to_string())
}

/// Time from `since` to the first 200 of `path`; the server binds before it opens the store, so a request
/// waits in the accept queue until the gateway serves and is answered the moment it can be.
fn until_ok(addr: &str, path: &str, key: Option<&str>, since: Instant) -> Option<Duration> {
    while since.elapsed() < START_LIMIT {
        let auth = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        if call(addr, "GET", path, &headers, "", START_LIMIT - since.elapsed().min(START_LIMIT)).0 == 200 {
            return Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

struct Setup {
    mediagate: PathBuf,
    sim_addr: String,
    work: PathBuf,
}

/// Starts a gateway on `data`, measures it, and returns it running with its address.
fn start_gateway(setup: &Setup, data: &Path, filled: &Filled) -> Result<(Server, String, Start), String> {
    let addr = format!("127.0.0.1:{}", free_port());
    let config = setup.work.join("restart.yaml");
    std::fs::write(&config, gateway_config(&addr, data, &format!("http://{}", setup.sim_addr), ""))
        .map_err(|e| e.to_string())?;
    let config = config.display().to_string();
    let began = Instant::now();
    let server = start(
        0,
        &setup.mediagate,
        &["serve", "--config", &config],
        &[(UPSTREAM_KEY_ENV, "bench-cn-beijing"), (ADMIN_ENV, "bench-admin")],
    );
    let ready = until_ok(&addr, "/readyz", None, began).ok_or("the gateway never answered /readyz")?;
    let task = format!("/v1/tasks/{}", filled.task_id);
    let first_read = until_ok(&addr, &task, Some(&filled.key), began).ok_or("the task never read back")?;
    let rss = rss_bytes(server.pid());
    let (_, metrics) = call(&addr, "GET", "/metrics", &[], "", Duration::from_secs(10));
    let in_flight = metrics
        .lines()
        .find(|l| !l.starts_with('#') && l.contains("tasks_in_flight"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    Ok((server, addr, Start { ready, first_read, rss, in_flight }))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ready_ms(starts: &[Start]) -> Vec<f64> {
    starts.iter().map(|s| ms(s.ready)).collect()
}

fn slowest(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

fn row(name: &str, start: &str, starts: &[Start], target: &str) -> String {
    format!(
        "| {name} | {start} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {target} |\n",
        median(ready_ms(starts)),
        slowest(&ready_ms(starts)),
        median(starts.iter().map(|s| ms(s.first_read)).collect()),
        median(starts.iter().map(|s| s.rss as f64 / 1048576.0).collect()),
        median(starts.iter().map(|s| s.in_flight).collect()),
    )
}

fn target(starts: &[Start]) -> String {
    let limit = ms(TARGET);
    format!(
        "< {limit:.0}: {} (median), {} (slowest)",
        met(median(ready_ms(starts)) < limit),
        met(slowest(&ready_ms(starts)) < limit)
    )
}

/// Sets the CPU affinity of every thread of this process (`taskset -a`); the fill is not measured, so it
/// may use both cores, and the bench goes back to core 1 before anything is timed.
fn pin_self(cores: &str) {
    let _ = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cores, &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status();
}

/// What start-up reads before it serves, timed in this process on a clean copy: the open, then
/// `Store::in_flight()` cold and again warm. Returns (open, first in_flight, second in_flight).
fn startup_reads(filled: &Filled, dir: &Path) -> Result<[Duration; 3], String> {
    fresh_copy(filled, dir)?;
    let began = Instant::now();
    let store = Store::open(dir).map_err(|e| e.to_string())?;
    let open = began.elapsed();
    let mut reads = [Duration::ZERO; 2];
    for read in reads.iter_mut() {
        let began = Instant::now();
        let tasks = store.in_flight().map_err(|e| e.to_string())?;
        *read = began.elapsed();
        if tasks.len() != IN_FLIGHT {
            return Err(format!("{} in-flight tasks read back, {IN_FLIGHT} stored", tasks.len()));
        }
    }
    drop(store);
    close_cleanly(&dir.join(STORE_FILE))?;
    Ok([open, reads[0], reads[1]])
}

/// Lets a started gateway work for `RUN_BEFORE_STOP` under `CLIENTS` clients that keep submitting until
/// it is stopped, with SIGTERM (`kill: false`) or SIGKILL: a gateway restarted in production is writing
/// when it is stopped, and what it leaves in the file depends on that. Returns the requests answered 200.
fn work_then_stop(server: Server, addr: &str, filled: &Filled, kill: bool) -> Result<usize, String> {
    let top_up = call(
        addr,
        "POST",
        &format!("/admin/v1/accounts/{}/top-up", filled.account),
        &[("Authorization", "Bearer bench-admin"), ("Content-Type", "application/json")],
        r#"{"amount": 1000000000000000}"#,
        Duration::from_secs(10),
    );
    if top_up.0 != 200 {
        return Err(format!("top-up answered {}: {}", top_up.0, top_up.1));
    }
    let stop = AtomicBool::new(false);
    let auth = format!("Bearer {}", filled.key);
    let served = std::thread::scope(|s| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                s.spawn(|| {
                    let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
                    let mut served = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let timeout = Duration::from_secs(5);
                        match call(addr, "POST", "/v1/images/generations", &headers, SUBMISSION, timeout).0 {
                            200 => served += 1,
                            _ => std::thread::sleep(Duration::from_millis(5)),
                        }
                    }
                    served
                })
            })
            .collect();
        std::thread::sleep(RUN_BEFORE_STOP);
        if kill {
            drop(server); // `Server`'s drop sends SIGKILL
        } else {
            server.stop();
        }
        stop.store(true, Ordering::Relaxed);
        clients.into_iter().map(|c| c.join().unwrap_or(0)).sum()
    });
    Ok(served)
}

/// Runs the scenario; returns its report section.
pub fn run() -> String {
    match scenario() {
        Ok(section) => section,
        Err(e) => format!("## Restart\n\nThe scenario failed: {e}\n\n"),
    }
}

fn scenario() -> Result<String, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mediagate = bin_dir().join("mediagate");
    let sim_addr = format!("127.0.0.1:{}", free_port());
    let _sim = start(
        1,
        &mediagate,
        &["simulate", "--listen", &sim_addr, "--time-scale", "0", "--key-prefix", "bench", "--concurrency", UNCAPPED],
        &[],
    );
    wait_listening(&sim_addr);
    let setup = Setup { mediagate, sim_addr, work: tmp.path().to_path_buf() };

    eprintln!("restart: filling {FINISHED} finished + {IN_FLIGHT} in-flight tasks");
    pin_self("0,1");
    let filled =
        upstream_jobs(&setup.sim_addr, IN_FLIGHT).and_then(|live| fill(&tmp.path().join("full"), FINISHED, &live));
    pin_self("1");
    let full = filled?;
    let small = fill(&tmp.path().join("small"), 1, &[])?;
    let bytes = std::fs::metadata(full.dir.join(STORE_FILE)).map(|m| m.len()).unwrap_or(0);
    eprintln!("restart: filled in {:.1} s, {} MiB", full.took.as_secs_f64(), bytes / 1048576);

    let run_dir = tmp.path().join("run");
    let [open, first_read, second_read] = startup_reads(&full, &run_dir)?;
    // Per lane and round: a start on a cleanly closed copy, a few seconds of work (the poller polls the
    // in-flight tasks and records the queued ones as running, so the store is written as in production),
    // SIGTERM, then the restart on the file that stop left.
    let mut lanes: [(&Filled, Vec<Start>, Vec<Start>); 2] =
        [(&small, Vec::new(), Vec::new()), (&full, Vec::new(), Vec::new())];
    let mut sigterm_clean = Vec::new();
    let mut submitted = 0;
    for round in 0..ROUNDS {
        eprintln!("restart round {}/{ROUNDS}", round + 1);
        for (filled, fresh, restarted) in lanes.iter_mut() {
            fresh_copy(filled, &run_dir)?;
            let (server, addr, first) = start_gateway(&setup, &run_dir, filled)?;
            submitted += work_then_stop(server, &addr, filled, false)?;
            if std::ptr::eq(*filled, &full) {
                sigterm_clean.push(closed_cleanly(&run_dir.join(STORE_FILE)));
            }
            let (server, _, second) = start_gateway(&setup, &run_dir, filled)?;
            server.stop();
            fresh.push(first);
            restarted.push(second);
        }
    }

    // Unclean stop, once: SIGKILL after the same few seconds of work, then start again on that file.
    fresh_copy(&full, &run_dir)?;
    let (server, addr, _) = start_gateway(&setup, &run_dir, &full)?;
    submitted += work_then_stop(server, &addr, &full, true)?;
    let killed_clean = closed_cleanly(&run_dir.join(STORE_FILE));
    let (server, _, after_kill) = start_gateway(&setup, &run_dir, &full)?;
    server.stop();

    let [(_, floor_fresh, floor_restart), (_, full_fresh, full_restart)] = lanes;
    let left_clean = sigterm_clean.iter().filter(|c| **c == Some(true)).count();
    let tasks = format!("{FINISHED} finished + {IN_FLIGHT} in flight");
    let mut out = String::from("## Restart (1M finished + 10k in-flight tasks)\n\n");
    out.push_str(
        "| store | start | to `/readyz` 200, median (ms) | slowest (ms) | to first `GET /v1/tasks/{id}` 200 (ms) \
         | RSS after ready (MiB) | in flight at start | target |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    out.push_str(&row("1 task (floor)", "cleanly closed file", &floor_fresh, ""));
    out.push_str(&row("1 task (floor)", "restart after SIGTERM", &floor_restart, ""));
    out.push_str(&row(&tasks, "cleanly closed file", &full_fresh, &target(&full_fresh)));
    out.push_str(&row(&tasks, "restart after SIGTERM", &full_restart, &target(&full_restart)));
    out.push_str(&row(&tasks, "restart after SIGKILL (once)", &[after_kill], "(extra row)"));
    let working = (2 * ROUNDS + 1) as f64 * RUN_BEFORE_STOP.as_secs_f64();
    let killed = match killed_clean {
        Some(true) => "after",
        Some(false) => "not after",
        None => "(unknown) after",
    };
    out.push_str(&format!(
        "\nStore file {:.0} MiB ({ACCOUNTS} accounts, {} models), filled through `Tasks::add_task` (deferred \
         writes from {FILL_THREADS} threads, durable every {FILL_DURABLE_EVERY} tasks per thread) in {:.1} s. \
         Each start gets a fresh copy of it (page cache warm) and works {} s before it is stopped, its poller \
         polling the in-flight tasks and {CLIENTS} clients submitting back to back ({:.0} sync images/s), so its \
         store is being written when the signal comes. \
         redb found the file cleanly closed after {left_clean} of {} SIGTERM stops and {killed} the SIGKILL; a \
         file not closed cleanly costs a full repair on the next open unless its last commit recorded the \
         allocator state. In this process on a clean copy: `Store::open` {:.0} ms, `Store::in_flight()` of \
         {IN_FLIGHT} tasks {:.0} ms cold, {:.0} ms warm. The fill writes no ledger rows for its tasks \
         (`add_task` without a hold); start-up does not read that table.\n\n",
        bytes as f64 / 1048576.0,
        MODELS.len(),
        full.took.as_secs_f64(),
        RUN_BEFORE_STOP.as_secs(),
        submitted as f64 / working,
        sigterm_clean.len(),
        ms(open),
        ms(first_read),
        ms(second_read),
    ));
    Ok(out)
}
