//! Tasks end to end through the demo binary and its simulator: every example, every state, every hook,
//! cancel, idempotency, account scoping, and a SIGKILL restart.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, KEY, endpoint_of, examples, free_port};
use serde_json::{Value, json};
use std::time::Duration;

const T2V: &str = "alpha2.6-t2v_t2v";
const VIDEOS: &str = "/v1/videos/generations";

fn t2v(prompt: &str) -> Value {
    json!({"model": T2V, "prompt": prompt, "duration": 5})
}

fn submit(demo: &Demo, body: &Value) -> String {
    let reply = demo.post(VIDEOS, body);
    assert_eq!(reply.status, 200, "{}", reply.json);
    reply.json["task_id"].as_str().unwrap().to_string()
}

#[test]
fn every_example_runs_end_to_end_and_its_result_downloads() {
    let demo = Demo::start();
    let examples = examples();
    assert!(examples.len() >= 19, "one example per operation at least");
    for (name, body) in examples {
        let model = body["model"].as_str().unwrap().to_string();
        let endpoint = endpoint_of(&demo, &model);
        let reply = demo.post(&endpoint, &body);
        // An acceptance has a status; a synchronous answer is the result itself, which names its task too.
        assert!(reply.json["task_id"].is_string(), "{name}: {}", reply.json);
        let result_url = if reply.json["status"].is_string() {
            assert_eq!(reply.json["status"], "queued", "{name}");
            assert!(reply.json["message"].as_str().unwrap().contains("GET /v1/tasks/"), "{name}");
            let expected = if endpoint.starts_with("/v1/images") { 202 } else { 200 };
            assert_eq!(reply.status, expected, "{name}");
            let id = reply.json["task_id"].as_str().unwrap();
            let task = demo.wait_terminal(id, Duration::from_secs(60));
            assert_eq!(task["status"], "success", "{name}: {task}");
            assert!(task["results"][0]["expires_at"].is_string(), "{name}");
            task["results"][0]["url"].as_str().unwrap().to_string()
        } else {
            assert_eq!(reply.status, 200, "{name}: {}", reply.json);
            let data = reply.json["data"][0]["url"].as_str();
            let content = reply.json.pointer("/output/choices/0/message/content/0/image_url").and_then(Value::as_str);
            data.or(content).unwrap_or_else(|| panic!("{name}: no result in {}", reply.json)).to_string()
        };
        let file = ureq::get(&result_url).call().unwrap();
        let kind = file.headers().get("content-type").unwrap().to_str().unwrap().to_string();
        assert!(kind.starts_with("image/png") || kind.starts_with("video/mp4"), "{name}: {kind}");
    }
    // The poller kept under the upstream's per-key query limit (20 per second) throughout.
    let stats = demo.request("GET", "/upstream/_sim/query-stats", None, &[]);
    assert!(stats.json["queries"].as_u64().unwrap() > 0);
    assert!(stats.json["max_per_second"].as_u64().unwrap() <= 20, "{}", stats.json);
}

