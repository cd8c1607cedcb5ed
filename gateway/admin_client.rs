//! `mediagate admin ...`: a thin client of the admin API, printing its JSON answers.

use clap::Subcommand;
use serde_json::{Value, json};

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Accounts: create, show, top up, set a plan, grant a free trial.
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
    /// API keys: create (shown once), list (by prefix), revoke.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// The usage log, as JSON lines or CSV.
    Usage {
        #[arg(long)]
        account: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// Epoch milliseconds.
        #[arg(long)]
        since: Option<i64>,
        #[arg(long)]
        until: Option<i64>,
        #[arg(long, default_value = "jsonl")]
        format: String,
    },
    /// Any task, with its account and billing.
    Task { task_id: String },
    /// Models: list all with their switch, enable or disable one without a restart.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Check that every balance is the sum of its ledger entries.
    VerifyLedger,
}

#[derive(Subcommand)]
pub enum AccountCommand {
    Create {
        name: String,
    },
    Show {
        name: String,
    },
    /// Add AMOUNT micro-units to the balance.
    TopUp {
        name: String,
        amount: i64,
    },
    /// Set the plan and its allowance in micro-units.
    Plan {
        name: String,
        plan: String,
        allowance: i64,
    },
    /// Add AMOUNT micro-units of free trial.
    GrantTrial {
        name: String,
        amount: i64,
    },
}

#[derive(Subcommand)]
pub enum KeyCommand {
    Create { account: String },
    List { account: String },
    Revoke { account: String, prefix: String },
}

#[derive(Subcommand)]
pub enum ModelCommand {
    List,
    Enable { model: String },
    Disable { model: String },
}

/// Runs one admin command against `url` with `token`.
pub fn run(url: &str, token: &str, command: AdminCommand) -> Result<(), String> {
    let base = format!("{}/admin/v1", url.trim_end_matches('/'));
    // A body means POST, none means GET.
    let (path, body): (String, Option<Value>) = match command {
        AdminCommand::Account { command } => match command {
            AccountCommand::Create { name } => ("/accounts".into(), Some(json!({"name": name}))),
            AccountCommand::Show { name } => (format!("/accounts/{name}"), None),
            AccountCommand::TopUp { name, amount } => {
                (format!("/accounts/{name}/top-up"), Some(json!({"amount": amount})))
            }
            AccountCommand::Plan { name, plan, allowance } => {
                (format!("/accounts/{name}/plan"), Some(json!({"name": plan, "allowance": allowance})))
            }
            AccountCommand::GrantTrial { name, amount } => {
                (format!("/accounts/{name}/free-trial"), Some(json!({"amount": amount})))
            }
        },
        AdminCommand::Key { command } => match command {
            KeyCommand::Create { account } => (format!("/accounts/{account}/keys"), Some(json!({}))),
            KeyCommand::List { account } => (format!("/accounts/{account}/keys"), None),
            KeyCommand::Revoke { account, prefix } => {
                (format!("/accounts/{account}/keys/{prefix}/revoke"), Some(json!({})))
            }
        },
        AdminCommand::Usage { account, model, since, until, format } => {
            let mut query = vec![format!("format={format}")];
            query.extend(account.map(|a| format!("account={a}")));
            query.extend(model.map(|m| format!("model={m}")));
            query.extend(since.map(|s| format!("since={s}")));
            query.extend(until.map(|u| format!("until={u}")));
            (format!("/usage?{}", query.join("&")), None)
        }
        AdminCommand::Task { task_id } => (format!("/tasks/{task_id}"), None),
        AdminCommand::Model { command } => match command {
            ModelCommand::List => ("/models".into(), None),
            ModelCommand::Enable { model } => (format!("/models/{model}/enable"), Some(json!({}))),
            ModelCommand::Disable { model } => (format!("/models/{model}/disable"), Some(json!({}))),
        },
        AdminCommand::VerifyLedger => ("/ledger/verify".into(), None),
    };
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let url = format!("{base}{path}");
    let auth = format!("Bearer {token}");
    let response = match body {
        None => agent.get(&url).header("Authorization", &auth).call(),
        Some(body) => agent.post(&url).header("Authorization", &auth).send_json(&body),
    };
    let mut response = response.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    let pretty = serde_json::from_str::<Value>(&text).ok().and_then(|v| serde_json::to_string_pretty(&v).ok());
    println!("{}", pretty.unwrap_or(text));
    if (200..300).contains(&status) { Ok(()) } else { Err(format!("the admin API answered {status}")) }
}
