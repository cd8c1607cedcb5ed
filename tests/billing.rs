//! Money through HTTP against the demo stack: each billing basis, funding order, nothing charged for
//! failures, partial image failures, no negative balance under concurrency, free-trial-only models, the
//! equivalent-usage rules, and exactly-once settlement across a crash.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, endpoint_of, free_port};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn rule(demo: &Demo, model: &str) -> Value {
    let models = demo.admin("/models", None);
    models.json["data"].as_array().unwrap().iter().find(|m| m["id"] == model).unwrap()["billing"].clone()
}

/// Submits as `key` and waits for the terminal task.
fn run(demo: &Demo, key: &str, body: &Value) -> Value {
    let model = body["model"].as_str().unwrap();
    let reply = demo.post_as(key, &endpoint_of(demo, model), body);
    assert!(reply.status == 200 || reply.status == 202, "{}", reply.json);
    run_to_end(demo, key, reply.json)
}

/// A submission's answer, or its terminal task for an asynchronous one.
fn run_to_end(demo: &Demo, key: &str, answer: Value) -> Value {
    match answer["task_id"].as_str() {
        Some(id) => demo.wait_terminal_as(key, id, WAIT),
        None => answer,
    }
}

/// The statuses of 12 copies of one submission sent at once.
fn all_at_once(demo: &Demo, key: &str, path: &str, body: &Value) -> Vec<u16> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..12).map(|_| s.spawn(|| demo.post_as(key, path, body).status)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// What each line of the account's usage log charged, oldest first.
fn charges(demo: &Demo, account: &str) -> Vec<i64> {
    let usage = demo.admin(&format!("/usage?account={account}"), None);
    let lines = std::str::from_utf8(&usage.bytes).unwrap().lines();
    lines.map(|line| serde_json::from_str::<Value>(line).unwrap()["charged"].as_i64().unwrap()).collect()
}

fn total(funds: (i64, i64, i64)) -> i64 {
    funds.0 + funds.1 + funds.2
}

#[test]
fn each_billing_basis_prices_what_was_delivered() {
    let demo = Demo::start();
    let key = demo.account("acme", 10_000_000_000, 0, 0);
    // Per second, by resolution tier and audio: the upstream's `duration` times the tier's price.
    let before = total(demo.funds("acme"));
    let task =
        run(&demo, &key, &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox", "duration": 5, "size": "1280*720"}));
    let per_second = rule(&demo, "alpha2.6-t2v_t2v")["tiers"]["720P"]["audio"].as_i64().unwrap();
    let seconds = task["usage"]["duration"].as_f64().unwrap();
    let charged = task["settlement"]["charged"].as_i64().unwrap();
    assert_eq!(charged, (seconds * per_second as f64).round() as i64);
    assert_eq!(before - total(demo.funds("acme")), charged);
    // Per image times n.
    let per_image = rule(&demo, "alphax-sketch-to-image-lite_sketch")["price"].as_i64().unwrap();
    let body = json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "a house", "n": 2});
    let task = run(&demo, &key, &body);
    assert_eq!(task["settlement"]["charged"].as_i64().unwrap(), 2 * per_image);
    // Per call.
    let per_call = rule(&demo, "alphax-style-repaint-v1_style_repaint")["price"].as_i64().unwrap();
    let body =
        json!({"model": "alphax-style-repaint-v1_style_repaint", "image": "https://m.example/p.png", "style_index": 3});
    let task = run(&demo, &key, &body);
    assert_eq!(task["settlement"]["charged"].as_i64().unwrap(), per_call);
    let report = demo.admin("/ledger/verify", None);
    assert_eq!(report.json["problems"], json!([]));
}

#[test]
fn funding_comes_from_free_trial_then_plan_then_balance() {
    let demo = Demo::start();
    let per_image = rule(&demo, "alphax-sketch-to-image-lite_sketch")["price"].as_i64().unwrap();
    // Trial covers half an image, the plan one more half, the balance the rest.
    let key = demo.account("order", 10 * per_image, per_image / 2, per_image / 2);
    let body = json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "a house", "n": 2});
    let task = run(&demo, &key, &body);
    assert_eq!(task["status"], "success");
    let (trial, plan, balance) = demo.funds("order");
    assert_eq!((trial, plan), (0, 0));
    assert_eq!(balance, 10 * per_image - (2 * per_image - per_image / 2 - per_image / 2));
}

