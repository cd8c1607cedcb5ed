//! The use cases: submitting, reading and cancelling tasks, accounts and money, webhook settings, and the
//! background work (the poller, the copy worker, the webhook dispatcher).

pub mod accounts;
pub mod auth;
pub mod capacity;
pub mod copies;
pub mod deliveries;
pub mod errors;
pub mod limits;
pub mod models;
pub mod operators;
pub mod quotes;
pub mod settings;
pub mod submit;
pub mod tasks;
pub mod webhook_settings;

use crate::domain::registry::Registry;
use crate::ports::storage::{Storage, Topology};
use crate::ports::upstream::Upstream;
use crate::ports::webhooks::WebhookSender;
use copies::Copies;
use limits::Limits;
use operators::Operators;
use settings::Settings;
use std::sync::Arc;
use tasks::answers::FinishedAnswers;
use tasks::poller::Poller;

/// What the use cases run on: the ports, the catalog's switches, the in-memory limits and caches, and the
/// settings, handed over by the binary's wiring (`app::server`). No edge's type is among them; each module
/// of this layer takes it, and none of them holds another's.
pub struct Gateway {
    pub store: Arc<dyn Storage>,
    pub registry: Registry,
    pub upstream: Arc<dyn Upstream>,
    /// Where webhook deliveries are posted through.
    pub webhooks: Arc<dyn WebhookSender>,
    pub poller: Poller,
    /// Upstream slots per key and model, and the tasks waiting for one.
    pub capacity: Arc<capacity::Capacity>,
    pub limits: Limits,
    /// Answers of finished task reads, kept rendered.
    pub finished: FinishedAnswers,
    /// Result copies and the links that serve them.
    pub copies: Copies,
    /// Who may use the admin API and the operator's console.
    pub operators: Operators,
    pub settings: Settings,
    /// When this process opened the store (epoch ms): a live task created before it and never forwarded
    /// was cut short by the last process.
    pub started_ms: i64,
}

/// What the wiring hands over to make a [`Gateway`].
pub struct Parts {
    pub store: Arc<dyn Storage>,
    pub upstream: Arc<dyn Upstream>,
    pub webhooks: Arc<dyn WebhookSender>,
    pub copies: Copies,
    pub operators: Operators,
    pub settings: Settings,
    /// Bytes of finished tasks' rendered answers kept for task reads.
    pub finished_task_cache_bytes: u64,
}

impl Gateway {
    /// Reads what the use cases start from: the model switches and the live tasks this process polls.
    pub async fn start(parts: Parts) -> Result<Gateway, String> {
        let Parts { store, upstream, webhooks, copies, operators, settings, finished_task_cache_bytes } = parts;
        let switches = store.model_switches().await.map_err(|e| e.to_string())?;
        // Read once: the tasks this process polls from now on (every live one, on a store it owns alone,
        // which its in-flight slots start from too; a store shared by replicas keeps the limits itself).
        let claimed = store.claim().await.map_err(|e| e.to_string())?;
        // Where the store is this process's alone, the accounts' limits are kept here.
        let limits = Limits::new(&settings.limits, store.topology() == Topology::Owned);
        limits.restore(claimed.iter().map(|t| t.account.clone()));
        let shared = (store.topology() == Topology::Shared && settings.shared_upstream_slots).then(|| store.clone());
        let capacity = Arc::new(capacity::Capacity::new(upstream.clone(), shared));
        let polled = tasks::dispatch::sort_claimed(&*store, &capacity, claimed).await;
        Ok(Gateway {
            registry: Registry::new(switches)?,
            poller: Poller::new(polled),
            capacity,
            finished: FinishedAnswers::new(finished_task_cache_bytes),
            started_ms: crate::domain::clock::now_ms(),
            store,
            upstream,
            webhooks,
            limits,
            copies,
            operators,
            settings,
        })
    }
}
