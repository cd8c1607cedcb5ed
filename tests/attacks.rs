//! The reproductions of issue 27's torture run, each with the behaviour it must have now: money that
//! cannot overflow or be created by an upstream, and replays that never accept what cannot finish.
#![allow(clippy::unwrap_used)]

mod common;

use common::Demo;
use serde_json::json;
use std::time::Duration;

/// The documented maximum of any amount or pot (`billing::MAX_MICROS`).
const MAX_MICROS: i64 = 10_000_000_000_000_000;

fn verified(demo: &Demo) {
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

#[test]
fn amounts_and_sums_past_the_maximum_are_refused_and_nothing_is_written() {
    let demo = Demo::start();
    demo.account("acme", 0, 0, 0);
    let top_up = |amount: serde_json::Value| demo.admin("/accounts/acme/top-up", Some(&json!({"amount": amount})));
    // 2^62, twice, wrapped the balance before.
    let refused = top_up(json!(1i64 << 62));
    assert_eq!((refused.status, refused.code(), refused.param()), (400, "invalid_parameter", "amount"));
    assert_eq!(top_up(json!(MAX_MICROS)).status, 200);
    let sum = top_up(json!(1));
    assert_eq!((sum.status, sum.code(), sum.param()), (400, "invalid_parameter", "amount"), "{:?}", sum.json);
    assert!(sum.json["error"]["message"].as_str().unwrap().contains("maximum"));
    let beyond_i64 = top_up(json!(u64::MAX));
    assert_eq!(beyond_i64.status, 400);
    assert_eq!(demo.funds("acme"), (0, 0, MAX_MICROS));
    let grant = demo.admin("/accounts/acme/free-trial", Some(&json!({"amount": MAX_MICROS + 1})));
    assert_eq!(grant.status, 400);
    let plan = demo.admin("/accounts/acme/plan", Some(&json!({"name": "huge", "allowance": MAX_MICROS + 1})));
    assert_eq!((plan.status, plan.param()), (400, "allowance"));
    verified(&demo);
}

#[test]
fn usage_that_makes_no_sense_is_billed_at_the_request_price_and_never_pays_the_account() {
    let demo = Demo::start();
    let key = demo.account("acme", 100_000_000, 0, 0);
    let metric = |demo: &Demo| {
        let text = String::from_utf8(demo.request("GET", "/metrics", None, &[]).bytes).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("mediagate_upstream_usage_unusable_total "))
            .map_or(0, |n| n.trim().parse::<u64>().unwrap())
    };
    let mut charged = 0;
    for (n, hook) in ["sim:seconds=-5", "sim:seconds=abc", "sim:seconds=100"].iter().enumerate() {
        let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": format!("a fox {hook}"), "duration": 2});
        let accepted = demo.post_as(&key, "/v1/videos/generations", &body);
        assert_eq!(accepted.status, 200, "{:?}", accepted.json);
        let task = demo.wait_terminal_as(&key, accepted.json["task_id"].as_str().unwrap(), Duration::from_secs(20));
        assert_eq!(task["status"], "success");
        let settlement = &task["settlement"];
        let quoted = settlement["list_price"].as_i64().unwrap();
        assert!(quoted > 0 && settlement["charged"] == quoted, "{hook}: {settlement}");
        charged += quoted;
        assert_eq!(metric(&demo), n as u64 + 1, "{hook}");
    }
    assert_eq!(demo.funds("acme").2, 100_000_000 - charged);
    verified(&demo);
}

/// A keyed POST sent from another thread, which is expected to get no answer (the gateway dies under it):
/// whether it got one.
fn first_attempt(
    base: &str,
    key: &str,
    idempotency: &str,
    path: &str,
    body: &serde_json::Value,
) -> std::thread::JoinHandle<bool> {
    let (url, auth, idempotency, body) =
        (format!("{base}{path}"), format!("Bearer {key}"), idempotency.to_string(), body.clone());
    std::thread::spawn(move || {
        ureq::post(&url).header("Authorization", &auth).header("Idempotency-Key", &idempotency).send_json(&body).is_ok()
    })
}

/// Sends `signal` (`-STOP`, `-CONT`) to `process`.
fn signal(process: &common::Process, signal: &str) {
    let pid = process.child.id().to_string();
    assert!(std::process::Command::new("kill").args([signal, &pid]).status().unwrap().success());
}

