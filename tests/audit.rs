//! The audit trail (README, Operators and the audit trail): every kind of operator change, made through each
//! edge (the admin API, `mediagate admin`, the console) by a named operator, is on the trail under that
//! operator and edge with its values before and after; root alone manages operators; a revoked operator's
//! token stops at once; the trail is exported as JSON lines and outlives retention and a restart.
#![allow(clippy::unwrap_used)]

mod common;

use common::{ADMIN_TOKEN, Demo, path_segment};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

const IMAGE: &str = "/v1/images/generations";
const MODEL: &str = "beta-image-2.0-pro_t2i";

/// Every kind of change an operator makes to an account.
const ACCOUNT_ACTIONS: [&str; 10] = [
    "account.open",
    "balance.top_up",
    "free_trial.grant",
    "plan.set",
    "weight.set",
    "key.issue",
    "key.revoke",
    "webhook.secret_rotate",
    "webhook.endpoint_set",
    "delivery.replay",
];

fn as_operator(demo: &Demo, token: &str, method: &str, path: &str, body: Option<&Value>) -> common::Reply {
    demo.request(method, &format!("/admin/v1{path}"), body, &[("Authorization", &format!("Bearer {token}"))])
}

/// A new operator's token, made by root through the admin API.
fn operator(demo: &Demo, name: &str) -> String {
    let made = demo.admin("/operators", Some(&json!({"name": name})));
    assert_eq!(made.status, 201, "{}", made.json);
    made.json["token"].as_str().unwrap().to_string()
}

/// The trail's entries the query keeps, through the admin API's JSON lines.
fn trail(demo: &Demo, query: &str) -> Vec<Value> {
    let reply = as_operator(demo, ADMIN_TOKEN, "GET", &format!("/audit?format=jsonl&{query}"), None);
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.bytes));
    assert_eq!(reply.header("content-type"), Some("application/x-ndjson"));
    String::from_utf8(reply.bytes).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn cli(demo: &Demo, token: &str, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .args(["admin", "--url", &demo.base, "--token", token])
        .args(args)
        .env_remove("MEDIAGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{args:?}: {printed}{}", String::from_utf8_lossy(&output.stderr));
    printed
}

/// A console session signed in with `token`: its cookie, and its CSRF token (the cookie's fourth field).
fn console(demo: &Demo, token: &str) -> (String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let reply = agent.post(demo.url("/console/sign-in")).send_form([("admin_token", token)]).unwrap();
    assert_eq!(reply.status(), 303);
    let cookie = reply.headers().get("set-cookie").unwrap().to_str().unwrap().split(';').next().unwrap().to_string();
    let csrf = cookie.split('=').nth(1).unwrap().split('.').nth(3).unwrap().to_string();
    (cookie, csrf)
}

fn form(demo: &Demo, session: &(String, String), path: &str, fields: &[(&str, &str)]) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let mut fields = fields.to_vec();
    fields.push(("csrf", &session.1));
    let reply = agent.post(demo.url(path)).header("Cookie", &session.0).send_form(fields).unwrap();
    reply.status().as_u16()
}

fn wait_until<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(found) = found() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A delivery of `account`'s task end to a receiver on loopback, once it is made.
fn delivery(demo: &Demo, key: &str, account: &str, receiver: &str) -> String {
    let body = json!({"model": MODEL, "prompt": "a fox", "callback_url": format!("http://{receiver}/hook")});
    let reply = demo.post_as(key, IMAGE, &body);
    assert!(reply.status < 300, "{}", reply.json);
    wait_until("a delivery", || {
        let listed = demo.admin(&format!("/webhooks/deliveries?account={}", path_segment(account)), None);
        listed.json["deliveries"][0]["id"].as_str().map(str::to_string)
    })
}

