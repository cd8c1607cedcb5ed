//! Money earmarked in memory for tasks that are written once, when they end.
//!
//! A synchronous task without an `Idempotency-Key` is not stored while the upstream works: nothing of it
//! is on disk until its ending write, so a crash meanwhile leaves nothing any client heard of and no hold
//! to undo, and a request costs one store write instead of two. What it may cost is earmarked here rather
//! than held in the ledger. Only the writer thread adds to the book, in sequence with every change of
//! funds, and every debit it makes counts what is earmarked (`ledger::append` refuses one that would take
//! it, holds are planned from what is left), so an account's pots never hold less than their earmarks:
//! the ending write that charges an earmark always finds the money.

use super::ledger::{Funds, Pot};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What is earmarked, per account and pot.
#[derive(Default)]
pub(crate) struct Book(Mutex<HashMap<String, Funds>>);

impl Book {
    /// What `account` has earmarked, per pot.
    pub(crate) fn of(&self, account: &str) -> Funds {
        self.lock().get(account).copied().unwrap_or_default()
    }

    /// Earmarks `split` for a task of `account`. The writer's alone: it decided `split` from the funds in
    /// its transaction, less what was earmarked already.
    pub(crate) fn earmark(self: &Arc<Book>, account: &str, split: Vec<(Pot, i64)>) -> Earmark {
        let mut book = self.lock();
        let funds = book.entry(account.to_string()).or_default();
        for (pot, amount) in &split {
            funds.add(*pot, *amount);
        }
        Earmark { book: self.clone(), account: account.to_string(), split }
    }

    fn release(&self, account: &str, split: &[(Pot, i64)]) {
        let mut book = self.lock();
        if let Some(funds) = book.get_mut(account) {
            for (pot, amount) in split {
                funds.add(*pot, -amount);
            }
            if *funds == Funds::default() {
                book.remove(account);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Funds>> {
        // A panic elsewhere cannot leave a half-made change: every change is made under one lock.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Money earmarked for one task: released when dropped (the task was never stored, so nothing was
/// charged), or spent by the write that stores the task's end.
pub struct Earmark {
    book: Arc<Book>,
    account: String,
    split: Vec<(Pot, i64)>,
}

impl Earmark {
    /// How much each pot earmarked, in funding order.
    pub fn split(&self) -> &[(Pot, i64)] {
        &self.split
    }

    /// Takes the earmark off the book, inside the write that charges what the task used.
    pub(crate) fn spend(mut self) {
        self.book.release(&self.account, &std::mem::take(&mut self.split));
    }
}

impl Drop for Earmark {
    fn drop(&mut self) {
        if !self.split.is_empty() {
            self.book.release(&self.account, &self.split);
        }
    }
}

impl std::fmt::Debug for Earmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Earmark").field("account", &self.account).field("split", &self.split).finish()
    }
}
