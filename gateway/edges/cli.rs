//! `mediagate admin ...`: a thin client of the admin API, returning its JSON answers for the CLI to print.
//! An `https://` gateway is verified under the gateway's own trust rules (`tls::trusted_roots`).

use clap::{Subcommand, ValueEnum};
use serde_json::{Value, json};
use std::path::Path;

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
    /// The usage log: one line per settled task, oldest first.
    Usage {
        /// Only this account's lines.
        #[arg(long)]
        account: Option<String>,
        /// Only this model's lines (its public id).
        #[arg(long)]
        model: Option<String>,
        /// Only tasks that ended at or after this time, in epoch milliseconds.
        #[arg(long, value_name = "EPOCH_MS")]
        since: Option<i64>,
        /// Only tasks that ended at or before this time, in epoch milliseconds.
        #[arg(long, value_name = "EPOCH_MS")]
        until: Option<i64>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = UsageFormat::Jsonl)]
        format: UsageFormat,
    },
    /// Any task, with its account and billing.
    Task {
        /// The task's id, as `POST /v1/...` answered it.
        task_id: String,
    },
    /// Models: list all with their switch, enable or disable one without a restart.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Check, on the running gateway, that every pot is the sum of its ledger entries.
    VerifyLedger,
    /// Webhooks: an account's secret and default endpoint; deliveries, and sending one again.
    Webhook {
        #[command(subcommand)]
        command: WebhookCommand,
    },
    /// Named operators, each with a token of its own (root, the admin token, creates and revokes them).
    Operator {
        #[command(subcommand)]
        command: OperatorCommand,
    },
    /// The audit trail: every change an operator made, oldest first, as JSON lines.
    Audit {
        /// Only this operator's changes (`root` for the admin token).
        #[arg(long)]
        operator: Option<String>,
        /// Only changes of this kind, like balance.top_up or key.revoke.
        #[arg(long)]
        action: Option<String>,
        /// Only changes to this account.
        #[arg(long)]
        account: Option<String>,
        /// Only changes made through api, cli or console.
        #[arg(long)]
        via: Option<String>,
        /// Only changes made at or after this time, in epoch milliseconds.
        #[arg(long, value_name = "EPOCH_MS")]
        since: Option<i64>,
        /// Only changes made at or before this time, in epoch milliseconds.
        #[arg(long, value_name = "EPOCH_MS")]
        until: Option<i64>,
    },
}

#[derive(Subcommand)]
pub enum OperatorCommand {
    /// Create an operator and print its token (shown once).
    Create {
        /// 1-64 characters of a-z, 0-9, `.`, `_` and `-`; never reused once taken.
        name: String,
    },
    /// Every operator, revoked ones included (never a token).
    List,
    /// Revoke an operator's token; it stops working at once.
    Revoke {
        /// The operator's name.
        name: String,
    },
}

