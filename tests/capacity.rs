//! Upstream capacity, against the simulator's caps: a burst beyond every key's slots is accepted and runs
//! with no key over its cap, a small account is not starved behind a big one, a job the upstream fails for
//! its own reasons runs again on another key and is charged once, and a queued task cancelled before it
//! was sent never reaches the upstream.

#![allow(clippy::unwrap_used)]

mod common;

use common::Demo;
use serde_json::{Value, json};
use std::time::Duration;

const KEYS: &str = "k-cn-beijing,k-cn-beijing-2,k-cn-beijing-3";
const MODEL: &str = "alpha2.6-t2v_t2v";

/// A simulator with three keys (three upstream accounts) capped at two running tasks per model, and a
/// gateway sending to all three with the same cap.
fn start(tmp: &tempfile::TempDir, time_scale: &str) -> (common::Process, Demo) {
    let simulator = common::simulator(time_scale, &["--keys", "3", "--concurrency", "2"]);
    // Webhooks to loopback are allowed: a delivery is queued (and recorded) however its posting goes.
    let extra = "webhooks: {allow_private_callbacks: true}\n";
    let config = common::serve_config(&simulator.address(), ", concurrency: {default: 2}", extra);
    let gateway = Demo::serve(&tmp.path().join("gateway"), &config, &[(common::SIM_KEY.0, KEYS)]);
    (simulator, gateway)
}

fn capacity_stats(simulator: &common::Process) -> Vec<Value> {
    let stats = common::get_json(&format!("{}/_sim/capacity-stats", simulator.address()));
    stats["accounts"].as_array().cloned().unwrap_or_default()
}