#[test]
fn failed_timed_out_and_cancelled_tasks_cost_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, "max_task_seconds: 2\n", &[]);
    let key = demo.account("careful", 10_000_000_000, 0, 0);
    let before = demo.funds("careful");
    let failed = run(&demo, &key, &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox sim:fail"}));
    assert_eq!(failed["status"], "failed");
    let timeout = run(&demo, &key, &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox sim:never"}));
    assert_eq!(timeout["status"], "timeout");
    let slow =
        demo.post_as(&key, "/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox sim:slow"}));
    let id = slow.json["task_id"].as_str().unwrap();
    let cancelled = demo.post_as(&key, &format!("/v1/tasks/{id}/cancel"), &json!({}));
    assert_eq!(cancelled.json["status"], "cancelled", "{}", cancelled.json);
    let rejected =
        demo.post_as(&key, "/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox sim:reject"}));
    assert_eq!(rejected.status, 400);
    assert_eq!(demo.funds("careful"), before);
    for task in [&failed, &timeout, &cancelled.json] {
        assert_eq!(task["settlement"]["charged"], 0, "{task}");
    }
}

#[test]
fn a_partial_image_failure_costs_only_the_delivered_images() {
    let demo = Demo::start();
    let per_image = rule(&demo, "alphax-sketch-to-image-lite_sketch")["price"].as_i64().unwrap();
    let key = demo.account("partial", 10 * per_image, 0, 0);
    let body = json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "sim:partial", "n": 2});
    let task = run(&demo, &key, &body);
    assert_eq!(task["status"], "success");
    assert_eq!(task["usage"]["image_count"], 1);
    assert_eq!(task["settlement"]["charged"].as_i64().unwrap(), per_image);
    assert_eq!(demo.funds("partial").2, 9 * per_image);
}

#[test]
fn concurrent_submissions_never_overdraw() {
    let demo = Demo::start();
    let per_image = rule(&demo, "alphax-sketch-to-image-lite_sketch")["price"].as_i64().unwrap();
    let key = demo.account("rush", 3 * per_image, 0, 0);
    let body = json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "a house", "n": 1});
    let statuses = all_at_once(&demo, &key, "/v1/images/edits", &body);
    assert_eq!(statuses.iter().filter(|s| **s == 202).count(), 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 402).count(), 9, "{statuses:?}");
    assert!(demo.funds("rush").2 >= 0);
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

