//! Tasks (with their idempotency records), accounts and their keys, as every backend stores them: plain
//! data and the rules that change it; what a backend does with them is the storage port's business.

use crate::domain::results::{FailedItem, Mirror, MirrorState, TaskResult};
use crate::domain::usage::Measured;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    Success,
    Failed,
    Timeout,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Success | TaskStatus::Failed | TaskStatus::Timeout | TaskStatus::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Success => "success",
            TaskStatus::Failed => "failed",
            TaskStatus::Timeout => "timeout",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Where the task stands, in a sentence's words: "has already succeeded".
    pub fn described(self) -> &'static str {
        match self {
            TaskStatus::Queued => "is queued",
            TaskStatus::Running => "is already running upstream",
            TaskStatus::Success => "has already succeeded",
            TaskStatus::Failed => "has already failed",
            TaskStatus::Timeout => "has already timed out",
            TaskStatus::Cancelled => "is already cancelled",
        }
    }

    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Success,
        TaskStatus::Failed,
        TaskStatus::Timeout,
        TaskStatus::Cancelled,
    ];
}

/// Why a task failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// Money to set aside for a new task.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub amount: i64,
    /// Only the free-trial pot may fund it.
    pub trial_only: bool,
}

/// What an `Idempotency-Key` was first used for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex.
    pub body_hash: String,
    pub task_id: String,
}

/// A task as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: String,
    pub request_id: String,
    pub account: String,
    pub key_prefix: String,
    /// The catalog's names, borrowed when a task is made (no copy per request) and owned when read back.
    pub model: Cow<'static, str>,
    pub operation: Cow<'static, str>,
    pub media: crate::domain::catalog::Media,
    pub status: TaskStatus,
    /// Local time, `YYYY-MM-DD HH:MM:SS`.
    pub created_at: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    #[serde(default)]
    pub finished_ms: Option<i64>,
    /// Set once the upstream accepted the job.
    #[serde(default)]
    pub upstream_task_id: Option<String>,
    /// When the poller should ask the upstream next (epoch ms).
    #[serde(default)]
    pub next_poll_ms: i64,
    pub deadline_ms: i64,
    #[serde(default)]
    pub results: Vec<TaskResult>,
    /// The upstream's `usage`, as it came.
    #[serde(default)]
    pub usage: Option<crate::domain::usage::Usage>,
    #[serde(default)]
    pub error: Option<TaskError>,
    /// Billing state of the task (hold, settlement), owned by the billing module.
    #[serde(default)]
    pub billing: Option<crate::domain::billing::TaskBilling>,
    /// Where the task's end is delivered (the submission's `callback_url`), if not to its account's
    /// default endpoint.
    #[serde(default)]
    pub callback_url: Option<String>,
    /// The copies of its results in the gateway's storage, once it succeeded with mirroring on.
    #[serde(default)]
    pub mirror: Option<Mirror>,
    /// When the poller recorded it running (epoch ms), if it saw it so: a task's page shows its timeline.
    #[serde(default)]
    pub running_ms: Option<i64>,
    /// What the upstream's usage report says was delivered, which its settlement prices (tasks that ended
    /// before it was kept have `usage` alone, and were settled then).
    #[serde(default)]
    pub measured: Option<crate::domain::usage::Measured>,
    /// The items of a successful task the upstream could not make (a partial success).
    #[serde(default)]
    pub failed_items: Vec<FailedItem>,
    /// The body sent upstream, kept while the task is live: a task waiting for an upstream slot is sent
    /// from it, and so is one sent again after a transient failure.
    #[serde(default)]
    pub envelope: Option<String>,
    /// Every time the task was sent upstream, in order.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// The job's trace, as a W3C `traceparent` of its submit span: every later step (polls, settlement, the
    /// copy, deliveries) is traced under it. `None` when traces are off.
    #[serde(default)]
    pub trace: Option<String>,
}

/// One sending of a task to the upstream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attempt {
    /// Which key of the region's list (an upstream account) it went to; never the key itself.
    pub key: u32,
    pub started_ms: i64,
    /// The upstream's task id, once it accepted the job.
    #[serde(default)]
    pub upstream_task_id: Option<String>,
    /// The code it failed with, when another attempt followed.
    #[serde(default)]
    pub failed: Option<String>,
}

impl TaskRecord {
    /// Records a success's result files and the items it could not make: those the upstream named, else, where
    /// it delivered fewer images than the request asked for, the missing ones (some families just leave them out).
    pub fn record_results(&mut self, results: Vec<TaskResult>, failed: Vec<FailedItem>) {
        let asked = self.billing.as_ref().and_then(|b| b.units.images).map_or(0, |n| n as usize);
        self.failed_items = if failed.is_empty() { FailedItem::left_out(asked, results.len()) } else { failed };
        self.results = results;
    }

