//! Accounts and their money and keys, as operators manage them (through the admin API or the console): open
//! an account, credit a pot, set a plan, issue and revoke keys, read the usage log, switch a model.

use crate::domain::audit::Actor;
use crate::domain::billing::MAX_MICROS;
use crate::domain::billing::books::{EntryKind, Posting, Pot};
use crate::domain::clock::now_ms;
use crate::domain::deliveries::WebhookSettings;
use crate::domain::errors::{Code, Problem};
use crate::domain::tasks::{AccountQuery, AccountSummary};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use serde_json::{Value, json};

const CSV_COLUMNS: &[&str] = &[
    "at",
    "account",
    "key_prefix",
    "model",
    "operation",
    "task_id",
    "request_id",
    "status",
    "list_price",
    "charged",
    "units",
    "by_source",
];

pub async fn account_exists(state: &Gateway, account: &str) -> Result<(), ServiceError> {
    match state.store.account(account).await? {
        Some(_) => Ok(()),
        None => {
            Err(Problem::new(Code::account_not_found, format!("No account `{account}`.")).with_param("account").into())
        }
    }
}

/// Accounts a listing shows at most, per page.
pub const ACCOUNTS_PAGE: usize = 100;

/// Accounts whose name contains `search`, in name order after `after`, a page at a time, with their funds
/// and last activity; whether more follow.
pub async fn list_accounts(
    state: &Gateway,
    search: &str,
    after: Option<String>,
    limit: Option<usize>,
) -> Result<(Vec<AccountSummary>, bool), ServiceError> {
    let limit = limit.unwrap_or(ACCOUNTS_PAGE).clamp(1, ACCOUNTS_PAGE);
    let query = AccountQuery { search: search.to_string(), after, limit: limit + 1 };
    let mut listed = state.store.list_accounts(&query).await?;
    state.store.caught_up().await?;
    let more = listed.len() > limit;
    listed.truncate(limit);
    Ok((listed, more))
}

pub async fn account_view(state: &Gateway, account: &str) -> Result<Value, ServiceError> {
    let record = state.store.account(account).await?.ok_or_else(|| {
        Problem::new(Code::account_not_found, format!("No account `{account}`.")).with_param("account")
    })?;
    let funds = state.store.funds(account).await?;
    Ok(json!({"account": record, "funds": funds, "earmarked": state.store.earmarked(account)}))
}

/// Opens the account `name` (trimmed) if it is new, with its first webhook secret (`webhook_secret` in the
/// answer, shown once); its view either way.
pub async fn open_account(state: &Gateway, name: &str, by: &Actor) -> Result<Value, ServiceError> {
    let name = name.trim();
    if name.is_empty() || name.len() > 128 || name.contains(char::is_control) {
        return Err(Problem::new(
            Code::invalid_parameter,
            "`name` must be 1-128 characters, none of them a control character.",
        )
        .with_param("name")
        .into());
    }
    state.store.ensure_account(name, by).await?;
    let (secret, made) = first_secret(state, name).await?;
    let mut view = account_view(state, name).await?;
    if made {
        view["webhook_secret"] = json!(secret);
    }
    Ok(view)
}

async fn post_to_pot(
    state: &Gateway,
    account: &str,
    kind: EntryKind,
    pot: Pot,
    delta: i64,
    note: String,
    by: &Actor,
) -> Result<Value, ServiceError> {
    account_exists(state, account).await?;
    let posting = Posting { account: account.to_string(), kind, pot, delta, task_id: None, note };
    state.store.post(vec![posting], by).await.map_err(|e| ServiceError::from(e).with_param("amount"))?;
    account_view(state, account).await
}

fn positive(amount: i64) -> Result<i64, Problem> {
    if amount <= 0 || amount > MAX_MICROS {
        return Err(Problem::new(
            Code::invalid_parameter,
            // Read by people who typed units (the console, the CLI) and programs that sent micro-units.
            format!(
                "`amount` must be more than 0 and at most {} units ({MAX_MICROS} micro-units).",
                MAX_MICROS / 1_000_000
            ),
        )
        .with_param("amount"));
    }
    Ok(amount)
}

/// Adds a positive amount to one pot (a top-up to the balance, a grant to the free trial).
/// Money an operator adds to an account.
#[derive(Clone, Copy)]
pub enum Credit {
    /// To the balance.
    TopUp,
    /// To the free trial (spent first, and the only money free-trial-only models take).
    FreeTrial,
}

pub async fn credit(
    state: &Gateway,
    account: &str,
    credit: Credit,
    amount: i64,
    note: String,
    by: &Actor,
) -> Result<Value, ServiceError> {
    let amount = positive(amount)?;
    let (kind, pot) = match credit {
        Credit::TopUp => (EntryKind::TopUp, Pot::Balance),
        Credit::FreeTrial => (EntryKind::Grant, Pot::FreeTrial),
    };
    post_to_pot(state, account, kind, pot, amount, note, by).await
}

