//! The admin API under `/admin/v1`, authenticated by the admin token from the environment. The
//! `mediagate admin` command is its client. Its operations on accounts and keys are plain functions the
//! console's forms call too, so the console adds no second path to money or keys.

use crate::domain::billing::MAX_MICROS;
use crate::domain::billing::books::{EntryKind, Posting, Pot};
use crate::domain::errors::Code;
use crate::domain::usage_log::UsageFilter;
use crate::edges::http::error::ApiError;
use crate::edges::http::models::describe;
use crate::services::gateway::Gateway;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};
use std::future::{Ready, ready};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::scope("/admin/v1").configure(|cfg| {
        use super::mount;
        mount(cfg, "/accounts", vec![("POST", web::post().to(create_account))]);
        mount(cfg, "/accounts/{account}", vec![("GET", web::get().to(show_account))]);
        mount(cfg, "/accounts/{account}/top-up", vec![("POST", web::post().to(top_up))]);
        mount(cfg, "/accounts/{account}/plan", vec![("POST", web::post().to(set_plan))]);
        mount(cfg, "/accounts/{account}/free-trial", vec![("POST", web::post().to(grant_free_trial))]);
        let keys = vec![("GET", web::get().to(list_keys)), ("POST", web::post().to(create_key))];
        mount(cfg, "/accounts/{account}/keys", keys);
        mount(cfg, "/accounts/{account}/keys/{prefix}/revoke", vec![("POST", web::post().to(revoke_keys))]);
        mount(cfg, "/usage", vec![("GET", web::get().to(usage))]);
        mount(cfg, "/tasks/{task_id}", vec![("GET", web::get().to(task))]);
        mount(cfg, "/models", vec![("GET", web::get().to(models))]);
        mount(cfg, "/models/{model}/{switch}", vec![("POST", web::post().to(switch_model))]);
        mount(cfg, "/ledger/verify", vec![("GET", web::get().to(verify))]);
        super::admin_webhooks::configure(cfg);
    }));
}

/// A request carrying the admin token.
pub struct Admin;

impl Admin {
    /// Whether `presented` is the admin token (compared in constant time).
    pub fn check(state: &Gateway, presented: Option<&str>) -> Result<Admin, ApiError> {
        if !state.operators.enabled() {
            return Err(ApiError::new(Code::admin_forbidden, "The admin API is disabled: no admin token is set."));
        }
        match presented {
            Some(presented) if state.operators.is_operator(presented) => Ok(Admin),
            _ => Err(ApiError::new(Code::admin_forbidden, "A valid admin token is required.")),
        }
    }
}

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let Some(state) = req.app_data::<web::Data<Gateway>>() else {
            return ready(Err(ApiError::internal("no app state")));
        };
        ready(Admin::check(state, crate::edges::http::auth::presented_key(req)))
    }
}

#[derive(Deserialize)]
struct NewAccount {
    name: String,
}

#[derive(Deserialize)]
pub struct Amount {
    /// Micro-units.
    pub amount: i64,
    #[serde(default)]
    pub note: String,
}

#[derive(Deserialize)]
struct Plan {
    name: String,
    /// Micro-units the plan funds; the plan pot is set to this amount.
    allowance: i64,
}

pub async fn account_exists(state: &Gateway, account: &str) -> Result<(), ApiError> {
    match state.store.account(account).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::new(Code::account_not_found, format!("No account `{account}`.")).with_param("account")),
    }
}

pub async fn account_view(state: &Gateway, account: &str) -> Result<Value, ApiError> {
    let record = state.store.account(account).await?.ok_or_else(|| {
        ApiError::new(Code::account_not_found, format!("No account `{account}`.")).with_param("account")
    })?;
    let funds = state.store.funds(account).await?;
    Ok(json!({"account": record, "funds": funds, "earmarked": state.store.earmarked(account)}))
}

async fn create_account(
    _: Admin,
    state: web::Data<Gateway>,
    body: web::Json<NewAccount>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Created().json(open_account(&state, &body.name).await?))
}

