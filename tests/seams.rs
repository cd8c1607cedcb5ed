//! The use cases run on their ports alone. Test doubles stand in for the upstream (no HTTP, no simulator)
//! and the webhook endpoint while the submit use case, the poller and the settlement run against a real
//! embedded store; and for the store itself while a money rule (a top-up) runs.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use mediagate::adapters::files::{Files, FilesConfig};
use mediagate::adapters::store::embedded::Store;
use mediagate::domain::audit::{Action, Actor, AuditEntry, AuditFilter, OperatorRecord};
use mediagate::domain::billing::audit::LedgerReport;
use mediagate::domain::billing::books::Pot;
use mediagate::domain::billing::books::{Entry, Funds, Posting, Shortfall};
use mediagate::domain::billing::pricing;
use mediagate::domain::catalog::{ENDPOINTS, Media, ModelSpec};
use mediagate::domain::deliveries::{Delivery, DeliveryFilter, WebhookSettings};
use mediagate::domain::listing::TaskQuery;
use mediagate::domain::results::Mirror;
use mediagate::domain::results::TaskResult;
use mediagate::domain::retention::Retention;
use mediagate::domain::tasks::{Account, AccountQuery, AccountSummary, Hold, IdempotencyRecord, KeyRecord, TaskRecord};
use mediagate::domain::tasks::{TaskStatus, hash_key};
use mediagate::domain::usage::{Measured, Reading, Usage};
use mediagate::domain::usage_log::UsageFilter;
use mediagate::ports::storage::{
    Accounts, AuditTrail, Commit, Copies as CopyQueue, Deliveries, Earmark, Forwarded, IdempotencyClaim, Inserted,
    Ledger, Lifecycle, PolledBy, Purged, Purging, Refusal, SettingsChange, Slots, StoreError, Switches, TaskChange,
    TaskRef, Tasks, Topology,
};
use mediagate::ports::upstream::{Created, Fetched, ListRequest, Observed, TaskPage, Upstream, UpstreamError};
use mediagate::ports::webhooks::WebhookSender;
use mediagate::services::accounts::Credit;
use mediagate::services::runtime::copies::Copies;
use mediagate::services::runtime::links::Links;
use mediagate::services::runtime::operators::Operators;
use mediagate::services::runtime::settings::{PollerConfig, Settings};
use mediagate::services::runtime::{Gateway, Parts};
use mediagate::services::submit::{Submission, Submitted};
use mediagate::services::{accounts, auth, startup, submit};
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
    async fn create(&self, model: &ModelSpec, envelope: &Bytes, _: usize) -> Result<Created, UpstreamError> {
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
        Ok(Observed::Succeeded {
            results: vec![result],
            failed: Vec::new(),
            usage: Some(usage),
            measured: Some(self.measured.clone()),
        })
    }

    async fn list(&self, _: &str, _: usize, _: &ListRequest) -> Result<TaskPage, UpstreamError> {
        // No list: the poller asks about the task directly.
        Err(UpstreamError::Timeout)
    }

    async fn cancel(&self, _: &str, _: usize, _: &str) -> Result<(), UpstreamError> {
        Ok(())
    }

    async fn fetch(&self, _: &str, _: &str, _: Option<&str>) -> Result<Fetched, UpstreamError> {
        Err(UpstreamError::Timeout)
    }

    fn recorded(&self, code: &str, message: &str, _: &str) -> UpstreamError {
        UpstreamError::Malformed(format!("{code}: {message}"))
    }

    fn caps(&self, model: &ModelSpec) -> Vec<u32> {
        vec![model.concurrency]
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
    Arc::new(startup::start(parts).await.unwrap())
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
        gateway.store.insert_key("acme", "key-1", &Actor::local()).await.unwrap();
        accounts::credit(&gateway, "acme", Credit::TopUp, 100_000_000, String::new(), &Actor::local()).await.unwrap();
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

/// A store that keeps accounts' pots in memory and takes postings as a real one does (each pot within
/// `MAX_MICROS`, refused whole otherwise); anything else a money rule should not touch is unreachable.
#[derive(Default)]
struct FakeStore {
    pots: Mutex<std::collections::BTreeMap<String, Funds>>,
    posted: Mutex<Vec<Posting>>,
}

fn unused() -> ! {
    unreachable!("not part of a top-up")
}

#[async_trait::async_trait]
impl Accounts for FakeStore {
    async fn ensure_account(&self, name: &str, _: &Actor) -> Result<Account, StoreError> {
        self.pots.lock().unwrap().entry(name.into()).or_default();
        Ok(Account { name: name.into(), created_at: String::new(), plan: None, queue_weight: None })
    }
    async fn account(&self, name: &str) -> Result<Option<Account>, StoreError> {
        let known = self.pots.lock().unwrap().contains_key(name);
        Ok(known.then(|| Account { name: name.into(), created_at: String::new(), plan: None, queue_weight: None }))
    }
    async fn list_accounts(&self, _: &AccountQuery) -> Result<Vec<AccountSummary>, StoreError> {
        unused()
    }
    async fn set_plan(&self, _: &str, _: &str, _: i64, _: &Actor) -> Result<Account, StoreError> {
        unused()
    }
    async fn set_queue_weight(&self, _: &str, _: u32, _: &Actor) -> Result<Account, StoreError> {
        unused()
    }
    async fn insert_key(&self, _: &str, _: &str, _: &Actor) -> Result<(), StoreError> {
        unused()
    }
    async fn key(&self, _: &[u8; 32]) -> Result<Option<Arc<KeyRecord>>, StoreError> {
        unused()
    }
    fn cached_key(&self, _: &[u8; 32]) -> Option<Arc<KeyRecord>> {
        unused()
    }
    async fn admit_request(&self, _: &[u8; 32], _: u32) -> Result<bool, StoreError> {
        unused()
    }
    async fn keys_of(&self, _: &str) -> Result<Vec<KeyRecord>, StoreError> {
        unused()
    }
    async fn revoke_keys(&self, _: &str, _: &str, _: &Actor) -> Result<usize, StoreError> {
        unused()
    }
}

#[async_trait::async_trait]
impl Ledger for FakeStore {
    async fn post(&self, postings: Vec<Posting>, _: &Actor) -> Result<(), StoreError> {
        let mut pots = self.pots.lock().unwrap();
        let mut moved = pots.clone();
        for posting in &postings {
            let funds = moved.entry(posting.account.clone()).or_default();
            let pot = match posting.pot {
                Pot::FreeTrial => &mut funds.free_trial,
                Pot::Plan => &mut funds.plan,
                Pot::Balance => &mut funds.balance,
            };
            *pot = mediagate::domain::billing::checked_sum(*pot, posting.delta)
                .ok_or_else(|| StoreError::refused(Refusal::TooLarge, "the pot would pass the maximum"))?;
        }
        *pots = moved;
        self.posted.lock().unwrap().extend(postings);
        Ok(())
    }
    async fn has_entries(&self, _: &str) -> Result<bool, StoreError> {
        unused()
    }
    async fn funds(&self, account: &str) -> Result<Funds, StoreError> {
        Ok(self.pots.lock().unwrap().get(account).copied().unwrap_or_default())
    }
    fn earmarked(&self, _: &str) -> Funds {
        Funds::default()
    }
    async fn entries(&self, _: Option<&str>) -> Result<Vec<Entry>, StoreError> {
        unused()
    }
    async fn verify_ledger(&self) -> Result<LedgerReport, StoreError> {
        unused()
    }
    async fn usage(&self, _: UsageFilter) -> Result<Vec<serde_json::Value>, StoreError> {
        unused()
    }
    async fn earmark(&self, _: &str, _: Hold) -> Result<Result<Earmark, Shortfall>, StoreError> {
        unused()
    }
    fn earmark_now(&self, _: &str, _: Hold) -> Option<Result<Earmark, Shortfall>> {
        unused()
    }
}

#[async_trait::async_trait]
impl Tasks for FakeStore {
    async fn add_task(
        &self,
        _: TaskRecord,
        _: Option<IdempotencyClaim>,
        _: Option<Hold>,
        _: Commit,
    ) -> Result<Inserted, StoreError> {
        unused()
    }
    async fn add_ended(&self, _: TaskRecord, _: Earmark) -> Result<TaskRecord, StoreError> {
        unused()
    }
    async fn task(&self, _: &str) -> Result<Option<TaskRecord>, StoreError> {
        unused()
    }
    async fn list_tasks(&self, _: TaskQuery) -> Result<Vec<TaskRecord>, StoreError> {
        unused()
    }
    async fn change_task(
        &self,
        _: TaskRef,
        _: &[TaskStatus],
        _: Commit,
        _: TaskChange,
    ) -> Result<Option<TaskRecord>, StoreError> {
        unused()
    }
    async fn forwarded(&self, _: TaskRef, _: PolledBy, _: TaskChange) -> Result<Option<Forwarded>, StoreError> {
        unused()
    }
    async fn claim(&self) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(Vec::new())
    }
    async fn polls_here(&self, _: &str) -> Result<bool, StoreError> {
        unused()
    }
    async fn leased(&self, _: Option<String>, _: usize) -> Result<Option<Vec<TaskRecord>>, StoreError> {
        unused()
    }
    async fn abandoned(&self, _: &TaskRecord, _: i64) -> Result<bool, StoreError> {
        unused()
    }
    async fn idempotency(&self, _: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        unused()
    }
}

