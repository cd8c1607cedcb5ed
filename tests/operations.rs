//! Operability and back office through the real binary: limits, key revocation, model switches, the
//! admin CLI, metrics, data-inspection pass-through, start-up refusal of a cross-region config.
#![allow(clippy::unwrap_used)]

mod common;

use common::{ADMIN_TOKEN, Demo};
use serde_json::json;
use std::time::Duration;

#[test]
fn in_flight_and_request_rate_limits_answer_429_with_retry_after() {
    let tmp = tempfile::tempdir().unwrap();
    let config = "limits: {max_in_flight_per_account: 2, requests_per_second_per_key: 1000}\n";
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, config, &[]);
    let slow = json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox sim:slow"});
    assert_eq!(demo.post("/v1/videos/generations", &slow).status, 200);
    assert_eq!(demo.post("/v1/videos/generations", &slow).status, 200);
    let third = demo.post("/v1/videos/generations", &slow);
    assert_eq!((third.status, third.code()), (429, "too_many_tasks"));
    assert!(third.header("retry-after").is_some());

    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, "limits: {requests_per_second_per_key: 3}\n", &[]);
    let statuses: Vec<u16> = (0..10).map(|_| demo.get("/v1/models").status).collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    let limited = (0..10).map(|_| demo.get("/v1/models")).find(|r| r.status == 429).unwrap();
    assert_eq!(limited.code(), "rate_limited");
    assert!(limited.header("retry-after").is_some());
}

#[test]
fn a_revoked_key_stops_at_once_and_keys_list_by_prefix() {
    let demo = Demo::start();
    let key = demo.account("revoke-me", 1_000_000, 0, 0);
    assert_eq!(demo.get_as(&key, "/v1/models").status, 200);
    let listed = demo.admin("/accounts/revoke-me/keys", None);
    let prefix = listed.json["keys"][0]["prefix"].as_str().unwrap().to_string();
    assert!(key.starts_with(&prefix) && prefix.len() < key.len());
    assert!(!listed.json.to_string().contains(&key), "a listing never shows the whole key");
    // A prefix shorter than the listed one could take every key: it is refused, and nothing is revoked.
    let short = demo.admin("/accounts/revoke-me/keys/mg-/revoke", Some(&json!({})));
    assert_eq!(
        (short.status, short.code(), short.json["error"]["param"].as_str()),
        (400, "invalid_parameter", Some("prefix"))
    );
    assert_eq!(demo.get_as(&key, "/v1/models").status, 200);
    let revoked = demo.admin(&format!("/accounts/revoke-me/keys/{prefix}/revoke"), Some(&json!({})));
    assert_eq!(revoked.json["revoked"], 1);
    let after = demo.get_as(&key, "/v1/models");
    assert_eq!((after.status, after.code()), (401, "invalid_api_key"));
}

/// Operators find accounts by a part of their name, a page at a time, each with its pots and its last task.
#[test]
fn accounts_are_listed_by_name_with_their_funds_and_last_task() {
    let demo = Demo::start();
    let key = demo.account("studio-north", 2_500_000, 0, 0);
    demo.account("studio-south", 0, 1_000_000, 0);
    demo.account("other", 0, 0, 0);
    let accepted = demo.post_as(&key, "/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "a"}));
    assert_eq!(accepted.status, 200, "{:?}", accepted.json);

    let studios = demo.admin("/accounts?search=STUDIO", None).json;
    let names: Vec<&str> = studios["data"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["studio-north", "studio-south"], "{studios}");
    assert!(
        studios["data"][0]["last_task_at"].is_string() && studios["data"][1]["last_task_at"].is_null(),
        "{studios}"
    );
    assert_eq!(studios["data"][1]["funds"]["free_trial"], 1_000_000);

    let first = demo.admin("/accounts?search=studio&limit=1", None).json;
    assert_eq!((first["data"].as_array().unwrap().len(), first["has_more"].as_bool()), (1, Some(true)), "{first}");
    let next = demo.admin("/accounts?search=studio&limit=1&after=studio-north", None).json;
    assert_eq!((next["data"][0]["name"].as_str(), next["has_more"].as_bool()), (Some("studio-south"), Some(false)));

    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .args(["admin", "--url", &demo.base, "account", "list", "--search", "south"])
        .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success() && printed.contains("studio-south") && !printed.contains("studio-north"), "{printed}");
}

