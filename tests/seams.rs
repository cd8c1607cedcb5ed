//! The use cases run on their ports alone: test doubles stand in for the upstream (no HTTP, no simulator)
//! and for the webhook endpoint, and the submit use case, the poller and the settlement run on them
//! against a real embedded store.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use mediagate::adapters::files::{Files, FilesConfig};
use mediagate::adapters::store::embedded::Store;
use mediagate::domain::billing::books::{EntryKind, Pot};
use mediagate::domain::billing::pricing;
use mediagate::domain::catalog::{ENDPOINTS, Media, ModelSpec};
use mediagate::domain::results::TaskResult;
use mediagate::domain::tasks::{TaskStatus, hash_key};
use mediagate::domain::usage::{Measured, Reading, Usage};
use mediagate::ports::upstream::{Created, Fetched, ListRequest, Observed, TaskPage, Upstream, UpstreamError};
use mediagate::ports::webhooks::WebhookSender;
use mediagate::services::copies::Copies;
use mediagate::services::copies::links::Links;
use mediagate::services::operators::Operators;
use mediagate::services::settings::{PollerConfig, Settings};
use mediagate::services::submit::{Submission, Submitted};
use mediagate::services::{Gateway, Parts, accounts, auth, submit};
use serde_json::json;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An upstream that accepts every job, runs it for `polls_running` queries, then reports it done, having
/// delivered what `measured` says; it records every call.
struct FakeUpstream {
    measured: Measured,
    polls_running: usize,
    calls: Mutex<Vec<String>>,
}

#[async_trait::async_trait(?Send)]
impl Upstream for FakeUpstream {
    async fn create(&self, model: &ModelSpec, envelope: &Bytes) -> Result<Created, UpstreamError> {
        let sent: serde_json::Value = serde_json::from_slice(envelope).unwrap();
        self.calls.lock().unwrap().push(format!("create {} {}", model.id, sent["model"]));
        Ok(Created { task_id: Some("up-1".into()), ..Created::default() })
    }

    async fn query(&self, region: &str, _: usize, id: &str, media: Media) -> Result<Observed, UpstreamError> {
        let mut calls = self.calls.lock().unwrap();
        calls.push(format!("query {region} {id}"));
        if calls.iter().filter(|c| c.starts_with("query")).count() <= self.polls_running {
            return Ok(Observed::Running);
        }
        let result = TaskResult {
            url: "https://results.example/v.mp4".into(),
            kind: media.as_str().into(),
            expires_at: String::new(),
        };
        let usage = Usage::from(json!({"seconds": 3}));
        Ok(Observed::Succeeded { results: vec![result], usage: Some(usage), measured: Some(self.measured.clone()) })
    }

    async fn list(&self, _: &str, _: usize, _: &ListRequest) -> Result<TaskPage, UpstreamError> {
        // No list: the poller asks about the task directly.
        Err(UpstreamError::Timeout)
    }

    async fn cancel(&self, _: &str, _: &str) -> Result<(), UpstreamError> {
        Ok(())
    }

    async fn fetch(&self, _: &str, _: &str, _: Option<&str>) -> Result<Fetched, UpstreamError> {
        Err(UpstreamError::Timeout)
    }

    fn recorded(&self, code: &str, message: &str, _: &str) -> UpstreamError {
        UpstreamError::Malformed(format!("{code}: {message}"))
    }

    fn regions(&self) -> Vec<(&'static str, usize)> {
        vec![("cn-beijing", 1)]
    }