#[test]
fn every_task_state_is_reached_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    // Deadlines long enough for a task to be seen running first: on PostgreSQL a gateway queries nothing in
    // its first seconds, until the other replicas would have counted it.
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, "max_task_seconds: 6\n", &[]);
    let queued = submit(&demo, &t2v("a slow fox sim:slow"));
    assert_eq!(demo.get(&format!("/v1/tasks/{queued}")).json["status"], "queued");
    let cancel = demo.post(&format!("/v1/tasks/{queued}/cancel"), &json!({}));
    assert_eq!(cancel.status, 200, "{}", cancel.json);
    assert_eq!(cancel.json["status"], "cancelled");
    let never = submit(&demo, &t2v("a fox that never ends sim:never"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while demo.get(&format!("/v1/tasks/{never}")).json["status"] != "running" {
        assert!(std::time::Instant::now() < deadline, "never reached running");
        std::thread::sleep(Duration::from_millis(50));
    }
    let timed_out = demo.wait_terminal(&never, Duration::from_secs(20));
    assert_eq!(timed_out["status"], "timeout");
    let failed = demo.wait_terminal(&submit(&demo, &t2v("sim:fail")), Duration::from_secs(20));
    assert_eq!(failed["status"], "failed");
    assert!(failed["error"]["code"].is_string() && failed["error"]["message"].is_string());
    let ok = demo.wait_terminal(&submit(&demo, &t2v("a fox")), Duration::from_secs(20));
    assert_eq!(ok["status"], "success");
    assert_eq!(ok["model"], T2V);
    assert_eq!(ok["operation"], "t2v");
    assert!(ok["usage"].is_object() && ok["settlement"]["outcome"] == "posted");
}

#[test]
fn create_time_hooks_map_to_the_error_catalogue() {
    let demo = Demo::start();
    for (hook, status, code) in [
        ("sim:reject", 400, "upstream_rejected"),
        ("sim:inspect", 400, "upstream_content_blocked"),
        ("sim:error", 502, "upstream_error"),
        ("sim:unavailable", 503, "upstream_unavailable"),
        ("sim:arrears", 503, "upstream_unavailable"),
        ("sim:quota", 403, "upstream_quota_exhausted"),
    ] {
        let reply = demo.post(VIDEOS, &t2v(&format!("fox {hook}")));
        assert_eq!((reply.status, reply.code()), (status, code), "{hook}: {}", reply.json);
        let text = reply.json.to_string();
        assert!(!text.contains("upstream/") && !text.contains("demo-upstream"), "{hook} leaks: {text}");
    }
    // A create the upstream refuses for its capacity is no refusal of the client's job: it waits its turn.
    let throttled = demo.post(VIDEOS, &t2v("fox sim:throttle"));
    assert_eq!((throttled.status, throttled.json["status"].as_str()), (200, Some("queued")), "{}", throttled.json);
}

#[test]
fn raw_output_token_values_are_kept_in_usage() {
    let demo = Demo::start();
    for (value, expected) in [("0", json!(0)), ("null", Value::Null), ("abc", json!("abc")), ("12", json!(12))] {
        let task =
            demo.wait_terminal(&submit(&demo, &t2v(&format!("fox sim:tokens={value}"))), Duration::from_secs(20));
        assert_eq!(task["status"], "success");
        assert_eq!(task["usage"]["output_tokens"], expected, "{value}");
    }
}

#[test]
fn actual_seconds_and_transient_query_errors_are_handled() {
    let demo = Demo::start();
    let task = demo.wait_terminal(&submit(&demo, &t2v("fox sim:seconds=3")), Duration::from_secs(20));
    assert_eq!(task["usage"]["duration"], 3, "{task}");
    assert_eq!(task["settlement"]["units"]["seconds"], 3.0);
    // The first queries answer 500: the poller retries instead of failing the task.
    let task = demo.wait_terminal(&submit(&demo, &t2v("fox sim:query-error")), Duration::from_secs(30));
    assert_eq!(task["status"], "success", "{task}");
}

#[test]
fn a_client_that_disconnects_during_a_sync_call_leaves_a_cancelled_record_and_no_charge() {
    use std::io::Write;
    let demo = Demo::start();
    let funds = demo.funds("demo");
    let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "shop sim:slow"}).to_string();
    let addr = demo.base.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let request = format!(
        "POST /v1/images/generations HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let usage = demo.admin("/usage?account=demo&model=beta-image-2.0-pro_t2i", None);
        let text = String::from_utf8(usage.bytes).unwrap();
        if let Some(line) = text.lines().next() {
            let record: Value = serde_json::from_str(line).unwrap();
            assert_eq!(record["status"], "cancelled", "{record}");
            assert_eq!(record["charged"], 0);
            assert_eq!(demo.funds("demo"), funds, "what the call earmarked is available again");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no record of the abandoned call");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn synchronous_calls_on_a_kept_alive_connection_are_not_taken_for_a_client_that_left() {
    use std::io::{BufRead, BufReader, Read, Write};
    let demo = Demo::start();
    let addr = demo.base.trim_start_matches("http://").to_string();
    let body = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "shop"}).to_string();
    let request = format!(
        "POST /v1/images/generations HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let stream = std::net::TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut answer = || {
        let (mut status, mut length, mut line) = (String::new(), 0, String::new());
        reader.read_line(&mut status).unwrap();
        while reader.read_line(&mut line).unwrap() > 2 {
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
            line.clear();
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status} {body}");
        assert!(body["data"][0]["url"].is_string(), "{body}");
    };
    // One after another: each request's arrival is readable on the watched socket, not a close.
    for _ in 0..3 {
        writer.write_all(request.as_bytes()).unwrap();
        answer();
    }
    // Pipelined: the next request waits in the socket while the first one's upstream call runs.
    writer.write_all(format!("{request}{request}").as_bytes()).unwrap();
    answer();
    answer();
}

