//! A newcomer's first hour with the `mediagate` command: what it says when something is missing, and that
//! it stays quiet and readable where it should.
#![allow(clippy::unwrap_used)]

mod common;

use common::{ADMIN_TOKEN, Demo, KEY};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mediagate(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mediagate"));
    command.args(args).env_remove("MEDIAGATE_ADMIN_TOKEN");
    command
}

#[test]
fn a_missing_admin_token_names_the_variable_that_holds_it() {
    let output = mediagate(&["admin", "model", "list"]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("MEDIAGATE_ADMIN_TOKEN"), "{stderr}");
}

#[test]
fn admin_output_cut_short_by_its_reader_ends_quietly() {
    let demo = Demo::start();
    let mut child = mediagate(&["admin", "--url", &demo.base, "model", "list"])
        .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the answer is printed, as `| head` does once it has its lines.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && !stderr.contains("panicked"), "{:?}: {stderr}", output.status);
}

#[test]
fn a_store_held_by_a_running_gateway_says_so_and_shows_the_way_round() {
    let demo = Demo::start_embedded();
    let data_dir = demo.data_dir.join("gateway").display().to_string();
    let output = mediagate(&["ledger", "verify", "--data-dir", &data_dir]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("in use by a running mediagate") && stderr.contains("admin verify-ledger"), "{stderr}");
}

#[test]
fn account_show_names_the_plan() {
    let demo = Demo::start();
    demo.account("acme", 0, 0, 5_000_000);
    let body = json!({"name": "pro", "allowance": 7_000_000});
    assert_eq!(demo.admin("/accounts/acme/plan", Some(&body)).status, 200);
    let output = mediagate(&["admin", "--url", &demo.base, "account", "show", "acme"])
        .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["account"]["plan"], "pro");
    assert_eq!(shown["funds"]["plan"], 7_000_000);
}

#[test]
fn a_region_without_an_upstream_is_named_at_start_and_in_its_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let gateway = Demo::serve(tmp.path(), "", &[]);
    let log = gateway.process.stderr();
    for expected in
        ["no upstream is configured", "\"region\":\"us-east-1\"", "alpha2.6-t2v-us_t2v", "upstreams.us-east-1"]
    {
        assert!(log.contains(expected), "{expected} missing from {log}");
    }
    let key = gateway.account("acme", 100_000_000, 0, 0);
    let body = json!({"model": "alpha2.6-t2v-us_t2v", "prompt": "a fox", "duration": 5});
    let refused = gateway.post_as(&key, "/v1/videos/generations", &body);
    assert_eq!((refused.status, refused.code()), (503, "upstream_unavailable"));
    let message = refused.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("`us-east-1`") && message.contains("`upstreams.us-east-1`"), "{message}");
}