/// Submissions that arrive together share one commit on PostgreSQL (group commit, `adds.rs`), and each
/// still gets its own outcome: on two accounts at once, those their funds cover are accepted and the rest
/// refused, and retries under one `Idempotency-Key` answer the one task.
#[test]
fn submissions_that_share_a_commit_each_get_their_own_outcome() {
    let demo = Demo::start();
    let model = "alphax-sketch-to-image-lite_sketch";
    let per_image = rule(&demo, model)["price"].as_i64().unwrap();
    let keys = [demo.account("group-a", 5 * per_image, 0, 0), demo.account("group-b", 7 * per_image, 0, 0)];
    let body = json!({"model": model, "image": "https://m.example/s.png", "prompt": "a house", "n": 1});
    let answers: Vec<(usize, Option<String>, u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..48)
            .map(|i| {
                let (keys, body, demo) = (&keys, &body, &demo);
                s.spawn(move || {
                    let account = i % 2;
                    // On account b, each of four idempotency keys is sent six times.
                    let idempotency = (account == 1).then(|| format!("group-{}", i / 12));
                    let auth = format!("Bearer {}", keys[account]);
                    let mut headers = vec![("Authorization", auth.as_str())];
                    if let Some(idempotency) = &idempotency {
                        headers.push(("Idempotency-Key", idempotency));
                    }
                    let reply = demo.request("POST", "/v1/images/edits", Some(body), &headers);
                    (account, idempotency, reply.status, reply.json)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let accepted_a = answers.iter().filter(|(a, _, status, _)| *a == 0 && *status == 202).count();
    assert_eq!(accepted_a, 5, "{answers:?}");
    assert!(answers.iter().all(|(a, _, status, _)| *a == 1 || *status == 202 || *status == 402), "{answers:?}");
    // Account b: one task per key (4 keys, 24 requests), each answer naming it, or saying it is under way.
    let mut tasks = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for (_, idempotency, status, json) in answers.iter().filter(|(a, ..)| *a == 1) {
        if *status == 409 {
            assert_eq!(json["error"]["code"], "request_in_progress", "{json}");
            continue;
        }
        assert_eq!(*status, 202, "{json}");
        tasks.entry(idempotency.clone().unwrap()).or_default().insert(json["task_id"].as_str().unwrap().to_string());
    }
    assert_eq!(tasks.len(), 4, "{tasks:?}");
    assert!(tasks.values().all(|ids| ids.len() == 1), "one task per key: {tasks:?}");
    for (account, key, jobs) in [("group-a", &keys[0], 5), ("group-b", &keys[1], 4)] {
        let listed = demo.get_as(key, "/v1/tasks?limit=100").json;
        assert_eq!(listed["data"].as_array().unwrap().len(), jobs, "{account}: {listed}");
    }
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

/// A synchronous request without an `Idempotency-Key` is stored once, when it ends; meanwhile its price is
/// earmarked in memory, and the requests in flight together never earmark more than the account has.
#[test]
fn concurrent_synchronous_calls_never_overdraw_and_each_is_charged_once() {
    let demo = Demo::start();
    let per_image = rule(&demo, "beta-image-2.0-pro_t2i")["price"].as_i64().unwrap();
    let key = demo.account("rush-sync", 3 * per_image, 0, 0);
    // Slow: every call is in flight while the others are decided.
    let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a shop sim:slow", "n": 1});
    let statuses = all_at_once(&demo, &key, "/v1/images/generations", &body);
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 402).count(), 9, "{statuses:?}");
    assert_eq!(demo.funds("rush-sync"), (0, 0, 0));
    let account = demo.admin("/accounts/rush-sync", None);
    assert_eq!(account.json["earmarked"], json!({"free_trial": 0, "plan": 0, "balance": 0}));
    assert_eq!(charges(&demo, "rush-sync"), [per_image; 3]);
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

/// Earmarks (synchronous calls) and holds (asynchronous tasks) racing for one account: never more is
/// spent than it has, and every micro-unit is either charged to a task that succeeded or still there.
#[test]
fn earmarks_and_holds_racing_for_one_account_spend_no_more_than_it_has() {
    let demo = Demo::start();
    let sync_price = rule(&demo, "beta-image-2.0-pro_t2i")["price"].as_i64().unwrap();
    let async_price = rule(&demo, "alphax-sketch-to-image-lite_sketch")["price"].as_i64().unwrap();
    let funded = 3 * sync_price + 3 * async_price;
    let key = demo.account("mixed", funded, 0, 0);
    let sync = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a shop sim:slow"});
    let edit =
        json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "a house"});
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (demo, key, sync, edit) = (&demo, &key, &sync, &edit);
                s.spawn(move || {
                    let body = if i % 2 == 0 { sync } else { edit };
                    let reply = demo.post_as(key, &endpoint_of(demo, body["model"].as_str().unwrap()), body);
                    match reply.status {
                        402 => Value::Null,
                        200 | 202 => run_to_end(demo, key, reply.json),
                        other => panic!("{other}: {}", reply.json),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Nothing is given back while they race (each success costs its whole price), so whatever the order
    // at least five fit (four calls and an edit) and at most eight (eight edits); the rest are refused.
    let succeeded = answers.iter().filter(|a| !a.is_null()).count();
    assert!((5..=8).contains(&succeeded), "{answers:?}");
    let charged: i64 = charges(&demo, "mixed").iter().sum();
    assert_eq!(total(demo.funds("mixed")) + charged, funded);
    assert_eq!(demo.admin("/accounts/mixed", None).json["earmarked"]["balance"], 0);
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

/// What a call in flight earmarked is not available to anything else, and setting a plan meanwhile sets
/// what is available: the call's charge comes out of its earmark.
#[test]
fn money_earmarked_for_a_call_in_flight_is_kept_from_other_spending() {
    let demo = Demo::start();
    let per_image = rule(&demo, "beta-image-2.0-pro_t2i")["price"].as_i64().unwrap();
    let key = demo.account("marked", 0, 0, per_image);
    let slow = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a shop sim:slow"});
    std::thread::scope(|s| {
        let call = s.spawn(|| demo.post_as(&key, "/v1/images/generations", &slow));
        let deadline = std::time::Instant::now() + WAIT;
        // Set aside: earmarked in memory (the embedded store) or held in the ledger (PostgreSQL).
        while demo.funds("marked") != (0, 0, 0) {
            assert!(std::time::Instant::now() < deadline, "the call set nothing aside");
            std::thread::sleep(Duration::from_millis(20));
        }
        let other =
            demo.post_as(&key, "/v1/images/generations", &json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a"}));
        assert_eq!(other.status, 402, "{}", other.json);
        let plan = demo.admin("/accounts/marked/plan", Some(&json!({"name": "small", "allowance": 10})));
        assert_eq!(plan.status, 200, "{}", plan.json);
        assert_eq!(demo.funds("marked"), (0, 10, 0));
        let answer = call.join().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.json);
    });
    assert_eq!(demo.funds("marked"), (0, 10, 0));
    assert_eq!(demo.admin("/accounts/marked", None).json["earmarked"]["plan"], 0);
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

#[test]
fn free_trial_only_models_stop_at_the_quota() {
    let demo = Demo::start();
    let model = "image-instance-segmentation_segmentation";
    let price = rule(&demo, model)["price"].as_i64().unwrap();
    let body = json!({"model": model, "image": "https://m.example/p.png"});
    let trial = demo.account("trial", 100 * price, 2 * price, 0);
    for _ in 0..2 {
        assert_eq!(run(&demo, &trial, &body)["status"], "success");
    }
    let refused = demo.post_as(&trial, "/v1/images/edits", &body);
    assert_eq!((refused.status, refused.code(), refused.param()), (403, "free_trial_exhausted", "model"));
    assert!(refused.json["error"]["message"].as_str().unwrap().contains(model));
    assert_eq!(demo.funds("trial").2, 100 * price, "the balance never pays for a trial-only model");
}

fn projected(reply_usage: &Value, list_price: i64, baseline: i64) {
    assert_eq!(reply_usage["output_tokens"].as_i64().unwrap(), list_price * 1_000_000 / baseline);
}

#[test]
fn equivalent_usage_follows_every_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = free_port();
    let config = "billing: {equivalent_micros_per_million_tokens: 2000000}\n";
    let mut demo = Demo::start_with(tmp.path(), &listen, 0.05, config, &[]);
    let key = demo.account("eq", 10_000_000_000, 0, 0);
    let t2i = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a shop", "n": 1});
    // Images-standard shape: `usage.output_tokens` and `usage_basis`, original usage kept, no-store.
    let sync = demo.post_as(&key, "/v1/images/generations", &t2i);
    assert_eq!(sync.status, 200, "{}", sync.json);
    assert_eq!(sync.header("content-type"), Some("application/json"));
    assert_eq!(sync.header("cache-control"), Some("no-store"));
    assert_eq!(sync.json["usage"]["usage_basis"], "price_equivalent");
    assert_eq!(sync.json["usage"]["image_count"], 1);
    let per_image = rule(&demo, "beta-image-2.0-pro_t2i")["price"].as_i64().unwrap();
    projected(&sync.json["usage"], per_image, 2_000_000);
    assert!(sync.json.get("equivalent_usage").is_none());
    // Edits keep the upstream shape and get a top-level object.
    let i2i =
        json!({"model": "beta-image-2.0-pro_i2i", "prompt": "autumn", "images": ["https://m.example/a.png"], "n": 1});
    let edit = demo.post_as(&key, "/v1/images/edits", &i2i);
    assert_eq!(edit.json["equivalent_usage"]["usage_basis"], "price_equivalent", "{}", edit.json);
    assert_eq!(edit.header("cache-control"), Some("no-store"));
    // Any raw output-token field blocks the mapping.
    for raw in ["0", "null", "abc", "12"] {
        let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": format!("shop sim:tokens={raw}")});
        let reply = demo.post_as(&key, "/v1/images/generations", &body);
        assert_eq!(reply.status, 200);
        assert!(reply.json["usage"].get("usage_basis").is_none(), "{raw}: {}", reply.json);
        assert_ne!(reply.header("cache-control"), Some("no-store"), "{raw}");
    }
    // Async creation and errors never carry it.
    let sketch = json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "house", "n": 1});
    let accepted = demo.post_as(&key, "/v1/images/edits", &sketch);
    assert_eq!(accepted.status, 202);
    assert!(accepted.json.get("equivalent_usage").is_none());
    let error = demo.post_as(&key, "/v1/images/edits", &json!({"model": "alphax-sketch-to-image-lite_sketch"}));
    assert!(error.json.get("equivalent_usage").is_none());
    // Image task query on success: top-level, no-store, computed on read.
    let id = accepted.json["task_id"].as_str().unwrap().to_string();
    demo.wait_terminal_as(&key, &id, WAIT);
    let read = demo.get_as(&key, &format!("/v1/tasks/{id}"));
    let sketch_price = rule(&demo, "alphax-sketch-to-image-lite_sketch")["price"].as_i64().unwrap();
    projected(&read.json["equivalent_usage"], sketch_price, 2_000_000);
    assert_eq!(read.header("cache-control"), Some("no-store"));
    // Not on failed image tasks, nor on video task queries.
    let failed = run(
        &demo,
        &key,
        &json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png", "prompt": "sim:fail"}),
    );
    assert!(failed.get("equivalent_usage").is_none());
    let video = run(&demo, &key, &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox"}));
    assert!(video.get("equivalent_usage").is_none());
    // A new baseline later recomputes nothing for earlier tasks.
    demo.kill();
    let demo =
        Demo::start_with(tmp.path(), &listen, 0.05, "billing: {equivalent_micros_per_million_tokens: 5000000}\n", &[]);
    let again = demo.get_as(&key, &format!("/v1/tasks/{id}"));
    assert_eq!(again.json["equivalent_usage"], read.json["equivalent_usage"]);
}

#[test]
fn settlement_happens_once_across_a_crash_between_answer_and_write() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = free_port();
    let mut demo = Demo::start_with(tmp.path(), &listen, 0.05, "", &[("MEDIAGATE_FAILPOINT", "before-settle")]);
    let reply = demo.post("/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox"}));
    let id = reply.json["task_id"].as_str().unwrap().to_string();
    // The poller sees SUCCEEDED and the process is killed (SIGKILL) before writing it.
    std::thread::sleep(Duration::from_secs(3));
    demo.kill();
    let demo = Demo::start_in(tmp.path(), &listen, 0.05);
    let task = demo.wait_terminal(&id, WAIT);
    assert_eq!(task["status"], "success");
    let usage = demo.admin("/usage?account=demo", None);
    assert_eq!(std::str::from_utf8(&usage.bytes).unwrap().lines().filter(|l| l.contains(&id)).count(), 1);
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

#[test]
fn acknowledged_charges_and_top_ups_survive_a_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = free_port();
    let mut demo = Demo::start_in(tmp.path(), &listen, 0.05);
    let key = demo.account("acme", 1_000_000_000, 0, 0);
    for i in 0..5 {
        let answer = run(&demo, &key, &json!({"model": "beta-image-2.0-pro_t2i", "prompt": format!("cat {i}")}));
        assert!(answer.get("error").is_none(), "{answer}");
    }
    let top_up = demo.admin("/accounts/acme/top-up", Some(&json!({"amount": 3_000_000})));
    assert_eq!(top_up.status, 200);
    let acknowledged = demo.funds("acme");
    assert!(total(acknowledged) < 1_003_000_000, "the sync tasks were charged");
    // Killed at once: what was answered is in the write-ahead log, not yet in a redb checkpoint.
    demo.kill();
    let demo = Demo::start_in(tmp.path(), &listen, 0.05);
    assert_eq!(demo.funds("acme"), acknowledged);
    let usage = demo.admin("/usage?account=acme", None);
    assert_eq!(std::str::from_utf8(&usage.bytes).unwrap().lines().count(), 5);
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

#[test]
fn a_quote_prices_a_job_as_its_submission_would_and_runs_stores_and_holds_nothing() {
    let demo = Demo::start();
    let key = demo.account("quoted", 50_000_000, 100_000, 0);
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "size": "1280*720", "duration": 5});
    let before = demo.funds("quoted");

    let quote = demo.post_as(&key, "/v1/quotes", &json!({"endpoint": "/v1/videos/generations", "request": body}));
    assert_eq!(quote.status, 200, "{}", quote.json);
    let amount = quote.json["amount"].as_i64().unwrap();
    assert!(amount > 100_000, "{}", quote.json);
    assert_eq!(quote.json["units"], json!({"seconds": 5.0, "resolution": "720P", "audio": true}));
    assert_eq!(
        quote.json["funding"],
        json!([{"pot": "free_trial", "amount": 100_000}, {"pot": "balance", "amount": amount - 100_000}])
    );
    assert_eq!((quote.json["fundable"].as_bool(), quote.json["short_by"].as_i64()), (Some(true), Some(0)));
    assert_eq!(quote.json["free_trial_only"], false);
    // The endpoint may be left out: the model's own is used.
    let again = demo.post_as(&key, "/v1/quotes", &json!({"request": body}));
    assert_eq!(again.json["amount"], amount);
    assert_eq!(again.json["endpoint"], "/v1/videos/generations");
    // Nothing stored, held or sent.
    assert_eq!(demo.funds("quoted"), before);
    assert_eq!(demo.get_as(&key, "/v1/tasks").json["data"], json!([]));

    // It validates as a submission does, with the same error.
    let bad = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 99});
    let refused = demo.post_as(&key, "/v1/quotes", &json!({"request": bad}));
    let submitted = demo.post_as(&key, "/v1/videos/generations", &bad);
    assert_eq!((refused.status, submitted.status), (400, 400));
    assert_eq!(refused.json["error"]["code"], submitted.json["error"]["code"]);
    assert_eq!(
        (refused.param(), refused.json["error"]["message"].clone()),
        ("duration", submitted.json["error"]["message"].clone())
    );
    let image = json!({"model": "beta-image-plus", "prompt": "a fox"});
    let wrong_route =
        demo.post_as(&key, "/v1/quotes", &json!({"endpoint": "/v1/videos/generations", "request": image}));
    let submitted = demo.post_as(&key, "/v1/videos/generations", &image);
    assert_eq!(submitted_error(&wrong_route.json), submitted_error(&submitted.json));
    let unknown = demo.post_as(&key, "/v1/quotes", &json!({"endpoint": "/v1/nowhere", "request": body}));
    assert_eq!((unknown.status, unknown.param()), (400, "endpoint"));
    assert!(unknown.json["error"]["message"].as_str().unwrap().contains("/v1/videos/generations"));
    let missing = demo.post_as(&key, "/v1/quotes", &json!({"body": body}));
    assert_eq!((missing.status, missing.param()), (400, "request"));

    // `?dry_run=true` on a submit route is refused by name, never run.
    let dry = demo.post_as(&key, "/v1/videos/generations?dry_run=true", &body);
    assert_eq!((dry.status, dry.param()), (400, "dry_run"), "{}", dry.json);
    assert!(dry.json["error"]["message"].as_str().unwrap().contains("/v1/quotes"));
    assert_eq!(demo.post_as(&key, "/v1/images/generations?verbose=1", &image).param(), "verbose");
    assert_eq!(demo.funds("quoted"), before);
    assert_eq!(demo.get_as(&key, "/v1/tasks").json["data"], json!([]));

    // The acceptance and the task carry the quoted amount; the settlement charges it for a job as asked.
    let accepted = demo.post_as(&key, "/v1/videos/generations", &body);
    assert_eq!(accepted.json["quote"]["amount"], amount, "{}", accepted.json);
    let task = demo.wait_terminal_as(&key, accepted.json["task_id"].as_str().unwrap(), WAIT);
    assert_eq!(task["status"], "success", "{task}");
    assert_eq!(task["quote"]["amount"], amount);
    assert_eq!(task["settlement"]["charged"], amount);

    // An account that cannot pay is told so, and by how much; a trial-only model names only the trial.
    let poor = demo.account("poorer", 1_000, 0, 0);
    let short = demo.post_as(&poor, "/v1/quotes", &json!({"request": body}));
    assert_eq!(
        (short.json["fundable"].as_bool(), short.json["short_by"].as_i64()),
        (Some(false), Some(amount - 1_000))
    );
    assert_eq!(short.json["funding"], json!([{"pot": "balance", "amount": 1_000}]));
    let (_, trial_body) =
        common::examples().into_iter().find(|(_, b)| b["model"] == "alphax-poster-generation-v1_poster").unwrap();
    let trial = demo.post_as(&key, "/v1/quotes", &json!({"request": trial_body}));
    assert_eq!(trial.status, 200, "{}", trial.json);
    assert_eq!(trial.json["free_trial_only"], true);
    assert!(trial.json["funding"].as_array().unwrap().iter().all(|f| f["pot"] == "free_trial"), "{}", trial.json);
}

/// An error envelope less its request id, to compare two answers' errors.
fn submitted_error(answer: &Value) -> serde_json::Map<String, Value> {
    let mut error = answer["error"].as_object().unwrap().clone();
    error.remove("request_id");
    error
}
