//! Accounts, their keys (SHA-256 hashes) and model switches.

use super::changes::CHANNEL;
use super::{audit, db_error, ledger};
use crate::domain::audit::{Action, Actor, Change};
use crate::domain::billing::books::{EntryKind, Funds, Posting, Pot};
use crate::domain::tasks::{Account, AccountQuery, AccountSummary, KeyRecord, hash_key};
use crate::ports::storage::{Refusal, StoreError};
use deadpool_postgres::GenericClient;
use deadpool_postgres::Object;
use serde_json::{Value, json};

fn now() -> String {
    chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

fn account_of(row: &tokio_postgres::Row) -> Account {
    let weight: Option<i32> = row.get(3);
    Account {
        name: row.get(0),
        created_at: row.get(1),
        plan: row.get(2),
        queue_weight: weight.map(|w| w.max(1) as u32),
    }
}

/// Tells every replica that keys or switches changed, when the caller's transaction commits.
async fn announce(client: &impl GenericClient, what: &str) -> Result<(), StoreError> {
    client.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &what]).await.map_err(db_error)?;
    Ok(())
}

/// The account, created (by `by`, on the trail) if it does not exist yet, inside the caller's transaction.
pub(super) async fn ensure(client: &impl GenericClient, name: &str, by: &Actor) -> Result<Account, StoreError> {
    let created = client
        .execute(
            "INSERT INTO accounts (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &now()],
        )
        .await
        .map_err(db_error)?;
    let account = get(client, name).await?.ok_or_else(|| StoreError::new(format!("account {name} vanished")))?;
    if created > 0 {
        let change = Change::new(by, Action::AccountOpen, Some(name)).values(Value::Null, json!(account));
        audit::append(client, change).await?;
    }
    Ok(account)
}

/// Opens the account in one transaction with its trail entry.
pub(super) async fn open(client: &mut Object, name: &str, by: &Actor) -> Result<Account, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let account = ensure(&tx, name, by).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(account)
}

pub(super) async fn get(client: &impl GenericClient, name: &str) -> Result<Option<Account>, StoreError> {
    let row = client
        .query_opt("SELECT name, created_at, plan, queue_weight FROM accounts WHERE name = $1", &[&name])
        .await
        .map_err(db_error)?;
    Ok(row.as_ref().map(account_of))
}

/// The plan's name and its pot's entry, in one transaction; the pot is set to `allowance`.
pub(super) async fn set_plan(
    client: &mut Object,
    account: &str,
    plan: &str,
    allowance: i64,
    by: &Actor,
) -> Result<Account, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let row = tx
        .query_opt("SELECT plan FROM accounts WHERE name = $1 FOR UPDATE", &[&account])
        .await
        .map_err(db_error)?
        .ok_or_else(|| StoreError::refused(Refusal::Conflict, format!("No account `{account}`.")))?;
    let plan_before: Option<String> = row.get(0);
    let current = ledger::funds(&tx, account, true).await?.unwrap_or_default().plan;
    let delta = allowance
        .checked_sub(current)
        .ok_or_else(|| StoreError::refused(Refusal::TooLarge, "the plan's allowance is out of range"))?;
    if delta != 0 {
        let posting = Posting {
            account: account.to_string(),
            kind: EntryKind::Plan,
            pot: Pot::Plan,
            delta,
            task_id: None,
            note: format!("plan {plan}"),
        };
        ledger::append(&tx, &[posting]).await?;
    }
    let row = tx
        .query_one(
            "UPDATE accounts SET plan = $2 WHERE name = $1 RETURNING name, created_at, plan, queue_weight",
            &[&account, &plan],
        )
        .await
        .map_err(db_error)?;
    let (before, after) =
        (json!({"plan": plan_before, "allowance": current}), json!({"plan": plan, "allowance": allowance}));
    audit::append(&tx, Change::new(by, Action::PlanSet, Some(account)).values(before, after)).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(account_of(&row))
}

pub(super) async fn set_queue_weight(
    client: &mut Object,
    account: &str,
    weight: u32,
    by: &Actor,
) -> Result<Account, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let before: Option<i32> = tx
        .query_opt("SELECT queue_weight FROM accounts WHERE name = $1 FOR UPDATE", &[&account])
        .await
        .map_err(db_error)?
        .ok_or_else(|| StoreError::refused(Refusal::Conflict, format!("No account `{account}`.")))?
        .get(0);
    let row = tx
        .query_one(
            "UPDATE accounts SET queue_weight = $2 WHERE name = $1 RETURNING name, created_at, plan, queue_weight",
            &[&account, &i32::try_from(weight).unwrap_or(i32::MAX)],
        )
        .await
        .map_err(db_error)?;
    let change = Change::new(by, Action::WeightSet, Some(account));
    audit::append(&tx, change.values(json!({"weight": before.unwrap_or(1)}), json!({"weight": weight}))).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(account_of(&row))
}