/// The request id of the one usage line that charged something.
fn charged_request(lines: &[&str]) -> String {
    let lines: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let charged: Vec<_> = lines.iter().filter(|l| l["charged"].as_i64().unwrap() > 0).collect();
    assert_eq!(charged.len(), 1, "{lines:?}");
    charged[0]["request_id"].as_str().unwrap().to_string()
}

/// A request with an `Idempotency-Key`, as `key`'s account.
fn keyed(demo: &Demo, key: &str, idempotency: &str, path: &str, body: &serde_json::Value) -> common::Reply {
    let auth = format!("Bearer {key}");
    demo.request("POST", path, Some(body), &[("Authorization", &auth), ("Idempotency-Key", idempotency)])
}

/// A keyed retry after a crash, retried as the 409 asks while the first attempt may still be under way:
/// at once on the embedded store (one process, which restarted), within a lease on PostgreSQL (another
/// replica could be forwarding it until its lease runs out).
fn retried_after_crash(
    demo: &Demo,
    key: &str,
    idempotency: &str,
    path: &str,
    body: &serde_json::Value,
) -> common::Reply {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let reply = keyed(demo, key, idempotency, path, body);
        if reply.status != 409 || reply.code() != "request_in_progress" || std::time::Instant::now() > deadline {
            return reply;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_keyed_retry_answers_what_the_first_attempt_answered_never_an_acceptance_of_a_failure() {
    let demo = Demo::start();
    let key = demo.account("acme", 100_000_000, 0, 0);
    let cases = [
        // (route, body, the first answer's status and code)
        (
            "/v1/images/generations",
            json!({"model": "beta-image-plus", "prompt": "a cat sim:reject"}),
            400,
            "upstream_rejected",
        ),
        (
            "/v1/videos/generations",
            json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox sim:error", "duration": 5}),
            502,
            "upstream_error",
        ),
        (
            "/v1/images/generations",
            json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a cat sim:inspect"}),
            400,
            "upstream_content_blocked",
        ),
    ];
    for (n, (path, body, status, code)) in cases.iter().enumerate() {
        let idempotency = format!("refused-{n}");
        let first = keyed(&demo, &key, &idempotency, path, body);
        assert_eq!((first.status, first.code()), (*status, *code), "{:?}", first.json);
        let retry = keyed(&demo, &key, &idempotency, path, body);
        assert_eq!((retry.status, retry.code()), (*status, *code), "{:?}", retry.json);
        assert_eq!(retry.json["error"]["message"], first.json["error"]["message"]);
    }
    assert_eq!(demo.funds("acme").2, 100_000_000, "refused creates cost nothing");

    // A synchronous success replays its answer in the endpoint's shape; an acceptance replays while live.
    let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a lighthouse"});
    let first = keyed(&demo, &key, "sync-ok", "/v1/images/generations", &body);
    assert_eq!(first.status, 200);
    let retry = keyed(&demo, &key, "sync-ok", "/v1/images/generations", &body);
    assert_eq!(retry.status, 200);
    assert_eq!(retry.json["data"], first.json["data"]);
    assert_eq!(retry.json["usage"], first.json["usage"]);
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox sim:slow", "duration": 5});
    let first = keyed(&demo, &key, "async-ok", "/v1/videos/generations", &body);
    let retry = keyed(&demo, &key, "async-ok", "/v1/videos/generations", &body);
    assert_eq!((first.status, retry.status), (200, 200));
    assert_eq!(retry.json["task_id"], first.json["task_id"]);
    assert_eq!(retry.json["status"], "queued");
    verified(&demo);
}

#[test]
fn a_keyed_synchronous_retry_after_a_crash_completes_the_work_and_charges_once() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = common::free_port();
    let mut demo = Demo::start_in(tmp.path(), &listen, 0.05);
    let key = demo.account("acme", 100_000_000, 0, 0);
    let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a slow cat sim:slow"});
    let first = first_attempt(&demo.base, &key, "crash-1", "/v1/images/generations", &body);
    std::thread::sleep(Duration::from_secs(1));
    demo.kill();
    assert!(!first.join().unwrap(), "the first attempt got no answer");

    let demo = Demo::start_in(tmp.path(), &listen, 0.05);
    let retry = retried_after_crash(&demo, &key, "crash-1", "/v1/images/generations", &body);
    assert_eq!(retry.status, 200, "{:?}", retry.json);
    assert!(retry.json["data"][0]["url"].is_string(), "the endpoint's answer, not a task view: {:?}", retry.json);
    let again = keyed(&demo, &key, "crash-1", "/v1/images/generations", &body);
    assert_eq!(again.json["data"], retry.json["data"], "the retry's answer is now the key's");
    let request_id = retry.header("x-request-id").unwrap().to_string();
    assert_eq!(again.header("x-request-id"), Some(request_id.as_str()), "a later replay names the same request");
    let charged = 100_000_000 - demo.funds("acme").2;
    assert!(charged > 0);
    let usage = demo.admin("/usage?account=acme", None);
    let lines: Vec<&str> = std::str::from_utf8(&usage.bytes).unwrap().lines().collect();
    let charges: Vec<i64> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["charged"].as_i64().unwrap())
        .collect();
    assert_eq!(charges.iter().sum::<i64>(), charged, "{lines:?}");
    assert_eq!(charges.iter().filter(|c| **c > 0).count(), 1, "charged once: {lines:?}");
    assert_eq!(charged_request(&lines), request_id, "the answer names the request that did the work: {lines:?}");
    verified(&demo);
}

