//! The admin API as `/openapi.json` publishes it: every documented operation under `/admin/v1` is called on
//! the demo with the admin token and a body its request schema accepts, and answers a status the document
//! lists with a body its response schema accepts; every admin route mounted is documented.

#![allow(clippy::unwrap_used)]

mod common;

use common::{ADMIN_TOKEN, Demo, Reply, endpoint_of, free_port, path_segment};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Every route mounted under `/admin/v1` by gateway/edges/http/admin.rs, admin_webhooks.rs and admin_audit.rs.
const MOUNTED: [(&str, &str); 24] = [
    ("get", "/admin/v1/accounts"),
    ("post", "/admin/v1/accounts"),
    ("get", "/admin/v1/accounts/{account}"),
    ("post", "/admin/v1/accounts/{account}/top-up"),
    ("post", "/admin/v1/accounts/{account}/plan"),
    ("post", "/admin/v1/accounts/{account}/weight"),
    ("post", "/admin/v1/accounts/{account}/free-trial"),
    ("get", "/admin/v1/accounts/{account}/keys"),
    ("post", "/admin/v1/accounts/{account}/keys"),
    ("post", "/admin/v1/accounts/{account}/keys/{prefix}/revoke"),
    ("post", "/admin/v1/accounts/{account}/keys/revoke-all"),
    ("get", "/admin/v1/usage"),
    ("get", "/admin/v1/tasks/{task_id}"),
    ("get", "/admin/v1/models"),
    ("post", "/admin/v1/models/{model}/{switch}"),
    ("get", "/admin/v1/ledger/verify"),
    ("post", "/admin/v1/accounts/{account}/webhook-secret"),
    ("post", "/admin/v1/accounts/{account}/webhook-endpoint"),
    ("get", "/admin/v1/webhooks/deliveries"),
    ("post", "/admin/v1/webhooks/deliveries/{id}/replay"),
    ("get", "/admin/v1/operators"),
    ("post", "/admin/v1/operators"),
    ("post", "/admin/v1/operators/{name}/revoke"),
    ("get", "/admin/v1/audit"),
];

