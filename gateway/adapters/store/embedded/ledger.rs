//! The ledger: append-only entries, each moving money into or out of one of an account's three pots. A
//! pot's available amount is always the sum of its entries; `FUNDS` caches those sums and is updated in the
//! same transaction as the entries, and [`Ledger::verify_ledger`] proves the two agree. Money earmarked in
//! memory (`earmarks`) stays in its pot until it is charged, and no other debit may take it.
//!
//! Entries are `LEDGER` rows, except an earmarked task's charge: it is journaled on the task's settlement,
//! which holds all it says (pot, amount, task, time) and is written in the same transaction, so it costs
//! no row of its own (the synchronous path's busiest write). Sequence numbers come from one counter
//! (`SEQUENCES`) for both, and every read of the entries merges the two.

use super::Earmark;
use super::earmarks::{Book, Move};
use super::overlay::{ReadTable, View};
use super::tables::{LEDGER_SEQ, SEQUENCES, USAGE_LINES};
use super::{Commit, FUNDS, LEDGER, Refusal, Store, StoreError, TASKS, TaskRecord, Tx, decode, encode};
use super::{Hold, blocking};
use crate::domain::audit::{Actor, Change};
use crate::domain::billing::MAX_MICROS;
use crate::domain::billing::audit;
use crate::domain::billing::audit::{LedgerReport, TaskMoney};
use crate::domain::billing::books::Shortfall;
use crate::domain::billing::books::{Entry, Funds, Posting};
use crate::domain::usage_log::{UsageFilter, UsageLine};
use crate::ports::storage::Ledger;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) fn funds_in(tx: &Tx, account: &str) -> Result<Funds, StoreError> {
    funds_row(&*tx.open_table(FUNDS)?, account)
}

/// An account's funds as `table` (`FUNDS`) holds them; none yet is nothing in every pot.
pub(crate) fn funds_row(
    table: &ReadTable<'_, &'static str, &'static [u8]>,
    account: &str,
) -> Result<Funds, StoreError> {
    Ok(table.get(account)?.map(|v| decode(v.value())).transpose()?.unwrap_or_default())
}

/// Where appended entries are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// As `LEDGER` rows.
    Rows,
    /// On the settlement of the earmarked task they charge, one per pot of its `by_pot` (see [`entries_on`]);
    /// the caller records the first one's sequence number there.
    OnSettlement,
}

/// Appends entries and updates the cached sums, inside the caller's transaction, spending `spending` if
/// given (its money leaves the book as the entries take it from the pots). A debit that would leave a pot
/// below what is earmarked from it is refused (and so is one that would leave it negative). Returns the
/// first entry's sequence number (`None` for no postings).
pub(crate) fn append(
    tx: &Tx,
    earmarks: &Arc<Book>,
    postings: Vec<Posting>,
    spending: Option<Earmark>,
    keep: Keep,
) -> Result<Option<u64>, StoreError> {
    if postings.is_empty() {
        return Ok(None);
    }
    let mut funds_table = tx.open_table(FUNDS)?;
    // Each account's funds as the postings leave them, read before anything is decided or written.
    let mut funds: Vec<(&str, Funds)> = Vec::with_capacity(1);
    let mut moves = Vec::with_capacity(postings.len());
    for p in &postings {
        let index = match funds.iter().position(|(account, _)| *account == p.account) {
            Some(index) => index,
            None => {
                funds.push((&p.account, funds_row(&funds_table, &p.account)?));
                funds.len() - 1
            }
        };
        let account = &mut funds[index].1;
        if p.delta.unsigned_abs() > MAX_MICROS.unsigned_abs() || account.add(p.pot, p.delta).is_none() {
            return Err(StoreError::refused(
                Refusal::TooLarge,
                format!(
                    "{} micro-units would take the {:?} pot of `{}` past the maximum of {MAX_MICROS} micro-units",
                    p.delta, p.pot, p.account
                ),
            ));
        }
        moves.push(Move { account: &p.account, pot: p.pot, delta: p.delta, after: account.get(p.pot) });
    }
    let debited = earmarks.decide(&moves, spending).map_err(|e| StoreError::refused(Refusal::Conflict, e))?;
    if !debited.is_empty() {
        let book = earmarks.clone();
        tx.on_undo(move || book.forget(&debited));
    }
    for (account, funds) in &funds {
        funds_table.insert(*account, encode(funds)?.as_slice())?;
    }
    let first = take_seqs(tx, postings.len() as u64)?;
    if keep == Keep::OnSettlement {
        return Ok(Some(first));
    }
    let mut ledger = tx.open_table(LEDGER)?;
    let now = chrono::Utc::now().timestamp_millis();
    for (seq, p) in (first..).zip(postings) {
        let entry = Entry {
            seq,
            account: p.account,
            kind: p.kind,
            pot: p.pot,
            delta: p.delta,
            task_id: p.task_id,
            at_ms: now,
            note: p.note,
        };
        ledger.insert(seq, encode(&entry)?.as_slice())?;
    }
    Ok(Some(first))
}

