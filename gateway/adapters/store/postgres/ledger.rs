//! The ledger on PostgreSQL: append-only entries (`ledger`), and each account's pots (`funds`), the sums of
//! its entries, written in the same transaction. Every change to an account's pots locks its `funds` row
//! first, so the decisions to spend from one account are made one at a time, whichever replica makes them.

use super::db_error;
use crate::adapters::store::decode;
use crate::domain::billing::MAX_MICROS;
use crate::domain::billing::audit;
use crate::domain::billing::audit::{LedgerReport, TaskMoney};
use crate::domain::billing::books::{Entry, Funds, Posting};
use crate::domain::tasks::TaskRecord;
use crate::ports::storage::{Refusal, StoreError};
use deadpool_postgres::GenericClient;
use deadpool_postgres::Object;
use serde::{Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;

/// A unit enum's name as serde spells it (`free_trial`, `top_up`, …): how pots and entry kinds are stored.
pub(super) fn name_of<T: Serialize>(value: &T) -> Result<String, StoreError> {
    match serde_json::to_value(value)? {
        serde_json::Value::String(name) => Ok(name),
        other => Err(StoreError::new(format!("{other} is not a name"))),
    }
}

pub(super) fn from_name<T: DeserializeOwned>(name: String) -> Result<T, StoreError> {
    Ok(serde_json::from_value(serde_json::Value::String(name))?)
}

/// An account's pots, if it has a `funds` row; `lock` holds the row until the transaction ends.
pub(super) async fn funds(client: &impl GenericClient, account: &str, lock: bool) -> Result<Option<Funds>, StoreError> {
    let query = if lock {
        "SELECT free_trial, plan, balance FROM funds WHERE account = $1 FOR UPDATE"
    } else {
        "SELECT free_trial, plan, balance FROM funds WHERE account = $1"
    };
    let row = client.query_opt(query, &[&account]).await.map_err(db_error)?;
    Ok(row.map(|row| Funds { free_trial: row.get(0), plan: row.get(1), balance: row.get(2) }))
}

/// Appends `postings` and moves the pots they name, inside the caller's transaction. A change that would
/// take a pot past the maximum, or below zero, is refused and nothing is written. Accounts are locked in
/// name order, so two transactions never wait for each other's locks.
pub(super) async fn append(tx: &impl GenericClient, postings: &[Posting]) -> Result<(), StoreError> {
    let accounts: Vec<&str> = postings.iter().map(|p| p.account.as_str()).collect();
    let mut pots = lock_funds(tx, &accounts).await?;
    for posting in postings {
        move_pots(&mut pots, posting)?;
    }
    insert_entries(tx, postings.iter()).await?;
    store_funds(tx, &pots).await
}

/// The pots of `accounts`, each account's `funds` row made if missing and locked until the transaction
/// ends, in name order.
pub(super) async fn lock_funds(
    tx: &impl GenericClient,
    accounts: &[&str],
) -> Result<BTreeMap<String, Funds>, StoreError> {
    let mut accounts = accounts.to_vec();
    accounts.sort_unstable();
    accounts.dedup();
    tx.execute("INSERT INTO funds (account) SELECT unnest($1::text[]) ON CONFLICT (account) DO NOTHING", &[&accounts])
        .await
        .map_err(db_error)?;
    let rows = tx
        .query(
            "SELECT account, free_trial, plan, balance FROM funds WHERE account = ANY($1) ORDER BY account FOR UPDATE",
            &[&accounts],
        )
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .map(|row| (row.get(0), Funds { free_trial: row.get(1), plan: row.get(2), balance: row.get(3) }))
        .collect())
}

/// Moves the pots `posting` names (in `pots`, from [`lock_funds`]); a change past the maximum, or below
/// zero, is refused and moves nothing.
pub(super) fn move_pots(pots: &mut BTreeMap<String, Funds>, p: &Posting) -> Result<(), StoreError> {
    let account = p.account.as_str();
    let current = pots.get(account).copied().unwrap_or_default();
    let mut moved = current;
    if p.delta.unsigned_abs() > MAX_MICROS.unsigned_abs() || moved.add(p.pot, p.delta).is_none() {
        return Err(StoreError::refused(
            Refusal::TooLarge,
            format!(
                "{} micro-units would take the {:?} pot of `{account}` past the maximum of {MAX_MICROS} micro-units",
                p.delta, p.pot
            ),
        ));
    }
    if moved.get(p.pot) < 0 {
        return Err(StoreError::refused(
            Refusal::Conflict,
            format!("{} micro-units would leave the {:?} pot of `{account}` below zero", p.delta, p.pot),
        ));
    }
    pots.insert(account.to_string(), moved);
    Ok(())
}

