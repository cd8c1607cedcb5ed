//! A store whose disk fails (full, or erroring): nothing is acknowledged that is not durable, every write is
//! answered at once with 503 `storage_unavailable`, the probes say so, and the gateway exits non-zero for its
//! supervisor to restart it; restarted once space is back, it has every acknowledged write and its money
//! verifies. The faults come from the store's fault-injection layer (`MEDIAGATE_STORE_FAULTS`).
#![allow(clippy::unwrap_used)]

mod common;

use common::Demo;
use serde_json::json;
use std::time::{Duration, Instant};

fn t2v(prompt: &str) -> serde_json::Value {
    json!({"model": "alpha2.6-t2v_t2v", "prompt": prompt, "duration": 5})
}

/// A demo on `dir` whose store faults are planned in the file it returns (empty at first).
fn demo_with_faults(dir: &std::path::Path, listen: &str) -> (Demo, std::path::PathBuf) {
    let faults = dir.join("faults");
    if !faults.exists() {
        std::fs::write(&faults, "").unwrap();
    }
    let env = faults.display().to_string();
    (Demo::start_embedded_with(dir, listen, 0.05, "", &[("MEDIAGATE_STORE_FAULTS", env.as_str())]), faults)
}

/// Waits for the process to exit; its exit code.
fn exit_code(demo: &mut Demo, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = demo.process.child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the gateway did not exit; stderr: {}", demo.process.stderr());
}

#[test]
fn a_full_disk_is_answered_at_once_and_the_gateway_exits_for_a_restart_that_loses_nothing() {
    for fault in ["log-write enospc", "log-write short", "log-write eio"] {
        let tmp = tempfile::tempdir().unwrap();
        let listen = common::free_port();
        let (mut demo, faults) = demo_with_faults(tmp.path(), &listen);
        let acknowledged = demo.post("/v1/videos/generations", &t2v("before the fault"));
        assert_eq!(acknowledged.status, 200);
        let task_id = acknowledged.json["task_id"].as_str().unwrap().to_string();

        std::fs::write(&faults, format!("{fault}\n")).unwrap();
        // Writes of every kind at once: the first to reach the store finds it broken and the gateway stops,
        // so each is answered 503 at once, or (once it has stopped) not at all. None is acknowledged.
        let started = Instant::now();
        let auth = format!("Bearer {}", common::KEY);
        let admin = format!("Bearer {}", common::ADMIN_TOKEN);
        let video = t2v("during the fault").to_string();
        let image = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a cat"}).to_string();
        let top_up = json!({"amount": 1000}).to_string();
        let writes = [
            ("/v1/videos/generations", video.as_str(), auth.as_str()),
            ("/v1/images/generations", image.as_str(), auth.as_str()),
            ("/admin/v1/accounts/demo/top-up", top_up.as_str(), admin.as_str()),
        ];
        let replies: Vec<_> = std::thread::scope(|scope| {
            let calls: Vec<_> = writes
                .iter()
                .map(|(path, body, auth)| {
                    let demo = &demo;
                    scope.spawn(move || {
                        demo.try_raw("POST", path, Some(body), "application/json", &[("Authorization", auth)])
                    })
                })
                .collect();
            calls.into_iter().map(|call| call.join().unwrap()).collect()
        });
        let answered: Vec<_> = replies.iter().flatten().collect();
        assert!(!answered.is_empty(), "{fault}: no write was answered");
        for reply in answered {
            assert_eq!((reply.status, reply.code()), (503, "storage_unavailable"), "{fault}: {:?}", reply.json);
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{fault}: answered after {:?}", started.elapsed());
        if let Ok(ready) = demo.try_raw("GET", "/readyz", None, "", &[]) {
            assert_eq!(ready.status, 503, "{fault}");
        }
        assert_ne!(exit_code(&mut demo, Duration::from_secs(40)), Some(0), "{fault}");
        assert!(demo.process.stderr().contains("the store can no longer make writes durable"), "{fault}");

        // Space is back: a restart replays the log, and everything acknowledged is there.
        std::fs::write(&faults, "").unwrap();
        let (demo, _) = demo_with_faults(tmp.path(), &listen);
        let task = demo.wait_terminal(&task_id, Duration::from_secs(30));
        assert_eq!(task["status"], "success", "{fault}: {task}");
        assert_eq!(demo.post("/v1/videos/generations", &t2v("after the fault")).status, 200);
        assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]), "{fault}");
    }
}

#[test]
fn a_checkpoint_that_fails_stops_the_gateway_at_once_and_the_restart_loses_nothing() {
    for fault in ["store-write enospc", "store-write short", "store-sync eio"] {
        let tmp = tempfile::tempdir().unwrap();
        let listen = common::free_port();
        let (mut demo, faults) = demo_with_faults(tmp.path(), &listen);
        let mut acknowledged: Vec<String> = (0..3)
            .map(|n| demo.post("/v1/videos/generations", &t2v(&format!("before {n}"))).json["task_id"].to_string())
            .map(|id| id.trim_matches('"').to_string())
            .collect();
        std::fs::write(&faults, format!("{fault}\n")).unwrap();
        let failed_at = Instant::now();
        // A light load, as redb's file fails and its space is freed again as soon as the first checkpoint
        // fails: every write is acknowledged durable (from the log) or refused, until the gateway stops.
        let mut freed = false;
        let auth = format!("Bearer {}", common::KEY);
        let exit = loop {
            if let Some(status) = demo.process.child.try_wait().unwrap() {
                break status.code();
            }
            assert!(failed_at.elapsed() < Duration::from_secs(10), "{fault}: the gateway did not stop");
            if !freed && demo.process.stderr().contains("store checkpoint failed") {
                std::fs::write(&faults, "").unwrap();
                freed = true;
            }
            let body = t2v(&format!("fox {}", acknowledged.len())).to_string();
            if let Ok(reply) = demo.try_raw(
                "POST",
                "/v1/videos/generations",
                Some(&body),
                "application/json",
                &[("Authorization", &auth)],
            ) {
                match reply.status {
                    200 => acknowledged.push(reply.json["task_id"].as_str().unwrap().to_string()),
                    _ => assert_eq!((reply.status, reply.code()), (503, "storage_unavailable"), "{fault}"),
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(demo.process.stderr().contains("store checkpoint failed"), "{fault}: {}", demo.process.stderr());
        std::fs::write(&faults, "").unwrap();
        assert_ne!(exit, Some(0), "{fault}");
        assert!(demo.process.stderr().contains("the store can no longer make writes durable"), "{fault}");

        // Space is back: the restart replays the log, and everything acknowledged is there.
        let (demo, _) = demo_with_faults(tmp.path(), &listen);
        for id in &acknowledged {
            assert_eq!(demo.wait_terminal(id, Duration::from_secs(30))["status"], "success", "{fault}");
        }
        assert_eq!(demo.post("/v1/videos/generations", &t2v("after the fault")).status, 200);
        assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]), "{fault}");
    }
}