pub(super) async fn insert_key(client: &mut Object, account: &str, key: &str, by: &Actor) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    ensure(&tx, account, by).await?;
    let prefix = crate::domain::tasks::key_prefix(key);
    let inserted = tx
        .execute(
            "INSERT INTO api_keys (hash, account, prefix, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (hash) DO NOTHING",
            &[&hash_key(key).as_slice(), &account, &prefix, &now()],
        )
        .await
        .map_err(db_error)?;
    if inserted > 0 {
        let change = Change::new(by, Action::KeyIssue, Some(account)).target(&prefix);
        audit::append(&tx, change.values(Value::Null, json!({"prefix": prefix}))).await?;
    }
    announce(&tx, "keys").await?;
    tx.commit().await.map_err(db_error)
}

fn key_of(row: &tokio_postgres::Row) -> KeyRecord {
    KeyRecord { account: row.get(0), prefix: row.get(1), created_at: row.get(2), revoked: row.get(3) }
}

pub(super) async fn key(client: &Object, hash: &[u8; 32]) -> Result<Option<KeyRecord>, StoreError> {
    let statement = client
        .prepare_cached("SELECT account, prefix, created_at, revoked FROM api_keys WHERE hash = $1")
        .await
        .map_err(db_error)?;
    let row = client.query_opt(&statement, &[&hash.as_slice()]).await.map_err(db_error)?;
    Ok(row.as_ref().map(key_of))
}

/// The accounts `query` keeps, in name order, with their funds and their newest task's time.
pub(super) async fn list(client: &Object, query: &AccountQuery) -> Result<Vec<AccountSummary>, StoreError> {
    let search = query.search.trim().to_lowercase();
    let after = query.after.clone().unwrap_or_default();
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    let rows = client
        .query(
            "SELECT a.name, a.created_at, a.plan, coalesce(f.free_trial, 0), coalesce(f.plan, 0), coalesce(f.balance, 0),
                    (SELECT max(t.created_ms) FROM tasks t WHERE t.account = a.name)
             FROM accounts a LEFT JOIN funds f ON f.account = a.name
             WHERE a.name > $1 AND strpos(lower(a.name), $2) > 0
             ORDER BY a.name LIMIT $3",
            &[&after, &search, &limit],
        )
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .map(|row| AccountSummary {
            name: row.get(0),
            created_at: row.get(1),
            plan: row.get(2),
            funds: Funds { free_trial: row.get(3), plan: row.get(4), balance: row.get(5) },
            last_task_ms: row.get(6),
        })
        .collect())
}

pub(super) async fn keys_of(client: &Object, account: &str) -> Result<Vec<KeyRecord>, StoreError> {
    let rows = client
        .query(
            "SELECT account, prefix, created_at, revoked FROM api_keys WHERE account = $1 ORDER BY created_at, prefix",
            &[&account],
        )
        .await
        .map_err(db_error)?;
    Ok(rows.iter().map(key_of).collect())
}

pub(super) async fn revoke_keys(
    client: &mut Object,
    account: &str,
    prefix: &str,
    by: &Actor,
) -> Result<usize, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let rows = tx
        .query(
            "UPDATE api_keys SET revoked = true WHERE account = $1 AND starts_with(prefix, $2) AND NOT revoked \
             RETURNING prefix",
            &[&account, &prefix],
        )
        .await
        .map_err(db_error)?;
    if !rows.is_empty() {
        let prefixes: Vec<&str> = rows.iter().map(|row| row.get(0)).collect();
        audit::append(&tx, Change::keys_revoked(by, account, prefix, &prefixes)).await?;
    }
    announce(&tx, "keys").await?;
    tx.commit().await.map_err(db_error)?;
    Ok(rows.len())
}

pub(super) async fn model_switches(client: &Object) -> Result<Vec<(String, bool)>, StoreError> {
    let rows = client.query("SELECT model, enabled FROM model_switches", &[]).await.map_err(db_error)?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// The secret kept under `name`, `made` if none was: the first replica to ask decides it for all. Two
/// statements, so that the read's snapshot sees a row another replica's insert won the race with.
pub(super) async fn shared_secret(client: &Object, name: &str, made: &[u8]) -> Result<Vec<u8>, StoreError> {
    client
        .execute("INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", &[&name, &made])
        .await
        .map_err(db_error)?;
    let row = client.query_one("SELECT value FROM secrets WHERE name = $1", &[&name]).await.map_err(db_error)?;
    Ok(row.get(0))
}

pub(super) async fn set_model_switch(
    client: &mut Object,
    model: &str,
    enabled: bool,
    by: &Actor,
) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let before: Option<bool> = tx
        .query_opt("SELECT enabled FROM model_switches WHERE model = $1 FOR UPDATE", &[&model])
        .await
        .map_err(db_error)?
        .map(|row| row.get(0));
    tx.execute(
        "INSERT INTO model_switches (model, enabled) VALUES ($1, $2) \
         ON CONFLICT (model) DO UPDATE SET enabled = EXCLUDED.enabled",
        &[&model, &enabled],
    )
    .await
    .map_err(db_error)?;
    audit::append(&tx, Change::switched(by, model, before, enabled)).await?;
    announce(&tx, "switches").await?;
    tx.commit().await.map_err(db_error)
}
