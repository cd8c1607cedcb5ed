//! Webhook records: an account's secrets and default endpoint, and the deliveries of task ends. A delivery
//! is queued in the write that ends its task (`Delivery::for_ended`), so a crash never loses one.

use crate::domain::tasks::TaskRecord;
use serde::{Deserialize, Serialize};

/// An account's webhook settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WebhookSettings {
    /// Newest first. Every secret not retired signs every delivery, so a receiver may switch to the new
    /// one whenever it likes while the old one still verifies.
    #[serde(default)]
    pub secrets: Vec<WebhookSecret>,
    /// Where the ends of the account's tasks without a `callback_url` of their own go.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Endpoints that answered 410 Gone: nothing more is sent to them.
    #[serde(default)]
    pub disabled: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebhookSecret {
    /// `whsec_` and the key in base64.
    pub secret: String,
    pub created_ms: i64,
    /// When it stops signing (set when a newer one replaces it).
    #[serde(default)]
    pub retires_ms: Option<i64>,
}

impl WebhookSettings {
    /// The secrets that sign a delivery made at `now_ms`.
    pub fn signing_secrets(&self, now_ms: i64) -> impl Iterator<Item = &str> {
        self.secrets.iter().filter(move |s| s.retires_ms.is_none_or(|at| at > now_ms)).map(|s| s.secret.as_str())
    }

    /// Makes `secret` the account's first, if it has none.
    pub fn adopt_first(&mut self, secret: String, now_ms: i64) {
        if self.secrets.is_empty() {
            self.secrets.push(WebhookSecret { secret, created_ms: now_ms, retires_ms: None });
        }
    }

    /// Makes `secret` the newest; the one it replaces keeps signing until `retire_ms`, and retired ones go.
    pub fn rotate(&mut self, secret: String, now_ms: i64, retire_ms: i64) {
        self.secrets.retain(|s| s.retires_ms.is_none_or(|at| at > now_ms));
        for old in &mut self.secrets {
            old.retires_ms = Some(old.retires_ms.map_or(retire_ms, |at| at.min(retire_ms)));
        }
        self.secrets.insert(0, WebhookSecret { secret, created_ms: now_ms, retires_ms: None });
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its next attempt.
    Pending,
    /// An attempt got a 2xx.
    Delivered,
    /// Every attempt of the schedule failed.
    Failed,
    /// Its endpoint answered 410 Gone (now or before): not sent.
    Disabled,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Disabled => "disabled",
        }
    }

    pub const ALL: [DeliveryState; 4] =
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Failed, DeliveryState::Disabled];
}

/// One attempt at a delivery.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attempt {
    pub at_ms: i64,
    /// The endpoint's HTTP status, if it answered.
    #[serde(default)]
    pub status: Option<u16>,
    /// Why it failed, if it did without an answer (or with one that is not 2xx).
    #[serde(default)]
    pub error: Option<String>,
}

/// A task's end, to be sent to an endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    /// `msg_…`: the `webhook-id` of every attempt.
    pub id: String,
    pub account: String,
    pub task_id: String,
    /// `task.success`, `task.failed`, `task.timeout` or `task.cancelled`.
    pub event: String,
    pub url: String,
    pub created_ms: i64,
    pub state: DeliveryState,
    /// When a pending delivery is next attempted.
    #[serde(default)]
    pub next_attempt_ms: i64,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// How often an operator asked for it to be sent again.
    #[serde(default)]
    pub replays: u32,
    /// Its task's trace (`TaskRecord::trace`): each attempt is traced under it and carries it.
    #[serde(default)]
    pub trace: Option<String>,
}

impl Delivery {
    /// The delivery of `task`'s end, if it has an endpoint: its own `callback_url`, else its account's; not
    /// attempted if that endpoint is disabled.
    pub fn for_ended(task: &TaskRecord, settings: Option<&WebhookSettings>, now_ms: i64) -> Option<Delivery> {
        if !task.status.is_terminal() {
            return None;
        }
        let url = task.callback_url.clone().or_else(|| settings?.endpoint.clone())?;
        let disabled = settings.is_some_and(|s| s.disabled.contains(&url));
        Some(Delivery {
            id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
            account: task.account.clone(),
            task_id: task.task_id.clone(),
            event: format!("task.{}", task.status.as_str()),
            url,
            created_ms: now_ms,
            state: if disabled { DeliveryState::Disabled } else { DeliveryState::Pending },
            next_attempt_ms: now_ms,
            attempts: Vec::new(),
            replays: 0,
            trace: task.trace.clone(),
        })
    }

    /// Due again now, whatever became of it (its attempts are kept).
    pub fn replay(&mut self, now_ms: i64) {
        self.state = DeliveryState::Pending;
        self.next_attempt_ms = now_ms;
        self.replays = self.replays.saturating_add(1);
    }

    /// What to write after an attempt: `self`, as the attempt left it, unless a replay was asked for while it
    /// ran (`stored` has more replays), which still stands: the attempt is kept, and the delivery is due
    /// when the replay said.
    pub fn after_attempt(self, stored: &Delivery) -> Delivery {
        if stored.replays == self.replays {
            return self;
        }
        Delivery {
            state: DeliveryState::Pending,
            next_attempt_ms: stored.next_attempt_ms,
            replays: stored.replays,
            ..self
        }
    }
}

/// Which deliveries to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub account: Option<String>,
    pub task_id: Option<String>,
    pub state: Option<DeliveryState>,
    pub limit: usize,
}

impl DeliveryFilter {
    pub fn keeps(&self, delivery: &Delivery) -> bool {
        self.account.as_deref().is_none_or(|a| delivery.account == a)
            && self.task_id.as_deref().is_none_or(|t| delivery.task_id == t)
            && self.state.is_none_or(|s| delivery.state == s)
    }
}
