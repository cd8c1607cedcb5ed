//! Three replicas on one PostgreSQL and one simulator serve as one gateway under mixed load spread over all
//! three, through a replica's SIGKILL (and its restart later) and a stop of the database (and its start):
//! every acknowledged task ends exactly once, the ledger verifies, the money adds up, and no upstream key
//! went over its per-key query limit in any second.
#![allow(clippy::unwrap_used)]

mod common;

use common::postgres::Cluster;
use common::{Demo, Process};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

const BALANCE: i64 = 1_000_000_000_000;
/// The gateway's per-key query limit, checked on the simulator: low enough that the load keeps the pollers
/// at it, high enough that they end every task within a minute of the load.
const LIMIT: u64 = 12;
const KEYS: &str = "k-cn-beijing,k-cn-beijing-2";

struct Replicas {
    url: String,
    simulator: String,
    /// Added to the upstream's config entry (`, concurrency: ...`), and to the config.
    upstream: String,
    extra: String,
    tmp: tempfile::TempDir,
    gateways: Vec<RwLock<Option<Demo>>>,
}

impl Replicas {
    fn start(url: &str, simulator: &str) -> Replicas {
        Replicas::start_with(url, simulator, "", "")
    }

    fn start_with(url: &str, simulator: &str, upstream: &str, extra: &str) -> Replicas {
        let replicas = Replicas {
            url: url.into(),
            simulator: simulator.into(),
            upstream: upstream.into(),
            extra: extra.into(),
            tmp: tempfile::tempdir().unwrap(),
            gateways: Vec::new(),
        };
        let gateways = (0..3).map(|n| RwLock::new(Some(replicas.serve(n)))).collect();
        Replicas { gateways, ..replicas }
    }

    fn serve(&self, n: usize) -> Demo {
        self.serve_with(n, &[])
    }

    fn serve_with(&self, n: usize, env: &[(&str, &str)]) -> Demo {
        let config = format!(
            "store: {{url: '{}'}}\n\
             upstreams:\n  cn-beijing: {{base_url: '{}/cn-beijing', api_key_env: REPLICA_SIM_KEYS{}}}\n\
             limits: {{max_in_flight_per_account: 100000, requests_per_second_per_key: 100000}}\n\
             poller: {{queries_per_second: {LIMIT}, min_interval_ms: 200, max_interval_ms: 1000, sweep_interval_ms: 100}}\n{}",
            self.url, self.simulator, self.upstream, self.extra
        );
        let mut env = env.to_vec();
        env.extend([("REPLICA_SIM_KEYS", KEYS), ("MEDIAGATE_LOG", "warn,mediagate::services::tasks=debug")]);
        Demo::serve(&self.tmp.path().join(format!("replica-{n}")), &config, &env)
    }

    /// Runs `f` on replica `n`, if it is up.
    fn on<T>(&self, n: usize, f: impl FnOnce(&Demo) -> T) -> Option<T> {
        self.gateways[n].read().unwrap().as_ref().map(f)
    }

    fn kill(&self, n: usize) {
        if let Some(mut demo) = self.gateways[n].write().unwrap().take() {
            demo.kill();
        }
    }

    fn restart(&self, n: usize) {
        self.restart_with(n, &[]);
    }

    fn restart_with(&self, n: usize, env: &[(&str, &str)]) {
        self.kill(n);
        *self.gateways[n].write().unwrap() = Some(self.serve_with(n, env));
    }

    fn status(&self, n: usize, path: &str) -> u16 {
        self.on(n, |demo| demo.get(path).status).unwrap_or(0)
    }
}

/// One request of the mix: async video, sync image, now and then slow, every third keyed.
fn request(n: u64) -> (&'static str, Value, Option<String>) {
    let slow = if n.is_multiple_of(5) { " sim:slow" } else { "" };
    let key = n.is_multiple_of(3).then(|| format!("k-{n}"));
    match n % 3 {
        0 | 1 => (
            "/v1/videos/generations",
            json!({"model": "alpha2.6-t2v_t2v", "prompt": format!("fox {n}{slow}"), "duration": 2}),
            key,
        ),
        _ => (
            "/v1/images/generations",
            json!({"model": "beta-image-2.0-pro_t2i", "prompt": format!("cat {n}{slow}")}),
            key,
        ),
    }
}