    /// Settles the task, which has just ended, by billing's rules ([`crate::domain::billing::settle`]): writes the
    /// settlement onto its billing and returns the ledger postings; `None` without billing or if settled.
    pub fn settle(&mut self) -> Option<crate::domain::billing::Settled> {
        let TaskRecord { task_id, account, model, status, measured, billing, .. } = self;
        let ending = crate::domain::billing::Ending {
            task_id,
            account,
            model,
            state: status.as_str(),
            delivered: (*status == TaskStatus::Success).then(|| measured.as_ref().unwrap_or(&Measured::NOTHING)),
        };
        crate::domain::billing::settle(billing.as_mut()?, &ending)
    }

    /// When the task ended (what its usage line and its settlement's entries are dated by).
    /// Whether the write ending this task queues the copy of its results (every backend does it in that
    /// same write, so a crash never loses the copy).
    pub fn copy_queued(&self) -> bool {
        self.status.is_terminal() && self.mirror.as_ref().is_some_and(|m| m.state == MirrorState::Pending)
    }

    pub fn ended_ms(&self) -> i64 {
        self.finished_ms.unwrap_or(self.updated_ms)
    }

    /// Whether the task waits for an upstream slot: accepted, with its body kept, and not being sent (an
    /// attempt without an upstream id or an outcome is a send whose answer is not known).
    pub fn waits_for_slot(&self) -> bool {
        self.status == TaskStatus::Queued
            && self.upstream_task_id.is_none()
            && self.envelope.is_some()
            && self.attempts.last().is_none_or(|a| a.failed.is_some())
    }

    /// When the send under way started: an attempt with neither an upstream id nor an outcome.
    pub fn sending_since(&self) -> Option<i64> {
        let attempt = self.attempts.last()?;
        (self.upstream_task_id.is_none() && attempt.upstream_task_id.is_none() && attempt.failed.is_none())
            .then_some(attempt.started_ms)
    }

    /// The key (upstream account) that created the upstream task the record names: only that account can
    /// ask about it. `None` where no attempt recorded it.
    pub fn upstream_key(&self) -> Option<usize> {
        let id = self.upstream_task_id.as_deref()?;
        self.attempts.iter().rev().find(|a| a.upstream_task_id.as_deref() == Some(id)).map(|a| a.key as usize)
    }

    /// The key the task holds a running slot on: its last attempt's, while the upstream has it.
    pub fn slot_key(&self) -> Option<usize> {
        let attempt = self.attempts.last()?;
        (self.upstream_task_id.is_some() && attempt.failed.is_none()).then_some(attempt.key as usize)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Account {
    pub name: String,
    pub created_at: String,
    /// The plan's name, once one is set (`Accounts::set_plan`).
    #[serde(default)]
    pub plan: Option<String>,
    /// Its share of the upstream's slots while its tasks wait for one, against other accounts' (1 unless set).
    #[serde(default)]
    pub queue_weight: Option<u32>,
}

/// Which accounts a listing shows: names containing `search` (any case), after `after` in name order, at
/// most `limit`.
#[derive(Debug, Clone, Default)]
pub struct AccountQuery {
    pub search: String,
    pub after: Option<String>,
    pub limit: usize,
}

impl AccountQuery {
    /// Whether the listing shows the account named `name`.
    pub fn keeps(&self, name: &str) -> bool {
        self.after.as_deref().is_none_or(|after| name > after)
            && name.to_lowercase().contains(&self.search.trim().to_lowercase())
    }
}

/// An account as a listing shows it: its pots (what is available to spend) and when it last submitted a task.
#[derive(Debug, Clone, Serialize)]
pub struct AccountSummary {
    pub name: String,
    pub created_at: String,
    pub plan: Option<String>,
    pub funds: crate::domain::billing::books::Funds,
    /// When its newest task was submitted (epoch ms), if it has one.
    pub last_task_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyRecord {
    pub account: String,
    /// The first characters of the key, safe to show and log.
    pub prefix: String,
    pub created_at: String,
    #[serde(default)]
    pub revoked: bool,
}

/// How many of a key's first characters are kept as its prefix: enough to tell an account's keys apart,
/// and the least a revocation names.
pub const KEY_PREFIX_CHARS: usize = 8;

/// A key's prefix, safe to show and log.
pub fn key_prefix(key: &str) -> String {
    key.chars().take(KEY_PREFIX_CHARS).collect()
}

/// A new API key: the plain key, shown once (the store keeps its [`hash_key`]).
pub fn new_key() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    format!("mg-{}", hex::encode(bytes))
}

/// The stored form of a key.
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}