/// Sets the account's plan and its allowance (the plan pot is set to it).
pub async fn change_plan(
    state: &Gateway,
    account: &str,
    name: &str,
    allowance: i64,
    by: &Actor,
) -> Result<Value, ServiceError> {
    if !(0..=MAX_MICROS).contains(&allowance) {
        return Err(Problem::new(
            Code::invalid_parameter,
            format!("`allowance` must be 0 to {MAX_MICROS} micro-units."),
        )
        .with_param("allowance")
        .into());
    }
    account_exists(state, account).await?;
    state
        .store
        .set_plan(account, name, allowance, by)
        .await
        .map_err(|e| ServiceError::from(e).with_param("allowance"))?;
    account_view(state, account).await
}

/// The most one account's queue weight may be: a share of 100 to 1 is already all of the slots.
pub const MAX_QUEUE_WEIGHT: u32 = 100;

/// Sets the account's share of the upstream's slots while its tasks wait for one (1 to
/// [`MAX_QUEUE_WEIGHT`]; every account starts at 1).
pub async fn set_queue_weight(state: &Gateway, account: &str, weight: i64, by: &Actor) -> Result<Value, ServiceError> {
    let weight = u32::try_from(weight).ok().filter(|w| (1..=MAX_QUEUE_WEIGHT).contains(w)).ok_or_else(|| {
        Problem::new(
            Code::invalid_parameter,
            format!("`weight` must be a whole number from 1 to {MAX_QUEUE_WEIGHT}: the account's share of the upstream's slots against an account of weight 1."),
        )
        .with_param("weight")
    })?;
    account_exists(state, account).await?;
    state.store.set_queue_weight(account, weight, by).await?;
    account_view(state, account).await
}

/// A new key for the account: the plain key, which only its hash outlives.
pub async fn issue_key(state: &Gateway, account: &str, by: &Actor) -> Result<String, ServiceError> {
    account_exists(state, account).await?;
    let key = crate::domain::tasks::new_key();
    state.store.insert_key(account, &key, by).await?;
    Ok(key)
}

/// Which of an account's keys a revocation takes.
#[derive(Clone, Copy)]
pub enum Revoked<'a> {
    /// The live keys starting with this, at least as long as a listed prefix so that a slip cannot take
    /// every key.
    Prefix(&'a str),
    All,
}

/// Revokes the account's live keys a revocation names; how many.
pub async fn revoke(state: &Gateway, account: &str, which: Revoked<'_>, by: &Actor) -> Result<usize, ServiceError> {
    use crate::domain::tasks::KEY_PREFIX_CHARS;
    let prefix = match which {
        Revoked::All => "",
        Revoked::Prefix(prefix) if prefix.chars().count() < KEY_PREFIX_CHARS => {
            let message = format!(
                "`prefix` is too short: give the key's prefix as the key list shows it ({KEY_PREFIX_CHARS} characters, like `mg-1a2b3`), or revoke every key of the account at once."
            );
            return Err(Problem::new(Code::invalid_parameter, message).with_param("prefix").into());
        }
        Revoked::Prefix(prefix) => prefix,
    };
    account_exists(state, account).await?;
    let revoked = state.store.revoke_keys(account, prefix, by).await?;
    if revoked == 0 && matches!(which, Revoked::All) {
        return Err(Problem::new(Code::not_found, format!("`{account}` has no live key.")).into());
    }
    if revoked == 0 {
        return Err(Problem::new(Code::not_found, format!("No live key of `{account}` starts with `{prefix}`.")).into());
    }
    Ok(revoked)
}

/// Usage lines as CSV, one column per field of a line.
pub fn usage_csv(records: &[Value]) -> Result<Vec<u8>, Problem> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let failed = |e: csv::Error| Problem::internal(format!("usage CSV: {e}"));
    writer.write_record(CSV_COLUMNS).map_err(failed)?;
    for r in records {
        writer
            .write_record(CSV_COLUMNS.iter().map(|c| match &r[*c] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            }))
            .map_err(failed)?;
    }
    writer.into_inner().map_err(|e| Problem::internal(format!("usage CSV: {e}")))
}

/// The account's newest webhook secret, made now if it has none (every account has one from its creation),
/// and whether it was made now (then it is shown once).
pub async fn first_secret(state: &Gateway, account: &str) -> Result<(String, bool), ServiceError> {
    let made = crate::services::deliveries::signing::new_secret();
    let (now, new) = (now_ms(), made.clone());
    let settings = state
        .store
        // Part of opening the account, whose own entry is on the trail.
        .change_webhook_settings(account, Box::new(move |s: &mut WebhookSettings| s.adopt_first(new, now)), None)
        .await?;
    let newest = settings.secrets.first().map_or_else(|| made.clone(), |s| s.secret.clone());
    let fresh = newest == made;
    Ok((newest, fresh))
}