/// Inserts ledger entries, in order, with one statement.
pub(super) async fn insert_entries<'p>(
    tx: &impl GenericClient,
    postings: impl Iterator<Item = &'p Posting>,
) -> Result<(), StoreError> {
    let postings: Vec<&Posting> = postings.collect();
    if postings.is_empty() {
        return Ok(());
    }
    let accounts: Vec<&str> = postings.iter().map(|p| p.account.as_str()).collect();
    let kinds = postings.iter().map(|p| name_of(&p.kind)).collect::<Result<Vec<_>, _>>()?;
    let pots = postings.iter().map(|p| name_of(&p.pot)).collect::<Result<Vec<_>, _>>()?;
    let deltas: Vec<i64> = postings.iter().map(|p| p.delta).collect();
    let tasks: Vec<Option<&str>> = postings.iter().map(|p| p.task_id.as_deref()).collect();
    let notes: Vec<&str> = postings.iter().map(|p| p.note.as_str()).collect();
    let now = chrono::Utc::now().timestamp_millis();
    tx.execute(
        "INSERT INTO ledger (account, kind, pot, delta, task_id, at_ms, note) \
         SELECT account, kind, pot, delta, task_id, $7, note \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[]) \
         WITH ORDINALITY AS e(account, kind, pot, delta, task_id, note, n) ORDER BY n",
        &[&accounts, &kinds, &pots, &deltas, &tasks, &notes, &now],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Writes the pots [`lock_funds`] read and [`move_pots`] moved.
pub(super) async fn store_funds(tx: &impl GenericClient, pots: &BTreeMap<String, Funds>) -> Result<(), StoreError> {
    if pots.is_empty() {
        return Ok(());
    }
    let accounts: Vec<&str> = pots.keys().map(String::as_str).collect();
    let column = |pot: fn(&Funds) -> i64| pots.values().map(pot).collect::<Vec<i64>>();
    let (free_trial, plan, balance) = (column(|f| f.free_trial), column(|f| f.plan), column(|f| f.balance));
    tx.execute(
        "UPDATE funds SET free_trial = u.free_trial, plan = u.plan, balance = u.balance \
         FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(account, free_trial, plan, balance) \
         WHERE funds.account = u.account",
        &[&accounts, &free_trial, &plan, &balance],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

fn entry_of(row: tokio_postgres::Row) -> Result<Entry, StoreError> {
    Ok(Entry {
        seq: row.get::<_, i64>(0) as u64,
        account: row.get(1),
        kind: from_name(row.get(2))?,
        pot: from_name(row.get(3))?,
        delta: row.get(4),
        task_id: row.get(5),
        at_ms: row.get(6),
        note: row.get(7),
    })
}

const ENTRY_COLUMNS: &str = "seq, account, kind, pot, delta, task_id, at_ms, note";

pub(super) async fn entries(client: &impl GenericClient, account: Option<&str>) -> Result<Vec<Entry>, StoreError> {
    let rows = match account {
        Some(account) => {
            let query = format!("SELECT {ENTRY_COLUMNS} FROM ledger WHERE account = $1 ORDER BY seq");
            client.query(&query, &[&account]).await
        }
        None => client.query(&format!("SELECT {ENTRY_COLUMNS} FROM ledger ORDER BY seq"), &[]).await,
    };
    rows.map_err(db_error)?.into_iter().map(entry_of).collect()
}

/// Audits the ledger ([`audit::audit`]) as of one snapshot of the database.
pub(super) async fn verify(client: &mut Object) -> Result<LedgerReport, StoreError> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db_error)?;
    let entries = entries(&tx, None).await?;
    let mut tasks = Vec::new();
    for row in tx.query("SELECT record FROM tasks", &[]).await.map_err(db_error)? {
        let task: TaskRecord = decode(row.get(0))?;
        if let Some(billing) = &task.billing {
            tasks.push(TaskMoney::of(&task.task_id, billing));
        }
    }
    let mut cached = BTreeMap::new();
    for row in tx.query("SELECT account, free_trial, plan, balance FROM funds", &[]).await.map_err(db_error)? {
        cached.insert(row.get(0), Funds { free_trial: row.get(1), plan: row.get(2), balance: row.get(3) });
    }
    tx.commit().await.map_err(db_error)?;
    Ok(audit::audit(&entries, &tasks, &cached))
}
