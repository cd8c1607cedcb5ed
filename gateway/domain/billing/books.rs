//! The books: an account's pots, the entries that move money in and out of them, and the order in which
//! pots fund a request. Plain types and rules, shared by every store backend.

use super::micros::checked_sum;
use serde::{Deserialize, Serialize};

/// Where money comes from, in funding order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pot {
    FreeTrial,
    Plan,
    Balance,
}

impl Pot {
    pub const FUNDING_ORDER: [Pot; 3] = [Pot::FreeTrial, Pot::Plan, Pot::Balance];

    /// The pot in a person's words.
    pub fn label(self) -> &'static str {
        match self {
            Pot::FreeTrial => "free trial",
            Pot::Plan => "plan",
            Pot::Balance => "balance",
        }
    }
}

/// Available amounts of an account's pots, in micro-units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Funds {
    pub free_trial: i64,
    pub plan: i64,
    pub balance: i64,
}

impl Funds {
    pub fn get(&self, pot: Pot) -> i64 {
        match pot {
            Pot::FreeTrial => self.free_trial,
            Pot::Plan => self.plan,
            Pot::Balance => self.balance,
        }
    }

    /// What is left of each pot once `earmarked` is set aside. Pots and earmarks stay within
    /// `MAX_MICROS`, so the differences cannot overflow; saturating keeps that true of any input.
    pub fn less(&self, earmarked: &Funds) -> Funds {
        Funds {
            free_trial: self.free_trial.saturating_sub(earmarked.free_trial),
            plan: self.plan.saturating_sub(earmarked.plan),
            balance: self.balance.saturating_sub(earmarked.balance),
        }
    }

    /// `pot` moved by `delta`: `None`, and nothing changed, if it would pass `±MAX_MICROS`.
    #[must_use]
    pub(crate) fn add(&mut self, pot: Pot, delta: i64) -> Option<()> {
        let slot = match pot {
            Pot::FreeTrial => &mut self.free_trial,
            Pot::Plan => &mut self.plan,
            Pot::Balance => &mut self.balance,
        };
        *slot = checked_sum(*slot, delta)?;
        Some(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    TopUp,
    Grant,
    Plan,
    /// Pending: money set aside for a task (negative delta).
    Hold,
    /// Settles a hold: gives back what the task did not use (delta >= 0).
    Post,
    /// Cancels a hold: gives all of it back.
    Void,
    /// What a task whose money was earmarked rather than held used (delta < 0): written when it ends.
    Charge,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub account: String,
    pub kind: EntryKind,
    pub pot: Pot,
    /// Change of the pot's available amount.
    pub delta: i64,
    #[serde(default)]
    pub task_id: Option<String>,
    pub at_ms: i64,
    #[serde(default)]
    pub note: String,
}

/// A draft entry; the ledger assigns sequence and time.
#[derive(Debug, Clone)]
pub struct Posting {
    pub account: String,
    pub kind: EntryKind,
    pub pot: Pot,
    pub delta: i64,
    pub task_id: Option<String>,
    pub note: String,
}

/// Why money could not be set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    /// Not enough in the pots the model may use.
    Insufficient { needed: i64, available: i64 },
    /// A free-trial-only model and the trial is used up.
    TrialExhausted { needed: i64, available: i64 },
}

/// Splits `amount` over the pots in funding order (only the free trial for trial-only models).
pub fn plan_hold(funds: &Funds, amount: i64, trial_only: bool) -> Result<Vec<(Pot, i64)>, Shortfall> {
    let (split, unfunded) = funding(funds, amount, trial_only);
    if unfunded == 0 {
        return Ok(split);
    }
    let available = amount - unfunded;
    Err(if trial_only {
        Shortfall::TrialExhausted { needed: amount, available }
    } else {
        Shortfall::Insufficient { needed: amount, available }
    })
}

/// What each pot the model may use would pay of `amount`, in funding order, and what none of them can:
/// the part left unfunded (0 when the account can pay all of it).
pub fn funding(funds: &Funds, amount: i64, trial_only: bool) -> (Vec<(Pot, i64)>, i64) {
    let pots: &[Pot] = if trial_only { &[Pot::FreeTrial] } else { &Pot::FUNDING_ORDER };
    let mut left = amount.max(0);
    let mut split = Vec::new();
    for pot in pots {
        let take = left.min(funds.get(*pot).max(0));
        if take > 0 {
            split.push((*pot, take));
            left -= take;
        }
    }
    (split, left)
}

/// The ledger entries that hold `split` (from [`plan_hold`]) for task `task_id` of `account`, noted with the
/// task's model.
pub fn hold_postings(account: &str, task_id: &str, model: &str, split: &[(Pot, i64)]) -> Vec<Posting> {
    split
        .iter()
        .map(|(pot, amount)| Posting {
            account: account.to_string(),
            kind: EntryKind::Hold,
            pot: *pot,
            delta: -amount,
            task_id: Some(task_id.to_string()),
            note: model.to_string(),
        })
        .collect()
}
