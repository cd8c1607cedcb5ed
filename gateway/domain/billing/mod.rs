//! Money: the price of a request before it is forwarded, the hold that reserves it (ledger entries, or an
//! earmark in memory for a task written once, when it ends), the settlement that posts what the upstream
//! says was delivered (its usage, measured in the domain's terms: `usage::Measured`) or voids the hold, and
//! the display-only equivalent-usage projection.
//! Amounts are integer micro-units; no float ever holds money.

pub mod amount;
pub mod audit;
pub mod books;
pub mod equivalent;
pub mod micros;
pub mod pricing;
#[cfg(test)]
mod tests;

pub use micros::{MAX_MICROS, checked_sum};

use crate::domain::usage::Measured;
use books::{EntryKind, Posting, Pot};
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

/// What a settlement needs to know of the task that ended.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub task_id: &'a str,
    pub account: &'a str,
    pub model: &'a str,
    /// The terminal state, as named in the entries' note.
    pub state: &'a str,
    /// `Some` if the work was delivered, with what the upstream says was: that is charged. `None`: the hold
    /// is voided.
    pub delivered: Option<&'a Measured>,
}

/// What settling a task decided: the ledger postings, and whether the upstream's usage made no sense (the
/// task was then priced as quoted, which the caller counts and logs).
#[derive(Debug, Default)]
pub struct Settled {
    pub postings: Vec<Posting>,
    pub usage_unusable: bool,
}

/// Settles a task that has just reached a terminal state: returns the ledger postings, and writes the
/// settlement onto its billing (which makes it a line of the usage log). Called inside the store
/// transaction that makes the state terminal, so it happens exactly once; `None` if already settled.
pub fn settle(billing: &mut TaskBilling, ending: &Ending<'_>) -> Option<Settled> {
    if billing.settlement.is_some() {
        return None;
    }
    let held = billing.hold.iter().map(|(_, a)| *a).try_fold(0, checked_sum)?;
    let mut usage_unusable = false;
    let (charged_total, list_price, units, outcome) = match ending.delivered {
        Some(measured) => {
            // The task carries what it needs to settle: a model since removed from the spec prices it as quoted.
            let delivered = match crate::domain::catalog::ModelSpec::find(ending.model) {
                Some(model) => pricing::actual(model, billing.quoted, &billing.units, measured),
                None => {
                    pricing::Delivered { amount: billing.quoted, units: billing.units.clone(), usage_unusable: false }
                }
            };
            usage_unusable = delivered.usage_unusable;
            // Within [0, hold]: the hold is the most a request can cost (the client agreed to the quoted
            // price), and nothing an upstream says can make a task pay the account.
            (delivered.amount.clamp(0, held.max(0)), delivered.amount, delivered.units, "posted")
        }
        None => (0, 0, billing.units.clone(), "voided"),
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
            (Some(ending.task_id.to_string()), entry_note(ending.state, ending.model))
        };
        postings.push(Posting { account: ending.account.to_string(), kind, pot: *pot, delta, task_id, note });
    }
    billing.settlement = Some(Settlement {
        outcome: outcome.into(),
        charged: charged_total,
        list_price,
        by_pot,
        units,
        ledger_seq: None,
    });
    Some(Settled { postings, usage_unusable })
}

/// The note on a task's settlement entries: its terminal state and its model.
pub fn entry_note(state: &str, model: &str) -> String {
    format!("{state} {model}")
}

/// The settlement summary shown on a finished task.
pub fn summary(billing: &TaskBilling) -> Option<Value> {
    let s = billing.settlement.as_ref()?;
    Some(
        json!({"outcome": s.outcome, "charged": s.charged, "list_price": s.list_price, "by_source": s.by_pot, "units": s.units}),
    )
}
