//! Accounts and their API keys. Keys are stored as SHA-256 hashes; the plain key is shown once at creation.

use super::blocking;
use super::{
    ACCOUNTS, Account, FUNDS, KEYS, KeyRecord, Refusal, Store, StoreError, TASKS_BY_ACCOUNT, Tx, decode, encode,
};
use super::{audit, ledger};
use crate::domain::audit::{Action, Actor, Change};
use crate::domain::billing::books::{EntryKind, Posting, Pot};
use crate::domain::tasks::hash_key;
use crate::domain::tasks::{AccountQuery, AccountSummary};
use crate::ports::storage::Accounts;
use serde_json::{Value, json};
use std::sync::Arc;

/// The account, created in `tx` (by `by`, on the trail) if it does not exist yet.
fn ensure_account_in(tx: &Tx, name: &str, by: &Actor) -> Result<Account, StoreError> {
    let mut table = tx.open_table(ACCOUNTS)?;
    if let Some(account) = table.get(name)?.map(|v| decode::<Account>(v.value())).transpose()? {
        return Ok(account);
    }
    let account = Account { name: name.to_string(), created_at: now(), plan: None, queue_weight: None };
    table.insert(name, encode(&account)?.as_slice())?;
    audit::append(tx, Change::new(by, Action::AccountOpen, Some(name)).values(Value::Null, json!(account)))?;
    Ok(account)
}

/// The account `name`, refused as a conflict if there is none.
fn existing(tx: &Tx, name: &str) -> Result<Account, StoreError> {
    tx.open_table(ACCOUNTS)?
        .get(name)?
        .map(|v| decode::<Account>(v.value()))
        .transpose()?
        .ok_or_else(|| StoreError::refused(Refusal::Conflict, format!("No account `{name}`.")))
}