#[test]
fn every_kind_of_change_through_each_edge_is_on_the_trail_under_its_operator() {
    let tmp = tempfile::tempdir().unwrap();
    let config = "webhooks: {allow_private_callbacks: true}\nresults: {mirror: false}\n";
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, config, &[]);
    let receiver = common::http_receiver(|_| 200);
    let endpoint = format!("http://{receiver}/default");

    // The admin API, called directly by operator `api-op`.
    let api = operator(&demo, "api-op");
    let call = |method: &str, path: &str, body: Option<Value>| {
        let reply = as_operator(&demo, &api, method, path, body.as_ref());
        assert!(reply.status < 300, "{path}: {}", reply.json);
        reply.json
    };
    call("POST", "/accounts", Some(json!({"name": "by-api"})));
    call("POST", "/accounts/by-api/top-up", Some(json!({"amount": 5_000_000, "note": "invoice 7"})));
    call("POST", "/accounts/by-api/free-trial", Some(json!({"amount": 1_000_000})));
    call("POST", "/accounts/by-api/plan", Some(json!({"name": "pro", "allowance": 2_000_000})));
    call("POST", "/accounts/by-api/weight", Some(json!({"weight": 3})));
    let key = call("POST", "/accounts/by-api/keys", Some(json!({})))["key"].as_str().unwrap().to_string();
    let spare = call("POST", "/accounts/by-api/keys", Some(json!({})))["key"].as_str().unwrap().to_string();
    call("POST", &format!("/accounts/by-api/keys/{}/revoke", &spare[..8]), Some(json!({})));
    call("POST", "/accounts/by-api/webhook-secret", Some(json!({})));
    call("POST", "/accounts/by-api/webhook-endpoint", Some(json!({"url": endpoint})));
    call("POST", &format!("/models/{MODEL}/disable"), Some(json!({})));
    call("POST", &format!("/models/{MODEL}/enable"), Some(json!({})));
    let id = delivery(&demo, &key, "by-api", &receiver);
    call("POST", &format!("/webhooks/deliveries/{id}/replay"), Some(json!({})));

    // `mediagate admin`, run by operator `cli-op`.
    let cli_token = operator(&demo, "cli-op");
    let run = |args: &[&str]| cli(&demo, &cli_token, args);
    run(&["account", "create", "by-cli"]);
    run(&["account", "top-up", "by-cli", "5"]);
    run(&["account", "grant-trial", "by-cli", "1"]);
    run(&["account", "plan", "by-cli", "pro", "2"]);
    run(&["account", "weight", "by-cli", "2"]);
    let printed = run(&["key", "create", "by-cli"]);
    let key = serde_json::from_str::<Value>(&printed).unwrap()["key"].as_str().unwrap().to_string();
    let printed = run(&["key", "create", "by-cli"]);
    let spare = serde_json::from_str::<Value>(&printed).unwrap()["key"].as_str().unwrap().to_string();
    run(&["key", "revoke", "by-cli", &spare[..8]]);
    run(&["webhook", "rotate", "by-cli"]);
    run(&["webhook", "endpoint", "by-cli", &endpoint]);
    run(&["model", "disable", MODEL]);
    run(&["model", "enable", MODEL]);
    let id = delivery(&demo, &key, "by-cli", &receiver);
    run(&["webhook", "replay", &id]);

    // The console, signed in as operator `console-op`.
    let session = console(&demo, &operator(&demo, "console-op"));
    let post = |path: &str, fields: &[(&str, &str)]| {
        let status = form(&demo, &session, path, fields);
        assert!(status == 303 || status == 200, "{path}: {status}");
    };
    post("/console/accounts", &[("name", "by-console")]);
    post("/console/accounts/by-console/top-up", &[("amount", "5")]);
    post("/console/accounts/by-console/free-trial", &[("amount", "1")]);
    post("/console/accounts/by-console/plan", &[("plan", "pro"), ("amount", "2")]);
    post("/console/accounts/by-console/weight", &[("weight", "4")]);
    post("/console/accounts/by-console/keys", &[]);
    post("/console/accounts/by-console/keys", &[]);
    let keys = demo.admin("/accounts/by-console/keys", None).json["keys"].clone();
    let spare = keys[1]["prefix"].as_str().unwrap().to_string();
    post(&format!("/console/accounts/by-console/keys/{spare}/revoke"), &[]);
    post("/console/accounts/by-console/webhook-secret", &[]);
    post("/console/accounts/by-console/webhook-endpoint", &[("url", &endpoint)]);
    post(&format!("/console/models/{MODEL}/disable"), &[]);
    post(&format!("/console/models/{MODEL}/enable"), &[]);
    let key = demo.account("console-client", 10_000_000, 0, 0);
    let replayed = delivery(&demo, &key, "console-client", &receiver);
    post(&format!("/console/webhooks/{replayed}/replay"), &[]);

    for (edge, operator, account) in
        [("api", "api-op", "by-api"), ("cli", "cli-op", "by-cli"), ("console", "console-op", "by-console")]
    {
        let entries = trail(&demo, &format!("operator={operator}"));
        assert!(entries.iter().all(|e| e["via"] == edge), "{edge}: {entries:#?}");
        let mut done: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
        done.dedup();
        for action in ACCOUNT_ACTIONS.iter().chain(&["model.switch"]) {
            assert!(done.contains(action), "{edge}: no {action} in {done:?}");
        }
        let of = |action: &str| entries.iter().find(|e| e["action"] == action).unwrap().clone();
        // The values before and after, where the change has them.
        let top_up = of("balance.top_up");
        assert_eq!(top_up["account"], account);
        assert_eq!(top_up["before"]["available"], 0, "{top_up}");
        assert_eq!(top_up["after"]["available"], 5_000_000, "{top_up}");
        assert_eq!(top_up["after"]["amount"], 5_000_000, "{top_up}");
        let plan = of("plan.set");
        assert_eq!((plan["before"]["plan"].clone(), plan["after"]["plan"].clone()), (Value::Null, json!("pro")));
        assert_eq!(plan["after"]["allowance"], 2_000_000);
        let weight = of("weight.set");
        assert_eq!(weight["before"]["weight"], 1, "{weight}");
        let revoked = of("key.revoke");
        assert_eq!(revoked["after"]["revoked"].as_array().unwrap().len(), 1, "{revoked}");
        let rotated = of("webhook.secret_rotate");
        let (before, after) = (&rotated["before"]["secrets"], &rotated["after"]["secrets"]);
        assert_eq!((before.as_array().unwrap().len(), after.as_array().unwrap().len()), (1, 2), "{rotated}");
        assert!(!rotated.to_string().contains("whsec_"), "a secret is never on the trail: {rotated}");
        let switched: Vec<Value> =
            entries.iter().filter(|e| e["action"] == "model.switch").map(|e| e["after"]["enabled"].clone()).collect();
        assert_eq!(switched, [json!(false), json!(true)]);
        assert_eq!(of("delivery.replay")["after"]["replays"], 1);
    }

    // Operators, made by root through each edge, and revoked.
    let root_entries = |action: &str| trail(&demo, &format!("operator=root&action={action}"));
    cli(&demo, ADMIN_TOKEN, &["operator", "create", "made-by-cli"]);
    cli(&demo, ADMIN_TOKEN, &["operator", "revoke", "made-by-cli"]);
    let root_console = console(&demo, ADMIN_TOKEN);
    assert_eq!(form(&demo, &root_console, "/console/operators", &[("name", "made-in-console")]), 200);
    assert_eq!(form(&demo, &root_console, "/console/operators/made-in-console/revoke", &[]), 200);
    assert_eq!(demo.admin("/operators/api-op/revoke", Some(&json!({}))).status, 200);
    let created: Vec<(Value, Value)> =
        root_entries("operator.create").iter().map(|e| (e["target"].clone(), e["via"].clone())).collect();
    for expected in [("api-op", "api"), ("cli-op", "api"), ("made-by-cli", "cli"), ("made-in-console", "console")] {
        assert!(created.contains(&(json!(expected.0), json!(expected.1))), "{expected:?} in {created:?}");
    }
    let revoked: Vec<Value> = root_entries("operator.revoke").iter().map(|e| e["via"].clone()).collect();
    assert_eq!(revoked, [json!("cli"), json!("console"), json!("api")]);

    // The console's page lists the trail and its export is the API's.
    let page = demo.raw("GET", "/console/audit?operator=cli-op", None, "", &[("Cookie", &root_console.0)]);
    let html = String::from_utf8(page.bytes).unwrap();
    assert!(html.contains("data-audit-action=\"balance.top_up\""), "{html}");
    let export = demo.raw("GET", "/console/audit.jsonl?operator=cli-op", None, "", &[("Cookie", &root_console.0)]);
    let api = as_operator(&demo, ADMIN_TOKEN, "GET", "/audit?format=jsonl&operator=cli-op", None);
    assert_eq!(export.bytes, api.bytes);
    let printed = cli(&demo, ADMIN_TOKEN, &["audit", "--operator", "cli-op", "--action", "balance.top_up"]);
    let lines: Vec<Value> =
        printed.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{printed}");
    assert_eq!(lines[0]["account"], "by-cli");
}

