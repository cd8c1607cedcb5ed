//! Retention (README, Retention): finished work past its time is purged, on both stores; live work and
//! tasks whose results' copy is still served are kept; the usage log (API, CSV, the console's pages) and
//! the ledger read the same before and after a purge; an `Idempotency-Key` whose record is gone runs again.
#![allow(clippy::unwrap_used)]

mod common;

use common::{ADMIN_TOKEN, Demo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const VIDEO: &str = "/v1/videos/generations";
const IMAGE: &str = "/v1/images/generations";
const SHORT: &str = "retention: {tasks: 1s, deliveries: 1s, idempotency: 1s}\n";

/// The usage log's JSON lines, by task id.
fn usage_lines(demo: &Demo) -> BTreeMap<String, Value> {
    let reply = demo.raw("GET", "/admin/v1/usage", None, "", &[("Authorization", &format!("Bearer {ADMIN_TOKEN}"))]);
    assert_eq!(reply.status, 200);
    String::from_utf8(reply.bytes)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|line| (line["task_id"].as_str().unwrap().to_string(), line))
        .collect()
}

/// The CSV's rows (header first), of the admin API and of the console, which must be the same file.
fn usage_csv(demo: &Demo, console: &str) -> Vec<String> {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let api = demo.raw("GET", "/admin/v1/usage?format=csv", None, "", &[("Authorization", &auth)]);
    let page = demo.raw("GET", "/console/usage.csv", None, "", &[("Cookie", console)]);
    assert_eq!((api.status, page.status), (200, 200));
    assert_eq!(api.bytes, page.bytes, "the console's CSV is the admin API's");
    String::from_utf8(api.bytes).unwrap().lines().map(str::to_string).collect()
}

/// An operator's console session cookie.
fn operator_cookie(demo: &Demo) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let reply = agent.post(demo.url("/console/sign-in")).send_form([("admin_token", ADMIN_TOKEN)]).unwrap();
    assert_eq!(reply.status(), 303);
    let cookie = reply.headers().get("set-cookie").unwrap().to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

fn ledger_is_whole(demo: &Demo) {
    let verified = demo.admin("/ledger/verify", None);
    assert_eq!(verified.status, 200, "{}", verified.json);
    assert_eq!(verified.json["problems"], json!([]), "{}", verified.json);
}

fn submit(demo: &Demo, key: &str, path: &str, body: &Value, idempotency: Option<&str>) -> Value {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if let Some(idempotency) = idempotency {
        headers.push(("Idempotency-Key", idempotency));
    }
    let reply = demo.request("POST", path, Some(body), &headers);
    assert!(reply.status < 300, "{}", reply.json);
    reply.json
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn finished_work_is_purged_and_billing_history_reads_the_same_after() {
    let tmp = tempfile::tempdir().unwrap();
    // Kept as long as the defaults say: nothing is purged while the history is read the first time.
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, "results: {mirror: false}\n", &[]);
    let key = demo.account("kept", 1_000_000_000, 0, 0);
    let video = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5});
    let image = json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a fox"});
    let failing = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox sim:fail", "duration": 5});
    let ended: Vec<String> = [
        submit(&demo, &key, VIDEO, &video, None),
        submit(&demo, &key, IMAGE, &image, None),
        submit(&demo, &key, IMAGE, &image, Some("once")),
        submit(&demo, &key, VIDEO, &failing, None),
    ]
    .iter()
    .map(|answer| answer["task_id"].as_str().unwrap().to_string())
    .collect();
    for task in &ended {
        demo.wait_terminal_as(&key, task, Duration::from_secs(30));
    }
    let never = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox sim:never", "duration": 5});
    let live = submit(&demo, &key, VIDEO, &never, None)["task_id"].as_str().unwrap().to_string();
    let console = operator_cookie(&demo);
    let (lines, csv) = (usage_lines(&demo), usage_csv(&demo, &console));
    assert_eq!(lines.len(), 4, "each settled task, the failed one (charged nothing) too: {lines:?}");
    let funds = demo.admin("/accounts/kept", None).json;
    ledger_is_whole(&demo);
    drop(demo);

    // Kept a second: every finished task goes but the one whose copy is still served; the live one stays.
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, SHORT, &[]);
    let served = submit(&demo, &key, VIDEO, &video, None)["task_id"].as_str().unwrap().to_string();
    demo.wait_terminal_as(&key, &served, Duration::from_secs(30));
    for task in &ended {
        wait_until(&format!("task {task} purged"), Duration::from_secs(30), || {
            demo.get_as(&key, &format!("/v1/tasks/{task}")).status == 404
        });
    }
    // A few passes more: the live task and the served copy's task are still there.
    std::thread::sleep(Duration::from_secs(3));
    let live = demo.get_as(&key, &format!("/v1/tasks/{live}")).json;
    assert!(live["status"] == "queued" || live["status"] == "running", "{live}");
    assert_eq!(demo.get_as(&key, &format!("/v1/tasks/{served}")).json["status"], "success");

    // The usage log and its CSV read as before, with the served task's line after them; the account's funds
    // moved by that task's charge alone (a purge charges and gives back nothing), and the ledger adds up.
    let console = operator_cookie(&demo);
    let after = usage_lines(&demo);
    for (task, line) in &lines {
        assert_eq!(after.get(task), Some(line), "the usage line of purged task {task}");
    }
    assert_eq!(after.len(), lines.len() + 1, "{after:?}");
    let csv_after = usage_csv(&demo, &console);
    assert_eq!(csv_after[..csv.len()], csv[..], "the CSV's rows of the purged tasks");
    let page = demo.raw("GET", "/console/usage", None, "", &[("Cookie", &console)]);
    let page = String::from_utf8(page.bytes).unwrap();
    for task in lines.keys() {
        assert!(page.contains(task.as_str()), "the console's usage page lists purged task {task}");
    }
    let balance = |account: &Value| account["funds"]["balance"].as_i64().unwrap();
    let spent = balance(&funds) - balance(&demo.admin("/accounts/kept", None).json);
    assert_eq!(json!(spent), after[&served]["charged"], "only the task run since was charged");
    ledger_is_whole(&demo);

    // The idempotency record went with its task: the same key runs the request again, as a new task.
    let again = submit(&demo, &key, IMAGE, &image, Some("once"));
    assert_ne!(again["task_id"], json!(ended[2]), "{again}");
    let metrics = String::from_utf8_lossy(&demo.get("/metrics").bytes).to_string();
    let purged_tasks = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mediagate_purged_total{kind=\"tasks\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(purged_tasks.is_some_and(|n| n >= 4), "{metrics}");
}
