//! The console end to end in a real Chromium, driven by Playwright (`tests/console/e2e.py`) against the
//! real binary: an operator opens an account, tops it up and makes a key; the client signs in with it,
//! submits from the playground, sees the task finish, its page and the usage chart change, and exports its
//! usage; the operator reads the usage, switches a model off and on, sends the task's webhook delivery
//! again and verifies the ledger, then revokes
//! the key, and the client's next request is refused. Screenshots of each page land in
//! `target/console-screenshots`. `tests/all.sh` installs Chromium (Debian's) and Playwright (a venv under
//! `target/tools`).
#![allow(clippy::unwrap_used)]

mod common;

use common::Demo;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn an_operator_and_a_client_run_the_gateway_from_the_browser() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/tools/venv/bin/python");
    assert!(python.exists(), "Playwright is missing: tests/all.sh makes a venv with it under target/tools");
    let tmp = tempfile::tempdir().unwrap();
    // The playground's task is delivered to a loopback endpoint, which a gateway refuses unless told.
    let config = "webhooks: {allow_private_callbacks: true}";
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, config, &[]);
    let screenshots = root.join("target/console-screenshots");
    let _ = std::fs::remove_dir_all(&screenshots);
    let run = Command::new(&python)
        .arg(root.join("tests/console/e2e.py"))
        .args([demo.url(""), common::ADMIN_TOKEN.to_string()])
        .arg(&screenshots)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stdout}\n{stderr}\ngateway: {}", demo.process.stderr());
    assert!(stdout.contains("console end to end: ok"), "{stdout}");
    println!("{stdout}");
    for page in [
        "01-sign-in",
        "04-client-home",
        "05-playground-finished",
        "09-operator-usage",
        "11-webhooks",
        "14-client-refused",
    ] {
        assert!(screenshots.join(format!("{page}.png")).exists(), "no screenshot of {page}");
    }
}

/// A client's session sees its own account only, and reaches no operator page; a state change without the
/// session's CSRF token, or sent from another site, is refused; an altered cookie is no session.
#[test]
fn a_console_session_reaches_only_what_its_key_or_token_may() {
    let demo = Demo::start();
    let (mine, theirs) = (demo.account("mine", 1_000_000, 0, 0), demo.account("theirs", 1_000_000, 0, 0));
    let video = serde_json::json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 2});
    let their_task =
        demo.post_as(&theirs, "/v1/videos/generations", &video).json["task_id"].as_str().unwrap().to_string();
    demo.wait_terminal_as(&theirs, &their_task, std::time::Duration::from_secs(30));
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let sign_in = |field: &str, secret: &str| {
        let reply = agent.post(demo.url("/console/sign-in")).send_form([(field, secret)]).unwrap();
        assert_eq!(reply.status(), 303);
        let cookie = reply.headers().get("set-cookie").unwrap().to_str().unwrap().to_string();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Max-Age"),
            "{cookie}"
        );
        cookie.split(';').next().unwrap().to_string()
    };
    let get = |cookie: &str, path: &str| {
        let mut reply = agent.get(demo.url(path)).header("Cookie", cookie).call().unwrap();
        (reply.status().as_u16(), reply.body_mut().read_to_string().unwrap_or_default())
    };

    // The gateway's address in a browser leads to the console: its sign-in page, for no session.
    let root = agent.get(demo.url("/")).call().unwrap();
    assert_eq!(
        (root.status().as_u16(), root.headers().get("location").unwrap().to_str().unwrap()),
        (303, "/console/sign-in")
    );

    let client = sign_in("api_key", &mine);
    // An account with no task yet: its home says where to start.
    let (_, home) = get(&client, "/console/home");
    assert!(home.contains("No tasks yet. Try a job in <a href=\"/console/playground\">"), "{home}");
    assert_eq!(get(&client, &format!("/console/tasks/{their_task}")).0, 404, "another account's task");
    let (status, usage) = get(&client, "/console/usage?account=theirs");
    assert_eq!(status, 200);
    assert!(!usage.contains(&their_task), "another account's usage");
    let (_, theirs_seen_by_operator) =
        get(&sign_in("admin_token", common::ADMIN_TOKEN), "/console/usage?account=theirs");
    assert!(theirs_seen_by_operator.contains(&their_task), "the usage line exists");
    // A client on an operator page is told why it may not see it.
    for operator_page in ["/console/overview", "/console/models", "/console/webhooks", "/console/accounts/theirs"] {
        let (status, page) = get(&client, operator_page);
        assert_eq!(status, 403, "{operator_page}");
        assert!(page.contains("This page is for operators"), "{operator_page}: {page}");
    }
    let altered = client.replacen("client", "operator", 1);
    assert_eq!(get(&altered, "/console/home").0, 303, "an altered cookie is no session");
    assert_eq!(sign_in_refused(&agent, &demo, "api_key", "mg-not-a-key"), 401);
    assert_eq!(sign_in_refused(&agent, &demo, "admin_token", "not-the-token"), 403);

    let operator = sign_in("admin_token", common::ADMIN_TOKEN);
    let (_, account) = get(&operator, "/console/accounts/mine");
    assert!(account.contains("mine has submitted no job yet. Give its owner a key"), "{account}");
    let top_up = |cookie: &str, csrf: &str, site: &str| {
        let reply = agent
            .post(demo.url("/console/accounts/mine/top-up"))
            .header("Cookie", cookie)
            .header("Sec-Fetch-Site", site)
            .send_form([("csrf", csrf), ("amount", "5")])
            .unwrap();
        reply.status().as_u16()
    };
    let (_, overview) = get(&operator, "/console/overview");
    let csrf = overview.split("name=\"csrf-token\" content=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    assert_eq!(top_up(&operator, "wrong", "same-origin"), 403, "no CSRF token");
    assert_eq!(top_up(&operator, &csrf, "cross-site"), 403, "sent from another site");
    assert_eq!(demo.funds("mine").2, 1_000_000, "nothing was credited");
    assert_eq!(top_up(&operator, &csrf, "same-origin"), 303);
    assert_eq!(demo.funds("mine").2, 6_000_000);
}

/// A refused sign-in's status; its reason is shown on the sign-in page itself.
fn sign_in_refused(agent: &ureq::Agent, demo: &Demo, field: &str, secret: &str) -> u16 {
    let mut reply = agent.post(demo.url("/console/sign-in")).send_form([(field, secret)]).unwrap();
    let page = reply.body_mut().read_to_string().unwrap();
    assert!(page.contains("role=\"alert\"") && page.contains("Sign in with the key"), "{page}");
    reply.status().as_u16()
}