#[test]
fn a_keyed_asynchronous_retry_after_a_crash_with_the_upstream_paused_is_forwarded_again() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.02", &[]);
    let config = common::serve_config(&simulator.address(), "", "");
    let env = [common::SIM_KEY];
    let mut gateway = Demo::serve(&tmp.path().join("gateway"), &config, &env);
    let key = gateway.account("acme", 100_000_000, 0, 0);
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5});
    signal(&simulator, "-STOP");
    let first = first_attempt(&gateway.base, &key, "crash-2", "/v1/videos/generations", &body);
    std::thread::sleep(Duration::from_millis(700));
    gateway.kill();
    assert!(!first.join().unwrap(), "the first attempt got no answer");
    signal(&simulator, "-CONT");

    let gateway = Demo::serve(&tmp.path().join("gateway"), &config, &env);
    let retry = retried_after_crash(&gateway, &key, "crash-2", "/v1/videos/generations", &body);
    assert_eq!((retry.status, retry.json["status"].as_str()), (200, Some("queued")), "{:?}", retry.json);
    // The answer names the task that does the work, in its header and its body alike, and so does a replay.
    let request_id = retry.json["request_id"].as_str().unwrap();
    assert_eq!(retry.header("x-request-id"), Some(request_id));
    let again = keyed(&gateway, &key, "crash-2", "/v1/videos/generations", &body);
    assert_eq!((again.json["request_id"].as_str(), again.header("x-request-id")), (Some(request_id), Some(request_id)));
    let task = gateway.wait_terminal_as(&key, retry.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(task["status"], "success", "{task}");
    assert_eq!(task["request_id"], request_id);
    let charged = task["settlement"]["charged"].as_i64().unwrap();
    assert_eq!(gateway.funds("acme").2, 100_000_000 - charged, "charged once, the interrupted hold given back");
    let usage = gateway.admin("/usage?account=acme", None);
    let lines: Vec<&str> = std::str::from_utf8(&usage.bytes).unwrap().lines().collect();
    assert_eq!(charged_request(&lines), request_id, "{lines:?}");
    verified(&gateway);
}

#[test]
fn a_task_the_upstream_finished_during_an_outage_past_its_deadline_is_not_timed_out() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.05", &[]);
    let config = common::serve_config(&simulator.address(), ", timeout_seconds: 1", "max_task_seconds: 2\n");
    let gateway = Demo::serve(&tmp.path().join("gateway"), &config, &[common::SIM_KEY]);
    let key = gateway.account("acme", 100_000_000, 0, 0);
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5});
    let accepted = gateway.post_as(&key, "/v1/videos/generations", &body);
    assert_eq!(accepted.status, 200);
    // An outage longer than the deadline, during which the upstream's job finishes (its clock runs on).
    signal(&simulator, "-STOP");
    std::thread::sleep(Duration::from_secs(4));
    signal(&simulator, "-CONT");
    let task = gateway.wait_terminal_as(&key, accepted.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(task["status"], "success", "{task}");

    // A task the upstream still runs at its deadline times out, as before.
    let never = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox sim:never", "duration": 5});
    let accepted = gateway.post_as(&key, "/v1/videos/generations", &never);
    let task = gateway.wait_terminal_as(&key, accepted.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(task["status"], "timeout", "{task}");
    verified(&gateway);
}
