//! A simulated job and the timeline its status follows from: the simulator's store keeps the one, its list
//! index the other.

use serde::{Deserialize, Serialize};

/// What the simulator remembers of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimTask {
    pub task_id: String,
    pub request_id: String,
    pub model: String,
    pub region: String,
    /// The index of the key that created it among its region's: each key is one upstream account, and
    /// sees only its own tasks.
    #[serde(default)]
    pub account: usize,
    pub created_ms: i64,
    /// Milliseconds spent PENDING, then RUNNING; `None` runs forever.
    pub pending_ms: i64,
    pub running_ms: Option<i64>,
    pub fail_code: Option<String>,
    pub cancelled_ms: Option<i64>,
    /// The request, for the success payload (prompt, duration, resolution, n, ...).
    pub input: serde_json::Value,
    pub parameters: serde_json::Value,
    pub hooks: Vec<String>,
}

impl SimTask {
    pub fn timeline(&self) -> Timeline {
        Timeline {
            created_ms: self.created_ms,
            pending_ms: self.pending_ms,
            running_ms: self.running_ms,
            failed: self.fail_code.is_some(),
            cancelled_ms: self.cancelled_ms,
        }
    }
}

/// The facts a task's status follows from, small enough to keep for every task in the list index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    pub created_ms: i64,
    pub pending_ms: i64,
    pub running_ms: Option<i64>,
    pub failed: bool,
    pub cancelled_ms: Option<i64>,
}

impl Timeline {
    /// The upstream status at `now`.
    pub fn status(&self, now: i64) -> &'static str {
        if now - self.created_ms > super::files::TTL_SECONDS * 1000 {
            return "UNKNOWN";
        }
        if self.cancelled_ms.is_some() {
            return "CANCELED";
        }
        if now < self.started_ms() {
            return "PENDING";
        }
        match self.running_ms {
            Some(run) if now >= self.started_ms() + run => {
                if self.failed {
                    "FAILED"
                } else {
                    "SUCCEEDED"
                }
            }
            _ => "RUNNING",
        }
    }

    /// When the task left PENDING (or will).
    pub fn started_ms(&self) -> i64 {
        self.created_ms + self.pending_ms
    }

    /// When the task ended (or will): cancelled, or run to completion.
    pub fn end_ms(&self) -> i64 {
        self.cancelled_ms.unwrap_or(self.started_ms() + self.running_ms.unwrap_or(0))
    }
}