#[test]
fn cancel_is_for_queued_tasks_only() {
    let demo = Demo::start();
    let done = submit(&demo, &t2v("fox"));
    demo.wait_terminal(&done, Duration::from_secs(20));
    let late = demo.post(&format!("/v1/tasks/{done}/cancel"), &json!({}));
    assert_eq!((late.status, late.code()), (409, "task_not_cancellable"));
    let says = late.json["error"]["message"].as_str().unwrap();
    assert_eq!(says, format!("Task `{done}` has already succeeded; only a queued task can be cancelled."));
    let missing = demo.post("/v1/tasks/task-nope/cancel", &json!({}));
    assert_eq!((missing.status, missing.code()), (404, "task_not_found"));
}

#[test]
fn an_idempotency_key_replays_the_original_task_and_refuses_a_different_body() {
    let demo = Demo::start();
    let auth = format!("Bearer {KEY}");
    let headers = [("Authorization", auth.as_str()), ("Idempotency-Key", "order-42")];
    let first = demo.request("POST", VIDEOS, Some(&t2v("fox")), &headers);
    let again = demo.request("POST", VIDEOS, Some(&t2v("fox")), &headers);
    assert_eq!(first.status, 200);
    assert_eq!(first.json["task_id"], again.json["task_id"]);
    let other = demo.request("POST", VIDEOS, Some(&t2v("wolf")), &headers);
    assert_eq!((other.status, other.code()), (409, "idempotency_conflict"));
}

#[test]
fn concurrent_retries_with_one_idempotency_key_get_one_task() {
    let demo = Demo::start();
    let auth = format!("Bearer {KEY}");
    let headers = [("Authorization", auth.as_str()), ("Idempotency-Key", "order-43")];
    // Retries racing the first request: some find its task only inside the store's writer, before it is
    // committed, or while it is being forwarded. Each gets the one task, or a 409 to retry: never another.
    let replies: Vec<common::Reply> = std::thread::scope(|scope| {
        let calls: Vec<_> =
            (0..8).map(|_| scope.spawn(|| demo.request("POST", VIDEOS, Some(&t2v("fox")), &headers))).collect();
        calls.into_iter().map(|call| call.join().unwrap()).collect()
    });
    let mut ids = Vec::new();
    for reply in &replies {
        match reply.status {
            200 => ids.push(reply.json["task_id"].clone()),
            409 => assert_eq!(reply.code(), "request_in_progress", "{}", reply.json),
            other => panic!("{other}: {}", reply.json),
        }
    }
    let mut settled = demo.request("POST", VIDEOS, Some(&t2v("fox")), &headers);
    for _ in 0..100 {
        if settled.status != 409 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        settled = demo.request("POST", VIDEOS, Some(&t2v("fox")), &headers);
    }
    assert_eq!(settled.status, 200, "{}", settled.json);
    ids.push(settled.json["task_id"].clone());
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let task = demo.wait_terminal(ids[0].as_str().unwrap(), Duration::from_secs(60));
    assert_eq!(task["status"], "success");
    assert_eq!(demo.admin("/ledger/verify", None).json["problems"], json!([]));
}

#[test]
fn tasks_are_scoped_to_their_account() {
    let demo = Demo::start();
    let id = submit(&demo, &t2v("fox"));
    // The owner's reads of the finished task keep its rendered answer, which still answers no one else.
    demo.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(demo.get(&format!("/v1/tasks/{id}")).status, 200);
    let other = demo.account("someone-else", 1_000_000_000, 0, 0);
    let theirs = demo.get_as(&other, &format!("/v1/tasks/{id}"));
    let missing = demo.get_as(&other, "/v1/tasks/task-does-not-exist");
    assert_eq!((theirs.status, theirs.code()), (404, "task_not_found"));
    assert_eq!(
        theirs.json["error"]["message"].as_str().unwrap().replace(&id, "X"),
        missing.json["error"]["message"].as_str().unwrap().replace("task-does-not-exist", "X")
    );
    let cancel = demo.post_as(&other, &format!("/v1/tasks/{id}/cancel"), &json!({}));
    assert_eq!(cancel.status, 404);
}

#[test]
fn sigkill_with_tasks_in_flight_loses_and_doubles_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = free_port();
    let mut demo = Demo::start_in(tmp.path(), &listen, 0.3);
    let mut ids = Vec::new();
    for i in 0..12 {
        let prompt = if i % 3 == 0 { format!("fox {i} sim:slow") } else { format!("fox {i}") };
        ids.push(submit(&demo, &t2v(&prompt)));
    }
    demo.kill();
    let demo = Demo::start_in(tmp.path(), &listen, 0.3);
    for id in &ids {
        let task = demo.wait_terminal(id, Duration::from_secs(60));
        assert_eq!(task["status"], "success", "{id}: {task}");
    }
    let usage = demo.admin("/usage?account=demo", None);
    let lines: Vec<&str> = std::str::from_utf8(&usage.bytes).unwrap().lines().collect();
    for id in &ids {
        assert_eq!(lines.iter().filter(|l| l.contains(id.as_str())).count(), 1, "{id} settled once");
    }
    let report = demo.admin("/ledger/verify", None);
    assert_eq!(report.json["problems"], json!([]), "{}", report.json);
}