#[test]
fn every_key_of_an_account_is_revoked_at_once_only_when_asked_for_all() {
    let demo = Demo::start();
    let first = demo.account("many-keys", 1_000_000, 0, 0);
    let second = demo.admin("/accounts/many-keys/keys", Some(&json!({}))).json["key"].as_str().unwrap().to_string();
    let revoked = demo.admin("/accounts/many-keys/keys/revoke-all", Some(&json!({})));
    assert_eq!((revoked.status, revoked.json["revoked"].as_u64()), (200, Some(2)), "{:?}", revoked.json);
    for key in [&first, &second] {
        assert_eq!(demo.get_as(key, "/v1/models").status, 401);
    }
    let again = demo.admin("/accounts/many-keys/keys/revoke-all", Some(&json!({})));
    assert_eq!((again.status, again.code()), (404, "not_found"));
}

#[test]
fn models_switch_off_and_on_without_a_restart_and_image_routes_503_without_image_models() {
    let demo = Demo::start();
    let off = demo.admin("/models/alpha2.6-t2v_t2v/disable", Some(&json!({})));
    assert_eq!(off.json["enabled"], false);
    let listed = demo.get("/v1/models");
    assert!(!listed.json["data"].as_array().unwrap().iter().any(|m| m["id"] == "alpha2.6-t2v_t2v"));
    let refused = demo.post("/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox"}));
    assert_eq!((refused.status, refused.code()), (403, "model_disabled"));
    demo.admin("/models/alpha2.6-t2v_t2v/enable", Some(&json!({})));
    assert_eq!(demo.post("/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox"})).status, 200);

    let all = demo.admin("/models", None);
    for model in all.json["data"].as_array().unwrap().iter().filter(|m| m["type"] == "image") {
        demo.admin(&format!("/models/{}/disable", model["id"].as_str().unwrap()), Some(&json!({})));
    }
    let body = json!({"model": "beta-image-plus", "prompt": "a cat"});
    let reply = demo.post("/v1/images/generations", &body);
    assert_eq!((reply.status, reply.code()), (503, "image_models_unavailable"));
    assert_eq!(demo.post("/v1/images/edits", &body).code(), "image_models_unavailable");
}