/// Opens the account `name` (trimmed) if it is new, with its first webhook secret (`webhook_secret` in the
/// answer, shown once); its view either way.
pub async fn open_account(state: &Gateway, name: &str) -> Result<Value, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.len() > 128 || name.contains(char::is_control) {
        return Err(ApiError::new(
            Code::invalid_parameter,
            "`name` must be 1-128 characters, none of them a control character.",
        )
        .with_param("name"));
    }
    state.store.ensure_account(name).await?;
    let (secret, made) = super::admin_webhooks::first_secret(state, name).await?;
    let mut view = account_view(state, name).await?;
    if made {
        view["webhook_secret"] = json!(secret);
    }
    Ok(view)
}

async fn show_account(
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let mut view = account_view(&state, &account).await?;
    view["keys"] = json!(state.store.keys_of(&account).await?);
    // Shown no sooner than durable, as task reads are: a crash must not undo what an answer showed.
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok().json(view))
}

async fn post_to_pot(
    state: &Gateway,
    account: &str,
    kind: EntryKind,
    pot: Pot,
    delta: i64,
    note: String,
) -> Result<Value, ApiError> {
    account_exists(state, account).await?;
    let posting = Posting { account: account.to_string(), kind, pot, delta, task_id: None, note };
    state.store.post(vec![posting]).await.map_err(|e| ApiError::from(e).with_param("amount"))?;
    account_view(state, account).await
}

fn positive(amount: i64) -> Result<i64, ApiError> {
    if amount <= 0 || amount > MAX_MICROS {
        return Err(ApiError::new(
            Code::invalid_parameter,
            format!("`amount` must be a positive number of micro-units, at most {MAX_MICROS}."),
        )
        .with_param("amount"));
    }
    Ok(amount)
}

async fn top_up(
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Amount>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(credit(&state, &account, body.into_inner(), EntryKind::TopUp, Pot::Balance).await?))
}

async fn grant_free_trial(
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Amount>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(credit(&state, &account, body.into_inner(), EntryKind::Grant, Pot::FreeTrial).await?))
}

/// Adds a positive amount to one pot (a top-up to the balance, a grant to the free trial).
pub async fn credit(
    state: &Gateway,
    account: &str,
    body: Amount,
    kind: EntryKind,
    pot: Pot,
) -> Result<Value, ApiError> {
    let amount = positive(body.amount)?;
    post_to_pot(state, account, kind, pot, amount, body.note).await
}

async fn set_plan(
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Plan>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(change_plan(&state, &account, &body.name, body.allowance).await?))
}

/// Sets the account's plan and its allowance (the plan pot is set to it).
pub async fn change_plan(state: &Gateway, account: &str, name: &str, allowance: i64) -> Result<Value, ApiError> {
    if !(0..=MAX_MICROS).contains(&allowance) {
        return Err(ApiError::new(
            Code::invalid_parameter,
            format!("`allowance` must be 0 to {MAX_MICROS} micro-units."),
        )
        .with_param("allowance"));
    }
    account_exists(state, account).await?;
    state.store.set_plan(account, name, allowance).await.map_err(|e| ApiError::from(e).with_param("allowance"))?;
    account_view(state, account).await
}

async fn create_key(_: Admin, state: web::Data<Gateway>, account: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let key = issue_key(&state, &account).await?;
    Ok(HttpResponse::Created()
        .json(json!({"account": account.as_str(), "key": key, "note": "Shown once; store it now."})))
}

/// A new key for the account: the plain key, which only its hash outlives.
pub async fn issue_key(state: &Gateway, account: &str) -> Result<String, ApiError> {
    account_exists(state, account).await?;
    let key = crate::domain::tasks::new_key();
    state.store.insert_key(account, &key).await?;
    Ok(key)
}

async fn list_keys(_: Admin, state: web::Data<Gateway>, account: web::Path<String>) -> Result<HttpResponse, ApiError> {
    account_exists(&state, &account).await?;
    let keys = state.store.keys_of(&account).await?;
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok().json(json!({"keys": keys})))
}

async fn revoke_keys(
    _: Admin,
    state: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, prefix) = path.into_inner();
    Ok(HttpResponse::Ok().json(json!({"revoked": revoke(&state, &account, &prefix).await?})))
}