    fn longest_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// A webhook endpoint that keeps what it was sent.
#[derive(Default)]
struct FakeEndpoint(Mutex<Vec<String>>);

#[async_trait::async_trait(?Send)]
impl WebhookSender for FakeEndpoint {
    async fn post(&self, url: &str, _: Vec<(&'static str, String)>, _: Vec<u8>) -> Result<u16, String> {
        self.0.lock().unwrap().push(url.to_string());
        Ok(200)
    }
}

async fn gateway(dir: &std::path::Path, upstream: Arc<dyn Upstream>) -> Arc<Gateway> {
    let files = Files::new(&FilesConfig { dir: dir.join("results"), s3: None }).unwrap();
    let links = Links::new("http://gateway.test", b"secret").unwrap();
    let poller =
        PollerConfig { min_interval_ms: 20, max_interval_ms: 50, sweep_interval_ms: 20, ..PollerConfig::default() };
    let parts = Parts {
        store: Arc::new(Store::open(&dir.join("store")).unwrap()),
        upstream,
        webhooks: Arc::new(FakeEndpoint::default()),
        copies: Copies::new(Arc::new(files), links, false, 30),
        operators: Operators::new(None),
        settings: Settings { poller, ..Settings::default() },
        finished_task_cache_bytes: 0,
    };
    Arc::new(Gateway::start(parts).await.unwrap())
}

/// A submission reaches the upstream through the port, the poller follows the task to its end through the
/// port, and the settlement charges what the upstream says was delivered: three of the five seconds asked
/// for, at 720P.
#[test]
fn a_submission_is_polled_to_success_and_settled_through_the_upstream_port() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local = tokio::task::LocalSet::new();
    let measured = Measured { seconds: Reading::Count(3.0), resolution: Some("720P".into()), ..Measured::default() };
    let upstream = Arc::new(FakeUpstream { measured, polls_running: 1, calls: Mutex::default() });
    local.block_on(&runtime, async {
        let gateway = gateway(dir.path(), upstream.clone()).await;
        gateway.store.insert_key("acme", "key-1").await.unwrap();
        accounts::credit(&gateway, "acme", 100_000_000, String::new(), EntryKind::TopUp, Pot::Balance).await.unwrap();
        let caller = auth::authenticate(&gateway, hash_key("key-1")).await.unwrap();
        tokio::task::spawn_local(mediagate::services::tasks::poller::run(gateway.clone()));

        let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5, "size": "1280*720"});
        let endpoint = ENDPOINTS.iter().find(|e| e.path == "/v1/videos/generations").unwrap();
        let submission = Submission {
            endpoint,
            caller: &caller,
            body: body.clone(),
            idempotency_key: None,
            request_id: "vid-1".into(),
        };
        let answer = submit::submit(&gateway, submission, std::future::pending()).await;
        let Ok(Submitted::Accepted(task)) = answer.result else { panic!("not accepted") };
        assert_eq!(task.upstream_task_id.as_deref(), Some("up-1"));

        let ended = RefCell::new(None);
        for _ in 0..200 {
            let stored = gateway.store.task(&task.task_id).await.unwrap().unwrap();
            if stored.status.is_terminal() {
                *ended.borrow_mut() = Some(stored);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ended = ended.into_inner().expect("the poller ended the task");
        assert_eq!(ended.status, TaskStatus::Success);
        assert_eq!(ended.results[0].url, "https://results.example/v.mp4");

        // Charged as delivered: the model's price of three seconds at 720P, not the five asked for.
        let model = ModelSpec::find("alpha2.6-t2v_t2v").unwrap();
        let mut delivered = body.as_object().unwrap().clone();
        delivered.insert("duration".into(), json!(3));
        let (expected, _) = pricing::quote(model, &delivered);
        let settlement = ended.billing.as_ref().and_then(|b| b.settlement.as_ref()).unwrap();
        assert_eq!(settlement.charged, expected);
        assert!(expected > 0 && expected < pricing::quote(model, body.as_object().unwrap()).0);
        let funds = gateway.store.funds("acme").await.unwrap();
        assert_eq!(funds.get(Pot::Balance), 100_000_000 - expected);
        let calls = upstream.calls.lock().unwrap().clone();
        assert_eq!(calls[0], "create alpha2.6-t2v_t2v \"alpha2.6-t2v\"");
        assert!(calls[1..].iter().all(|c| c == "query cn-beijing up-1"), "{calls:?}");
    });
}