#[test]
fn root_alone_manages_operators_and_a_revoked_token_stops_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, "", &[]);
    let alice = operator(&demo, "alice");
    let session = console(&demo, &alice);

    let refused = as_operator(&demo, &alice, "POST", "/operators", Some(&json!({"name": "mallory"})));
    assert_eq!((refused.status, refused.code()), (403, "admin_forbidden"), "{}", refused.json);
    assert!(refused.json["error"]["message"].as_str().unwrap().contains("Only root"), "{}", refused.json);
    for (name, status, param) in [("root", 400, "name"), ("Bad Name", 400, "name"), ("alice", 409, "name")] {
        let reply = demo.admin("/operators", Some(&json!({"name": name})));
        assert_eq!((reply.status, reply.param()), (status, param), "{name}: {}", reply.json);
    }
    let listed = as_operator(&demo, &alice, "GET", "/operators", None);
    assert_eq!(listed.json["data"][0]["name"], "alice");
    assert!(!listed.json.to_string().contains(&alice), "a token is never listed");

    assert_eq!(demo.admin("/operators/alice/revoke", Some(&json!({}))).status, 200);
    let after = as_operator(&demo, &alice, "GET", "/accounts", None);
    assert_eq!(after.status, 403);
    assert!(after.json["error"]["message"].as_str().unwrap().contains("revoked"), "{}", after.json);
    let page = demo.raw("GET", "/console/accounts", None, "", &[("Cookie", &session.0)]);
    let page = String::from_utf8(page.bytes).unwrap();
    assert!(page.contains("name=\"admin_token\""), "a revoked operator's console session is signed out: {page}");
    assert_eq!(demo.admin("/operators/alice/revoke", Some(&json!({}))).status, 404);
    // Its name is never given to another: the trail's lines keep meaning one operator.
    assert_eq!(demo.admin("/operators", Some(&json!({"name": "alice"}))).status, 409);
}