/// Takes `count` sequence numbers for new entries; returns the first. The counter is written with the
/// first entry, so a store without it has none and starts at 1.
fn take_seqs(tx: &Tx, count: u64) -> Result<u64, StoreError> {
    let mut sequences = tx.open_table(SEQUENCES)?;
    let first = sequences.get(LEDGER_SEQ)?.map_or(1, |next| next.value());
    sequences.insert(LEDGER_SEQ, first + count)?;
    Ok(first)
}

/// The entries `task`'s settlement holds ([`Keep::OnSettlement`]): an earmarked task's charge, dated when
/// the task ended.
pub(crate) fn entries_on(task: &TaskRecord) -> Vec<Entry> {
    UsageLine::of(task).map(|line| line.charge_entries()).unwrap_or_default()
}

impl Store {
    /// Everything the store holds, as of one snapshot ([`crate::ports::storage::Export`]).
    pub fn export(&self) -> Result<crate::ports::storage::Export, StoreError> {
        use super::{ACCOUNTS, IDEMPOTENCY, KEYS, MODEL_SWITCHES};
        let view = self.overlay.snapshot(&self.db)?;
        let mut export = crate::ports::storage::Export::default();
        for row in view.open_table(ACCOUNTS)?.iter()? {
            export.accounts.push(decode(row?.1.value())?);
        }
        for row in view.open_table(KEYS)?.iter()? {
            let (hash, record) = row?;
            let hash = <[u8; 32]>::try_from(hash.value()).map_err(|_| StoreError::new("a key hash is not 32 bytes"))?;
            export.keys.push((hash, decode(record.value())?));
        }
        for row in view.open_table(FUNDS)?.iter()? {
            let (account, funds) = row?;
            export.funds.push((account.value().to_string(), decode(funds.value())?));
        }
        for row in view.open_table(LEDGER)?.iter()? {
            export.entries.push(decode(row?.1.value())?);
        }
        for row in view.open_table(TASKS)?.iter()? {
            let task: TaskRecord = decode(row?.1.value())?;
            export.entries.extend(entries_on(&task));
            export.tasks.push(task);
        }
        for line in usage_lines(&view)? {
            export.entries.extend(line.charge_entries());
            export.usage_lines.push(line);
        }
        export.entries.sort_by_key(|entry| entry.seq);
        for row in view.open_table(IDEMPOTENCY)?.iter()? {
            let (key, record) = row?;
            export.idempotency.push((key.value().to_string(), decode(record.value())?));
        }
        for row in view.open_table(MODEL_SWITCHES)?.iter()? {
            let (model, enabled) = row?;
            export.switches.push((model.value().to_string(), enabled.value()));
        }
        for row in view.open_table(super::tables::WEBHOOK_SETTINGS)?.iter()? {
            let (account, settings) = row?;
            export.webhook_settings.push((account.value().to_string(), decode(settings.value())?));
        }
        for row in view.open_table(super::tables::DELIVERIES)?.iter()? {
            export.deliveries.push(decode(row?.1.value())?);
        }
        for row in view.open_table(super::tables::OPERATORS)?.iter()? {
            export.operators.push(decode(row?.1.value())?);
        }
        for row in view.open_table(super::tables::AUDIT)?.iter()? {
            export.audit.push(decode(row?.1.value())?);
        }
        Ok(export)
    }
}

