//! The usage log: one line per settled task, read off the task record while the task is kept (a task's
//! settlement is written in the transaction that ends it and a task never changes after that, so the line
//! is fixed from then on), and kept on its own ([`UsageLine`]) once retention purges the task.

use crate::domain::billing::books::{Entry, EntryKind, Pot};
use crate::domain::billing::pricing::Units;
use crate::domain::tasks::{TaskRecord, TaskStatus};
use serde::{Deserialize, Serialize};

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

/// A settled task's line of the usage log, as kept once its task is purged: what the log shows of the task,
/// and where its charge was journaled (an earmarked task's charge is on its settlement, not in the
/// ledger's rows, so the line keeps it for the ledger's check).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageLine {
    pub at_ms: i64,
    pub account: String,
    pub key_prefix: String,
    pub model: String,
    pub operation: String,
    pub task_id: String,
    pub request_id: String,
    pub status: TaskStatus,
    pub created_at: String,
    pub units: Units,
    pub list_price: i64,
    pub charged: i64,
    pub by_pot: Vec<(Pot, i64)>,
    /// `Settlement::ledger_seq`: the first number of an earmarked task's charge entries.
    pub ledger_seq: Option<u64>,
}

impl UsageLine {
    /// The usage line of `task`, if it is settled; it is dated when the task ended.
    pub fn of(task: &TaskRecord) -> Option<UsageLine> {
        let settlement = task.billing.as_ref()?.settlement.as_ref()?;
        Some(UsageLine {
            at_ms: task.ended_ms(),
            account: task.account.clone(),
            key_prefix: task.key_prefix.clone(),
            model: task.model.to_string(),
            operation: task.operation.to_string(),
            task_id: task.task_id.clone(),
            request_id: task.request_id.clone(),
            status: task.status,
            created_at: task.created_at.clone(),
            units: settlement.units.clone(),
            list_price: settlement.list_price,
            charged: settlement.charged,
            by_pot: settlement.by_pot.clone(),
            ledger_seq: settlement.ledger_seq,
        })
    }

    /// The line as the log shows it.
    pub fn record(&self) -> UsageRecord<'_> {
        UsageRecord {
            at: crate::domain::clock::local_time(self.at_ms),
            at_ms: self.at_ms,
            account: &self.account,
            key_prefix: &self.key_prefix,
            model: &self.model,
            operation: &self.operation,
            task_id: &self.task_id,
            request_id: &self.request_id,
            status: self.status.as_str(),
            created_at: &self.created_at,
            units: &self.units,
            list_price: self.list_price,
            charged: self.charged,
            by_source: &self.by_pot,
        }
    }

    /// An earmarked task's charge entries, one per pot, numbered from its settlement's `ledger_seq` (none for
    /// a task whose charge is in the ledger's rows).
    pub fn charge_entries(&self) -> Vec<Entry> {
        let Some(first) = self.ledger_seq else { return Vec::new() };
        (first..)
            .zip(&self.by_pot)
            .map(|(seq, (pot, charged))| Entry {
                seq,
                account: self.account.clone(),
                kind: EntryKind::Charge,
                pot: *pot,
                delta: -charged,
                task_id: Some(self.task_id.clone()),
                at_ms: self.at_ms,
                note: crate::domain::billing::entry_note(self.status.as_str(), &self.model),
            })
            .collect()
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
    /// Whether `line` is one to read.
    pub fn keeps(&self, line: &UsageLine) -> bool {
        self.account.as_deref().is_none_or(|a| a == line.account)
            && self.model.as_deref().is_none_or(|m| m == line.model)
            && self.since.is_none_or(|s| line.at_ms >= s)
            && self.until.is_none_or(|u| line.at_ms <= u)
    }

    /// The lines it keeps of `tasks` and of the lines `kept` of tasks purged since, oldest first.
    pub fn lines<'t>(
        &self,
        tasks: impl IntoIterator<Item = &'t TaskRecord>,
        kept: impl IntoIterator<Item = UsageLine>,
    ) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        let mut lines: Vec<UsageLine> = tasks.into_iter().filter_map(UsageLine::of).chain(kept).collect();
        lines.retain(|line| self.keeps(line));
        lines.sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then_with(|| a.task_id.cmp(&b.task_id)));
        lines.iter().map(|line| serde_json::to_value(line.record())).collect()
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
        assert!(UsageLine::of(&task).is_none(), "not settled yet");
        let postings = task.settle().unwrap().postings;
        let mut line: Value = serde_json::to_value(UsageLine::of(&task).unwrap().record()).unwrap();
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