#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Give the account a new webhook secret and print it (shown once); the old one keeps signing until it
    /// retires (`webhooks.old_secret_seconds`).
    Rotate {
        /// The account's name.
        account: String,
    },
    /// Set where the account's task ends go when a submission names no `callback_url` (no URL: nowhere).
    Endpoint {
        /// The account's name.
        account: String,
        /// An http or https URL.
        url: Option<String>,
    },
    /// Deliveries, newest first, with their attempts.
    Deliveries {
        /// Only this account's deliveries.
        #[arg(long)]
        account: Option<String>,
        /// Only the deliveries of this task.
        #[arg(long)]
        task_id: Option<String>,
        /// Only deliveries in this state: pending, delivered, failed or disabled.
        #[arg(long)]
        state: Option<String>,
        /// At most this many (default 100).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Send a delivery again now, with the same `webhook-id`.
    Replay {
        /// The delivery's id (`msg_…`).
        id: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum UsageFormat {
    /// One JSON object per line.
    Jsonl,
    /// A header line, then one row per task.
    Csv,
}

#[derive(Subcommand)]
pub enum AccountCommand {
    /// List accounts in name order, with their pots and when each last submitted a task.
    List {
        /// Only accounts whose name contains this (any case).
        #[arg(long, default_value = "")]
        search: String,
        /// The page after this account (the `last_name` of the page before).
        #[arg(long)]
        after: Option<String>,
    },
    /// Create an account (no money, no keys yet).
    Create {
        /// The account's name (1-128 characters).
        name: String,
    },
    /// Show an account: its pots, plan, what is earmarked and its keys (by prefix).
    Show {
        /// The account's name.
        name: String,
    },
    /// Add money to the balance.
    TopUp {
        /// The account's name.
        name: String,
        /// Units, as a decimal number (`50`, `1.5`); with --micros, whole micro-units.
        amount: String,
        /// The amount is in micro-units (1 unit = 1000000), as the admin HTTP API takes it.
        #[arg(long)]
        micros: bool,
    },
    /// Put the account on a plan: its name, and the plan pot set to the allowance.
    Plan {
        /// The account's name.
        name: String,
        /// The plan's name, shown by `account show`.
        plan: String,
        /// What the account may spend from the plan pot: units (`50`, `1.5`); with --micros, micro-units.
        allowance: String,
        /// The allowance is in micro-units (1 unit = 1000000), as the admin HTTP API takes it.
        #[arg(long)]
        micros: bool,
    },
    /// Set the account's share of the upstream's slots while its tasks wait for one (1 to 100; 1 unless set).
    Weight {
        /// The account's name.
        name: String,
        /// Its weight against an account of weight 1: 3 gets three slots to the other's one.
        weight: i64,
    },
    /// Add free-trial money (spent first, and the only money free-trial-only models take).
    GrantTrial {
        /// The account's name.
        name: String,
        /// Units, as a decimal number (`50`, `1.5`); with --micros, whole micro-units.
        amount: String,
        /// The amount is in micro-units (1 unit = 1000000), as the admin HTTP API takes it.
        #[arg(long)]
        micros: bool,
    },
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Create an API key for the account and print it; it is shown this once.
    Create {
        /// The account's name.
        account: String,
    },
    /// List the account's keys by prefix (never the keys themselves).
    List {
        /// The account's name.
        account: String,
    },
    /// Revoke the account's live keys starting with the prefix, or all of them; they stop working at once.
    Revoke {
        /// The account's name.
        account: String,
        /// The key's prefix as `key list` shows it (8 characters, like mg-1a2b3), or more of the key.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        prefix: Option<String>,
        /// Revoke every live key of the account.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
pub enum ModelCommand {
    /// Every model of the spec with its on/off switch.
    List,
    /// Serve the model again.
    Enable {
        /// The model's public id.
        model: String,
    },
    /// Stop serving the model (403 `model_disabled`); tasks already accepted finish.
    Disable {
        /// The model's public id.
        model: String,
    },
}

/// The admin API's answer: its body (pretty-printed when JSON) and whether it was a success.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// An amount typed on the command line as the micro-units the admin API takes: units, or micro-units
/// under `--micros`.
fn money(argument: &str, text: &str, micros: bool) -> Result<i64, String> {
    use crate::domain::billing::amount::{parse_micros, parse_units};
    let parsed = if micros { parse_micros(text) } else { parse_units(text) };
    parsed.map_err(|e| {
        let hint = if micros { "" } else { " For micro-units, add --micros." };
        format!("{}{hint}", e.message(argument))
    })
}

/// A query string of the parameters given a value, each encoded.
fn query(parameters: &[(&str, Option<String>)]) -> Result<String, String> {
    let given: Vec<(&str, &str)> =
        parameters.iter().filter_map(|(name, value)| Some((*name, value.as_deref()?))).collect();
    serde_urlencoded::to_string(given).map_err(|e| e.to_string())
}

/// Runs one admin command against `url` with `token`; `ca_file` is trusted besides the system's roots.
pub fn run(url: &str, token: &str, ca_file: Option<&Path>, command: AdminCommand) -> Result<Answer, String> {
    let base = format!("{}/admin/v1", url.trim_end_matches('/'));
    // A body means POST, none means GET.
    let at = crate::edges::web::path_segment;
    let (path, body): (String, Option<Value>) = match command {
        AdminCommand::Account { command } => match command {
            AccountCommand::List { search, after } => {
                (format!("/accounts?{}", query(&[("search", Some(search)), ("after", after)])?), None)
            }
            AccountCommand::Create { name } => ("/accounts".into(), Some(json!({"name": name}))),
            AccountCommand::Show { name } => (format!("/accounts/{}", at(&name)), None),
            AccountCommand::TopUp { name, amount, micros } => {
                let amount = money("AMOUNT", &amount, micros)?;
                (format!("/accounts/{}/top-up", at(&name)), Some(json!({"amount": amount})))
            }
            AccountCommand::Plan { name, plan, allowance, micros } => {
                let allowance = money("ALLOWANCE", &allowance, micros)?;
                (format!("/accounts/{}/plan", at(&name)), Some(json!({"name": plan, "allowance": allowance})))
            }
            AccountCommand::Weight { name, weight } => {
                (format!("/accounts/{}/weight", at(&name)), Some(json!({"weight": weight})))
            }
            AccountCommand::GrantTrial { name, amount, micros } => {
                let amount = money("AMOUNT", &amount, micros)?;
                (format!("/accounts/{}/free-trial", at(&name)), Some(json!({"amount": amount})))
            }
        },
        AdminCommand::Key { command } => match command {
            KeyCommand::Create { account } => (format!("/accounts/{}/keys", at(&account)), Some(json!({}))),
            KeyCommand::List { account } => (format!("/accounts/{}/keys", at(&account)), None),
            KeyCommand::Revoke { account, prefix: None, .. } => {
                (format!("/accounts/{}/keys/revoke-all", at(&account)), Some(json!({})))
            }
            KeyCommand::Revoke { account, prefix: Some(prefix), .. } => {
                if prefix.is_empty() {
                    return Err("PREFIX is empty: give the key's prefix as `key list` shows it, or --all.".into());
                }
                (format!("/accounts/{}/keys/{}/revoke", at(&account), at(&prefix)), Some(json!({})))
            }
        },
        AdminCommand::Usage { account, model, since, until, format } => {
            let format = match format {
                UsageFormat::Jsonl => "jsonl",
                UsageFormat::Csv => "csv",
            };
            let query = query(&[
                ("format", Some(format.to_string())),
                ("account", account),
                ("model", model),
                ("since", since.map(|s| s.to_string())),
                ("until", until.map(|u| u.to_string())),
            ])?;
            (format!("/usage?{query}"), None)
        }
        AdminCommand::Task { task_id } => (format!("/tasks/{}", at(&task_id)), None),
        AdminCommand::Model { command } => match command {
            ModelCommand::List => ("/models".into(), None),
            ModelCommand::Enable { model } => (format!("/models/{}/enable", at(&model)), Some(json!({}))),
            ModelCommand::Disable { model } => (format!("/models/{}/disable", at(&model)), Some(json!({}))),
        },
        AdminCommand::VerifyLedger => ("/ledger/verify".into(), None),
        AdminCommand::Webhook { command } => match command {
            WebhookCommand::Rotate { account } => {
                (format!("/accounts/{}/webhook-secret", at(&account)), Some(json!({})))
            }
            WebhookCommand::Endpoint { account, url } => {
                (format!("/accounts/{}/webhook-endpoint", at(&account)), Some(json!({"url": url})))
            }
            WebhookCommand::Deliveries { account, task_id, state, limit } => {
                let limit = limit.map(|l| l.to_string());
                let query = query(&[("account", account), ("task_id", task_id), ("state", state), ("limit", limit)])?;
                (format!("/webhooks/deliveries?{query}"), None)
            }
            WebhookCommand::Replay { id } => (format!("/webhooks/deliveries/{}/replay", at(&id)), Some(json!({}))),
        },
        AdminCommand::Operator { command } => match command {
            OperatorCommand::Create { name } => ("/operators".into(), Some(json!({"name": name}))),
            OperatorCommand::List => ("/operators".into(), None),
            OperatorCommand::Revoke { name } => (format!("/operators/{}/revoke", at(&name)), Some(json!({}))),
        },
        AdminCommand::Audit { operator, action, account, via, since, until } => {
            let query = query(&[
                ("format", Some("jsonl".to_string())),
                ("operator", operator),
                ("action", action),
                ("account", account),
                ("via", via),
                ("since", since.map(|s| s.to_string())),
                ("until", until.map(|u| u.to_string())),
            ])?;
            (format!("/audit?{query}"), None)
        }
    };
    let agent = agent(url, ca_file)?;
    let url = format!("{base}{path}");
    let auth = format!("Bearer {token}");
    // Names the CLI to the gateway, so its changes read `cli` on the audit trail.
    let user_agent = format!("{}{}", crate::domain::audit::CLI_AGENT, env!("CARGO_PKG_VERSION"));
    let response = match body {
        None => agent.get(&url).header("Authorization", &auth).header("User-Agent", &user_agent).call(),
        Some(body) => {
            agent.post(&url).header("Authorization", &auth).header("User-Agent", &user_agent).send_json(&body)
        }
    };
    let mut response = response.map_err(|e| {
        let e = e.to_string();
        match certificate_advice(&e) {
            Some(advice) => format!("{url}: {e}\n{advice}"),
            None => format!("{url}: {e}"),
        }
    })?;
    let status = response.status().as_u16();
    // JSON lines (the usage log, the audit trail) print as they came, one object a line.
    let json = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    let pretty =
        serde_json::from_str::<Value>(&text).ok().filter(|_| json).and_then(|v| serde_json::to_string_pretty(&v).ok());
    Ok(Answer { status, body: pretty.unwrap_or(text) })
}

/// What to do about a gateway certificate this command refused, in words (rustls names the fault only).
fn certificate_advice(error: &str) -> Option<&'static str> {
    if error.contains("CaUsedAsEndEntity") {
        Some(
            "The gateway's certificate is itself a CA certificate (as a lone `openssl req -x509` makes), which \
             TLS clients here refuse as a server's. Make a CA and a server certificate signed by it (README: \
             The gateway's own TLS), serve the server certificate, and pass the CA with --ca-file.",
        )
    } else if error.contains("UnknownIssuer") || error.contains("BadSignature") {
        Some(
            "The gateway's certificate is not signed by a CA this command trusts: pass the CA with --ca-file, or set SSL_CERT_FILE.",
        )
    } else if error.contains("NotValidForName") {
        Some(
            "The gateway's certificate does not name the host in --url: use a name or IP address it lists (subjectAltName).",
        )
    } else {
        None
    }
}

/// An HTTP agent that verifies an `https` gateway against the system's roots (and `ca_file`), and takes
/// a proxy from the environment as curl does.
fn agent(url: &str, ca_file: Option<&Path>) -> Result<ureq::Agent, String> {
    if ca_file.is_some() && !url.starts_with("https://") {
        return Err("--ca-file is for an https:// gateway".into());
    }
    crate::support::tls::http_agent(url, ca_file, None)
}