/// Every entry in `view`, rows and settlements', by sequence number; and the money of every task.
fn entries_and_tasks(view: &View) -> Result<(Vec<Entry>, Vec<TaskMoney>), StoreError> {
    let mut entries = Vec::new();
    for row in view.open_table(LEDGER)?.iter()? {
        entries.push(decode::<Entry>(row?.1.value())?);
    }
    let mut tasks = Vec::new();
    for row in view.open_table(TASKS)?.iter()? {
        let task: TaskRecord = decode(row?.1.value())?;
        entries.extend(entries_on(&task));
        if let Some(billing) = &task.billing {
            tasks.push(TaskMoney::of(&task.task_id, billing));
        }
    }
    // A purged task's charge entries, kept on its usage line.
    for line in usage_lines(view)? {
        entries.extend(line.charge_entries());
    }
    entries.sort_by_key(|entry| entry.seq);
    Ok((entries, tasks))
}

#[async_trait::async_trait]
impl Ledger for Store {
    async fn post(&self, postings: Vec<Posting>, by: &Actor) -> Result<(), StoreError> {
        let by = by.clone();
        blocking(self, move |store| {
            let earmarks = store.earmarks.clone();
            store.write(move |tx| {
                for posting in postings {
                    let before = funds_in(tx, &posting.account)?.less(&earmarks.of(&posting.account)).get(posting.pot);
                    let change = Change::posting(&by, &posting, before);
                    append(tx, &earmarks, vec![posting], None, Keep::Rows)?;
                    if let Some(change) = change {
                        super::audit::append(tx, change)?;
                    }
                }
                Ok(())
            })
        })
        .await
    }

    async fn has_entries(&self, account: &str) -> Result<bool, StoreError> {
        // An account's first entry writes its funds row.
        Ok(self.view()?.open_table(FUNDS)?.get(account)?.is_some())
    }

    async fn funds(&self, account: &str) -> Result<Funds, StoreError> {
        Ok(funds_row(&self.view()?.open_table(FUNDS)?, account)?.less(&self.earmarks.of(account)))
    }

    fn earmarked(&self, account: &str) -> Funds {
        self.earmarks.of(account)
    }

    async fn entries(&self, account: Option<&str>) -> Result<Vec<Entry>, StoreError> {
        // A full read of both tables, the rows and the settlements': for the back office.
        let (mut entries, _) = entries_and_tasks(&self.view()?)?;
        entries.retain(|entry| account.is_none_or(|a| a == entry.account));
        Ok(entries)
    }

    async fn verify_ledger(&self) -> Result<LedgerReport, StoreError> {
        blocking(self, |store| {
            // A snapshot: on a live store, entries and funds read at different moments would not agree.
            let tx = store.overlay.snapshot(&store.db)?;
            let (entries, tasks) = entries_and_tasks(&tx)?;
            let mut cached: BTreeMap<String, Funds> = BTreeMap::new();
            for row in tx.open_table(FUNDS)?.iter()? {
                let (account, value) = row?;
                cached.insert(account.value().to_string(), decode(value.value())?);
            }
            Ok(audit::audit(&entries, &tasks, &cached))
        })
        .await
    }

    async fn usage(&self, filter: UsageFilter) -> Result<Vec<serde_json::Value>, StoreError> {
        let tx = self.view()?;
        let tasks: Vec<TaskRecord> =
            tx.open_table(TASKS)?.iter()?.map(|row| decode(row?.1.value())).collect::<Result<_, _>>()?;
        Ok(filter.lines(&tasks, usage_lines(&tx)?)?)
    }

    async fn earmark(&self, account: &str, hold: Hold) -> Result<Result<Earmark, Shortfall>, StoreError> {
        // A stopped writer could not store the task's end: refuse before the upstream is called.
        if !self.writer.running() {
            return Err(StoreError::unavailable("the store can no longer make writes durable"));
        }
        if let Some(decided) = self.earmarks.try_earmark(account, hold) {
            return Ok(decided);
        }
        // The account's funds are not in memory yet: the writer reads them, in a write that writes nothing.
        let (account, earmarks) = (account.to_string(), self.earmarks.clone());
        self.queue(Commit::Deferred, move |tx: &Tx| Ok(earmarks.earmark_from(&account, funds_in(tx, &account)?, hold)))
            .await
    }

    fn earmark_now(&self, account: &str, hold: Hold) -> Option<Result<Earmark, Shortfall>> {
        // As `earmark` decides it, without its write: not at all once the writer has stopped.
        if !self.writer.running() {
            return None;
        }
        self.earmarks.try_earmark(account, hold)
    }
}

/// The usage lines of the tasks retention purged, in the order they ended.
fn usage_lines(view: &View) -> Result<Vec<UsageLine>, StoreError> {
    view.open_table(USAGE_LINES)?.iter()?.map(|row| decode(row?.1.value())).collect()
}
