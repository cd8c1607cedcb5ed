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
