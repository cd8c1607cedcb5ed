//! Money: the price of a request before it is forwarded, the hold that reserves it (ledger entries, or an
//! earmark in memory for a task written once, when it ends), the settlement that posts what the upstream's
//! `usage` says was delivered (or voids the hold), and the display-only equivalent-usage projection.
//! Amounts are integer micro-units; no float ever holds money.

pub mod equivalent;
pub mod pricing;

/// The largest amount of money the gateway keeps anywhere, in micro-units: 10^16 (ten billion units). An
/// amount, a price, or a pot or sum after a change beyond it is refused, so no arithmetic on money can
/// overflow (three full pots still fit an `i64` many times over).
pub const MAX_MICROS: i64 = 10_000_000_000_000_000;

/// `a + b`, if it stays within `±MAX_MICROS`.
pub fn checked_sum(a: i64, b: i64) -> Option<i64> {
    a.checked_add(b).filter(|sum| sum.abs() <= MAX_MICROS)
}

use crate::store::ledger::{EntryKind, Posting, Pot};
use crate::store::{TaskRecord, TaskStatus};
use pricing::Units;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The billing state stored on a task.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskBilling {
    /// List price of the request as submitted.
    pub quoted: i64,
    pub units: Units,
    /// What was set aside, per pot, in funding order.
    pub hold: Vec<(Pot, i64)>,
    /// The hold was an earmark in memory, not ledger entries (a task written once, when it ends): its
    /// settlement charges what was used and has nothing to give back.
    #[serde(default)]
    pub earmarked: bool,
    /// Equivalent-usage baseline in force at submission: micro-units per million tokens.
    pub baseline: u64,
    #[serde(default)]
    pub settlement: Option<Settlement>,
}

impl TaskBilling {
    /// Whether the task's ledger entries are kept on its settlement (an earmarked task's charge, see
    /// `ledger::entries_on`, which names and dates them) rather than as ledger rows.
    pub fn entries_on_settlement(&self) -> bool {
        self.earmarked
    }
}

/// How a task's hold ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settlement {
    /// `posted` (what was delivered is charged) or `voided` (nothing is: a held task's hold is given back, an
    /// earmarked one's released).
    pub outcome: String,
    /// Amount charged, in micro-units.
    pub charged: i64,
    /// List price of what was delivered (before trial, plan and balance offsets).
    pub list_price: i64,
    /// Charged amount per pot.
    pub by_pot: Vec<(Pot, i64)>,
    pub units: Units,
    /// An earmarked task's charge is journaled here rather than as `LEDGER` rows: one entry per pot of
    /// `by_pot`, numbered from this (`ledger::entries_on`).
    #[serde(default)]
    pub ledger_seq: Option<u64>,
}

/// One line of the usage log (`GET /admin/v1/usage`): a settled task's settlement, with what names the
/// task. It is read off the task record rather than stored beside it: a task's settlement is written in the
/// transaction that ends it and a task never changes after that, so the line is fixed from then on.
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
            at: crate::tasks::local_time(at_ms),
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

fn pots_as_object<S: serde::Serializer>(pots: &&[(Pot, i64)], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(pots.iter().map(|(pot, amount)| (pot, amount)))
}

/// Settles a task that has just reached a terminal state: returns the ledger postings, and writes the
/// settlement onto the task (which makes it a line of the usage log, [`UsageRecord::of`]). Called inside the
/// store transaction that makes the state terminal, so it happens exactly once.
pub fn settle(task: &mut TaskRecord) -> Option<Vec<Posting>> {
    let billing = task.billing.as_ref()?;
    if billing.settlement.is_some() {
        return None;
    }
    let held = billing.hold.iter().map(|(_, a)| *a).try_fold(0, checked_sum)?;
    let (charged_total, list_price, units, outcome) = if task.status == TaskStatus::Success {
        // The task carries what it needs to settle: a model since removed from the spec prices it as quoted.
        let delivered = match crate::catalog::ModelSpec::find(&task.model) {
            Some(model) => pricing::actual(model, &billing.units, task.usage.as_ref()),
            None => pricing::Delivered { amount: billing.quoted, units: billing.units.clone(), usage_unusable: false },
        };
        if delivered.usage_unusable {
            crate::metrics::usage_unusable();
            tracing::warn!(task_id = task.task_id, "the upstream's usage makes no sense; priced as quoted");
        }
        // Within [0, hold]: the hold is the most a request can cost (the client agreed to the quoted price),
        // and nothing an upstream says can make a task pay the account.
        (delivered.amount.clamp(0, held.max(0)), delivered.amount, delivered.units, "posted")
    } else {
        (0, 0, billing.units.clone(), "voided")
    };
    let mut left = charged_total;
    let mut postings = Vec::new();
    let mut by_pot = Vec::new();
    for (pot, amount) in &billing.hold {
        let used = left.min(*amount);
        left -= used;
        if used > 0 {
            by_pot.push((*pot, used));
        }
        let (kind, delta) = match (billing.earmarked, outcome == "posted") {
            (false, true) => (EntryKind::Post, amount - used),
            (false, false) => (EntryKind::Void, *amount),
            (true, _) => (EntryKind::Charge, -used),
        };
        // A held task's post closes its hold even when it gives nothing back; an earmarked task has no hold
        // to close, so a charge of nothing is no entry.
        if billing.earmarked && delta == 0 {
            continue;
        }
        // Entries kept on the settlement are named and dated from it: their postings only move the funds.
        let (task_id, note) = if billing.entries_on_settlement() {
            (None, String::new())
        } else {
            (Some(task.task_id.clone()), entry_note(task))
        };
        postings.push(Posting { account: task.account.clone(), kind, pot: *pot, delta, task_id, note });
    }
    let settlement =
        Settlement { outcome: outcome.into(), charged: charged_total, list_price, by_pot, units, ledger_seq: None };
    task.billing.as_mut()?.settlement = Some(settlement);
    Some(postings)
}

/// The note on a task's settlement entries.
pub fn entry_note(task: &TaskRecord) -> String {
    format!("{} {}", task.status.as_str(), task.model)
}

/// The settlement summary shown on a finished task.
pub fn summary(task: &TaskRecord) -> Option<Value> {
    let s = task.billing.as_ref()?.settlement.as_ref()?;
    Some(
        json!({"outcome": s.outcome, "charged": s.charged, "list_price": s.list_price, "by_source": s.by_pot, "units": s.units}),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
        let postings = settle(&mut task).unwrap();
        let mut line: Value = serde_json::to_value(UsageRecord::of(&task).unwrap()).unwrap();
        let fields = line.as_object_mut().unwrap();
        assert!(fields.shift_remove("at").unwrap().is_string());
        assert_eq!(fields.shift_remove("at_ms").unwrap(), 1_790_000_000_120i64, "dated when the task ended");
        assert_eq!(
            line.to_string(),
            r#"{"account":"acme","key_prefix":"mg-1","model":"beta-image-2.0-pro_t2i","operation":"t2i","task_id":"task-1","request_id":"img-1","status":"success","created_at":"2026-11-24 03:20:02","units":{"images":1},"list_price":40000,"charged":40000,"by_source":{"plan":10000,"balance":30000}}"#
        );
        assert_eq!(postings.iter().map(|p| (p.pot, p.delta)).collect::<Vec<_>>(), [(Pot::Plan, 0), (Pot::Balance, 0)]);
        assert!(settle(&mut task).is_none(), "settled once");
    }
}