#[test]
fn three_replicas_on_one_database_serve_as_one_through_a_kill_and_a_database_stop() {
    let cluster = Cluster::start();
    // The load outruns any realistic cap on running tasks, and would wait in line longer than the test waits
    // for it to end: caps are lifted here (tests/capacity.rs and the slots test below hold them).
    let simulator = common::simulator("0.2", &["--keys", "2", "--concurrency", "1000"]);
    let upstream = ", concurrency: {default: 1000}";
    let replicas = Replicas::start_with(&cluster.url("postgres"), &simulator.address(), upstream, "");
    let key = replicas.on(0, |demo| demo.account("acme", BALANCE, 0, 0)).unwrap();
    let (stop, counter) = (AtomicBool::new(false), AtomicU64::new(0));
    let acknowledged = Mutex::new(BTreeSet::new());
    let outage_answers = Mutex::new(Vec::new());

    std::thread::scope(|scope| {
        for client in 0..6 {
            let (replicas, key, stop, counter, acknowledged) = (&replicas, &key, &stop, &counter, &acknowledged);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let (route, body, idempotency) = request(n);
                    let auth = format!("Bearer {key}");
                    let mut headers = vec![("Authorization", auth.as_str())];
                    if let Some(idempotency) = &idempotency {
                        headers.push(("Idempotency-Key", idempotency.as_str()));
                    }
                    let text = body.to_string();
                    let sent = replicas.on((client + n as usize) % 3, |demo| {
                        demo.try_raw("POST", route, Some(&text), "application/json", &headers)
                    });
                    match sent {
                        // An acceptance names its task; a synchronous answer is final already.
                        Some(Ok(reply)) if reply.status < 300 => {
                            if let Some(task_id) = reply.json["task_id"].as_str() {
                                acknowledged.lock().unwrap().insert(task_id.to_string());
                            }
                        }
                        _ => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            });
        }

        // A replica dies mid-load; the others take its tasks over; it comes back later.
        std::thread::sleep(Duration::from_secs(3));
        replicas.kill(1);
        std::thread::sleep(Duration::from_secs(3));
        replicas.restart(1);
        std::thread::sleep(Duration::from_secs(2));

        // The database stops: every replica answers 503 and is not ready, then recovers by itself.
        cluster.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in 0..3 {
            while replicas.status(n, "/readyz") != 503 {
                assert!(Instant::now() < deadline, "replica {n} still ready without its database");
                std::thread::sleep(Duration::from_millis(100));
            }
            let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "during the outage"});
            let reply = replicas.on(n, |demo| demo.post_as(&key, "/v1/images/generations", &body)).unwrap();
            outage_answers.lock().unwrap().push((reply.status, reply.code().to_string()));
        }
        std::thread::sleep(Duration::from_secs(2));
        cluster.resume();
        let deadline = Instant::now() + Duration::from_secs(60);
        for n in 0..3 {
            while replicas.status(n, "/readyz") != 200 {
                assert!(Instant::now() < deadline, "replica {n} did not recover with its database");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });

    for (status, code) in outage_answers.into_inner().unwrap() {
        assert_eq!((status, code.as_str()), (503, "storage_unavailable"));
    }
    let acknowledged = acknowledged.into_inner().unwrap();
    assert!(acknowledged.len() >= 50, "only {} tasks acknowledged", acknowledged.len());
    // Every acknowledged task ends exactly once, the same seen from every replica.
    let database = cluster.url("postgres");
    for task_id in &acknowledged {
        let deadline = Instant::now() + Duration::from_secs(90);
        while replicas.on(2, |demo| demo.get_as(&key, &format!("/v1/tasks/{task_id}"))).unwrap().json["status"]
            .as_str()
            .is_some_and(|status| status == "queued" || status == "running")
        {
            if Instant::now() > deadline {
                let row = format!(
                    "SELECT status, lease_owner, handed_over, submitted_by, upstream_task_id, created_ms, \
                     next_poll_ms FROM tasks WHERE task_id = '{task_id}'"
                );
                let replicas_seen = "SELECT id, seen_ms, takes_handovers FROM replicas";
                let sessions = "SELECT pid, state, wait_event_type, wait_event, now() - xact_start, left(query, 120) \
                                FROM pg_stat_activity WHERE backend_type = 'client backend'";
                eprintln!("DIAG sessions: {:#?}", common::postgres::query(&database, sessions));
                for n in 0..3 {
                    let log = replicas.on(n, |demo| demo.process.stderr()).unwrap_or_default();
                    let lines: Vec<&str> =
                        log.lines().filter(|l| l.contains(task_id.as_str()) || l.contains("panick")).collect();
                    eprintln!("DIAG replica {n}: {} log lines; about the task: {lines:#?}", log.lines().count());
                    eprintln!("DIAG replica {n} tail: {:#?}", log.lines().rev().take(5).collect::<Vec<_>>());
                }
                panic!(
                    "{task_id} never ended at {}: {:?}; replicas {:?}",
                    common::now_ms(),
                    common::postgres::query(&database, &row),
                    common::postgres::query(&database, replicas_seen)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let ended = replicas.on(2, |demo| demo.wait_terminal_as(&key, task_id, Duration::from_secs(5))).unwrap();
        assert!(ended["settlement"].is_object(), "{task_id} ended unsettled: {ended}");
        let elsewhere = replicas.on(0, |demo| demo.get_as(&key, &format!("/v1/tasks/{task_id}"))).unwrap();
        assert_eq!(elsewhere.json["status"], ended["status"], "{task_id}");
    }
    replicas.on(0, |demo| {
        assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
        // The money adds up once every task has ended, those whose end a replica could not write (the
        // database was down) included: they end as interrupted, their holds given back.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let charged = demo.charged("acme");
            if demo.funds("acme") == (0, 0, BALANCE - charged) {
                break;
            }
            assert!(Instant::now() < deadline, "{:?} left, {charged} charged", demo.funds("acme"));
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    // No key went over its limit in any second, however the three replicas shared it.
    let stats = common::get_json(&format!("{}/_sim/query-stats", simulator.address()));
    let per_key = stats["per_key"].as_array().unwrap();
    assert_eq!(per_key.len(), 2, "{stats}");
    for key in per_key {
        assert!(key["max_per_second"].as_u64().unwrap() <= LIMIT, "{stats}");
    }
    drop::<Process>(simulator);
}

/// Each replica's `mediagate_tasks_in_flight` is the live tasks it holds. Tasks accepted by one replica and
/// polled and ended by the others never take a figure below zero, the figures add up to the tasks live, and
/// each is back to zero once every task has ended.
#[test]
fn each_replica_counts_the_live_tasks_it_holds_and_none_goes_negative() {
    let cluster = Cluster::start();
    let simulator = common::simulator("0.2", &["--keys", "2"]);
    let replicas = Replicas::start(&cluster.url("postgres"), &simulator.address());
    let key = replicas.on(0, |demo| demo.account("acme", BALANCE, 0, 0)).unwrap();
    let in_flight = |n: usize| -> i64 {
        let metrics = replicas.on(n, |demo| demo.get("/metrics")).unwrap();
        let text = String::from_utf8(metrics.bytes).unwrap();
        let line = text.lines().find(|l| l.starts_with("mediagate_tasks_in_flight ")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    // All accepted by replica 0, over several turns of creation time, so every replica polls some.
    let mut tasks = Vec::new();
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 2});
    let mut most = 0;
    for _ in 0..30 {
        let reply = replicas.on(0, |demo| demo.post_as(&key, "/v1/videos/generations", &body)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.json);
        tasks.push(reply.json["task_id"].as_str().unwrap().to_string());
        let figures: Vec<i64> = (0..3).map(in_flight).collect();
        assert!(figures.iter().all(|f| *f >= 0), "{figures:?}");
        most = most.max(figures.iter().sum());
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(most > 0, "no replica counted a live task");
    for task_id in &tasks {
        replicas.on(1, |demo| demo.wait_terminal_as(&key, task_id, Duration::from_secs(90))).unwrap();
        let figures: Vec<i64> = (0..3).map(in_flight).collect();
        assert!(figures.iter().all(|f| *f >= 0), "{figures:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let figures: Vec<i64> = (0..3).map(in_flight).collect();
        if figures == [0, 0, 0] {
            break;
        }
        assert!(Instant::now() < deadline, "with no task live, the replicas count {figures:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The upstream's slots are counted in the database, so the replicas together never send a key more than
/// its cap; a replica killed holding slots gives them up within its lease, and the jobs waiting on the
/// others run.
#[test]
fn upstream_slots_hold_across_replicas_and_a_killed_ones_come_back() {
    let cluster = Cluster::start();
    let simulator = common::simulator("0.5", &["--keys", "2", "--concurrency", "1"]);
    let upstream = ", concurrency: {default: 1}";
    let replicas = Replicas::start_with(&cluster.url("postgres"), &simulator.address(), upstream, "");
    let key = replicas.on(0, |demo| demo.account("acme", BALANCE, 0, 0)).unwrap();
    let submit = |n: usize, prompt: &str| {
        let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": prompt, "duration": 2});
        let reply = replicas.on(n, |demo| demo.post_as(&key, "/v1/videos/generations", &body)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.json);
        reply.json
    };
    // Replica 0 takes both keys' one slot; the others' jobs wait for them.
    let held: Vec<Value> = (0..2).map(|i| submit(0, &format!("held {i} sim:slow"))).collect();
    assert!(held.iter().all(|a| a.get("queue").is_none()), "{held:?}");
    let waiting: Vec<Value> = (0..4).map(|i| submit(1 + i % 2, &format!("waiting {i}"))).collect();
    assert!(waiting.iter().all(|a| a.get("queue").is_some()), "no slot is free on another replica: {waiting:?}");
    replicas.kill(0);
    for task in held.iter().chain(&waiting) {
        let id = task["task_id"].as_str().unwrap();
        let ended = replicas.on(1, |demo| demo.wait_terminal_as(&key, id, Duration::from_secs(120))).unwrap();
        assert_eq!(ended["status"], "success", "{ended}");
    }
    let stats = common::get_json(&format!("{}/_sim/capacity-stats", simulator.address()));
    for account in stats["accounts"].as_array().unwrap() {
        let model = &account["models"]["alpha2.6-t2v"];
        assert!(model["max_running"].as_u64().unwrap() <= 1, "a key went over its cap: {stats}");
        assert_eq!(model["refused_for_capacity"], 0, "the replicas together sent a create over a cap: {stats}");
    }
}

/// The line for upstream slots is one for all the replicas: a small account's first job, taken by one
/// replica while a big account's backlog waits on the others, goes in its fair turn across all of them (the
/// second of the jobs queued), not whenever its own replica happens to ask first.
#[test]
fn a_small_accounts_job_on_one_replica_is_served_in_turn_across_a_backlog_on_the_others() {
    let cluster = Cluster::start();
    let simulator = common::simulator("0.25", &["--keys", "2", "--concurrency", "1"]);
    let upstream = ", concurrency: {default: 1}";
    let replicas = Replicas::start_with(&cluster.url("postgres"), &simulator.address(), upstream, "");
    let keys: Vec<String> = ["first", "big", "small"]
        .iter()
        .map(|name| replicas.on(0, |demo| demo.account(name, BALANCE, 0, 0)).unwrap())
        .collect();
    let submit = |n: usize, key: &str, prompt: &str| {
        let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": prompt, "duration": 2});
        let reply = replicas.on(n, |demo| demo.post_as(key, "/v1/videos/generations", &body)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.json);
        reply.json["task_id"].as_str().unwrap().to_string()
    };
    // Both keys' one slot are taken; the big account's backlog waits on replicas 0 and 2.
    let held: Vec<String> = (0..2).map(|i| submit(0, &keys[0], &format!("held {i} sim:slow"))).collect();
    let big: Vec<String> = (0..8).map(|i| submit([0, 2][i % 2], &keys[1], &format!("big {i}"))).collect();
    let small = submit(1, &keys[2], "small 0");
    let status = |key: &str, id: &str| {
        let reply = replicas.on(1, |demo| demo.get_as(key, &format!("/v1/tasks/{id}"))).unwrap();
        reply.json["status"].as_str().unwrap_or_default().to_string()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while status(&keys[2], &small) == "queued" {
        assert!(std::time::Instant::now() < deadline, "the small account's job was never sent");
        std::thread::sleep(Duration::from_millis(50));
    }
    let big_sent = big.iter().filter(|id| status(&keys[1], id) != "queued").count();
    assert!(big_sent <= 1, "{big_sent} of the big account's jobs went before the small one's first");
    for (key, id) in held.iter().map(|id| (&keys[0], id)).chain(big.iter().map(|id| (&keys[1], id))) {
        let ended = replicas.on(1, |demo| demo.wait_terminal_as(key, id, Duration::from_secs(120))).unwrap();
        assert_eq!(ended["status"], "success", "{ended}");
    }
}

/// A replica that stops just after the line handed it a slot for a job, before sending the job, loses
/// neither: the job goes back in line (the replica that claims it finds no live replica sending it) and is
/// sent once, and the stopped replica's slot is cleared.
#[test]
fn a_job_whose_turn_went_to_a_replica_that_stopped_before_sending_it_is_sent_by_another() {
    let cluster = Cluster::start();
    let simulator = common::simulator("0.25", &["--keys", "2", "--concurrency", "1"]);
    let upstream = ", concurrency: {default: 1}";
    let replicas = Replicas::start_with(&cluster.url("postgres"), &simulator.address(), upstream, "");
    replicas.restart_with(1, &[("MEDIAGATE_FAILPOINT", "after-turn")]);
    let key = replicas.on(0, |demo| demo.account("acme", BALANCE, 0, 0)).unwrap();
    let submit = |prompt: &str| {
        let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": prompt, "duration": 2});
        let reply = replicas.on(0, |demo| demo.post_as(&key, "/v1/videos/generations", &body)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.json);
        reply.json
    };
    let held: Vec<Value> = (0..2).map(|i| submit(&format!("held {i} sim:slow"))).collect();
    let waiting = submit("waiting");
    assert!(waiting.get("queue").is_some(), "both slots are held: {waiting}");
    // Replica 1 alone is left to take the waiting job's turn when a slot frees, and stops there.
    replicas.kill(0);
    replicas.kill(2);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while replicas.on(1, |demo| demo.try_raw("GET", "/healthz", None, "", &[]).is_ok()).unwrap() {
        assert!(std::time::Instant::now() < deadline, "replica 1 never took the waiting job's turn");
        std::thread::sleep(Duration::from_millis(100));
    }
    replicas.kill(1);
    replicas.restart(0);
    for task in held.iter().chain([&waiting]) {
        let id = task["task_id"].as_str().unwrap();
        let ended = replicas.on(0, |demo| demo.wait_terminal_as(&key, id, Duration::from_secs(120))).unwrap();
        assert_eq!(ended["status"], "success", "{ended}");
    }
    let stats = common::get_json(&format!("{}/_sim/capacity-stats", simulator.address()));
    let accepted: u64 = stats["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["models"]["alpha2.6-t2v"]["accepted"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(accepted, 3, "each job was sent once: {stats}");
}

/// `mediagate store copy` moves a stopped gateway's embedded store into an empty PostgreSQL database, and a
/// gateway on it goes on where the old one stopped: the same keys, money, tasks (a live one finishes),
/// idempotency records and switches. A database that is not empty is refused.
#[test]
fn an_embedded_store_moves_into_postgres_with_one_command() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.05", &[]);
    let upstream = common::serve_config(&simulator.address(), "", "");
    let env = [common::SIM_KEY];
    let data_dir = tmp.path().join("gateway");
    let mut before = Demo::serve(&data_dir, &format!("store: {{}}\n{upstream}"), &env);
    let key = before.account("acme", 1_000_000_000, 5_000_000, 0);
    let image = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a lighthouse"});
    assert_eq!(before.post_as(&key, "/v1/images/generations", &image).status, 200);
    let video = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 2});
    let done = before.post_as(&key, "/v1/videos/generations", &video).json["task_id"].as_str().unwrap().to_string();
    before.wait_terminal_as(&key, &done, Duration::from_secs(30));
    let auth = format!("Bearer {key}");
    let keyed = |demo: &Demo| {
        let headers = [("Authorization", auth.as_str()), ("Idempotency-Key", "moved-1")];
        demo.request(
            "POST",
            "/v1/videos/generations",
            Some(&json!({"model": "alpha2.6-t2v_t2v", "prompt": "a slow fox sim:slow", "duration": 2})),
            &headers,
        )
    };
    let live = keyed(&before).json["task_id"].as_str().unwrap().to_string();
    assert_eq!(before.admin("/models/beta-image-plus/disable", Some(&json!({}))).status, 200);
    // A webhook secret, and a delivery queued for an endpoint that never answers.
    assert_eq!(before.admin("/accounts/acme/webhook-secret", Some(&json!({}))).status, 200);
    let hooked = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 2, "callback_url": "https://93.184.216.34/x"});
    let hooked = before.post_as(&key, "/v1/videos/generations", &hooked).json["task_id"].as_str().unwrap().to_string();
    before.wait_terminal_as(&key, &hooked, Duration::from_secs(30));
    let funds = before.funds("acme");
    let usage_lines = |demo: &Demo| std::str::from_utf8(&demo.admin("/usage", None).bytes).unwrap().lines().count();
    let lines = usage_lines(&before);
    let operator = before.admin("/operators", Some(&json!({"name": "alice"})));
    let alice = operator.json["token"].as_str().unwrap().to_string();
    let trail = |demo: &Demo| demo.admin("/audit?limit=1000", None).json["data"].clone();
    let entries = trail(&before);
    before.kill();

    let cluster = Cluster::start();
    let url = cluster.url("postgres");
    let copy = |to: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
            .args(["store", "copy", "--from-data-dir", data_dir.to_str().unwrap(), "--to", to])
            .env("MEDIAGATE_LOG", "warn")
            .output()
            .unwrap()
    };
    let copied = copy(&url);
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    let report: Value = serde_json::from_slice(&copied.stdout).unwrap();
    assert_eq!((report["accounts"].as_u64(), report["tasks"].as_u64()), (Some(1), Some(4)), "{report}");
    assert_eq!(report["link_secret"], true, "{report}");
    let again = copy(&url);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"), "{}", String::from_utf8_lossy(&again.stderr));

    // The copies stay where they were, which the new gateway is told.
    let results = format!("results: {{dir: '{}'}}", data_dir.join("results").display());
    let after =
        Demo::serve(&tmp.path().join("after"), &format!("store: {{url: '{url}'}}\n{results}\n{upstream}"), &env);
    assert_eq!(after.funds("acme").0, funds.0);
    let done_task = after.get_as(&key, &format!("/v1/tasks/{done}")).json;
    assert_eq!(done_task["status"], "success");
    // A result link given out before the move still serves: the link secret moved too.
    let link = done_task["results"][0]["url"].as_str().unwrap();
    let served = after.request("GET", &link[link.find("/v1/files/").unwrap()..], None, &[]);
    assert_eq!(served.status, 200, "{:?}", served.json);
    assert_eq!(keyed(&after).json["task_id"], live.as_str(), "the idempotency record moved too");
    let ended = after.wait_terminal_as(&key, &live, Duration::from_secs(60));
    assert_eq!(ended["status"], "success", "{ended}");
    let disabled = after.post_as(&key, "/v1/images/generations", &json!({"model": "beta-image-plus", "prompt": "a"}));
    assert_eq!(disabled.code(), "model_disabled");
    assert_eq!(usage_lines(&after), lines + 1);
    // The webhook secret and the delivery moved too.
    let deliveries = after.admin(&format!("/webhooks/deliveries?task_id={hooked}"), None);
    assert_eq!(deliveries.json["deliveries"][0]["url"], "https://93.184.216.34/x", "{}", deliveries.json);
    let signed = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 2, "callback_url": "https://93.184.216.34/y"});
    let signed = after.post_as(&key, "/v1/videos/generations", &signed);
    assert_eq!(signed.status, 200, "a secret to sign with: {}", signed.json);
    after.wait_terminal_as(&key, signed.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(after.admin("/ledger/verify", None).json["problems"], json!([]));
    // Every task has ended: the account holds what it was given less what the usage log charged.
    let (trial, plan, balance) = after.funds("acme");
    assert_eq!(trial + plan + balance, 1_000_000_000 + 5_000_000 - after.charged("acme"));
    // The audit trail moved whole, numbers kept, and goes on after its last entry; the operator's token works.
    let moved = trail(&after);
    assert_eq!(moved.as_array().unwrap()[..entries.as_array().unwrap().len()], entries.as_array().unwrap()[..]);
    let auth = format!("Bearer {alice}");
    let weighted = after.request(
        "POST",
        "/admin/v1/accounts/acme/weight",
        Some(&json!({"weight": 2})),
        &[("Authorization", &auth)],
    );
    assert_eq!(weighted.status, 200, "{}", weighted.json);
    let last = trail(&after).as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["operator"].as_str(), last["action"].as_str()), (Some("alice"), Some("weight.set")));
    assert!(last["seq"].as_u64() > entries.as_array().unwrap().last().unwrap()["seq"].as_u64(), "{last}");
    // Not even a database user may rewrite it.
    for statement in ["DELETE FROM audit_log", "UPDATE audit_log SET operator = 'x'", "TRUNCATE audit_log"] {
        let refused = common::postgres::query(&url, statement).unwrap_err();
        assert!(refused.contains("append-only"), "{statement}: {refused}");
    }
}

/// The limits of an account (unfinished tasks) and of a key (requests per second) hold across replicas:
/// both are counted in the database.
#[test]
fn account_and_key_limits_hold_across_replicas() {
    let cluster = Cluster::start();
    let simulator = common::simulator("1", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let config = format!(
        "store: {{url: '{}'}}\nlimits: {{max_in_flight_per_account: 3, requests_per_second_per_key: {RATE}}}\n{}",
        cluster.url("postgres"),
        common::serve_config(&simulator.address(), "", "")
    );
    let replicas: Vec<Demo> =
        (0..2).map(|n| Demo::serve(&tmp.path().join(format!("r{n}")), &config, &[common::SIM_KEY])).collect();
    let key = replicas[0].account("acme", 1_000_000_000, 0, 0);
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a slow fox sim:slow", "duration": 2});
    let statuses: Vec<u16> =
        (0..6).map(|n| replicas[n % 2].post_as(&key, "/v1/videos/generations", &body).status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 3, "{statuses:?}");

    // A key's requests spread over both replicas, as fast as they go: per second, within a tenth of its rate
    // and never over it.
    std::thread::sleep(Duration::from_secs(1));
    let answered = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (replicas, key, answered) = (&replicas, &key, &answered);
            scope.spawn(move || {
                while start.elapsed() < Duration::from_millis(4500) {
                    let status = replicas[client as usize % 2].get_as(key, "/v1/models").status;
                    answered.lock().unwrap().push((common::now_ms() / 1000, status));
                }
            });
        }
    });
    // Granted, per second, by both replicas together: never more than the rate.
    let granted = common::postgres::query(&cluster.url("postgres"), "SELECT second, used FROM key_rates").unwrap();
    for row in &granted {
        let used: u32 = row[1].as_deref().unwrap().parse().unwrap();
        assert!(used <= RATE, "{used} requests granted in second {:?}, limit {RATE}", row[0]);
    }
    // Answered 200, per second of the client's clock: within a tenth of the rate, give or take the requests
    // that straddle a second's edge (one per client: granted in one second, answered in the next). The first
    // and last seconds are partial.
    let mut per_second: std::collections::BTreeMap<i64, u32> = std::collections::BTreeMap::new();
    for (second, status) in answered.into_inner().unwrap() {
        if status == 200 {
            *per_second.entry(second).or_default() += 1;
        }
    }
    let counts: Vec<u32> = per_second.values().copied().collect();
    let whole = &counts[1..counts.len().saturating_sub(1).max(1)];
    assert!(whole.len() >= 2, "{per_second:?}");
    for count in whole {
        let expected = RATE * 9 / 10 - CLIENTS..=RATE + CLIENTS;
        assert!(expected.contains(count), "{count} in a second, rate {RATE}: {per_second:?}");
    }
}