/// Per key: (most ever running at once, creates accepted, creates refused for capacity) of `model_code`.
fn per_key(simulator: &common::Process, model_code: &str) -> Vec<(u64, u64, u64)> {
    capacity_stats(simulator)
        .iter()
        .map(|a| {
            let m = &a["models"][model_code];
            (
                m["max_running"].as_u64().unwrap_or(0),
                m["accepted"].as_u64().unwrap_or(0),
                m["refused_for_capacity"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn submit(gateway: &Demo, key: &str, prompt: &str) -> Value {
    let reply =
        gateway.post_as(key, "/v1/videos/generations", &json!({"model": MODEL, "prompt": prompt, "duration": 5}));
    assert_eq!(reply.status, 200, "a burst is accepted, never refused for upstream capacity: {}", reply.json);
    reply.json
}

#[test]
fn a_burst_beyond_every_keys_slots_is_accepted_and_runs_without_a_key_over_its_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let (simulator, gateway) = start(&tmp, "0.25");
    let key = gateway.account("acme", 1_000_000_000, 0, 0);
    let accepted: Vec<Value> = (0..15).map(|i| submit(&gateway, &key, &format!("fox {i}"))).collect();
    let queued: Vec<&Value> = accepted.iter().filter(|a| a.get("queue").is_some()).collect();
    assert_eq!(queued.len(), 15 - 6, "six slots, the rest in line: {accepted:?}");
    assert_eq!(queued[0]["queue"]["position"], 1, "{}", queued[0]);
    assert!(queued[0]["queue"]["ahead_of_you_seconds_estimate"].as_u64().unwrap() > 0);
    let last = queued.last().unwrap()["task_id"].as_str().unwrap();
    let view = gateway.get_as(&key, &format!("/v1/tasks/{last}"));
    assert_eq!(view.json["status"], "queued");
    assert!(view.json["queue"]["position"].as_u64().unwrap() >= 1, "{}", view.json);
    for task in &accepted {
        let ended = gateway.wait_terminal_as(&key, task["task_id"].as_str().unwrap(), Duration::from_secs(90));
        assert_eq!(ended["status"], "success", "{ended}");
    }
    let keys = per_key(&simulator, "alpha2.6-t2v");
    assert_eq!(keys.len(), 3, "every key is used: {keys:?}");
    for (max_running, _, refused) in &keys {
        assert!(*max_running <= 2, "no key over its cap: {keys:?}");
        assert_eq!(*refused, 0, "the gateway never sent a create over a cap: {keys:?}");
    }
    assert_eq!(keys.iter().map(|k| k.1).sum::<u64>(), 15, "each job created once: {keys:?}");
}

#[test]
fn a_small_account_is_served_within_a_turn_of_a_big_ones_backlog() {
    let tmp = tempfile::tempdir().unwrap();
    let (_simulator, gateway) = start(&tmp, "1");
    let big = gateway.account("big", 1_000_000_000, 0, 0);
    let small = gateway.account("small", 1_000_000_000, 0, 0);
    for i in 0..20 {
        submit(&gateway, &big, &format!("big {i}"));
    }
    let first = submit(&gateway, &small, "small 0");
    let position = first["queue"]["position"].as_u64().expect("all slots are taken, so it waits");
    assert!(position <= 2, "the small account's first job goes next, not behind the big backlog: {first}");
}

#[test]
fn a_job_the_upstream_fails_for_its_own_reasons_runs_again_on_another_key_and_is_charged_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (simulator, gateway) = start(&tmp, "0.1");
    let key = gateway.account("acme", 1_000_000_000, 0, 0);
    let endpoint = json!({"url": "http://127.0.0.1:9/hooks"});
    assert_eq!(gateway.admin("/accounts/acme/webhook-endpoint", Some(&endpoint)).status, 200);
    let accepted = submit(&gateway, &key, "a fox sim:flaky");
    let task = gateway.wait_terminal_as(&key, accepted["task_id"].as_str().unwrap(), Duration::from_secs(60));
    assert_eq!(task["status"], "success", "{task}");
    let attempts = task["attempts"].as_array().expect("both attempts are listed");
    assert_eq!(attempts.len(), 2, "{task}");
    assert_eq!(attempts[0]["failed"], "InternalError", "{task}");
    assert_ne!(attempts[0]["key"], attempts[1]["key"], "sent again on another key: {task}");
    assert!(!task.to_string().contains("k-cn-beijing"), "keys are named by index only: {task}");
    let charged = task["settlement"]["charged"].as_i64().unwrap();
    assert!(charged > 0);
    assert_eq!(gateway.charged("acme"), charged, "one settlement");
    let task_id = task["task_id"].as_str().unwrap();
    let deliveries = gateway.admin(&format!("/webhooks/deliveries?task_id={task_id}"), None);
    let listed = deliveries.json["deliveries"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "one webhook, at the real end: {}", deliveries.json);
    assert_eq!(per_key(&simulator, "alpha2.6-t2v").iter().map(|k| k.1).sum::<u64>(), 2);
}

#[test]
fn a_queued_task_cancelled_before_it_was_sent_never_reaches_the_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    let (simulator, gateway) = start(&tmp, "1");
    let key = gateway.account("acme", 1_000_000_000, 0, 0);
    let before = gateway.funds("acme").2;
    submit(&gateway, &key, "sim:never fox 0");
    let one_hold = before - gateway.funds("acme").2;
    assert!(one_hold > 0);
    for i in 1..6 {
        submit(&gateway, &key, &format!("sim:never fox {i}"));
    }
    let waiting = submit(&gateway, &key, "the seventh");
    assert!(waiting.get("queue").is_some(), "{waiting}");
    let task_id = waiting["task_id"].as_str().unwrap();
    let cancelled = gateway.post_as(&key, &format!("/v1/tasks/{task_id}/cancel"), &json!({}));
    assert_eq!(cancelled.status, 200, "{}", cancelled.json);
    assert_eq!(cancelled.json["status"], "cancelled");
    let view = gateway.get_as(&key, &format!("/v1/tasks/{task_id}"));
    assert_eq!(view.json["status"], "cancelled");
    assert!(view.json.get("queue").is_none(), "{}", view.json);
    assert_eq!(before - gateway.funds("acme").2, 6 * one_hold, "its hold is given back, nothing charged");
    std::thread::sleep(Duration::from_millis(500));
    let accepted: u64 = per_key(&simulator, "alpha2.6-t2v").iter().map(|k| k.1).sum();
    assert_eq!(accepted, 6, "only the six that had slots were sent");
}

#[test]
fn an_accounts_weight_buys_it_a_larger_share_of_the_slots() {
    let tmp = tempfile::tempdir().unwrap();
    let (_simulator, gateway) = start(&tmp, "1");
    let big = gateway.account("big", 1_000_000_000, 0, 0);
    let heavy = gateway.account("heavy", 1_000_000_000, 0, 0);
    let refused = gateway.admin("/accounts/heavy/weight", Some(&json!({"weight": 0})));
    assert_eq!((refused.status, refused.param()), (400, "weight"), "{}", refused.json);
    let set = gateway.admin("/accounts/heavy/weight", Some(&json!({"weight": 3})));
    assert_eq!(set.status, 200, "{}", set.json);
    assert_eq!(set.json["account"]["queue_weight"], 3);
    for i in 0..20 {
        submit(&gateway, &big, &format!("big {i}"));
    }
    let places: Vec<u64> = (0..3)
        .map(|i| submit(&gateway, &heavy, &format!("heavy {i}"))["queue"]["position"].as_u64().unwrap())
        .collect();
    // Weight 3 against 1: three of its jobs go for each of the other's (weight 1 would make these 2, 4, 6).
    assert_eq!(places, [2, 3, 4], "heavy's places in line");
}

#[test]
fn a_synchronous_call_with_no_free_slot_waits_its_turn_and_no_longer_than_the_upstream_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.4", &["--concurrency", "1"]);
    let config = common::serve_config(&simulator.address(), ", timeout_seconds: 3, concurrency: {default: 1}", "");
    let gateway = Demo::serve(&tmp.path().join("gateway"), &config, &[common::SIM_KEY]);
    let key = gateway.account("acme", 1_000_000_000, 0, 0);
    let call = |prompt: &'static str, after_ms: u64| {
        let (gateway, key) = (&gateway, &key);
        move || {
            std::thread::sleep(Duration::from_millis(after_ms));
            let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": prompt});
            gateway.post_as(key, "/v1/images/generations", &body)
        }
    };
    // The one slot is held 2.4 s by the first call; the second waits for it, then holds it as long; the
    // third's wait runs out first.
    let (first, second, third) = std::thread::scope(|scope| {
        let first = scope.spawn(call("a cat sim:slow", 0));
        let second = scope.spawn(call("a dog sim:slow", 200));
        let third = scope.spawn(call("a bird", 400));
        (first.join().unwrap(), second.join().unwrap(), third.join().unwrap())
    });
    assert_eq!(first.status, 200, "{}", first.json);
    assert_eq!(second.status, 200, "waited its turn: {}", second.json);
    assert_eq!((third.status, third.code()), (429, "upstream_rate_limited"), "{}", third.json);
    assert!(third.header("retry-after").is_some(), "{}", third.json);
    let stats = capacity_stats(&simulator);
    assert_eq!(stats[0]["models"]["beta-image-2.0-pro"]["refused_for_capacity"], 0, "{stats:?}");
}

#[test]
fn a_task_whose_deadline_passes_while_it_waits_times_out_uncharged() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("1", &["--concurrency", "1"]);
    let config = common::serve_config(&simulator.address(), ", concurrency: {default: 1}", "max_task_seconds: 2\n");
    let gateway = Demo::serve(&tmp.path().join("gateway"), &config, &[common::SIM_KEY]);
    let key = gateway.account("acme", 1_000_000_000, 0, 0);
    submit(&gateway, &key, "sim:never holds the slot");
    let waiting = submit(&gateway, &key, "waits for it");
    assert!(waiting.get("queue").is_some(), "{waiting}");
    let ended = gateway.wait_terminal_as(&key, waiting["task_id"].as_str().unwrap(), Duration::from_secs(20));
    assert_eq!(ended["status"], "timeout", "{ended}");
    assert_eq!(ended["settlement"]["charged"], 0, "{ended}");
    assert_eq!(per_key(&simulator, "alpha2.6-t2v").iter().map(|k| k.1).sum::<u64>(), 1, "it was never sent");
}
