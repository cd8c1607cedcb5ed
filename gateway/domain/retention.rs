//! How long finished work is kept. Finished tasks, webhook deliveries and idempotency records are purged
//! once older than their policy's duration; live work never is, nor a task whose results' copy is still
//! served. What money needs outlives them: a purged task leaves its usage line ([`UsageLine`]), and the
//! ledger's entries are never purged.
//!
//! [`UsageLine`]: crate::domain::usage_log::UsageLine

use crate::domain::deliveries::{Delivery, DeliveryState};
use crate::domain::results::MirrorState;
use crate::domain::tasks::TaskRecord;

/// How long each kind of finished work is kept, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Finished tasks, counted from their end.
    pub tasks_ms: i64,
    /// Webhook deliveries no longer pending, counted from their creation.
    pub deliveries_ms: i64,
    /// `Idempotency-Key` records, counted from their task's creation: a retry after this runs again.
    pub idempotency_ms: i64,
}

impl Default for Retention {
    /// Tasks for 90 days, deliveries for 30, idempotency records for one.
    fn default() -> Retention {
        const DAY: i64 = 86_400_000;
        Retention { tasks_ms: 90 * DAY, deliveries_ms: 30 * DAY, idempotency_ms: DAY }
    }
}

impl Retention {
    /// Whether `task` is purged at `now_ms`: it ended more than `tasks_ms` ago and no copy of its results is
    /// still served (a copy being made, or made and not expired).
    pub fn purges_task(&self, task: &TaskRecord, now_ms: i64) -> bool {
        let served = task.mirror.as_ref().is_some_and(|m| match m.state {
            MirrorState::Pending => true,
            MirrorState::Mirrored => m.expires_ms > now_ms,
            MirrorState::Failed => false,
        });
        task.status.is_terminal()
            && task.finished_ms.is_some()
            && older(task.ended_ms(), self.tasks_ms, now_ms)
            && !served
    }

    /// Whether `delivery` is purged at `now_ms`: no longer pending, and created more than `deliveries_ms`
    /// ago (or `tasks_ms`, if less: a delivery goes no later than its task).
    pub fn purges_delivery(&self, delivery: &Delivery, now_ms: i64) -> bool {
        delivery.state != DeliveryState::Pending && delivery.created_ms < self.deliveries_created_before(now_ms)
    }

    /// Deliveries created before this may be purged at `now_ms` (none created later are).
    pub fn deliveries_created_before(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.deliveries_ms.min(self.tasks_ms))
    }

    /// Idempotency records of tasks created before this are purged at `now_ms`: after `idempotency_ms` (or
    /// `tasks_ms`, if less: a record never names a task that is gone).
    pub fn idempotency_created_before(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.idempotency_ms.min(self.tasks_ms))
    }

    /// Tasks created before this may be purged at `now_ms` (none created later are: a task ends after it
    /// is created).
    pub fn tasks_created_before(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.tasks_ms)
    }

    /// How often to look for work to purge: often enough that a short duration purges within about half of
    /// it, and at least once a minute.
    pub fn pass_every_ms(&self) -> i64 {
        (self.tasks_ms.min(self.deliveries_ms).min(self.idempotency_ms) / 2).clamp(200, 60_000)
    }
}

/// Whether something dated `at_ms` is more than `keep_ms` old at `now_ms`.
fn older(at_ms: i64, keep_ms: i64, now_ms: i64) -> bool {
    at_ms < now_ms.saturating_sub(keep_ms)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::domain::results::Mirror;
    use serde_json::json;

    const DAY: i64 = 86_400_000;
    const POLICY: Retention = Retention { tasks_ms: 90 * DAY, deliveries_ms: 30 * DAY, idempotency_ms: DAY };

    fn task(status: &str, ended_ms: Option<i64>, mirror: Option<(MirrorState, i64)>) -> TaskRecord {
        let mut task: TaskRecord = serde_json::from_value(json!({
            "task_id": "task-1", "request_id": "vid-1", "account": "acme", "key_prefix": "mg-1",
            "model": "alpha2.6-t2v_t2v", "operation": "t2v", "media": "video", "status": status,
            "created_at": "2026-01-01 00:00:00", "created_ms": 0, "updated_ms": 0, "deadline_ms": 0,
            "finished_ms": ended_ms,
        }))
        .unwrap();
        task.mirror = mirror.map(|(state, expires_ms)| Mirror {
            state,
            sources: Vec::new(),
            expires_ms,
            files: Vec::new(),
            attempts: 0,
            error: None,
        });
        task
    }

    /// Each row: a task's status, end and copy, and whether it is purged 100 days in.
    #[test]
    fn a_task_is_purged_once_ended_past_its_retention_and_no_copy_of_it_is_served() {
        let now = 100 * DAY;
        let table = [
            ("running", None, None, false),
            ("queued", None, None, false),
            ("success", Some(now - 89 * DAY), None, false),
            ("success", Some(now - 91 * DAY), None, true),
            ("failed", Some(now - 91 * DAY), None, true),
            ("cancelled", Some(now - 91 * DAY), None, true),
            ("success", Some(now - 91 * DAY), Some((MirrorState::Pending, 0)), false),
            ("success", Some(now - 91 * DAY), Some((MirrorState::Mirrored, now + 1)), false),
            ("success", Some(now - 91 * DAY), Some((MirrorState::Mirrored, now - 1)), true),
            ("success", Some(now - 91 * DAY), Some((MirrorState::Failed, now + DAY)), true),
        ];
        for (status, ended, mirror, purged) in table {
            let task = task(status, ended, mirror);
            assert_eq!(POLICY.purges_task(&task, now), purged, "{status} ended {ended:?} copy {mirror:?}");
        }
    }

    #[test]
    fn deliveries_and_idempotency_records_never_outlive_their_tasks_retention() {
        let now = 100 * DAY;
        assert_eq!(POLICY.deliveries_created_before(now), 70 * DAY);
        assert_eq!(POLICY.idempotency_created_before(now), 99 * DAY);
        let short_tasks = Retention { tasks_ms: DAY / 2, ..POLICY };
        assert_eq!(short_tasks.deliveries_created_before(now), now - DAY / 2);
        assert_eq!(short_tasks.idempotency_created_before(now), now - DAY / 2);
        let delivery = |state: DeliveryState, created_ms: i64| Delivery {
            id: "msg_1".into(),
            account: "acme".into(),
            task_id: "task-1".into(),
            event: "task.success".into(),
            url: "https://hooks.example/x".into(),
            created_ms,
            state,
            next_attempt_ms: 0,
            attempts: Vec::new(),
            replays: 0,
            trace: None,
        };
        assert!(POLICY.purges_delivery(&delivery(DeliveryState::Delivered, now - 31 * DAY), now));
        assert!(POLICY.purges_delivery(&delivery(DeliveryState::Failed, now - 31 * DAY), now));
        assert!(!POLICY.purges_delivery(&delivery(DeliveryState::Delivered, now - 29 * DAY), now));
        assert!(!POLICY.purges_delivery(&delivery(DeliveryState::Pending, now - 31 * DAY), now), "still pending");
    }

    #[test]
    fn passes_come_within_half_the_shortest_duration_and_at_least_once_a_minute() {
        assert_eq!(POLICY.pass_every_ms(), 60_000);
        let short = Retention { tasks_ms: 1_000, deliveries_ms: 1_000, idempotency_ms: 1_000 };
        assert_eq!(short.pass_every_ms(), 500);
        assert_eq!(Retention { tasks_ms: 1, ..short }.pass_every_ms(), 200);
    }
}