/// The per-key request rate of the limits test, and its clients sending at once.
const RATE: u32 = 40;
const CLIENTS: u32 = 6;

/// What a client or an operator does on one replica holds on another: a submission is read, replayed and
/// cancelled there; a top-up is seen at once; a model switched off and a key revoked take effect within a
/// second.
#[test]
fn one_replica_sees_at_once_what_another_did() {
    let cluster = Cluster::start();
    let simulator = common::simulator("1", &[]);
    let tmp = tempfile::tempdir().unwrap();
    // Result copies in one directory both replicas use, as a shared mount would be.
    let results = format!("results: {{dir: '{}'}}\n", tmp.path().join("results").display());
    let config = format!(
        "store: {{url: '{}'}}\n{}",
        cluster.url("postgres"),
        common::serve_config(&simulator.address(), "", &results)
    );
    let (one, other) = (
        Demo::serve(&tmp.path().join("one"), &config, &[common::SIM_KEY]),
        Demo::serve(&tmp.path().join("other"), &config, &[common::SIM_KEY]),
    );
    let key = one.account("acme", 1_000_000_000, 0, 0);
    let auth = format!("Bearer {key}");
    let headers = [("Authorization", auth.as_str()), ("Idempotency-Key", "across")];
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a slow fox sim:slow", "duration": 2});
    let submitted = one.request("POST", "/v1/videos/generations", Some(&body), &headers);
    let replayed = other.request("POST", "/v1/videos/generations", Some(&body), &headers);
    assert_eq!((submitted.status, replayed.status), (200, 200), "{:?}", replayed.json);
    let task_id = submitted.json["task_id"].as_str().unwrap();
    assert_eq!(replayed.json["task_id"], task_id);
    let cancelled = other.request("POST", &format!("/v1/tasks/{task_id}/cancel"), None, &[("Authorization", &auth)]);
    assert_eq!((cancelled.status, cancelled.json["status"].as_str()), (200, Some("cancelled")), "{:?}", cancelled.json);
    assert_eq!(one.get_as(&key, &format!("/v1/tasks/{task_id}")).json["status"], "cancelled");

    let before = other.funds("acme").2;
    assert_eq!(one.admin("/accounts/acme/top-up", Some(&json!({"amount": 5}))).status, 200);
    assert_eq!(other.funds("acme").2, before + 5);
    // The account list reads the database too: the same balance, and the task submitted above.
    let listed = other.admin("/accounts?search=ACM", None).json;
    assert_eq!(listed["data"][0]["name"], "acme", "{listed}");
    assert_eq!(listed["data"][0]["funds"]["balance"], before + 5, "{listed}");
    assert!(listed["data"][0]["last_task_at"].is_string(), "{listed}");

    let image = json!({"model": "beta-image-plus", "prompt": "a"});
    assert!(other.post_as(&key, "/v1/images/generations", &image).status < 300);
    // Its result link, signed by the replica that ended the task (the one polling it), serves on the other:
    // one link secret, made by the first replica and kept in the database.
    let imaged = &one.get_as(&key, "/v1/tasks?limit=1").json["data"][0];
    let task_id = imaged["task_id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let copied = loop {
        let task = one.get_as(&key, &format!("/v1/tasks/{task_id}")).json;
        if task["mirror"]["status"] == "mirrored" {
            break task;
        }
        assert!(Instant::now() < deadline, "never mirrored: {task}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let link = copied["results"][0]["url"].as_str().unwrap();
    let (signer, server) = if link.starts_with(&one.base) { (&one, &other) } else { (&other, &one) };
    assert!(link.starts_with(&signer.base), "{link}");
    let served = server.request("GET", &link[signer.base.len()..], None, &[]);
    assert_eq!(served.status, 200, "{:?}", served.json);
    assert_eq!(served.bytes.len() as u64, copied["results"][0]["size"].as_u64().unwrap());
    assert_eq!(one.admin("/models/beta-image-plus/disable", Some(&json!({}))).status, 200);
    let within_a_second = |check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_millis(1200);
        while !check() {
            assert!(Instant::now() < deadline, "not seen on the other replica within a second");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    within_a_second(&|| other.post_as(&key, "/v1/images/generations", &image).code() == "model_disabled");
    let prefix: String = key.chars().take(8).collect();
    assert_eq!(one.admin(&format!("/accounts/acme/keys/{prefix}/revoke"), Some(&json!({}))).status, 200);
    within_a_second(&|| other.get_as(&key, "/v1/models").status == 401);
}

/// A replica whose lease on a task ran out, and was taken over by another, can no longer write what it
/// polled of the task; the replica that took it over can, and so can a client's change on any replica.
#[test]
fn a_replica_whose_lease_was_taken_over_cannot_write_the_task() {
    use mediagate::adapters::store::postgres::{Options, Store};
    use mediagate::domain::tasks::{TaskRecord, TaskStatus};
    use mediagate::ports::storage::{Accounts, Commit, Inserted, TaskRef, Tasks};
    let cluster = Cluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let connect = || {
        let options =
            Options { url: cluster.url("postgres"), pool_size: 2, ca_file: None, max_in_flight_per_account: 10 };
        runtime.block_on(Store::connect(options)).unwrap()
    };
    let (stalled, other) = (connect(), connect());
    runtime.block_on(stalled.ensure_account("acme", &mediagate::domain::audit::Actor::local())).unwrap();
    let task = queued_task("task-fenced", common::now_ms(), Some("up-1"));
    let added = runtime.block_on(stalled.add_task(task, None, None, Commit::Durable)).unwrap();
    assert!(matches!(added, Inserted::Stored(_)));
    assert!(runtime.block_on(other.claim()).unwrap().is_empty(), "a live lease is not taken over");

    // The submitting replica stalls past its lease (as if it had not been seen for a while), and the other
    // takes the task over before the stalled one beats again.
    let take_over = || {
        let not_seen = "UPDATE replicas SET seen_ms = 0 WHERE id = (SELECT lease_owner FROM tasks)";
        common::postgres::sql(&cluster.url("postgres"), not_seen, false);
        runtime.block_on(other.claim()).unwrap()
    };
    let claimed = (0..20).map(|_| take_over()).find(|claimed| !claimed.is_empty()).unwrap_or_default();
    assert_eq!(claimed.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(), ["task-fenced"]);
    let running = |t: &mut TaskRecord| t.status = TaskStatus::Running;
    let polled = || TaskRef::Polled("task-fenced".into());
    let live = [TaskStatus::Queued, TaskStatus::Running];
    let by_stalled = runtime.block_on(stalled.change_task(polled(), &live, Commit::Durable, Box::new(running)));
    assert!(by_stalled.unwrap().is_none(), "the replica that lost the lease wrote the task");
    // Its poller, told the task moved on, asks who polls it now: the other replica.
    assert!(!runtime.block_on(stalled.polls_here("task-fenced")).unwrap());
    assert!(runtime.block_on(other.polls_here("task-fenced")).unwrap());
    let by_other = runtime.block_on(other.change_task(polled(), &live, Commit::Durable, Box::new(running)));
    assert_eq!(by_other.unwrap().map(|t| t.status), Some(TaskStatus::Running));
    let cancel = |t: &mut TaskRecord| t.status = TaskStatus::Cancelled;
    let by_client =
        runtime.block_on(stalled.change_task("task-fenced".into(), &live, Commit::Durable, Box::new(cancel)));
    assert_eq!(by_client.unwrap().map(|t| t.status), Some(TaskStatus::Cancelled));
}

/// A task the upstream accepted is handed to the replica whose turn its creation time falls in: that one
/// takes it with its next claim and may write it as its poller; the submitting one may not. Tasks nobody
/// polls (their replica stopped) are handed out by the same turns, whichever replica claims them.
#[test]
fn replicas_take_turns_at_polling_by_creation_time() {
    use mediagate::adapters::store::postgres::{Options, Store};
    use mediagate::domain::tasks::{TaskRecord, TaskStatus};
    use mediagate::ports::storage::{Accounts, Commit, Inserted, Lifecycle, PolledBy, TaskRef, Tasks};
    let cluster = Cluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let connect = || {
        let options =
            Options { url: cluster.url("postgres"), pool_size: 2, ca_file: None, max_in_flight_per_account: 100 };
        runtime.block_on(Store::connect(options)).unwrap()
    };
    let (submitter, other) = (connect(), connect());
    runtime.block_on(submitter.ensure_account("acme", &mediagate::domain::audit::Actor::local())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while submitter.poll_share() != Some(2) || other.poll_share() != Some(2) {
        assert!(Instant::now() < deadline, "the replicas never counted each other");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(runtime.block_on(submitter.claim()).unwrap().is_empty());
    assert!(runtime.block_on(other.claim()).unwrap().is_empty());

    // Six tasks, each created in a turn of its own (turns are 3 s of creation time).
    let now = common::now_ms();
    let mut polled_here = Vec::new();
    for n in 0..6 {
        let task = queued_task(&format!("task-{n}"), now + n * 3_000, None);
        let added = runtime.block_on(submitter.add_task(task, None, None, Commit::Durable)).unwrap();
        assert!(matches!(added, Inserted::Stored(_)));
        let upstream = format!("up-{n}");
        let change = Box::new(move |t: &mut TaskRecord| t.upstream_task_id = Some(upstream));
        let forwarded =
            runtime.block_on(submitter.forwarded(format!("task-{n}").as_str().into(), PolledBy::Turn, change)).unwrap();
        let forwarded = forwarded.expect("the task was written");
        assert_eq!(forwarded.task.upstream_task_id.as_deref(), Some(format!("up-{n}").as_str()));
        polled_here.push(forwarded.polled_here);
    }
    // Turns alternate between the two replicas.
    assert!(polled_here.windows(2).all(|pair| pair[0] != pair[1]), "{polled_here:?}");

    let handed: Vec<String> = (0..6).filter(|n| !polled_here[*n]).map(|n| format!("task-{n}")).collect();
    let mut claimed: Vec<String> = runtime.block_on(other.claim()).unwrap().into_iter().map(|t| t.task_id).collect();
    claimed.sort();
    assert_eq!(claimed, handed);
    assert!(runtime.block_on(other.claim()).unwrap().is_empty(), "a handed task is taken once");
    assert!(runtime.block_on(submitter.claim()).unwrap().is_empty(), "the submitter keeps its own turns' tasks");

    let running = |t: &mut TaskRecord| t.status = TaskStatus::Running;
    let live = [TaskStatus::Queued, TaskStatus::Running];
    for (n, here) in polled_here.iter().enumerate() {
        let (poller, not_poller) = if *here { (&submitter, &other) } else { (&other, &submitter) };
        let polled = || TaskRef::Polled(format!("task-{n}"));
        let fenced = runtime.block_on(not_poller.change_task(polled(), &live, Commit::Durable, Box::new(running)));
        assert!(fenced.unwrap().is_none(), "task-{n} was written by the replica not polling it");
        let written = runtime.block_on(poller.change_task(polled(), &live, Commit::Durable, Box::new(running)));
        assert_eq!(written.unwrap().map(|t| t.status), Some(TaskStatus::Running), "task-{n}");
    }

    common::postgres::query(&cluster.url("postgres"), "UPDATE tasks SET lease_owner = NULL").unwrap();
    let claim = |store: &Store| {
        let mut claimed: Vec<String> =
            runtime.block_on(store.claim()).unwrap().into_iter().map(|t| t.task_id).collect();
        claimed.sort();
        claimed
    };
    let submitters: Vec<String> = (0..6).filter(|n| polled_here[*n]).map(|n| format!("task-{n}")).collect();
    assert_eq!(claim(&submitter), submitters, "the first to claim keeps only its own turns' tasks");
    assert_eq!(claim(&other), handed);

    // A task sent from the shared line by a replica other than its submitter's is polled by the sender,
    // whatever its turn: it is leased to it, and not handed to anyone's claim.
    let task = queued_task("task-sent", now, None);
    runtime.block_on(submitter.add_task(task, None, None, Commit::Durable)).unwrap();
    let change = Box::new(|t: &mut TaskRecord| t.upstream_task_id = Some("up-sent".into()));
    let forwarded = runtime.block_on(other.forwarded("task-sent".into(), PolledBy::Sender, change)).unwrap();
    assert!(forwarded.expect("the task was written").polled_here);
    assert!(claim(&submitter).is_empty() && claim(&other).is_empty(), "the sender's task is nobody's to claim");
    let polled = || TaskRef::Polled("task-sent".into());
    let fenced = runtime.block_on(submitter.change_task(polled(), &live, Commit::Durable, Box::new(running)));
    assert!(fenced.unwrap().is_none(), "the submitter wrote a task its sender polls");
    let written = runtime.block_on(other.change_task(polled(), &live, Commit::Durable, Box::new(running)));
    assert_eq!(written.unwrap().map(|t| t.status), Some(TaskStatus::Running));
}

/// A queued video task of `acme` created at `created_ms`, as a submission stores it.
fn queued_task(task_id: &str, created_ms: i64, upstream_task_id: Option<&str>) -> mediagate::domain::tasks::TaskRecord {
    mediagate::domain::tasks::TaskRecord {
        task_id: task_id.into(),
        request_id: format!("vid-{task_id}"),
        account: "acme".into(),
        key_prefix: "mg-test".into(),
        model: "alpha2.6-t2v_t2v".into(),
        operation: "t2v".into(),
        media: mediagate::domain::catalog::Media::Video,
        status: mediagate::domain::tasks::TaskStatus::Queued,
        created_at: String::new(),
        created_ms,
        updated_ms: created_ms,
        finished_ms: None,
        upstream_task_id: upstream_task_id.map(String::from),
        next_poll_ms: created_ms,
        deadline_ms: created_ms + 600_000,
        results: Vec::new(),
        usage: None,
        error: None,
        billing: None,
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
