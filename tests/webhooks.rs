//! Webhooks end to end: deliveries of task ends to a receiver on a loopback port, their signatures checked
//! by the Standard Webhooks project's own Python library (`standardwebhooks`, from PyPI into a venv under
//! target/), retried after failures, kept across a SIGKILL, replayed; endpoints refused where they must be.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, endpoint_of, free_port};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const T2V: &str = "alpha2.6-t2v_t2v";
/// Retries a tenth of a second apart, so a test sees several attempts.
const FAST_RETRIES: &str = "webhooks: {allow_private_callbacks: true, retry_delays_ms: [100, 100, 100]}\n";

/// A request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    headers: HashMap<String, String>,
    body: String,
}

/// An HTTP endpoint on a loopback port that records every request and answers the statuses queued, then
/// 200.
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
    statuses: Arc<Mutex<VecDeque<u16>>>,
}

impl Receiver {
    fn start(statuses: &[u16]) -> Receiver {
        let received = Arc::new(Mutex::new(Vec::new()));
        let statuses = Arc::new(Mutex::new(statuses.iter().copied().collect::<VecDeque<u16>>()));
        let (log, answers) = (received.clone(), statuses.clone());
        let address = common::http_receiver(move |request| {
            let body = String::from_utf8(request.body).unwrap();
            log.lock().unwrap().push(Received { headers: request.headers, body });
            answers.lock().unwrap().pop_front().unwrap_or(200)
        });
        Receiver { url: format!("http://{address}/hooks"), received, statuses }
    }

    /// Waits until `count` requests have come; returns them all.
    fn wait_for(&self, count: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let received = self.received.lock().unwrap().clone();
            if received.len() >= count {
                return received;
            }
            assert!(Instant::now() < deadline, "{} of {count} deliveries came: {received:?}", received.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A Python with the `standardwebhooks` package, in a venv under target/ made on first use.
fn verifier() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/webhooks-venv");
        let python = venv.join("bin/python");
        let ready =
            || Command::new(&python).args(["-c", "import standardwebhooks"]).status().is_ok_and(|s| s.success());
        if !ready() {
            let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().unwrap();
            assert!(made.success(), "python3 -m venv failed");
            let pip = venv.join("bin/pip");
            let installed = Command::new(pip).args(["install", "--quiet", "standardwebhooks==1.*"]).status().unwrap();
            assert!(installed.success(), "pip install standardwebhooks failed");
        }
        assert!(ready(), "standardwebhooks does not import");
        python
    })
}