fn now() -> String {
    chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

impl Store {
    /// Creates a key for `account` (creating the account too) and returns the plain key, once: for the
    /// `keys create` command and the benches, which have no gateway to issue one through.
    pub async fn create_key(&self, account: &str) -> Result<String, StoreError> {
        let key = crate::domain::tasks::new_key();
        self.insert_key(account, &key, &Actor::local()).await?;
        Ok(key)
    }
}

#[async_trait::async_trait]
impl Accounts for Store {
    async fn ensure_account(&self, name: &str, by: &Actor) -> Result<Account, StoreError> {
        let (name, by) = (name.to_string(), by.clone());
        blocking(self, move |store| store.write(move |tx| ensure_account_in(tx, &name, &by))).await
    }

    async fn account(&self, name: &str) -> Result<Option<Account>, StoreError> {
        let tx = self.view()?;
        let table = tx.open_table(ACCOUNTS)?;
        table.get(name)?.map(|v| decode(v.value())).transpose()
    }

    async fn list_accounts(&self, query: &AccountQuery) -> Result<Vec<AccountSummary>, StoreError> {
        let tx = self.view()?;
        let (accounts, funds, by_account) =
            (tx.open_table(ACCOUNTS)?, tx.open_table(FUNDS)?, tx.open_table(TASKS_BY_ACCOUNT)?);
        let mut listed = Vec::new();
        for row in accounts.iter()? {
            if listed.len() >= query.limit {
                break;
            }
            let (name, record) = row?;
            if !query.keeps(name.value()) {
                continue;
            }
            let account: Account = decode(record.value())?;
            // Its last activity is its newest task's creation, the last of its rows in the account index.
            let newest =
                by_account.range_back((name.value(), i64::MIN, ""), (name.value(), i64::MAX, "\u{10FFFF}"))?.next();
            let last_task_ms = newest.transpose()?.map(|(key, _)| key.value().1);
            let funds = ledger::funds_row(&funds, name.value())?.less(&self.earmarks.of(name.value()));
            listed.push(AccountSummary {
                name: account.name,
                created_at: account.created_at,
                plan: account.plan,
                funds,
                last_task_ms,
            });
        }
        Ok(listed)
    }

    async fn set_plan(&self, account: &str, plan: &str, allowance: i64, by: &Actor) -> Result<Account, StoreError> {
        let (account, plan, by) = (account.to_string(), plan.to_string(), by.clone());
        blocking(self, move |store| {
            let earmarks = store.earmarks.clone();
            store.write(move |tx| {
                let mut record = existing(tx, &account)?;
                // The allowance is what the plan pot has left to spend, net of what tasks in flight have
                // earmarked from it, so the entry moves the pot by the difference.
                let current = ledger::funds_in(tx, &account)?.less(&earmarks.of(&account)).plan;
                let delta = allowance
                    .checked_sub(current)
                    .ok_or_else(|| StoreError::refused(Refusal::TooLarge, "the plan's allowance is out of range"))?;
                if delta != 0 {
                    let posting = Posting {
                        account: account.clone(),
                        kind: EntryKind::Plan,
                        pot: Pot::Plan,
                        delta,
                        task_id: None,
                        note: format!("plan {plan}"),
                    };
                    ledger::append(tx, &earmarks, vec![posting], None, ledger::Keep::Rows)?;
                }
                let before = json!({"plan": record.plan, "allowance": current});
                record.plan = Some(plan);
                tx.open_table(ACCOUNTS)?.insert(account.as_str(), encode(&record)?.as_slice())?;
                let after = json!({"plan": record.plan, "allowance": allowance});
                audit::append(tx, Change::new(&by, Action::PlanSet, Some(&account)).values(before, after))?;
                Ok(record)
            })
        })
        .await
    }

    async fn set_queue_weight(&self, account: &str, weight: u32, by: &Actor) -> Result<Account, StoreError> {
        let (account, by) = (account.to_string(), by.clone());
        blocking(self, move |store| {
            store.write(move |tx| {
                let mut record = existing(tx, &account)?;
                let before = json!({"weight": record.queue_weight.unwrap_or(1)});
                record.queue_weight = Some(weight);
                tx.open_table(ACCOUNTS)?.insert(account.as_str(), encode(&record)?.as_slice())?;
                let change = Change::new(&by, Action::WeightSet, Some(&account));
                audit::append(tx, change.values(before, json!({"weight": weight})))?;
                Ok(record)
            })
        })
        .await
    }

    async fn insert_key(&self, account: &str, key: &str, by: &Actor) -> Result<(), StoreError> {
        let (account, key, by) = (account.to_string(), key.to_string(), by.clone());
        blocking(self, move |store| {
            let hash = hash_key(&key);
            let prefix = crate::domain::tasks::key_prefix(&key);
            let record = KeyRecord { account, prefix, created_at: now(), revoked: false };
            store.write(move |tx| {
                ensure_account_in(tx, &record.account, &by)?;
                let mut table = tx.open_table(KEYS)?;
                if table.get(hash.as_slice())?.is_none() {
                    table.insert(hash.as_slice(), encode(&record)?.as_slice())?;
                    let change = Change::new(&by, Action::KeyIssue, Some(&record.account)).target(&record.prefix);
                    audit::append(tx, change.values(Value::Null, json!({"prefix": record.prefix})))?;
                }
                Ok(())
            })?;
            store.key_cache.invalidate();
            Ok(())
        })
        .await
    }

    async fn key(&self, hash: &[u8; 32]) -> Result<Option<Arc<KeyRecord>>, StoreError> {
        let (generation, cached) = self.key_cache.get(hash);
        if cached.is_some() {
            return Ok(cached);
        }
        let tx = self.view()?;
        let table = tx.open_table(KEYS)?;
        let record = table.get(hash.as_slice())?.map(|v| decode::<KeyRecord>(v.value()).map(Arc::new)).transpose()?;
        if let Some(record) = &record {
            self.key_cache.put(generation, *hash, record.clone());
        }
        Ok(record)
    }

    fn cached_key(&self, hash: &[u8; 32]) -> Option<Arc<KeyRecord>> {
        self.key_cache.get(hash).1
    }

    async fn admit_request(&self, _: &[u8; 32], _: u32) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn keys_of(&self, account: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let tx = self.view()?;
        let table = tx.open_table(KEYS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let record: KeyRecord = decode(row?.1.value())?;
            if record.account == account {
                out.push(record);
            }
        }
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.prefix.cmp(&b.prefix)));
        Ok(out)
    }

    async fn revoke_keys(&self, account: &str, prefix: &str, by: &Actor) -> Result<usize, StoreError> {
        let (account, prefix, by) = (account.to_string(), prefix.to_string(), by.clone());
        blocking(self, move |store| {
            let count = store.write(move |tx| {
                let mut table = tx.open_table(KEYS)?;
                let mut hits = Vec::new();
                for row in table.iter()? {
                    let (k, v) = row?;
                    let record: KeyRecord = decode(v.value())?;
                    if record.account == account && record.prefix.starts_with(&prefix) && !record.revoked {
                        hits.push((k.value().to_vec(), record));
                    }
                }
                for (hash, record) in &mut hits {
                    record.revoked = true;
                    table.insert(hash.as_slice(), encode(record)?.as_slice())?;
                }
                if !hits.is_empty() {
                    let prefixes: Vec<&str> = hits.iter().map(|(_, record)| record.prefix.as_str()).collect();
                    audit::append(tx, Change::keys_revoked(&by, &account, &prefix, &prefixes))?;
                }
                Ok(hits.len())
            })?;
            store.key_cache.invalidate();
            Ok(count)
        })
        .await
    }
}