#[async_trait::async_trait]
impl Deliveries for FakeStore {
    async fn webhook_settings(&self, _: &str) -> Result<Option<WebhookSettings>, StoreError> {
        unused()
    }
    async fn change_webhook_settings(
        &self,
        _: &str,
        _: SettingsChange,
        _: Option<(&Actor, Action)>,
    ) -> Result<WebhookSettings, StoreError> {
        unused()
    }
    async fn due_deliveries(&self, _: i64, _: usize) -> Result<Vec<Delivery>, StoreError> {
        unused()
    }
    async fn save_delivery(&self, _: Delivery) -> Result<(), StoreError> {
        unused()
    }
    async fn replay_delivery(&self, _: &str, _: i64, _: &Actor) -> Result<Option<Delivery>, StoreError> {
        unused()
    }
    async fn delivery(&self, _: &str) -> Result<Option<Delivery>, StoreError> {
        unused()
    }
    async fn deliveries(&self, _: DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        unused()
    }
}

#[async_trait::async_trait]
impl CopyQueue for FakeStore {
    async fn due_mirrors(&self, _: i64, _: i64, _: usize) -> Result<Vec<TaskRecord>, StoreError> {
        unused()
    }
    async fn renew_mirrors(&self, _: Vec<String>, _: i64) -> Result<(), StoreError> {
        unused()
    }
    async fn save_mirror(&self, _: &str, _: Mirror, _: Vec<TaskResult>, _: Option<i64>) -> Result<(), StoreError> {
        unused()
    }
}