/// Whether the Standard Webhooks library accepts `received` as signed with `secret`.
fn verifies(secret: &str, received: &Received) -> bool {
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
case = json.load(sys.stdin)
try:
    Webhook(case["secret"]).verify(case["body"], case["headers"])
    print("verified")
except Exception as e:
    print("refused:", e)
"#;
    let case = json!({"secret": secret, "body": received.body, "headers": received.headers});
    let mut child = Command::new(verifier())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(case.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8(output.stdout).unwrap();
    said.trim() == "verified"
}

fn rotate(demo: &Demo, account: &str) -> String {
    let rotated = demo.admin(&format!("/accounts/{account}/webhook-secret"), Some(&json!({})));
    assert_eq!(rotated.status, 200, "{}", rotated.json);
    let secret = rotated.json["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    secret
}

fn submit(demo: &Demo, key: &str, prompt: &str, callback_url: &str) -> String {
    let body = json!({"model": T2V, "prompt": prompt, "duration": 5, "callback_url": callback_url});
    let reply = demo.post_as(key, &endpoint_of(demo, T2V), &body);
    assert_eq!(reply.status, 200, "{}", reply.json);
    reply.json["task_id"].as_str().unwrap().to_string()
}

fn message(received: &Received) -> Value {
    serde_json::from_str(&received.body).unwrap()
}

#[test]
fn task_ends_are_delivered_signed_retried_and_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, FAST_RETRIES, &[]);
    // An account is opened with its first secret, shown in the answer once.
    let opened = demo.admin("/accounts", Some(&json!({"name": "hooked"})));
    let first_secret = opened.json["webhook_secret"].as_str().unwrap().to_string();
    assert!(first_secret.starts_with("whsec_"), "{}", opened.json);
    let again = demo.admin("/accounts", Some(&json!({"name": "hooked"})));
    assert!(again.json.get("webhook_secret").is_none(), "shown twice: {}", again.json);
    let key = demo.account("hooked", 1_000_000_000, 0, 0);
    let receiver = Receiver::start(&[500, 503]);

    let task_id = submit(&demo, &key, "a fox", &receiver.url);
    // Refused twice, then taken: three attempts, one message.
    let received = receiver.wait_for(3, Duration::from_secs(30));
    let ids: Vec<&str> = received.iter().map(|r| r.headers["webhook-id"].as_str()).collect();
    assert!(ids.iter().all(|id| *id == ids[0] && id.starts_with("msg_")), "{ids:?}");
    let delivered = &received[2];
    assert!(verifies(&first_secret, delivered), "the delivery does not verify: {delivered:?}");
    let mut tampered = delivered.clone();
    tampered.body = tampered.body.replace("success", "failed");
    assert!(!verifies(&first_secret, &tampered), "an altered body verified");
    let event = message(delivered);
    assert_eq!(event["type"], "task.success");
    let task = demo.get_as(&key, &format!("/v1/tasks/{task_id}"));
    assert_eq!(event["data"], task.json, "the message carries the task as GET /v1/tasks/{{id}} shows it");

    let listed = demo.admin(&format!("/webhooks/deliveries?task_id={task_id}"), None);
    let delivery = &listed.json["deliveries"][0];
    assert_eq!(delivery["state"], "delivered", "{}", listed.json);
    let statuses: Vec<&Value> = delivery["attempts"].as_array().unwrap().iter().map(|a| &a["status"]).collect();
    assert_eq!(statuses, [&json!(500), &json!(503), &json!(200)]);
    let metrics = demo.get("/metrics");
    let text = String::from_utf8_lossy(&metrics.bytes);
    assert!(text.contains("mediagate_webhook_attempts_total{kind=\"retry\"} 2"), "{text}");
    assert!(text.contains("mediagate_webhook_attempts_total{kind=\"delivered\"} 1"), "{text}");

    // Replayed: the same message again.
    let id = delivery["id"].as_str().unwrap();
    let replayed = demo.admin(&format!("/webhooks/deliveries/{id}/replay"), Some(&json!({})));
    assert_eq!(replayed.status, 200, "{}", replayed.json);
    let again = receiver.wait_for(4, Duration::from_secs(10));
    assert_eq!(again[3].headers["webhook-id"], id);

    // Rotated: until the old secret retires, both sign, and a receiver holding either verifies.
    let second_secret = rotate(&demo, "hooked");
    submit(&demo, &key, "a fox sim:fail", &receiver.url);
    let received = receiver.wait_for(5, Duration::from_secs(30));
    let failed = &received[4];
    assert_eq!(message(failed)["type"], "task.failed");
    assert_eq!(failed.headers["webhook-signature"].split(' ').count(), 2, "{:?}", failed.headers);
    assert!(verifies(&first_secret, failed) && verifies(&second_secret, failed));

    // The account's default endpoint takes the ends of tasks with no callback_url; a 410 disables it.
    let set = demo.admin("/accounts/hooked/webhook-endpoint", Some(&json!({"url": receiver.url})));
    assert_eq!(set.status, 200, "{}", set.json);
    receiver.statuses.lock().unwrap().push_back(410);
    let plain = json!({"model": T2V, "prompt": "a fox", "duration": 5});
    let gone_task = demo.post_as(&key, &endpoint_of(&demo, T2V), &plain).json["task_id"].as_str().unwrap().to_string();
    receiver.wait_for(6, Duration::from_secs(30));
    let state_of = |task: &str| {
        let listed = demo.admin(&format!("/webhooks/deliveries?task_id={task}"), None);
        listed.json["deliveries"][0]["state"].as_str().unwrap_or_default().to_string()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of(&gone_task) != "disabled" {
        assert!(Instant::now() < deadline, "a 410 did not disable the delivery");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after_gone = demo.post_as(&key, &endpoint_of(&demo, T2V), &plain).json["task_id"].as_str().unwrap().to_string();
    demo.wait_terminal_as(&key, &after_gone, Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of(&after_gone) != "disabled" {
        assert!(Instant::now() < deadline, "a gone endpoint was not left alone");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(receiver.received.lock().unwrap().len(), 6, "nothing more is sent to a gone endpoint");
}

#[test]
fn a_delivery_queued_before_a_sigkill_is_sent_after_the_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = free_port();
    let receiver = Receiver::start(&[]);
    let failing = [("MEDIAGATE_FAILPOINT", "before-delivery")];
    let mut demo = Demo::start_with(tmp.path(), &listen, 0.05, FAST_RETRIES, &failing);
    let key = demo.account("hooked", 1_000_000_000, 0, 0);
    let secret = rotate(&demo, "hooked");
    let task_id = submit(&demo, &key, "a fox", &receiver.url);
    // The task ends, its delivery is queued in the same write, and the process dies as it is about to send.
    let deadline = Instant::now() + Duration::from_secs(30);
    let killed = loop {
        if let Some(status) = demo.process.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the failpoint never fired");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed), Some(9), "SIGKILL: {killed:?}");
    assert!(receiver.received.lock().unwrap().is_empty());
    demo.kill();
    let demo = Demo::start_with(tmp.path(), &listen, 0.05, FAST_RETRIES, &[]);
    // On PostgreSQL the killed process held the delivery's lease, which runs out within 20 s.
    let received = receiver.wait_for(1, Duration::from_secs(60));
    assert!(verifies(&secret, &received[0]));
    assert_eq!(message(&received[0])["data"]["task_id"], task_id.as_str());
    assert_eq!(demo.get_as(&key, &format!("/v1/tasks/{task_id}")).json["status"], "success");
}

/// Refused as a gateway is configured by default; the demo, which runs on the operator's own machine, takes
/// a receiver at a loopback address, but still no other scheme.
#[test]
fn callback_urls_at_internal_addresses_or_of_other_schemes_are_refused() {
    let simulator = common::simulator("0.05", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let config = common::serve_config(&simulator.address(), "", "");
    let demo = Demo::serve(tmp.path(), &config, &[common::SIM_KEY]);
    let key = demo.account("hooked", 1_000_000_000, 0, 0);
    for url in [
        "http://127.0.0.1:9/hooks",
        "http://10.0.0.8/hooks",
        "http://[::1]/hooks",
        "http://169.254.169.254/latest",
        "ftp://example.com/hooks",
        "http://localhost:9/hooks",
    ] {
        let body = json!({"model": T2V, "prompt": "a fox", "duration": 5, "callback_url": url});
        let refused = demo.post_as(&key, "/v1/videos/generations", &body);
        assert_eq!((refused.status, refused.param()), (400, "callback_url"), "{url}: {}", refused.json);
    }
    let endpoint = demo.admin("/accounts/hooked/webhook-endpoint", Some(&json!({"url": "http://192.168.0.1/x"})));
    assert_eq!((endpoint.status, endpoint.param()), (400, "url"), "{}", endpoint.json);

    let local = Demo::start();
    let key = local.account("hooked", 1_000_000_000, 0, 0);
    let submit = |url: &str| {
        let body = json!({"model": T2V, "prompt": "a fox", "duration": 5, "callback_url": url});
        local.post_as(&key, &endpoint_of(&local, T2V), &body)
    };
    assert_eq!(submit("http://127.0.0.1:9/hooks").status, 200);
    assert_eq!(submit("ftp://127.0.0.1/hooks").param(), "callback_url");
}
