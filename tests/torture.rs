//! Crash torture through HTTP: SIGKILL cycles under mixed synchronous, asynchronous and keyed load, then
//! the checks an operator's worst day needs: every acknowledged task exists and ends exactly once, every
//! keyed request retried after the crashes completes or says it is still running, the ledger verifies,
//! and the money adds up to what the usage log charged. CI runs a few cycles;
//! `MEDIAGATE_TORTURE_CYCLES=50 cargo test --test torture` runs a long one.
#![allow(clippy::unwrap_used)]

mod common;

use common::Demo;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BALANCE: i64 = 1_000_000_000_000;
const VIDEOS: &str = "/v1/videos/generations";
const IMAGES: &str = "/v1/images/generations";

/// What the clients were told was accepted, and the keyed requests they sent.
#[derive(Default)]
struct Acknowledged {
    tasks: BTreeSet<String>,
    /// `(Idempotency-Key, route, body)` of every keyed request sent, answered or not.
    keyed: Vec<(String, &'static str, Value)>,
}

/// One request of the mix, as client `client`'s `n`th: async or sync, keyed or not, now and then slow.
fn request(client: usize, n: u64) -> (&'static str, Value, Option<String>) {
    let slow = if n.is_multiple_of(5) { " sim:slow" } else { "" };
    let key = n.is_multiple_of(3).then(|| format!("c{client}-{n}"));
    match n % 4 {
        0 | 1 => (VIDEOS, json!({"model": "alpha2.6-t2v_t2v", "prompt": format!("fox {n}{slow}"), "duration": 2}), key),
        2 => (IMAGES, json!({"model": "beta-image-2.0-pro_t2i", "prompt": format!("cat {n}{slow}")}), key),
        _ => (IMAGES, json!({"model": "beta-image-plus", "prompt": format!("dog {n}")}), key),
    }
}

/// Sends the mix from `clients` threads until `stop`; records what was acknowledged.
fn load(demo: &Demo, key: &str, clients: usize, stop: &AtomicBool, seen: &Mutex<Acknowledged>, counter: &AtomicU64) {
    std::thread::scope(|scope| {
        for client in 0..clients {
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let (route, body, idempotency) = request(client, n);
                    let auth = format!("Bearer {key}");
                    let mut headers = vec![("Authorization", auth.as_str())];
                    if let Some(idempotency) = &idempotency {
                        headers.push(("Idempotency-Key", idempotency.as_str()));
                        seen.lock().unwrap().keyed.push((idempotency.clone(), route, body.clone()));
                    }
                    let text = body.to_string();
                    let Ok(reply) = demo.try_raw("POST", route, Some(&text), "application/json", &headers) else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    if let Some(task_id) = reply.json["task_id"].as_str().filter(|_| reply.status < 300) {
                        seen.lock().unwrap().tasks.insert(task_id.to_string());
                    }
                }
            });
        }
    });
}

#[test]
fn sigkill_cycles_under_mixed_load_lose_no_task_and_no_money() {
    let cycles: u64 = std::env::var("MEDIAGATE_TORTURE_CYCLES").ok().and_then(|c| c.parse().ok()).unwrap_or(3);
    let tmp = tempfile::tempdir().unwrap();
    let listen = common::free_port();
    let config = "limits: {max_in_flight_per_account: 100000, requests_per_second_per_key: 100000}\n";
    let start = || Demo::start_with(tmp.path(), &listen, 0.05, config, &[]);
    let mut demo = start();
    let key = demo.account("acme", BALANCE, 0, 0);
    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let counter = AtomicU64::new(0);
    for cycle in 0..cycles {
        let stop = AtomicBool::new(false);
        let pid = demo.process.child.id().to_string();
        std::thread::scope(|scope| {
            scope.spawn(|| load(&demo, &key, 4, &stop, &seen, &counter));
            // Killed at a different moment of each cycle's load.
            std::thread::sleep(Duration::from_millis(600 + 337 * (cycle % 4)));
            assert!(std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
            stop.store(true, Ordering::Relaxed);
        });
        demo.kill(); // reaps it
        demo = start();
    }

    let seen = seen.lock().unwrap();
    // Load enough to have crashed in the middle of things, each cycle.
    assert!(seen.tasks.len() as u64 >= 5 * cycles, "{} tasks acknowledged", seen.tasks.len());
    assert!(seen.keyed.len() as u64 >= 5 * cycles, "{} keyed requests", seen.keyed.len());
    // Every keyed request, retried now, completes or is told the first attempt still runs: never lost.
    for (idempotency, route, body) in &seen.keyed {
        let auth = format!("Bearer {key}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = demo.request(
                "POST",
                route,
                Some(body),
                &[("Authorization", auth.as_str()), ("Idempotency-Key", idempotency)],
            );
            if reply.status == 409 && reply.code() == "request_in_progress" && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert!(reply.status < 300, "{idempotency}: {} {:?}", reply.status, reply.json);
            break;
        }
    }
    // Every acknowledged task exists and ends, settled once.
    for task_id in &seen.tasks {
        let task = demo.wait_terminal_as(&key, task_id, Duration::from_secs(60));
        assert!(task["settlement"].is_object(), "{task_id} ended unsettled: {task}");
    }
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
    // The money adds up: what the account has is what it was given less what the usage log charged.
    assert_eq!(demo.funds("acme"), (0, 0, BALANCE - demo.charged("acme")));
}
