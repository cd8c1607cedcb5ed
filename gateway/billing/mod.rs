//! Money: the price of a request before it is forwarded, the hold that reserves it, the settlement that
//! posts what the upstream's `usage` says was delivered (or voids the hold), and the display-only
//! equivalent-usage projection. Amounts are integer micro-units; no float ever holds money.

pub mod equivalent;
pub mod pricing;

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
    /// Equivalent-usage baseline in force at submission: micro-units per million tokens.
    pub baseline: u64,
    #[serde(default)]
    pub settlement: Option<Settlement>,
}

/// How a task's hold ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settlement {
    /// `posted` or `voided`.
    pub outcome: String,
    /// Amount charged, in micro-units.
    pub charged: i64,
    /// List price of what was delivered (before trial, plan and balance offsets).
    pub list_price: i64,
    /// Charged amount per pot.
    pub by_pot: Vec<(Pot, i64)>,
    pub units: Units,
}

/// Settles a task that has just reached a terminal state: returns the ledger postings and the usage-log
/// record, and writes the settlement onto the task. Called inside the store transaction that makes the
/// state terminal, so it happens exactly once.
pub fn settle(task: &mut TaskRecord) -> Option<(Vec<Posting>, Value)> {
    let mut billing = task.billing.clone()?;
    if billing.settlement.is_some() {
        return None;
    }
    let model = crate::catalog::ModelSpec::find(&task.model)?;
    let held: i64 = billing.hold.iter().map(|(_, a)| a).sum();
    let (charged_total, list_price, units, outcome) = if task.status == TaskStatus::Success {
        let (price, units) = pricing::actual(model, &billing.units, task.usage.as_ref());
        // The hold is the most a request can cost: the client agreed to the quoted price.
        (price.min(held), price, units, "posted")
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
        let (kind, delta) =
            if outcome == "posted" { (EntryKind::Post, amount - used) } else { (EntryKind::Void, *amount) };
        postings.push(Posting {
            account: task.account.clone(),
            kind,
            pot: *pot,
            delta,
            task_id: Some(task.task_id.clone()),
            note: format!("{} {}", task.status.as_str(), task.model),
        });
    }
    let settlement = Settlement {
        outcome: outcome.into(),
        charged: charged_total,
        list_price,
        by_pot: by_pot.clone(),
        units: units.clone(),
    };
    billing.settlement = Some(settlement);
    task.billing = Some(billing);
    let now = crate::tasks::now_ms();
    let record = json!({
        "at": crate::tasks::local_time(now),
        "at_ms": now,
        "account": task.account,
        "key_prefix": task.key_prefix,
        "model": task.model,
        "operation": task.operation,
        "task_id": task.task_id,
        "request_id": task.request_id,
        "status": task.status.as_str(),
        "created_at": task.created_at,
        "units": units,
        "list_price": list_price,
        "charged": charged_total,
        "by_source": by_pot.iter().map(|(p, a)| (serde_json::to_value(p).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(), json!(a))).collect::<serde_json::Map<_, _>>(),
    });
    Some((postings, record))
}

/// The settlement summary shown on a finished task.
pub fn summary(task: &TaskRecord) -> Option<Value> {
    let s = task.billing.as_ref()?.settlement.as_ref()?;
    Some(
        json!({"outcome": s.outcome, "charged": s.charged, "list_price": s.list_price, "by_source": s.by_pot, "units": s.units}),
    )
}