#[async_trait::async_trait]
impl Switches for FakeStore {
    async fn model_switches(&self) -> Result<Vec<(String, bool)>, StoreError> {
        Ok(Vec::new())
    }
    async fn set_model_switch(&self, _: &str, _: bool, _: &Actor) -> Result<(), StoreError> {
        unused()
    }
}

impl Slots for FakeStore {}

#[async_trait::async_trait]
impl Purging for FakeStore {
    async fn purge(&self, _: &Retention, _: i64, _: usize) -> Result<Purged, StoreError> {
        Ok(Purged::default())
    }
}

#[async_trait::async_trait]
impl AuditTrail for FakeStore {
    async fn add_operator(&self, _: OperatorRecord, _: &Actor) -> Result<(), StoreError> {
        unused()
    }
    async fn revoke_operator(&self, _: &str, _: i64, _: &Actor) -> Result<Option<OperatorRecord>, StoreError> {
        unused()
    }
    async fn operators(&self) -> Result<Vec<OperatorRecord>, StoreError> {
        unused()
    }
    async fn operator_by_token(&self, _: &str) -> Result<Option<OperatorRecord>, StoreError> {
        unused()
    }
    async fn audit_entries(&self, _: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        unused()
    }
}

#[async_trait::async_trait]
impl Lifecycle for FakeStore {
    fn topology(&self) -> Topology {
        Topology::Owned
    }
    fn poll_share(&self) -> Option<u32> {
        Some(1)
    }
    async fn shared_secret(&self, _: &str, _: Vec<u8>) -> Result<Option<Vec<u8>>, StoreError> {
        unused()
    }
    fn writable(&self) -> bool {
        true
    }
    async fn broken(&self) {
        std::future::pending().await
    }
    async fn caught_up(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn changed(&self) {
        std::future::pending().await
    }
    async fn close(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A top-up, on a stand-in for the storage port: one entry, to the balance, of the amount; an amount that
/// is no positive amount refused before the store is asked; one the store refuses (its pot would pass the
/// maximum) answered as a bad `amount`, and nothing of it kept.
#[test]
fn a_top_up_posts_one_entry_to_the_balance_through_the_storage_port() {
    use mediagate::domain::errors::{Code, ErrorCode};
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = Arc::new(FakeStore::default());
    runtime.block_on(async {
        let files = Files::new(&FilesConfig { dir: dir.path().join("results"), s3: None }).unwrap();
        let parts = Parts {
            store: store.clone(),
            upstream: Arc::new(FakeUpstream {
                measured: Measured::default(),
                polls_running: 0,
                calls: Mutex::default(),
            }),
            webhooks: Arc::new(FakeEndpoint::default()),
            copies: Copies::new(Arc::new(files), Links::new("http://gateway.test", b"secret").unwrap(), false, 30),
            operators: Operators::new(None),
            settings: Settings::default(),
            finished_task_cache_bytes: 0,
        };
        let gateway = startup::start(parts).await.unwrap();
        store.ensure_account("acme", &Actor::local()).await.unwrap();

        let view = accounts::credit(&gateway, "acme", Credit::TopUp, 50_000_000, "hello".into(), &Actor::local())
            .await
            .unwrap();
        assert_eq!(view["funds"]["balance"], 50_000_000);
        let posted: Vec<String> = store
            .posted
            .lock()
            .unwrap()
            .iter()
            .map(|p| format!("{:?} {:?} {} {}", p.kind, p.pot, p.delta, p.note))
            .collect();
        assert_eq!(posted, ["TopUp Balance 50000000 hello"]);

        for refused in [0, -1] {
            let error = accounts::credit(&gateway, "acme", Credit::TopUp, refused, String::new(), &Actor::local())
                .await
                .unwrap_err();
            assert_eq!((error.error_code(), error.param()), (Code::invalid_parameter, Some("amount")), "{refused}");
        }
        let past = mediagate::domain::billing::MAX_MICROS;
        let error =
            accounts::credit(&gateway, "acme", Credit::TopUp, past, String::new(), &Actor::local()).await.unwrap_err();
        assert_eq!((error.error_code(), error.param()), (Code::invalid_parameter, Some("amount")));
        assert_eq!(store.posted.lock().unwrap().len(), 1, "nothing more was kept");
        assert_eq!(store.pots.lock().unwrap()["acme"].balance, 50_000_000);
    });
}
