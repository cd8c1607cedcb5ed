//! The poller at scale through the real binaries: `mediagate simulate` with several keys per region and a
//! per-key query limit, `mediagate serve` in front of it. Hundreds of tasks end in the right states, no key
//! ever goes over the limit, and polling by list windows costs far fewer queries than polling each task.

#![allow(clippy::unwrap_used)]

mod common;

use common::free_port;
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: usize = 3;
const LIMIT: u64 = 20;
const TASKS: usize = 300;
const ADMIN: &str = "poller-test-admin";

/// A child process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mediagate(args: &[&str], env: &[(&str, &str)]) -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mediagate"));
    command.args(args).env("MEDIAGATE_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    Process(command.spawn().unwrap())
}

fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{addr} never listened");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn call(method: &str, url: &str, auth: &str, body: Option<&Value>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let auth = format!("Bearer {auth}");
    let response = match body {
        Some(body) => agent.post(url).header("Authorization", &auth).send_json(body),
        None if method == "GET" => agent.get(url).header("Authorization", &auth).call(),
        None => agent.post(url).header("Authorization", &auth).send_empty(),
    };
    let mut response = response.unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_json().unwrap_or(Value::Null))
}

/// The simulator with `KEYS` keys per region and a per-key limit, and a gateway with all the keys.
struct Stack {
    gateway: String,
    simulator: String,
    _processes: (Process, Process),
    _dir: tempfile::TempDir,
}

impl Stack {
    fn start() -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let (simulator, gateway) = (free_port(), free_port());
        let (keys_flag, limit_flag) = (KEYS.to_string(), LIMIT.to_string());
        let sim = mediagate(
            &["simulate", "--listen", &simulator, "--time-scale", "1", "--key-prefix", "pt"]
                .into_iter()
                .chain(["--keys", &keys_flag, "--query-qps", &limit_flag])
                // Every task runs at once: this measures polling, not the upstream's caps (tests/capacity.rs).
                .chain(["--concurrency", "1000"])
                .collect::<Vec<_>>(),
            &[],
        );
        let keys: Vec<String> =
            (1..=KEYS).map(|n| if n == 1 { "pt-cn-beijing".into() } else { format!("pt-cn-beijing-{n}") }).collect();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: {gateway}\ndata_dir: {}\nadmin_token_env: POLLER_TEST_ADMIN\n\
                 upstreams:\n  cn-beijing: {{base_url: 'http://{simulator}/cn-beijing', api_key_env: POLLER_TEST_KEYS, concurrency: {{default: 1000}}}}\n\
                 limits: {{max_in_flight_per_account: 100000, requests_per_second_per_key: 100000}}\n\
                 poller: {{queries_per_second: {LIMIT}, min_interval_ms: 250, max_interval_ms: 1000, list_page_size: 50}}\n",
                dir.path().join("gateway").display()
            ),
        )
        .unwrap();
        let gw = mediagate(
            &["serve", "--config", config.to_str().unwrap()],
            &[("POLLER_TEST_KEYS", &keys.join(",")), ("POLLER_TEST_ADMIN", ADMIN)],
        );
        wait_listening(&simulator);
        wait_listening(&gateway);
        Stack { gateway, simulator, _processes: (sim, gw), _dir: dir }
    }

    /// A funded account's key.
    fn account(&self, name: &str) -> String {
        let admin = |path: &str, body: Value| {
            call("POST", &format!("http://{}/admin/v1{path}", self.gateway), ADMIN, Some(&body))
        };
        assert_eq!(admin("/accounts", json!({"name": name})).0, 201);
        assert_eq!(admin(&format!("/accounts/{name}/top-up"), json!({"amount": 1_000_000_000_000i64})).0, 200);
        admin(&format!("/accounts/{name}/keys"), json!({})).1["key"].as_str().unwrap().to_string()
    }

    fn query_stats(&self) -> Value {
        call("GET", &format!("http://{}/_sim/query-stats", self.simulator), "", None).1
    }
}

#[test]
fn hundreds_of_tasks_finish_under_the_per_key_limit_with_few_queries_each() {
    let stack = Stack::start();
    let key = stack.account("acme");
    // Every tenth task fails upstream; the rest succeed.
    let submitters: Vec<_> = (0..4)
        .map(|t| {
            let (gateway, key) = (stack.gateway.clone(), key.clone());
            std::thread::spawn(move || {
                (t..TASKS)
                    .step_by(4)
                    .map(|i| {
                        let prompt = if i % 10 == 0 { format!("fox {i} sim:fail") } else { format!("fox {i}") };
                        let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": prompt, "duration": 5});
                        let (status, reply) =
                            call("POST", &format!("http://{gateway}/v1/videos/generations"), &key, Some(&body));
                        assert_eq!(status, 200, "{reply}");
                        (i, reply["task_id"].as_str().unwrap().to_string())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut pending: Vec<(usize, String)> = submitters.into_iter().flat_map(|s| s.join().unwrap()).collect();
    assert_eq!(pending.len(), TASKS);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "{} tasks still live", pending.len());
        std::thread::sleep(Duration::from_millis(500));
        pending.retain(|(i, id)| {
            let (_, task) = call("GET", &format!("http://{}/v1/tasks/{id}", stack.gateway), &key, None);
            let status = task["status"].as_str().unwrap_or_default();
            if status == "queued" || status == "running" {
                return true;
            }
            let expected = if i % 10 == 0 { "failed" } else { "success" };
            assert_eq!(status, expected, "task {i}: {task}");
            if expected == "success" {
                assert!(task["usage"].is_object() && task["results"][0]["url"].is_string(), "{task}");
            }
            false
        });
    }
    let stats = stack.query_stats();
    let queries = stats["queries"].as_u64().unwrap();
    let per_key = stats["per_key"].as_array().unwrap();
    assert!(stats["max_per_second"].as_u64().unwrap() <= LIMIT, "a key went over the limit: {stats}");
    assert_eq!(per_key.len(), KEYS, "every key takes its share: {stats}");
    // Polled task by task, each 4-second job would take about 8 queries (from 1 s, every 250..800 ms);
    // by list windows each costs its one result query plus a share of the pages.
    let per_task = queries as f64 / TASKS as f64;
    eprintln!("{TASKS} tasks, {queries} upstream queries ({per_task:.2} per task): {stats}");
    assert!(per_task < 2.0, "{queries} queries for {TASKS} tasks: {stats}");
}