/// Waits until `process` has printed `needle` on stderr (or gives up after a few seconds).
fn stderr_shows(process: &common::Process, needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if process.stderr().contains(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn the_demo_keeps_its_banner_in_view_unless_asked_for_every_request() {
    let quiet_dir = tempfile::tempdir().unwrap();
    let quiet = Demo::start_with(quiet_dir.path(), "127.0.0.1:0", 0.05, "", &[("MEDIAGATE_LOG", "")]);
    let loud_dir = tempfile::tempdir().unwrap();
    let loud = Demo::start_flags(loud_dir.path(), "127.0.0.1:0", 0.05, "", &[("MEDIAGATE_LOG", "")], &["--access-log"]);
    for demo in [&quiet, &loud] {
        assert_eq!(demo.get("/v1/models").status, 200);
    }
    assert!(stderr_shows(&loud.process, "\"target\":\"mediagate::access\""), "{}", loud.process.stderr());
    assert!(!quiet.process.stderr().contains("mediagate::access"), "{}", quiet.process.stderr());
    let banner = quiet.process.stdout.lock().unwrap().join("\n");
    assert!(banner.contains(KEY) && banner.contains("curl"), "{banner}");
}

/// The webhook commands, for an account whose name needs escaping in a URL: opened with a secret, rotated,
/// given an endpoint; its deliveries listed (an attempt that got no answer in 15 s failed) and one replayed.
#[test]
fn webhook_commands_work_for_any_account_name() {
    let demo = Demo::start();
    let admin = |args: &[&str]| {
        let mut all = vec!["admin", "--url", &demo.base];
        all.extend_from_slice(args);
        let output = mediagate(&all).env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN).output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let name = "studio #1/b&c";
    let opened = admin(&["account", "create", name]);
    assert!(opened["webhook_secret"].as_str().unwrap().starts_with("whsec_"), "{opened}");
    let rotated = admin(&["webhook", "rotate", name]);
    assert!(rotated["secret"].as_str().unwrap().starts_with("whsec_"), "{rotated}");
    let receiver = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks", receiver.local_addr().unwrap());
    assert_eq!(admin(&["webhook", "endpoint", name, &url])["endpoint"], url.as_str());
    admin(&["account", "top-up", name, "100"]);
    let key = admin(&["key", "create", name])["key"].as_str().unwrap().to_string();
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5});
    let task_id = demo.post_as(&key, "/v1/videos/generations", &body).json["task_id"].as_str().unwrap().to_string();
    demo.wait_terminal_as(&key, &task_id, Duration::from_secs(30));
    let ended = Instant::now();
    let deadline = ended + Duration::from_secs(60);
    let delivery = loop {
        let listed = admin(&["webhook", "deliveries", "--account", name, "--task-id", &task_id]);
        if let Some(delivery) = listed["deliveries"].get(0) {
            break delivery.clone();
        }
        assert!(Instant::now() < deadline, "no delivery listed: {listed}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!((delivery["account"].as_str(), delivery["url"].as_str()), (Some(name), Some(url.as_str())));
    // The receiver takes the connection and never answers: the attempt fails once its 15 s are up.
    let attempted = loop {
        let listed = admin(&["webhook", "deliveries", "--task-id", &task_id]);
        if let Some(attempt) = listed["deliveries"][0]["attempts"].get(0) {
            break attempt.clone();
        }
        assert!(Instant::now() < deadline, "never attempted: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(attempted["status"].is_null() && attempted["error"].as_str().is_some_and(|e| !e.is_empty()), "{attempted}");
    assert!(ended.elapsed() >= Duration::from_secs(14), "failed before its 15 s: {attempted}");
    let replayed = admin(&["webhook", "replay", delivery["id"].as_str().unwrap()]);
    assert_eq!(replayed["id"], delivery["id"]);
    assert_eq!(replayed["state"], "pending");
    drop(receiver);
}

/// A mistake in the config file is shown in the file, at its line, in an operator's words.
#[test]
fn a_config_mistake_names_the_file_its_line_and_what_the_value_must_be() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(&config, "limits:\n  max_in_flight_per_account: -5\n").unwrap();
    let output = mediagate(&["serve", "--config", config.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("{}:2:30", config.display())), "{stderr}");
    assert!(stderr.contains("this must be a whole number, 0 or more"), "{stderr}");
    assert!(!stderr.contains("<input>") && !stderr.contains("u64") && stderr.matches("error").count() == 1, "{stderr}");
}

/// A command whose work leaves nothing on its standard output says what happened on its terminal.
#[test]
fn commands_that_print_nothing_else_say_what_they_did() {
    let dir = tempfile::tempdir().unwrap();
    let output = mediagate(&["schemas", "--out", dir.path().to_str().unwrap()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && stdout.starts_with("Wrote ") && stdout.contains("openapi.json"), "{stdout}");
    assert!(dir.path().join("openapi.json").exists());

    let demo = Demo::start();
    let usage = mediagate(&["admin", "--url", &demo.base, "usage", "--account", "nobody"])
        .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    assert!(usage.status.success());
    assert!(usage.stdout.is_empty(), "{}", String::from_utf8_lossy(&usage.stdout));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("No usage lines"));
}

/// A client team compares two releases: a written set against a running gateway (no change), and a set
/// whose contract was narrowed since (breaking, exit 1, named); the lock command on a spec copy.
#[test]
fn schemas_diff_names_each_change_and_fails_on_a_breaking_one() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    for out in [&old, &new] {
        assert!(mediagate(&["schemas", "--out", out.to_str().unwrap()]).status().unwrap().success());
    }
    let demo = Demo::start();
    let same = mediagate(&["schemas", "diff", old.to_str().unwrap(), &demo.base]).output().unwrap();
    let said = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success() && said.contains("0 breaking, 0 compatible."), "{said}");

    // The newer release dropped a model and narrowed a field, and added a field to the task.
    let openapi = new.join("openapi.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&openapi).unwrap()).unwrap();
    let schemas = doc["components"]["schemas"].as_object_mut().unwrap();
    schemas["alpha2.6-i2v_i2v"]["properties"]["duration"]["maximum"] = json!(10);
    schemas["Task"]["properties"]["extra"] = json!({"type": "string"});
    let refs =
        doc["paths"]["/v1/images/edits"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
            .as_array_mut()
            .unwrap();
    refs.retain(|r| r["$ref"] != "#/components/schemas/alphax-style-repaint-v1_style_repaint");
    std::fs::write(&openapi, serde_json::to_vec(&doc).unwrap()).unwrap();
    let changed = mediagate(&["schemas", "diff", old.to_str().unwrap(), openapi.to_str().unwrap()]).output().unwrap();
    let said = String::from_utf8_lossy(&changed.stdout);
    assert_eq!(changed.status.code(), Some(1), "{said}");
    for line in [
        "Breaking (2):",
        "  alpha2.6-i2v_i2v: duration: maximum narrowed from 15 to 10",
        "  alphax-style-repaint-v1_style_repaint: model removed",
        "Compatible (1):",
        "  Task: extra: field added",
        "2 breaking, 1 compatible.",
    ] {
        assert!(said.lines().any(|l| l == line), "no `{line}` in:\n{said}");
    }
    let nowhere = mediagate(&["schemas", "diff", dir.path().to_str().unwrap(), &demo.base]).output().unwrap();
    let stderr = String::from_utf8_lossy(&nowhere.stderr);
    assert!(
        !nowhere.status.success() && stderr.contains("holds neither openapi.json nor published.lock.json"),
        "{stderr}"
    );
}
