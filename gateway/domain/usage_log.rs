//! The usage log: one line per settled task, read off the task record rather than stored beside it (a
//! task's settlement is written in the transaction that ends it and a task never changes after that, so
//! the line is fixed from then on).

use crate::domain::billing::books::Pot;
use crate::domain::billing::pricing::Units;
use crate::domain::tasks::TaskRecord;
use serde::Serialize;

/// One line of the usage log (`GET /admin/v1/usage`): a settled task's settlement, with what names the task.
#[derive(Debug, Serialize)]
pub struct UsageRecord<'a> {
    at: String,
    at_ms: i64,
    account: &'a str,
    key_prefix: &'a str,
    model: &'a str,
    operation: &'a str,
    task_id: &'a str,
    request_id: &'a str,
    status: &'static str,
    created_at: &'a str,
    units: &'a Units,
    list_price: i64,
    charged: i64,
    /// Charged amount per pot, as an object keyed by pot.
    #[serde(serialize_with = "pots_as_object")]
    by_source: &'a [(Pot, i64)],
}

impl UsageRecord<'_> {
    /// The usage line of `task`, if it is settled; it is dated when the task ended.
    pub fn of(task: &TaskRecord) -> Option<UsageRecord<'_>> {
        let settlement = task.billing.as_ref()?.settlement.as_ref()?;
        let at_ms = task.ended_ms();
        Some(UsageRecord {
            at: crate::domain::clock::local_time(at_ms),
            at_ms,
            account: &task.account,
            key_prefix: &task.key_prefix,
            model: &task.model,
            operation: &task.operation,
            task_id: &task.task_id,
            request_id: &task.request_id,
            status: task.status.as_str(),
            created_at: &task.created_at,
            units: &settlement.units,
            list_price: settlement.list_price,
            charged: settlement.charged,
            by_source: &settlement.by_pot,
        })
    }
}

/// Which lines of the usage log to read.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub account: Option<String>,
    pub model: Option<String>,
    /// Epoch milliseconds, inclusive.
    pub since: Option<i64>,
    pub until: Option<i64>,
}

impl UsageFilter {
    /// Whether `task`'s line is one to read (if it has one).
    pub fn keeps(&self, task: &TaskRecord) -> bool {
        let at = task.ended_ms();
        self.account.as_deref().is_none_or(|a| a == task.account)
            && self.model.as_deref().is_none_or(|m| m == task.model)
            && self.since.is_none_or(|s| at >= s)
            && self.until.is_none_or(|u| at <= u)
    }

    /// The lines of `tasks` it keeps, oldest first.
    pub fn lines<'t>(
        &self,
        tasks: impl IntoIterator<Item = &'t TaskRecord>,
    ) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        let mut lines: Vec<(i64, serde_json::Value)> = Vec::new();
        for task in tasks {
            if let Some(line) = UsageRecord::of(task).filter(|_| self.keeps(task)) {
                lines.push((line.at_ms, serde_json::to_value(line)?));
            }
        }
        lines.sort_by_key(|(at, _)| *at);
        Ok(lines.into_iter().map(|(_, line)| line).collect())
    }
}

fn pots_as_object<S: serde::Serializer>(pots: &&[(Pot, i64)], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(pots.iter().map(|(pot, amount)| (pot, amount)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The usage log's line format is read by operators' tools: fields in this order, pots as an object.
    #[test]
    fn a_settled_task_is_a_usage_line_in_the_published_shape() {
        let mut task: TaskRecord = serde_json::from_value(json!({
            "task_id": "task-1", "request_id": "img-1", "account": "acme", "key_prefix": "mg-1",
            "model": "beta-image-2.0-pro_t2i", "operation": "t2i", "media": "image", "status": "success",
            "created_at": "2026-11-24 03:20:02", "created_ms": 0, "updated_ms": 0, "deadline_ms": 0,
            "finished_ms": 1_790_000_000_120i64,
            "usage": {"image_count": 1},
            "billing": {"quoted": 40000, "units": {"images": 1}, "hold": [["plan", 10000], ["balance", 30000]],
                        "baseline": 10000000},
        }))
        .unwrap();
        assert!(UsageRecord::of(&task).is_none(), "not settled yet");
        let postings = task.settle().unwrap().postings;
        let mut line: Value = serde_json::to_value(UsageRecord::of(&task).unwrap()).unwrap();
        let fields = line.as_object_mut().unwrap();
        assert!(fields.shift_remove("at").unwrap().is_string());
        assert_eq!(fields.shift_remove("at_ms").unwrap(), 1_790_000_000_120i64, "dated when the task ended");
        assert_eq!(
            line.to_string(),
            r#"{"account":"acme","key_prefix":"mg-1","model":"beta-image-2.0-pro_t2i","operation":"t2i","task_id":"task-1","request_id":"img-1","status":"success","created_at":"2026-11-24 03:20:02","units":{"images":1},"list_price":40000,"charged":40000,"by_source":{"plan":10000,"balance":30000}}"#
        );
        assert_eq!(postings.iter().map(|p| (p.pot, p.delta)).collect::<Vec<_>>(), [(Pot::Plan, 0), (Pot::Balance, 0)]);
        assert!(task.settle().is_none(), "settled once");
    }
}
