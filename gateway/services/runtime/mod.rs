//! What the use cases run on: the [`Gateway`] the binary's wiring hands them, and its parts (the slots and
//! lines of upstream capacity, the accounts' limits, the operators, the settings, the finished tasks'
//! answers, the result copies' storage and links, the poller's inbox). Nothing here imports a use case.

pub mod answers;
pub mod capacity;
pub mod copies;
pub mod inbox;
pub mod limits;
pub mod links;
pub mod operators;
pub mod settings;

use crate::domain::registry::Registry;
use crate::ports::storage::Storage;
use crate::ports::upstream::Upstream;
use crate::ports::webhooks::WebhookSender;
use answers::FinishedAnswers;
use copies::Copies;
use inbox::Poller;
use limits::Limits;
use operators::Operators;
use settings::Settings;
use std::sync::Arc;

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