/// Revokes the account's live keys starting with `prefix`; how many.
pub async fn revoke(state: &Gateway, account: &str, prefix: &str) -> Result<usize, ApiError> {
    account_exists(state, account).await?;
    let revoked = state.store.revoke_keys(account, prefix).await?;
    if revoked == 0 {
        return Err(ApiError::new(Code::not_found, format!("No live key of `{account}` starts with `{prefix}`.")));
    }
    Ok(revoked)
}

#[derive(Deserialize)]
struct UsageQuery {
    account: Option<String>,
    model: Option<String>,
    /// Epoch milliseconds, inclusive.
    since: Option<i64>,
    until: Option<i64>,
    /// `jsonl` (default) or `csv`.
    format: Option<String>,
}

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

async fn usage(_: Admin, state: web::Data<Gateway>, query: web::Query<UsageQuery>) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let filter = UsageFilter { account: q.account, model: q.model, since: q.since, until: q.until };
    let records = state.store.usage(filter).await?;
    state.store.caught_up().await?;
    match q.format.as_deref().unwrap_or("jsonl") {
        "jsonl" => {
            let body: String = records.iter().map(|r| format!("{r}\n")).collect();
            Ok(HttpResponse::Ok().content_type("application/x-ndjson").body(body))
        }
        "csv" => Ok(HttpResponse::Ok().content_type("text/csv").body(usage_csv(&records)?)),
        other => Err(ApiError::new(Code::invalid_parameter, format!("Unknown format `{other}`; use jsonl or csv."))
            .with_param("format")),
    }
}

/// Usage lines as CSV, one column per field of a line.
pub fn usage_csv(records: &[Value]) -> Result<Vec<u8>, ApiError> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let failed = |e: csv::Error| ApiError::internal(format!("usage CSV: {e}"));
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
    writer.into_inner().map_err(|e| ApiError::internal(format!("usage CSV: {e}")))
}

async fn task(_: Admin, state: web::Data<Gateway>, task_id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let task = state
        .store
        .task(&task_id)
        .await?
        .ok_or_else(|| ApiError::new(Code::task_not_found, format!("No task `{task_id}`.")))?;
    state.store.caught_up().await?;
    let mut view = crate::services::tasks::view(&task);
    view["account"] = json!(task.account);
    view["key_prefix"] = json!(task.key_prefix);
    view["upstream_task_id"] = json!(task.upstream_task_id);
    view["billing"] = serde_json::to_value(&task.billing).unwrap_or_default();
    Ok(HttpResponse::Ok().json(view))
}

async fn models(_: Admin, state: web::Data<Gateway>) -> HttpResponse {
    let data: Vec<Value> = crate::domain::catalog::MODELS
        .iter()
        .map(|m| {
            let mut v = describe(m);
            v["enabled"] = json!(state.registry.is_enabled(m));
            v["billing"] = crate::edges::http::models::billing_rule(m);
            v
        })
        .collect();
    HttpResponse::Ok().json(json!({"object": "list", "data": data}))
}

async fn switch_model(
    _: Admin,
    state: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (model, switch) = path.into_inner();
    let enabled = match switch.as_str() {
        "enable" => true,
        "disable" => false,
        _ => return Err(ApiError::new(Code::not_found, "Use /enable or /disable.")),
    };
    let model = set_model_enabled(&state, &model, enabled).await?;
    Ok(HttpResponse::Ok().json(json!({"model": model, "enabled": enabled})))
}

/// Switches a model on or off, on every replica; its id.
pub async fn set_model_enabled(state: &Gateway, model: &str, enabled: bool) -> Result<&'static str, ApiError> {
    let spec = crate::domain::catalog::ModelSpec::find(model)
        .ok_or_else(|| ApiError::new(Code::model_not_found, format!("No model `{model}`.")).with_param("model"))?;
    state.store.set_model_switch(spec.id, enabled).await?;
    state.registry.set_enabled(spec.id, enabled);
    Ok(spec.id)
}

async fn verify(_: Admin, state: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let report = state.store.verify_ledger().await?;
    Ok(HttpResponse::Ok().json(report))
}
