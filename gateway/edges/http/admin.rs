//! The admin API under `/admin/v1`, authenticated by an operator's token (the admin token from the
//! environment is `root`'s); each change is on the audit trail under the operator who made it. The
//! `mediagate admin` command is its client. Its operations on accounts and keys are plain functions the
//! console's forms call too, so the console adds no second path to money or keys.

use crate::domain::audit::Actor;
use crate::domain::errors::Code;
use crate::domain::usage_log::UsageFilter;
use crate::edges::http::auth::Admin;
use crate::edges::web::error::ApiError;
use crate::services::accounts::Credit;
use crate::services::runtime::Gateway;
use crate::services::{accounts, models};
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::scope("/admin/v1").configure(|cfg| {
        use super::mount;
        mount(cfg, "/accounts", vec![("GET", web::get().to(list_accounts)), ("POST", web::post().to(create_account))]);
        mount(cfg, "/accounts/{account}", vec![("GET", web::get().to(show_account))]);
        mount(cfg, "/accounts/{account}/top-up", vec![("POST", web::post().to(top_up))]);
        mount(cfg, "/accounts/{account}/plan", vec![("POST", web::post().to(set_plan))]);
        mount(cfg, "/accounts/{account}/weight", vec![("POST", web::post().to(set_weight))]);
        mount(cfg, "/accounts/{account}/free-trial", vec![("POST", web::post().to(grant_free_trial))]);
        let keys = vec![("GET", web::get().to(list_keys)), ("POST", web::post().to(create_key))];
        mount(cfg, "/accounts/{account}/keys", keys);
        mount(cfg, "/accounts/{account}/keys/{prefix}/revoke", vec![("POST", web::post().to(revoke_keys))]);
        mount(cfg, "/accounts/{account}/keys/revoke-all", vec![("POST", web::post().to(revoke_all_keys))]);
        mount(cfg, "/usage", vec![("GET", web::get().to(usage))]);
        mount(cfg, "/tasks/{task_id}", vec![("GET", web::get().to(task))]);
        mount(cfg, "/models", vec![("GET", web::get().to(models))]);
        mount(cfg, "/models/{model}/{switch}", vec![("POST", web::post().to(switch_model))]);
        mount(cfg, "/ledger/verify", vec![("GET", web::get().to(verify))]);
        super::admin_webhooks::configure(cfg);
        super::admin_audit::configure(cfg);
    }));
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewAccount {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amount {
    /// Micro-units.
    pub amount: i64,
    #[serde(default)]
    pub note: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Weight {
    weight: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    name: String,
    /// Micro-units the plan funds; the plan pot is set to this amount.
    allowance: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountListing {
    #[serde(default)]
    search: String,
    after: Option<String>,
    limit: Option<usize>,
}

/// Accounts in name order, a page at a time (`after` the last one of the page before), with their funds
/// and when each last submitted a task.
async fn list_accounts(
    _: Admin,
    state: web::Data<Gateway>,
    query: web::Query<AccountListing>,
) -> Result<HttpResponse, ApiError> {
    let AccountListing { search, after, limit } = query.into_inner();
    let (listed, has_more) = accounts::list_accounts(&state, &search, after, limit).await?;
    let data: Vec<Value> = listed
        .iter()
        .map(|a| {
            let last = a.last_task_ms.map(crate::domain::clock::local_time);
            json!({"name": a.name, "created_at": a.created_at, "plan": a.plan, "funds": a.funds, "last_task_at": last})
        })
        .collect();
    let last_name = listed.last().map(|a| a.name.clone());
    Ok(HttpResponse::Ok().json(json!({"data": data, "has_more": has_more, "last_name": last_name})))
}

async fn create_account(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    body: web::Json<NewAccount>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Created().json(accounts::open_account(&state, &body.name, &by).await?))
}

async fn show_account(
    _: Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let mut view = accounts::account_view(&state, &account).await?;
    view["keys"] = json!(state.store.keys_of(&account).await?);
    // Shown no sooner than durable, as task reads are: a crash must not undo what an answer showed.
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok().json(view))
}

async fn top_up(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Amount>,
) -> Result<HttpResponse, ApiError> {
    credit(&state, &account, Credit::TopUp, body.into_inner(), &by).await
}

async fn grant_free_trial(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Amount>,
) -> Result<HttpResponse, ApiError> {
    credit(&state, &account, Credit::FreeTrial, body.into_inner(), &by).await
}

async fn credit(
    state: &Gateway,
    account: &str,
    credit: Credit,
    body: Amount,
    by: &Actor,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(accounts::credit(state, account, credit, body.amount, body.note, by).await?))
}

async fn set_weight(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Weight>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(accounts::set_queue_weight(&state, &account, body.weight, &by).await?))
}

async fn set_plan(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
    body: web::Json<Plan>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(accounts::change_plan(&state, &account, &body.name, body.allowance, &by).await?))
}

async fn create_key(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let key = accounts::issue_key(&state, &account, &by).await?;
    Ok(HttpResponse::Created()
        .json(json!({"account": account.as_str(), "key": key, "note": "Shown once; store it now."})))
}

async fn list_keys(_: Admin, state: web::Data<Gateway>, account: web::Path<String>) -> Result<HttpResponse, ApiError> {
    accounts::account_exists(&state, &account).await?;
    let keys = state.store.keys_of(&account).await?;
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok().json(json!({"keys": keys})))
}

async fn revoke_keys(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, prefix) = path.into_inner();
    let revoked = accounts::revoke(&state, &account, accounts::Revoked::Prefix(&prefix), &by).await?;
    Ok(HttpResponse::Ok().json(json!({"revoked": revoked})))
}

async fn revoke_all_keys(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    account: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .json(json!({"revoked": accounts::revoke(&state, &account, accounts::Revoked::All, &by).await?})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    account: Option<String>,
    model: Option<String>,
    /// Epoch milliseconds, inclusive.
    since: Option<i64>,
    until: Option<i64>,
    /// `jsonl` (default) or `csv`.
    format: Option<String>,
}

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
        "csv" => Ok(HttpResponse::Ok().content_type("text/csv").body(accounts::usage_csv(&records)?)),
        other => Err(ApiError::new(Code::invalid_parameter, format!("Unknown format `{other}`; use jsonl or csv."))
            .with_param("format")),
    }
}

async fn task(_: Admin, state: web::Data<Gateway>, task_id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let task = state
        .store
        .task(&task_id)
        .await?
        .ok_or_else(|| ApiError::new(Code::task_not_found, format!("No task `{task_id}`.")))?;
    state.store.caught_up().await?;
    let mut view = crate::services::tasks::views::view(&task);
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
            let mut v = models::describe(m);
            v["enabled"] = json!(state.registry.is_enabled(m));
            v["billing"] = models::billing_rule(m);
            v
        })
        .collect();
    HttpResponse::Ok().json(json!({"object": "list", "data": data}))
}

async fn switch_model(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (model, switch) = path.into_inner();
    let (model, enabled) = models::switch_model(&state, &model, &switch, &by).await?;
    Ok(HttpResponse::Ok().json(json!({"model": model, "enabled": enabled})))
}

async fn verify(_: Admin, state: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let report = state.store.verify_ledger().await?;
    Ok(HttpResponse::Ok().json(report))
}
