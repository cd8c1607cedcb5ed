//! Money earmarked in memory for tasks in flight, and the one place where spending is decided.
//!
//! A synchronous task without an `Idempotency-Key` is not stored while the upstream works: nothing of it
//! is on disk until its ending write, so a crash meanwhile leaves nothing any client heard of and no hold
//! to undo, and a request costs one store write instead of two. What it may cost is earmarked here
//! instead. A hold (ledger entries, for every other task) is an earmark turned into entries at once.
//!
//! Every decision to spend is made under the book's lock, from funds no greater than the writer's: each
//! account's `known` funds take every debit as the writer makes it, and are forgotten on a credit or when a
//! write that debited them is undone, until the writer reloads them. So the request handler earmarks
//! without waiting for the writer when the account's funds are known, and the writer refuses a debit
//! that would take earmarked money: an account's pots never hold less than their earmarks, and the write
//! that charges an earmark always finds its money.

use super::Hold;
use crate::domain::billing::books::{Funds, Pot, Shortfall, plan_hold};
use crate::ports::storage::{Earmark, Releases};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// One account's page of the book.
#[derive(Default)]
struct Purse {
    earmarked: Funds,
    /// Its funds as the writer has them (debits under way included); `None` until the writer first earmarks
    /// for it, and again after a credit or an undone debit (the next earmark asks the writer).
    known: Option<Funds>,
}

/// What is earmarked, per account and pot, and the funds it is earmarked from.
#[derive(Default)]
pub(crate) struct Book(Mutex<HashMap<String, Purse>>);

/// One change of a pot, as the writer is about to make it.
pub(crate) struct Move<'p> {
    pub account: &'p str,
    pub pot: Pot,
    pub delta: i64,
    /// The pot's funds after it.
    pub after: i64,
}

impl Book {
    /// What `account` has earmarked, per pot.
    pub(crate) fn of(&self, account: &str) -> Funds {
        self.lock().get(account).map(|purse| purse.earmarked).unwrap_or_default()
    }

    /// Earmarks `hold` from the account's known funds; `None` when they are not known (then the writer
    /// decides: [`Book::earmark_from`]).
    pub(crate) fn try_earmark(self: &Arc<Book>, account: &str, hold: Hold) -> Option<Result<Earmark, Shortfall>> {
        let mut book = self.lock();
        let purse = book.get_mut(account)?;
        let known = purse.known?;
        Some(self.take(purse, account, known, hold))
    }

    /// Earmarks `hold` from `funds`, the account's funds in the writer's transaction (which become its
    /// known funds).
    pub(crate) fn earmark_from(
        self: &Arc<Book>,
        account: &str,
        funds: Funds,
        hold: Hold,
    ) -> Result<Earmark, Shortfall> {
        let mut book = self.lock();
        let purse = book.entry(account.to_string()).or_default();
        purse.known = Some(funds);
        self.take(purse, account, funds, hold)
    }

    fn take(
        self: &Arc<Book>,
        purse: &mut Purse,
        account: &str,
        funds: Funds,
        hold: Hold,
    ) -> Result<Earmark, Shortfall> {
        let split = plan_hold(&funds.less(&purse.earmarked), hold.amount, hold.trial_only)?;
        // Within the pots' funds, so within the maximum: a sum past it is refused like any shortfall.
        let mut earmarked = purse.earmarked;
        for (pot, amount) in &split {
            earmarked.add(*pot, *amount).ok_or(Shortfall::Insufficient { needed: hold.amount, available: 0 })?;
        }
        purse.earmarked = earmarked;
        let book: Arc<dyn Releases> = self.clone();
        Ok(Earmark::new(account.to_string(), split, book))
    }

    /// Decides the writer's changes of pots, spending `spending` (its money leaves the book as the moves
    /// take it from the pots): refused, with nothing changed but `spending` released, if a debit would
    /// leave a pot below what is earmarked from it. Returns the accounts whose known funds took a debit,
    /// to forget if the write is undone.
    pub(crate) fn decide(&self, moves: &[Move<'_>], spending: Option<Earmark>) -> Result<Vec<String>, String> {
        let mut book = self.lock();
        if let Some(earmark) = spending {
            let (account, split) = earmark.spend();
            release(&mut book, &account, &split);
        }
        for step in moves.iter().filter(|step| step.delta < 0) {
            let keep = book.get(step.account).map_or(0, |purse| purse.earmarked.get(step.pot));
            if step.after < keep {
                return Err(format!(
                    "{} pot {:?} would go below {keep} (what tasks in flight have earmarked)",
                    step.account, step.pot
                ));
            }
        }
        let mut debited = Vec::new();
        for step in moves {
            let Some(purse) = book.get_mut(step.account) else { continue };
            match (step.delta.signum(), purse.known.as_mut()) {
                (-1, Some(known)) => {
                    // Funds it cannot keep exactly are read again from the store.
                    if known.add(step.pot, step.delta).is_none() {
                        purse.known = None;
                    }
                    debited.push(step.account.to_string());
                }
                (1, _) => purse.known = None,
                _ => {}
            }
        }
        Ok(debited)
    }

    /// Forgets the known funds of `accounts` (a write that debited them was undone).
    pub(crate) fn forget(&self, accounts: &[String]) {
        let mut book = self.lock();
        for account in accounts {
            if let Some(purse) = book.get_mut(account) {
                purse.known = None;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Purse>> {
        // A panic elsewhere cannot leave a half-made change: every change is made under one lock.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Releases for Book {
    fn release(&self, account: &str, split: &[(Pot, i64)]) {
        release(&mut self.lock(), account, split);
    }
}

fn release(book: &mut HashMap<String, Purse>, account: &str, split: &[(Pot, i64)]) {
    if let Some(purse) = book.get_mut(account) {
        for (pot, amount) in split {
            // What was added is within the maximum, so taking it back is too.
            let _ = purse.earmarked.add(*pot, -amount);
        }
        if purse.known.is_none() && purse.earmarked == Funds::default() {
            book.remove(account);
        }
    }
}
