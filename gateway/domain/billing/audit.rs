//! The ledger's audit, as plain rules every backend runs over what it stores: every pot equals the sum of
//! its entries and is never negative, each entry is numbered once, and every task's money adds up (at most
//! one hold and one settlement entry per pot, a charge within `[0, hold]`, entries that sum to its charge).

use super::TaskBilling;
use super::books::{Entry, EntryKind, Funds, Pot};
use super::micros::checked_sum;
use serde::Serialize;
use std::collections::BTreeMap;

/// What `verify` found.
#[derive(Debug, Serialize)]
pub struct LedgerReport {
    pub entries: u64,
    pub accounts: usize,
    /// Accounts whose cached funds differ from the sum of their entries, or whose pots are negative.
    pub problems: Vec<String>,
}

/// What the ledger check needs of a task's billing.
pub struct TaskMoney {
    task_id: String,
    held: Option<i64>,
    earmarked: bool,
    /// `(charged, the sum of its per-pot charges)`, once settled.
    settled: Option<(i64, Option<i64>)>,
}

impl TaskMoney {
    pub fn of(task_id: &str, billing: &TaskBilling) -> TaskMoney {
        let total = |amounts: &[(Pot, i64)]| amounts.iter().map(|(_, a)| *a).try_fold(0, checked_sum);
        TaskMoney {
            task_id: task_id.to_string(),
            held: total(&billing.hold),
            earmarked: billing.earmarked,
            settled: billing.settlement.as_ref().map(|s| (s.charged, total(&s.by_pot))),
        }
    }
}

/// Audits `entries` (every entry, by sequence number) against `cached` (each account's funds as the store
/// keeps them) and `tasks` (the money of every task with billing).
pub fn audit(entries: &[Entry], tasks: &[TaskMoney], cached: &BTreeMap<String, Funds>) -> LedgerReport {
    let mut sums: BTreeMap<String, Funds> = BTreeMap::new();
    let mut last_seq = 0;
    let mut problems = Vec::new();
    for entry in entries {
        if entry.seq == last_seq {
            problems.push(format!("entry {} numbered twice", entry.seq));
        }
        last_seq = entry.seq;
        if sums.entry(entry.account.clone()).or_default().add(entry.pot, entry.delta).is_none() {
            problems.push(format!("{}: entry {} takes a pot past the maximum", entry.account, entry.seq));
        }
    }
    problems.extend(task_problems(entries, tasks));
    for (account, sum) in &sums {
        if cached.get(account) != Some(sum) {
            problems.push(format!("{account}: entries sum to {sum:?}, cached {:?}", cached.get(account)));
        }
        if sum.free_trial < 0 || sum.plan < 0 || sum.balance < 0 {
            problems.push(format!("{account}: negative pot {sum:?}"));
        }
    }
    for account in cached.keys().filter(|a| !sums.contains_key(*a)) {
        problems.push(format!("{account}: cached funds without entries"));
    }
    LedgerReport { entries: entries.len() as u64, accounts: sums.len(), problems }
}

/// Each task whose entries or settlement break the rules, in words.
fn task_problems(entries: &[Entry], tasks: &[TaskMoney]) -> Vec<String> {
    #[derive(Default)]
    struct Seen {
        holds: BTreeMap<Pot, u32>,
        settlements: BTreeMap<Pot, u32>,
        sum: Option<i64>,
    }
    let mut seen: std::collections::HashMap<&str, Seen> = std::collections::HashMap::new();
    for entry in entries {
        let Some(task) = entry.task_id.as_deref() else { continue };
        let task = seen.entry(task).or_default();
        let count = match entry.kind {
            EntryKind::Hold => &mut task.holds,
            EntryKind::Post | EntryKind::Void | EntryKind::Charge => &mut task.settlements,
            EntryKind::TopUp | EntryKind::Grant | EntryKind::Plan => continue,
        };
        *count.entry(entry.pot).or_default() += 1;
        task.sum = checked_sum(task.sum.unwrap_or(0), entry.delta);
    }
    let mut problems = Vec::new();
    for task in tasks {
        let id = &task.task_id;
        let entries = seen.remove(id.as_str()).unwrap_or_default();
        let Some(held) = task.held else {
            problems.push(format!("task {id}: its hold is past the maximum"));
            continue;
        };
        if entries.holds.values().chain(entries.settlements.values()).any(|n| *n > 1) {
            problems.push(format!("task {id}: a pot is held or settled more than once"));
        }
        let sum = entries.sum.unwrap_or(0);
        match task.settled {
            Some((charged, by_pot)) => {
                if !(0..=held).contains(&charged) {
                    problems.push(format!("task {id}: charged {charged}, outside [0, {held}] (its hold)"));
                }
                if by_pot != Some(charged) {
                    problems.push(format!("task {id}: its charges per pot do not add up to {charged}"));
                }
                let held_in_rows = !task.earmarked && held > 0;
                if (held_in_rows || task.earmarked) && sum != -charged {
                    problems.push(format!("task {id}: its entries sum to {sum}, its settlement charged {charged}"));
                }
            }
            None if !task.earmarked && sum != -held && !entries.holds.is_empty() => {
                problems.push(format!("task {id}: its entries sum to {sum}, its hold is {held}"));
            }
            None => {}
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, kind: EntryKind, pot: Pot, delta: i64) -> Entry {
        let task_id = Some("task-1".to_string());
        Entry { seq, account: "acme".into(), kind, pot, delta, task_id, at_ms: 0, note: String::new() }
    }

    fn task(held: i64, settled: Option<(i64, i64)>) -> TaskMoney {
        TaskMoney {
            task_id: "task-1".into(),
            held: Some(held),
            earmarked: false,
            settled: settled.map(|(charged, by_pot)| (charged, Some(by_pot))),
        }
    }

    #[test]
    fn a_task_whose_money_breaks_the_rules_is_named() {
        let hold = entry(1, EntryKind::Hold, Pot::Balance, -100);
        let post = |seq, delta| entry(seq, EntryKind::Post, Pot::Balance, delta);
        assert!(task_problems(&[hold.clone(), post(2, 40)], &[task(100, Some((60, 60)))]).is_empty());
        assert!(task_problems(std::slice::from_ref(&hold), &[task(100, None)]).is_empty(), "live and held");

        let broken = [
            // Settled twice.
            (vec![hold.clone(), post(2, 40), post(3, 0)], task(100, Some((60, 60)))),
            // Paid the account: a charge below zero.
            (vec![hold.clone(), post(2, 150)], task(100, Some((-50, -50)))),
            // Charged past its hold.
            (vec![hold.clone(), post(2, -20)], task(100, Some((120, 120)))),
            // Entries that do not add up to the charge.
            (vec![hold.clone(), post(2, 50)], task(100, Some((60, 60)))),
            // Per-pot charges that do not add up to the charge.
            (vec![hold.clone(), post(2, 40)], task(100, Some((60, 50)))),
            // Held twice.
            (vec![hold.clone(), entry(2, EntryKind::Hold, Pot::Balance, -100)], task(100, None)),
        ];
        for (entries, task) in broken {
            let problems = task_problems(&entries, &[task]);
            assert!(problems.iter().any(|p| p.contains("task-1")), "{entries:?} passed");
        }
    }
}
