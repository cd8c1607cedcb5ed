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

    /// Records an attempt made at `at_ms` and what the endpoint answered (its status, or why there was
    /// none), and decides what comes next: delivered on a 2xx; disabled on 410 Gone (the endpoint asked
    /// for no more); otherwise due again after the schedule's next delay, failed once it has none left.
    pub fn record_attempt(&mut self, at_ms: i64, answer: Result<u16, String>, retry_delays_ms: &[u64]) -> Outcome {
        let status = answer.as_ref().ok().copied();
        let error = match answer {
            Ok(200..=299) => None,
            Ok(status) => Some(format!("the endpoint answered {status}")),
            Err(e) => Some(e),
        };
        self.attempts.push(Attempt { at_ms, status, error });
        let (state, outcome) = match status {
            Some(200..=299) => (DeliveryState::Delivered, Outcome::Delivered),
            Some(410) => (DeliveryState::Disabled, Outcome::Disabled),
            _ => match retry_delays_ms.get(self.attempts.len() - 1) {
                Some(delay) => {
                    self.next_attempt_ms = at_ms.saturating_add(i64::try_from(*delay).unwrap_or(i64::MAX));
                    (DeliveryState::Pending, Outcome::Retry)
                }
                None => (DeliveryState::Failed, Outcome::Failed),
            },
        };
        self.state = state;
        outcome
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

/// What one attempt made of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// The endpoint answered 410 Gone: it gets nothing more until an operator enables it again.
    Disabled,
    /// Due again later.
    Retry,
    /// The schedule is used up.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Disabled => "disabled",
            Outcome::Retry => "retry",
            Outcome::Failed => "failed",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> Delivery {
        Delivery {
            id: "msg_1".into(),
            account: "acme".into(),
            task_id: "task-1".into(),
            event: "task.success".into(),
            url: "https://hooks.example/x".into(),
            created_ms: 0,
            state: DeliveryState::Pending,
            next_attempt_ms: 0,
            attempts: Vec::new(),
            replays: 0,
            trace: None,
        }
    }

    /// Each row: the answers of the attempts made so far (a status, or none), against a schedule of two
    /// delays; what the last attempt made of the delivery, and when it is next due.
    #[test]
    fn an_attempt_delivers_disables_retries_on_schedule_or_fails() {
        let delays = [1_000, 5_000];
        type Row<'a> = (&'a [Option<u16>], Outcome, DeliveryState, i64, Option<&'a str>);
        let table: &[Row] = &[
            (&[Some(200)], Outcome::Delivered, DeliveryState::Delivered, 0, None),
            (&[Some(204)], Outcome::Delivered, DeliveryState::Delivered, 0, None),
            (&[Some(410)], Outcome::Disabled, DeliveryState::Disabled, 0, Some("the endpoint answered 410")),
            (&[Some(500)], Outcome::Retry, DeliveryState::Pending, 1_100, Some("the endpoint answered 500")),
            (&[None], Outcome::Retry, DeliveryState::Pending, 1_100, Some("refused")),
            (&[None, Some(302)], Outcome::Retry, DeliveryState::Pending, 5_200, Some("the endpoint answered 302")),
            (
                &[None, None, Some(503)],
                Outcome::Failed,
                DeliveryState::Failed,
                5_200,
                Some("the endpoint answered 503"),
            ),
            (&[Some(500), Some(500), Some(200)], Outcome::Delivered, DeliveryState::Delivered, 5_200, None),
        ];
        for (answers, outcome, state, next, error) in table {
            let mut delivery = pending();
            let mut last = None;
            for (i, answer) in answers.iter().enumerate() {
                let at_ms = 100 * (i as i64 + 1);
                last = Some(delivery.record_attempt(at_ms, answer.ok_or_else(|| "refused".to_string()), &delays));
            }
            let case = format!("{answers:?}");
            assert_eq!(last, Some(*outcome), "{case}");
            assert_eq!(delivery.state, *state, "{case}");
            assert_eq!(delivery.next_attempt_ms, *next, "{case}");
            assert_eq!(delivery.attempts.len(), answers.len(), "{case}");
            assert_eq!(delivery.attempts.last().and_then(|a| a.error.as_deref()), *error, "{case}");
        }
    }
}