/// `GET /v1/tasks`: the caller's tasks newest first, a page at a time; paging shows every task once however
/// many arrive meanwhile, the filters select, and nothing of another account shows.
#[test]
fn listing_pages_through_every_task_once_while_new_ones_arrive() {
    let demo = Demo::start();
    let (key, other) = (demo.account("lister", 1_000_000_000, 0, 0), demo.account("other", 1_000_000_000, 0, 0));
    let submit_as = |key: &str, body: &Value| {
        let reply = demo.post_as(key, endpoint_of(&demo, body["model"].as_str().unwrap()).as_str(), body);
        assert!(reply.status < 300, "{}", reply.json);
        reply.json["task_id"].as_str().unwrap().to_string()
    };
    let listed = |key: &str, query: &str| {
        let page = demo.get_as(key, &format!("/v1/tasks?{query}"));
        assert_eq!(page.status, 200, "{query}: {}", page.json);
        let ids: Vec<String> =
            page.json["data"].as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap().into()).collect();
        assert_eq!(page.json["last_id"], ids.last().map_or(Value::Null, |id| json!(id)), "{query}");
        (ids, page.json)
    };
    let before: Vec<String> = (0..23).map(|n| submit_as(&key, &t2v(&format!("fox {n}")))).collect();
    let foreign = submit_as(&other, &t2v("not yours"));
    let mid = common::now_ms();

    let (mut seen, mut arrived, mut after) = (Vec::new(), Vec::new(), None::<String>);
    loop {
        // A task arrives before every page.
        arrived.push(submit_as(&key, &t2v("a late fox")));
        let query = after.as_ref().map_or("limit=5".to_string(), |id| format!("limit=5&after={id}"));
        let (ids, page) = listed(&key, &query);
        assert!(ids.len() <= 5);
        let created: Vec<&str> =
            page["data"].as_array().unwrap().iter().map(|t| t["created_at"].as_str().unwrap()).collect();
        assert!(created.windows(2).all(|pair| pair[0] >= pair[1]), "newest first: {created:?}");
        seen.extend(ids);
        if !page["has_more"].as_bool().unwrap() {
            break;
        }
        after = seen.last().cloned();
    }
    let mut expected: Vec<String> = before.iter().chain(&arrived[..1]).cloned().collect();
    let mut once = seen.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), seen.len(), "a task was listed twice: {seen:?}");
    expected.sort();
    assert_eq!(once, expected, "every task from before the first page, once, and none that came later");
    assert_eq!(listed(&other, "").0, std::slice::from_ref(&foreign));

    // Creation time bounds, inclusive, in epoch milliseconds.
    let mut late = listed(&key, &format!("limit=100&created_since={mid}")).0;
    late.sort();
    let mut all_arrived = arrived.clone();
    all_arrived.sort();
    assert_eq!(late, all_arrived);
    assert_eq!(listed(&key, &format!("limit=100&created_until={}", mid - 1)).0.len(), before.len());

    // Status and model filters.
    let slow = submit_as(&key, &t2v("a slow fox sim:slow"));
    assert_eq!(demo.post_as(&key, &format!("/v1/tasks/{slow}/cancel"), &json!({})).status, 200);
    assert_eq!(listed(&key, "status=cancelled").0, [slow]);
    let image = submit_as(&key, &json!({"model": "beta-image-plus", "prompt": "a"}));
    assert_eq!(listed(&key, "model=beta-image-plus").0, [image]);

    // Bad parameters are refused, each naming itself; another account's task is no cursor.
    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("status=done", "status"),
        ("created_since=yesterday", "created_since"),
        (&*format!("after={foreign}"), "after"),
    ] {
        let reply = demo.get_as(&key, &format!("/v1/tasks?{query}"));
        assert_eq!((reply.status, reply.code(), reply.param()), (400, "invalid_parameter", param), "{query}");
    }
    let unknown = demo.get_as(&key, "/v1/tasks?page=2");
    assert_eq!((unknown.status, unknown.code()), (400, "invalid_parameter"), "{}", unknown.json);
    assert!(unknown.json["error"]["message"].as_str().unwrap().contains("page"), "{}", unknown.json);
}