#[test]
fn the_trail_outlives_retention_and_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    // Without copies of results: a task whose copy is still served is kept.
    let short = "retention: {tasks: 1s, deliveries: 1s, idempotency: 1s}\nresults: {mirror: false}\n";
    let mut demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, short, &[]);
    let key = demo.account("acme", 10_000_000, 0, 0);
    let task = demo.post_as(&key, IMAGE, &json!({"model": MODEL, "prompt": "a fox"}));
    let task_id = task.json["task_id"].as_str().unwrap().to_string();
    demo.wait_terminal_as(&key, &task_id, Duration::from_secs(60));
    let before = trail(&demo, "account=acme");
    assert_eq!(before.len(), 3, "open, top-up, key: {before:#?}");
    wait_until("the task purged", || (demo.admin(&format!("/tasks/{task_id}"), None).status == 404).then_some(()));
    assert_eq!(trail(&demo, "account=acme"), before);

    demo.kill();
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, short, &[]);
    assert_eq!(trail(&demo, "account=acme"), before, "durable before its answer");
    let page = as_operator(&demo, ADMIN_TOKEN, "GET", "/audit?account=acme&limit=2", None);
    assert_eq!(page.json["data"].as_array().unwrap().len(), 2);
    assert_eq!(page.json["has_more"], true);
    let after = page.json["last_seq"].as_u64().unwrap();
    let next = as_operator(&demo, ADMIN_TOKEN, "GET", &format!("/audit?account=acme&after={after}"), None);
    assert_eq!(next.json["data"][0], before[2]);
    assert_eq!(next.json["has_more"], false);
    let unknown = as_operator(&demo, ADMIN_TOKEN, "GET", "/audit?action=money.print", None);
    assert_eq!((unknown.status, unknown.param()), (400, "action"), "{}", unknown.json);
}