#[test]
fn the_admin_cli_drives_the_admin_api() {
    let demo = Demo::start();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
            .arg("admin")
            .args(["--url", &demo.base])
            .args(args)
            .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    assert!(cli(&["account", "create", "cli-co"]).0);
    // Money is typed in units; micro-units only under --micros.
    assert!(cli(&["account", "top-up", "cli-co", "4.5"]).0);
    assert!(cli(&["account", "top-up", "cli-co", "--micros", "500000"]).0);
    let (ok, shown) = cli(&["account", "show", "cli-co"]);
    assert!(ok && shown.contains("\"balance\": 5000000"), "{shown}");
    for (args, says) in [
        (&["account", "top-up", "cli-co", "1,5"][..], "`AMOUNT` is an amount in units, written like 50 or 1.5"),
        (&["account", "top-up", "cli-co", "0.0000001"][..], "more than 6 decimals"),
        (&["account", "top-up", "cli-co", "--micros", "1.5"][..], "whole number of micro-units"),
        (&["account", "plan", "cli-co", "pro", "20000000000"][..], "`ALLOWANCE` is more than 10000000000 units"),
    ] {
        let refused = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
            .args(["admin", "--url", &demo.base])
            .args(args)
            .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && stderr.contains(says), "{args:?}: {stderr}");
    }
    let (_, shown) = cli(&["account", "show", "cli-co"]);
    assert!(shown.contains("\"balance\": 5000000"), "a refused amount moved money: {shown}");
    let (ok, key) = cli(&["key", "create", "cli-co"]);
    assert!(ok && key.contains("\"key\""), "{key}");
    let (ok, csv) = cli(&["usage", "--format", "csv"]);
    assert!(ok && csv.starts_with("at,account"), "{csv}");
    let (ok, report) = cli(&["verify-ledger"]);
    assert!(ok && report.contains("\"problems\": []"), "{report}");
    let (ok, revoked) = cli(&["key", "revoke", "cli-co", "--all"]);
    assert!(ok && revoked.contains("\"revoked\": 1"), "{revoked}");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .args(["admin", "--url", &demo.base, "--token", "wrong", "account", "show", "cli-co"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[test]
fn metrics_health_and_readiness_answer() {
    let demo = Demo::start();
    for _ in 0..2 {
        demo.post("/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "fox"}));
    }
    demo.post("/v1/videos/generations", &json!({"model": "no-such-model"}));
    assert_eq!(demo.request("GET", "/healthz", None, &[]).status, 200);
    assert_eq!(demo.request("GET", "/readyz", None, &[]).status, 200);
    let metrics = demo.request("GET", "/metrics", None, &[]);
    let text = String::from_utf8(metrics.bytes).unwrap();
    for name in [
        "mediagate_http_requests_total",
        "mediagate_http_request_duration_seconds",
        "mediagate_upstream_calls_total",
        "mediagate_tasks_in_flight",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    // Counted by route pattern and status, each request once.
    for line in [
        r#"mediagate_http_requests_total{route="/v1/videos/generations",status="200"} 2"#,
        r#"mediagate_http_requests_total{route="/v1/videos/generations",status="404"} 1"#,
        r#"mediagate_upstream_calls_total{kind="create"} 2"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
}

#[test]
fn erase_asks_the_upstream_for_data_inspection() {
    let demo = Demo::start();
    let body = json!({"model": "image-erase-completion_erase", "image_url": "https://m.example/b.png", "mask_url": "https://m.example/m.png"});
    let reply = demo.post("/v1/images/edits", &body);
    assert_eq!(reply.status, 202, "{}", reply.json);
    let seen = demo.request("GET", "/upstream/_sim/data-inspection", None, &[]);
    assert_eq!(seen.json["values"], json!(["enable"]), "{}", seen.json);
    demo.wait_terminal(reply.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
}

#[test]
fn a_config_pairing_a_model_with_another_region_is_refused_at_start_up() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.yaml");
    std::fs::write(
        &config,
        "upstreams:\n  cn-beijing: {base_url: 'http://127.0.0.1:9', api_key_env: MG_TEST_KEY}\nmodel_regions:\n  alpha2.6-t2v-us_t2v: cn-beijing\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(tmp.path())
        .env("MG_TEST_KEY", "k")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    for needle in ["alpha2.6-t2v-us_t2v", "us-east-1", "cn-beijing"] {
        assert!(message.contains(needle), "{needle} not in: {message}");
    }
}

#[test]
fn the_usage_csv_keeps_every_field_whole_whatever_it_holds() {
    let demo = Demo::start();
    let refused = demo.admin("/accounts", Some(&json!({"name": "two\r\nlines"})));
    assert_eq!((refused.status, refused.param()), (400, "name"));
    let name = "acme, \"the\" one";
    let key = demo.account(name, 100_000_000, 0, 0);
    let body = serde_json::json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a cat"});
    assert_eq!(demo.post_as(&key, "/v1/images/generations", &body).status, 200);
    let csv_text = demo.admin("/usage?format=csv", None).bytes;
    let mut reader = csv::Reader::from_reader(csv_text.as_slice());
    let column = reader.headers().unwrap().iter().position(|h| h == "account").unwrap();
    let accounts: Vec<String> = reader.records().map(|r| r.unwrap()[column].to_string()).collect();
    assert!(accounts.iter().any(|a| a == name), "{accounts:?}");
}