/// A new operator's name, never used before (names are never reused).
fn new_operator_name() -> String {
    format!("probe-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

/// The account the calls are about.
const PROBE: &str = "openapi probe";
const T2V: &str = "alpha2.6-t2v_t2v";

/// What the calls need to exist first: a funded account with a key and a webhook endpoint, a task of it
/// that ended (so it has a usage line and a delivery), and a model to switch.
struct Fixture {
    task_id: String,
    delivery_id: String,
    model: String,
    endpoint: String,
}

fn admin(demo: &Demo, method: &str, path: &str, body: Option<&Value>) -> Reply {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    demo.request(method, path, body, &[("Authorization", auth.as_str())])
}

fn account_path(rest: &str) -> String {
    format!("/admin/v1/accounts/{}{rest}", path_segment(PROBE))
}

/// A key of the probe account, issued now: the plain key.
fn issue_key(demo: &Demo) -> String {
    let issued = admin(demo, "POST", &account_path("/keys"), None);
    assert_eq!(issued.status, 201, "{}", issued.json);
    issued.json["key"].as_str().unwrap().to_string()
}

fn fixture(demo: &Demo) -> Fixture {
    let created = admin(demo, "POST", "/admin/v1/accounts", Some(&json!({"name": PROBE})));
    assert_eq!(created.status, 201, "{}", created.json);
    let topped = admin(demo, "POST", &account_path("/top-up"), Some(&json!({"amount": 1_000_000_000_000i64})));
    assert_eq!(topped.status, 200, "{}", topped.json);
    let key = issue_key(demo);
    // Nothing listens there: the delivery fails and stays pending, which is all a replay needs.
    let endpoint = format!("http://{}/hooks", free_port());
    let set = admin(demo, "POST", &account_path("/webhook-endpoint"), Some(&json!({"url": endpoint})));
    assert_eq!(set.status, 200, "{}", set.json);
    let body = json!({"model": T2V, "prompt": "fox", "duration": 5, "size": "1280*720"});
    let accepted = demo.post_as(&key, &endpoint_of(demo, T2V), &body);
    let task_id = accepted.json["task_id"].as_str().unwrap_or_else(|| panic!("{}", accepted.json)).to_string();
    let ended = demo.wait_terminal_as(&key, &task_id, Duration::from_secs(60));
    assert_eq!(ended["status"], "success", "{ended}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let delivery_id = loop {
        let listed = admin(demo, "GET", &format!("/admin/v1/webhooks/deliveries?task_id={task_id}"), None);
        if let Some(id) = listed.json["deliveries"][0]["id"].as_str() {
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "no delivery of {task_id}: {}", listed.json);
        std::thread::sleep(Duration::from_millis(50));
    };
    let models = admin(demo, "GET", "/admin/v1/models", None);
    let model = models.json["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).find(|id| *id != T2V);
    Fixture { task_id, delivery_id, model: model.unwrap().to_string(), endpoint }
}

/// The errors of `instance` against `schema`, whose `$ref`s point into the document's `components`.
fn violations(doc: &Value, schema: &Value, instance: &Value) -> Vec<String> {
    let root = json!({"$schema": doc["jsonSchemaDialect"], "allOf": [schema], "components": doc["components"]});
    let validator = jsonschema::validator_for(&root).unwrap_or_else(|e| panic!("schema {schema}: {e}"));
    validator.iter_errors(instance).map(|e| format!("{e} (at `{}`)", e.instance_path())).collect()
}

/// One call of an operation: the path with its parameters filled in and its query, and the body.
struct Call {
    path: String,
    body: Option<Value>,
}

/// The calls of the operation `method path`: one, or one per value of a path or query parameter with an
/// enum (a model switched off then on, the usage log in each format). Issues the key a revocation takes.
fn calls(demo: &Demo, fixture: &Fixture, method: &str, path: &str, operation: &Value) -> Vec<Call> {
    let body = match (method, path) {
        ("post", "/admin/v1/accounts") => Some(json!({"name": format!("{PROBE} 2")})),
        ("post", "/admin/v1/accounts/{account}/top-up") => Some(json!({"amount": 2_000_000, "note": "openapi"})),
        ("post", "/admin/v1/accounts/{account}/free-trial") => Some(json!({"amount": 500_000})),
        ("post", "/admin/v1/accounts/{account}/plan") => Some(json!({"name": "pro", "allowance": 3_000_000})),
        ("post", "/admin/v1/accounts/{account}/weight") => Some(json!({"weight": 2})),
        ("post", "/admin/v1/accounts/{account}/webhook-endpoint") => Some(json!({"url": fixture.endpoint})),
        ("post", "/admin/v1/operators") => Some(json!({"name": new_operator_name()})),
        _ => None,
    };
    let prefix = || issue_key(demo).chars().take(mediagate::domain::tasks::KEY_PREFIX_CHARS).collect::<String>();
    if path.ends_with("/revoke-all") {
        issue_key(demo);
    }
    let parameters: Vec<&Value> = operation["parameters"].as_array().map(|p| p.iter().collect()).unwrap_or_default();
    let mut filled = vec![(path.to_string(), Vec::<String>::new())];
    for parameter in parameters {
        let name = parameter["name"].as_str().unwrap();
        let values: Vec<String> = match (parameter["in"].as_str().unwrap(), name) {
            (_, _) if parameter["schema"]["enum"].is_array() => {
                parameter["schema"]["enum"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect()
            }
            ("path", "account") | ("query", "account") => vec![PROBE.into()],
            ("path", "prefix") => vec![prefix()],
            ("path", "task_id") => vec![fixture.task_id.clone()],
            ("path", "model") => vec![fixture.model.clone()],
            ("path", "id") => vec![fixture.delivery_id.clone()],
            ("path", "name") => {
                let made = admin(demo, "POST", "/admin/v1/operators", Some(&json!({"name": new_operator_name()})));
                vec![made.json["operator"]["name"].as_str().unwrap().to_string()]
            }
            ("path", other) => panic!("{method} {path}: no value for the path parameter `{other}`"),
            _ => continue,
        };
        let mut next = Vec::new();
        for (path, query) in &filled {
            for value in &values {
                match parameter["in"].as_str().unwrap() {
                    "path" => next.push((path.replace(&format!("{{{name}}}"), &path_segment(value)), query.clone())),
                    _ => next.push((
                        path.clone(),
                        [query.clone(), vec![format!("{name}={}", path_segment(value))]].concat(),
                    )),
                }
            }
        }
        filled = next;
    }
    filled
        .into_iter()
        .map(|(path, query)| Call {
            path: if query.is_empty() { path } else { format!("{path}?{}", query.join("&")) },
            body: body.clone(),
        })
        .collect()
}

/// Makes `call` of the operation and checks the answer against the document.
fn check(demo: &Demo, doc: &Value, method: &str, operation: &Value, call: &Call) {
    let at = format!("{} {}", method.to_uppercase(), call.path);
    match (&operation["requestBody"]["content"]["application/json"]["schema"], &call.body) {
        (Value::Null, None) => {}
        (Value::Null, Some(_)) => panic!("{at}: a body for an operation that documents none"),
        (_, None) => panic!("{at}: the operation documents a body, the test sends none"),
        (schema, Some(body)) => {
            let wrong = violations(doc, schema, body);
            assert!(wrong.is_empty(), "{at}: the test's body {body} is not what the document asks: {wrong:?}");
        }
    }
    let reply = admin(demo, &method.to_uppercase(), &call.path, call.body.as_ref());
    let status = reply.status.to_string();
    assert!(reply.status != 405, "{at}: 405, the route is not mounted for this method: {}", reply.json);
    let routed = !reply.json["error"]["message"].as_str().unwrap_or_default().starts_with("No route for");
    assert!(routed, "{at}: no route: {}", reply.json);
    let responses = &operation["responses"];
    let documented = if responses[&status].is_object() { &responses[&status] } else { &responses["default"] };
    assert!(
        responses[&status].is_object() || (reply.status >= 400 && documented.is_object()),
        "{at}: answered {status}, which the document does not list: {}",
        reply.json
    );
    // Every call here is meant to succeed; a documented error would be a broken fixture.
    assert!((200..300).contains(&reply.status), "{at}: answered {status}: {}", reply.json);
    let Some(content) = documented["content"].as_object() else {
        assert!(reply.bytes.is_empty(), "{at}: a body the document does not describe");
        return;
    };
    let content_type = reply.header("content-type").unwrap_or_default();
    let media = content_type.split(';').next().unwrap().trim();
    let Some(described) = content.get(media) else {
        panic!("{at}: answered {media}, the document lists {:?}", content.keys().collect::<Vec<_>>());
    };
    let schema = &described["schema"];
    match media {
        "application/json" => {
            let wrong = violations(doc, schema, &reply.json);
            assert!(wrong.is_empty(), "{at}: the answer {} is not what the document says: {wrong:?}", reply.json);
        }
        "application/x-ndjson" => {
            let text = std::str::from_utf8(&reply.bytes).unwrap();
            assert!(text.lines().count() > 0, "{at}: no line to check");
            for line in text.lines() {
                let wrong = violations(doc, schema, &serde_json::from_str(line).unwrap());
                assert!(wrong.is_empty(), "{at}: the line {line} is not what the document says: {wrong:?}");
            }
        }
        "text/csv" => {
            let text = std::str::from_utf8(&reply.bytes).unwrap();
            assert!(text.starts_with("at,account,") && text.lines().count() > 1, "{at}: {text}");
        }
        other => panic!("{at}: no check for {other}"),
    }
}

#[test]
fn every_admin_operation_is_documented_and_answers_as_documented() {
    let demo = Demo::start();
    let doc = demo.request("GET", "/openapi.json", None, &[]).json;
    assert_eq!(doc["openapi"], "3.1.0");

    // The hard-coded list is every route the two modules mount.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway/edges/http");
    let sources: String = ["admin.rs", "admin_webhooks.rs", "admin_audit.rs"]
        .iter()
        .map(|file| std::fs::read_to_string(root.join(file)).unwrap())
        .collect();
    let mounted_paths: BTreeSet<&str> = MOUNTED.iter().map(|(_, path)| *path).collect();
    assert_eq!(sources.matches("mount(cfg, \"").count(), mounted_paths.len(), "a route was mounted or dropped");
    for path in &mounted_paths {
        let relative = path.strip_prefix("/admin/v1").unwrap();
        assert!(sources.contains(&format!("mount(cfg, \"{relative}\"")), "{path} is not mounted");
    }

    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.starts_with("/admin/v1"))
        .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |method| (method.clone(), path.clone())))
        .collect();
    let mounted: BTreeSet<(String, String)> = MOUNTED.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, mounted, "the document's admin operations are not the mounted routes");

    // The bounds the document states are the handlers'.
    let max_micros = mediagate::domain::billing::MAX_MICROS;
    let body = |path: &str| &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(body("/admin/v1/accounts/{account}/top-up")["properties"]["amount"]["maximum"], max_micros);
    assert_eq!(body("/admin/v1/accounts/{account}/free-trial")["properties"]["amount"]["maximum"], max_micros);
    assert_eq!(body("/admin/v1/accounts/{account}/plan")["properties"]["allowance"]["maximum"], max_micros);
    let weight = &body("/admin/v1/accounts/{account}/weight")["properties"]["weight"]["maximum"];
    assert_eq!(*weight, mediagate::services::accounts::MAX_QUEUE_WEIGHT);
    let list = doc["paths"]["/admin/v1/accounts"]["get"]["parameters"].as_array().unwrap();
    let limit = list.iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!(limit["schema"]["maximum"], mediagate::services::accounts::ACCOUNTS_PAGE);
    let revoke = doc["paths"]["/admin/v1/accounts/{account}/keys/{prefix}/revoke"]["post"]["parameters"].as_array();
    let prefix = revoke.unwrap().iter().find(|p| p["name"] == "prefix").unwrap();
    assert_eq!(prefix["schema"]["minLength"], mediagate::domain::tasks::KEY_PREFIX_CHARS);

    let fixture = fixture(&demo);
    let mut made = 0;
    for (path, item) in doc["paths"].as_object().unwrap().iter().filter(|(path, _)| path.starts_with("/admin/v1")) {
        for (method, operation) in item.as_object().unwrap() {
            let at = format!("{} {path}", method.to_uppercase());
            assert_eq!(operation["security"], json!([{"adminToken": []}]), "{at}");
            assert!(operation["tags"].as_array().unwrap().contains(&json!("admin")), "{at}");
            assert_eq!(
                operation["responses"]["default"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/Error",
                "{at}"
            );
            for call in calls(&demo, &fixture, method, path, operation) {
                check(&demo, &doc, method, operation, &call);
                made += 1;
            }
        }
    }
    // A model switched both ways, and the usage log and the audit trail in both formats.
    assert_eq!(made, MOUNTED.len() + 3);

    // An error answers the envelope `default` describes.
    let missing = admin(&demo, "GET", "/admin/v1/tasks/no-such-task", None);
    assert_eq!((missing.status, missing.code()), (404, "task_not_found"), "{}", missing.json);
    let error = &doc["paths"]["/admin/v1/tasks/{task_id}"]["get"]["responses"]["default"];
    let wrong = violations(&doc, &error["content"]["application/json"]["schema"], &missing.json);
    assert!(wrong.is_empty(), "{wrong:?}");

    // A member the document does not list is refused by name, not dropped: a misspelt `note` is not lost.
    let before = admin(&demo, "GET", &account_path(""), None).json["funds"].clone();
    let misspelt = admin(&demo, "POST", &account_path("/top-up"), Some(&json!({"amount": 5, "notes": "refund"})));
    assert_eq!(misspelt.status, 400, "{}", misspelt.json);
    assert!(misspelt.json["error"]["message"].as_str().unwrap().contains("notes"), "{}", misspelt.json);
    assert_eq!(admin(&demo, "GET", &account_path(""), None).json["funds"], before);
    let query = admin(&demo, "GET", "/admin/v1/usage?acount=x", None);
    assert_eq!(query.status, 400, "{}", query.json);
}
