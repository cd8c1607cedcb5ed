//! One trace per job, exported over OTLP: a real OTLP/HTTP receiver on loopback (protobuf, decoded with the
//! OpenTelemetry protocol's own types) takes what the demo exports, and one job's spans are found under one
//! trace id with their parent links: submit, admission, the store write, the upstream create, each poll and
//! the settlement, the result copy and the webhook, whose request carries the trace too.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, KEY};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A span as received: its name, ids and parent (hex), and the service that sent it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    service: String,
}

#[derive(Default)]
struct Receiver {
    spans: Vec<Received>,
    /// Paths posted to other than `/v1/traces` (the webhook), with their `traceparent`.
    hooks: Vec<(String, Option<String>)>,
}

/// Serves OTLP/HTTP (`POST /v1/traces`, protobuf) and any other POST (a webhook receiver) on loopback.
fn receiver() -> (String, Arc<Mutex<Receiver>>) {
    let got = Arc::new(Mutex::new(Receiver::default()));
    let shared = got.clone();
    let address = common::http_receiver(move |request| {
        let mut got = shared.lock().unwrap();
        if request.path != "/v1/traces" {
            got.hooks.push((request.path, request.headers.get("traceparent").cloned()));
            return 200;
        }
        let export = ExportTraceServiceRequest::decode(request.body.as_slice()).unwrap();
        for resource in export.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .map(|v| format!("{:?}", v.value))
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                got.spans.push(Received {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    service: service.clone(),
                });
            }
        }
        200
    });
    (address, got)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_jobs_steps_are_one_trace_from_submit_to_webhook() {
    let (address, got) = receiver();
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = format!("http://{address}");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "mediagate-under-test"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, "", &env);
    let hook = format!("http://{address}/hook");
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 2, "callback_url": hook});
    let accepted = demo.post("/v1/videos/generations", &body);
    assert_eq!(accepted.status, 200, "{}", accepted.json);
    let task_id = accepted.json["task_id"].as_str().unwrap();

    // The task shows its trace; the job ends, its copy is made and its webhook delivered.
    let deadline = Instant::now() + Duration::from_secs(60);
    let trace_id = loop {
        let task = demo.get_as(KEY, &format!("/v1/tasks/{task_id}")).json;
        let hooked = got.lock().unwrap().hooks.iter().any(|(path, _)| path == "/hook");
        if task["status"] == "success" && task["mirror"]["status"] == "mirrored" && hooked {
            break task["trace_id"].as_str().expect("the task view names its trace").to_string();
        }
        assert!(Instant::now() < deadline, "the job did not end, copy and deliver: {task}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(trace_id.len(), 32);

    let wanted = [
        "job.submit",
        "job.admission",
        "job.store",
        "upstream.create",
        "job.poll",
        "job.settle",
        "job.copy",
        "job.webhook",
    ];
    let spans = loop {
        let spans: Vec<Received> =
            got.lock().unwrap().spans.iter().filter(|s| s.trace_id == trace_id).cloned().collect();
        if wanted.iter().all(|name| spans.iter().any(|s| s.name == *name)) {
            break spans;
        }
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert!(Instant::now() < deadline, "spans of the trace so far: {names:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let one = |name: &str| spans.iter().find(|s| s.name == name).unwrap();
    let submit = one("job.submit");
    assert_eq!(submit.parent, "", "the submit is the trace's root");
    assert!(submit.service.contains("mediagate-under-test"), "{}", submit.service);
    for child in ["job.admission", "job.store", "upstream.create", "job.poll", "job.copy", "job.webhook"] {
        assert_eq!(one(child).parent, submit.span_id, "{child} hangs under the submit");
    }
    let settle = one("job.settle");
    assert!(
        spans.iter().any(|s| s.name == "job.poll" && s.span_id == settle.parent),
        "the settlement hangs under the poll that saw the end"
    );

    // The webhook's request carries the trace, under its attempt's span.
    let hooks = got.lock().unwrap().hooks.clone();
    let (_, traceparent) = hooks.iter().find(|(path, _)| path == "/hook").unwrap();
    let traceparent = traceparent.as_deref().expect("the webhook carries a traceparent");
    assert!(traceparent.starts_with(&format!("00-{trace_id}-{}-", one("job.webhook").span_id)), "{traceparent}");
}
