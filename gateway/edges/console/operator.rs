//! The operator's pages: the overview, and an account's pots, plan, trial and keys with the forms that
//! change them (through `http::admin`'s functions).

use super::activity;
use super::charts::{self, BarChart};
use super::session::{self, Role, Session};
use super::{CsrfForm, Failure, Page, html, micros, redirect};
use crate::domain::billing::audit::LedgerReport;
use crate::domain::errors::Code;
use crate::domain::listing::TaskQuery;
use crate::domain::tasks::{KeyRecord, TaskRecord};
use crate::domain::usage_log::UsageFilter;
use crate::edges::web::error::ApiError;
use crate::services::accounts::Credit;
use crate::services::runtime::Gateway;
use crate::services::{accounts, webhook_settings};
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use askama::Template;
use serde::Deserialize;

const NAV: &[(&str, &str)] = super::OPERATOR_NAV;
/// Tasks an account's page lists.
const RECENT_TASKS: usize = 20;
/// The flash cookie carrying a new key or webhook secret (`key.…`, `webhook-secret.…`) to the one page
/// that shows it.
const SHOWN_ONCE: &str = "mediagate_shown_once";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/overview", web::get().to(overview))
        .route("/ledger/verify", web::post().to(verify_ledger))
        .route("/accounts", web::get().to(accounts_page))
        .route("/accounts", web::post().to(create_account))
        .route("/accounts/{name}", web::get().to(account))
        .route("/accounts/{name}/keys/{prefix}/revoke", web::post().to(revoke_key))
        .route("/accounts/{name}/{change}", web::post().to(change_account));
}

/// The request's operator session, its token still a live operator's, with the operator named.
pub async fn signed_in(state: &Gateway, req: &HttpRequest) -> Result<Session, Failure> {
    let session = session::of_request(req).ok_or(Failure::SignedOut)?;
    if let Role::Client { .. } = session.role {
        let message = "This page is for operators, and you are signed in with an API key. Sign out, then sign in \
                       with the admin token to see it.";
        return Err(Failure::Refused(ApiError::new(Code::admin_forbidden, message)));
    }
    session::operator(state, session).await.map_err(|_| Failure::SignedOut)
}

/// [`signed_in`], for a form that changes something: with the session's CSRF token, from this site.
pub async fn signed_in_form(state: &Gateway, req: &HttpRequest, csrf: &str) -> Result<Session, Failure> {
    let session = signed_in(state, req).await?;
    session::check_csrf(req, &session, Some(csrf))?;
    Ok(session)
}

#[derive(Template)]
#[template(path = "overview.html")]
struct Overview {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    in_flight: i64,
    ended: usize,
    days: usize,
    chart: BarChart,
    requests: BarChart,
    tasks: BarChart,
    recent: Recent,
    keys: Vec<KeyRow>,
    limit: u32,
    share: String,
    pools: Vec<PoolRow>,
    /// The last waits for a slot, p50 and p99 in seconds, and how many; failovers after a refused create and
    /// after a transient failure.
    waits: (String, String, usize),
    failovers: [u64; 2],
    ledger: Option<LedgerReport>,
}

/// One model's upstream slots on one key, and what waits for them.
struct PoolRow {
    region: &'static str,
    model: &'static str,
    key: usize,
    used: u32,
    cap: u32,
    /// Jobs waiting for this model, all keys: the first key's row says it.
    waiting: String,
}

/// The p50 and p99 of the last waits for a slot (seconds, one decimal), and how many there were.
fn recent_waits() -> (String, String, usize) {
    let mut waits: Vec<f64> =
        crate::support::metrics::totals().waits.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
    waits.sort_by(f64::total_cmp);
    let at = |p: f64| waits.get(((waits.len().saturating_sub(1)) as f64 * p).round() as usize).copied().unwrap_or(0.0);
    (format!("{:.1}", at(0.5)), format!("{:.1}", at(0.99)), waits.len())
}

/// The capacity pools in rows: a row per key, the line's accounts (most waiting first) on the first.
fn pool_rows(pools: Vec<crate::support::metrics::PoolFigures>) -> Vec<PoolRow> {
    let mut rows = Vec::new();
    for (region, model, slots, mut waiting) in pools {
        waiting.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let total: usize = waiting.iter().map(|w| w.1).sum();
        let line = match total {
            0 => "none".to_string(),
            _ => {
                let shown: Vec<String> = waiting.iter().take(3).map(|(a, n)| format!("{a} {n}")).collect();
                let more =
                    if waiting.len() > 3 { format!(", {} more accounts", waiting.len() - 3) } else { String::new() };
                format!("{total}: {}{more}", shown.join(", "))
            }
        };
        for (key, (used, cap)) in slots.into_iter().enumerate() {
            let waiting = if key == 0 { line.clone() } else { String::new() };
            rows.push(PoolRow { region, model, key, used, cap, waiting });
        }
    }
    rows
}

/// This replica's last minute.
#[derive(Default)]
struct Recent {
    requests: [u64; 3],
    succeeded: u64,
    unsucceeded: u64,
    upstream_calls: u64,
    upstream_errors: u64,
    /// Mean upstream answer time, in milliseconds.
    upstream_ms: String,
}

/// One upstream key's queries from this replica's poller in the last minute.
struct KeyRow {
    region: String,
    key: usize,
    queries: u64,
    per_second: String,
}

/// Minutes the activity charts show.
const ACTIVITY_MINUTES: i64 = 30;

fn recent(samples: &[activity::Sample]) -> (Recent, Vec<KeyRow>) {
    let Some((from, to)) = activity::last_minute(samples) else { return (Recent::default(), Vec::new()) };
    let grew = |a: u64, b: u64| b.saturating_sub(a);
    let timed = grew(from.upstream_timed, to.upstream_timed);
    let micros = grew(from.upstream_micros, to.upstream_micros);
    let recent = Recent {
        requests: [0, 1, 2].map(|i| grew(from.requests[i], to.requests[i])),
        succeeded: grew(from.succeeded, to.succeeded),
        unsucceeded: grew(from.unsucceeded, to.unsucceeded),
        upstream_calls: grew(from.upstream_calls, to.upstream_calls),
        upstream_errors: grew(from.upstream_errors, to.upstream_errors),
        upstream_ms: if timed == 0 { "-".into() } else { format!("{:.1}", micros as f64 / timed as f64 / 1000.0) },
    };
    let seconds = ((to.at_ms - from.at_ms) as f64 / 1000.0).max(1.0);
    let mut keys: Vec<KeyRow> = to
        .key_queries
        .iter()
        .flat_map(|(region, counts)| {
            counts.iter().enumerate().map(move |(key, count)| {
                let before = from.key_queries.get(region).and_then(|c| c.get(key)).copied().unwrap_or(0);
                let queries = count.saturating_sub(before);
                KeyRow { region: region.clone(), key, queries, per_second: format!("{:.2}", queries as f64 / seconds) }
            })
        })
        .collect();
    keys.sort_by(|a, b| (&a.region, a.key).cmp(&(&b.region, b.key)));
    (recent, keys)
}

async fn overview(state: web::Data<Gateway>, req: HttpRequest) -> Page {
    let session = signed_in(&state, &req).await?;
    overview_page(&state, session, None).await
}

/// Checks the ledger (every account's cached funds against its entries), shown on the overview.
async fn verify_ledger(state: web::Data<Gateway>, req: HttpRequest, form: web::Form<CsrfForm>) -> Page {
    let session = signed_in_form(&state, &req, &form.csrf).await?;
    let report = state.store.verify_ledger().await?;
    overview_page(&state, session, Some(report)).await
}

async fn overview_page(state: &Gateway, session: Session, ledger: Option<LedgerReport>) -> Page {
    let now = crate::domain::clock::now_ms();
    let since = now - charts::DAYS as i64 * 24 * 3600 * 1000;
    let lines = state.store.usage(UsageFilter { since: Some(since), ..UsageFilter::default() }).await?;
    let samples = activity::history();
    let requests = activity::per_minute(&samples, ACTIVITY_MINUTES, |s| s.requests.to_vec());
    let tasks = activity::per_minute(&samples, ACTIVITY_MINUTES, |s| vec![s.succeeded, s.unsucceeded]);
    let (recent, keys) = recent(&samples);
    let count = |n: i64| n.to_string();
    let page = Overview {
        csrf: session.csrf,
        nav: NAV.to_vec(),
        notice: None,
        in_flight: crate::support::metrics::in_flight(state.poller.holds()),
        ended: lines.len(),
        days: charts::DAYS,
        chart: charts::spend_chart("Spend per day, every account", &charts::spend_per_day(&lines, now)),
        requests: charts::stacked("Requests per minute, this replica", &["2xx/3xx", "4xx", "5xx"], &requests, 5, count),
        tasks: charts::stacked("Tasks ended per minute, this replica", &["succeeded", "not"], &tasks, 5, count),
        recent,
        keys,
        limit: state.settings.poller.queries_per_second,
        share: state.store.poll_share().map_or_else(|| "none yet".into(), |share| format!("1/{share}")),
        pools: pool_rows(state.capacity.snapshot()),
        waits: recent_waits(),
        failovers: crate::support::metrics::totals()
            .failovers
            .each_ref()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed)),
        ledger,
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Deserialize, serde::Serialize, Default)]
struct AccountSearch {
    #[serde(default)]
    search: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<String>,
}

/// One account of the list, in words and units.
struct AccountRow {
    name: String,
    balance: String,
    plan: String,
    free_trial: String,
    last_task: String,
}

#[derive(Template)]
#[template(path = "accounts.html")]
struct AccountsPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    search: String,
    accounts: Vec<AccountRow>,
    /// The query of the next page, if there is one.
    more: Option<String>,
}

async fn accounts_page(state: web::Data<Gateway>, req: HttpRequest, query: web::Query<AccountSearch>) -> Page {
    let session = signed_in(&state, &req).await?;
    let AccountSearch { search, after } = query.into_inner();
    let (listed, more) = accounts::list_accounts(&state, search.trim(), after, None).await?;
    let more = more.then(|| {
        let after = listed.last().map(|a| a.name.clone());
        serde_urlencoded::to_string(AccountSearch { search: search.clone(), after }).unwrap_or_default()
    });
    let accounts = listed
        .into_iter()
        .map(|a| AccountRow {
            balance: charts::money(a.funds.balance),
            plan: charts::money(a.funds.plan),
            free_trial: charts::money(a.funds.free_trial),
            last_task: a.last_task_ms.map_or_else(|| "never".into(), crate::domain::clock::local_time),
            name: a.name,
        })
        .collect();
    let page = AccountsPage { csrf: session.csrf, nav: NAV.to_vec(), notice: None, search, accounts, more };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Deserialize)]
struct NewAccount {
    csrf: String,
    name: String,
}

async fn create_account(state: web::Data<Gateway>, req: HttpRequest, form: web::Form<NewAccount>) -> Page {
    let by = signed_in_form(&state, &req, &form.csrf).await?.actor();
    let opened = accounts::open_account(&state, &form.name, &by).await?;
    let path = account_path(form.name.trim());
    match opened["webhook_secret"].as_str() {
        Some(secret) => shown_once(&req, redirect(&format!("{path}?done=opened")), format!("webhook-secret.{secret}")),
        None => Ok(redirect(&path)),
    }
}

/// `response`, carrying `shown` (`kind.secret`) to the account's page in a short-lived flash cookie.
fn shown_once(req: &HttpRequest, mut response: actix_web::HttpResponse, shown: String) -> Page {
    let secure = req.app_data::<web::Data<super::Sessions>>().is_some_and(|sessions| sessions.secure());
    let flash = Cookie::build(SHOWN_ONCE, shown)
        .path("/console/accounts")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(CookieDuration::seconds(60))
        .finish();
    response.add_cookie(&flash).map_err(|e| ApiError::internal(format!("console cookie: {e}")))?;
    Ok(response)
}

fn account_path(name: &str) -> String {
    format!("/console/accounts/{}", crate::edges::web::path_segment(name))
}

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    name: String,
    shown: Option<ShownOnce>,
    endpoint: Option<String>,
    balance: String,
    plan_pot: String,
    free_trial: String,
    plan: Option<String>,
    queue_weight: u32,
    max_queue_weight: u32,
    keys: Vec<KeyRecord>,
    tasks: Vec<TaskRecord>,
}

/// What a change's redirect says happened (`?done=`), shown once on the account's page.
fn notice(done: &str) -> Option<&'static str> {
    Some(match done {
        "top-up" => "Topped up.",
        "free-trial" => "Free trial granted.",
        "plan" => "Plan set.",
        "weight" => "Queue weight set.",
        "opened" => "Account opened.",
        "key" => "Key created. It is shown once: store it now.",
        "webhook-secret" => "Webhook secret rotated. It is shown once: store it now.",
        "webhook-endpoint" => "Default webhook endpoint set.",
        "revoked" => "Key revoked.",
        _ => return None,
    })
}

#[derive(Deserialize)]
struct Done {
    done: Option<String>,
}

async fn account(state: web::Data<Gateway>, req: HttpRequest, name: web::Path<String>, done: web::Query<Done>) -> Page {
    let session = signed_in(&state, &req).await?;
    let shown = req.cookie(SHOWN_ONCE).and_then(|c| {
        let (kind, value) = c.value().split_once('.')?;
        let label = match kind {
            "key" => "key",
            "webhook-secret" => "webhook secret",
            _ => return None,
        };
        Some(ShownOnce { label, value: value.to_string() })
    });
    let mut response = account_page(&state, session, &name, done.done.as_deref().and_then(notice), shown).await?;
    // Shown once: the flash cookie that carried it here goes.
    if req.cookie(SHOWN_ONCE).is_some() {
        let mut gone = Cookie::build(SHOWN_ONCE, "").path("/console/accounts").http_only(true).finish();
        gone.make_removal();
        response.add_cookie(&gone).map_err(|e| ApiError::internal(format!("console cookie: {e}")))?;
    }
    Ok(response)
}

/// A secret made just now, shown on this page only.
struct ShownOnce {
    label: &'static str,
    value: String,
}

async fn account_page(
    state: &Gateway,
    session: Session,
    name: &str,
    notice: Option<&str>,
    shown: Option<ShownOnce>,
) -> Page {
    let record = state.store.account(name).await?;
    accounts::account_exists(state, name).await?;
    let funds = state.store.funds(name).await?;
    let keys = state.store.keys_of(name).await?;
    let endpoint = state.store.webhook_settings(name).await?.and_then(|w| w.endpoint);
    let tasks = state.store.list_tasks(TaskQuery::recent(name, RECENT_TASKS)).await?;
    state.store.caught_up().await?;
    let page = AccountPage {
        csrf: session.csrf,
        nav: NAV.to_vec(),
        notice: notice.map(str::to_string),
        name: name.to_string(),
        shown,
        endpoint,
        balance: charts::money(funds.balance),
        plan_pot: charts::money(funds.plan),
        free_trial: charts::money(funds.free_trial),
        queue_weight: record.as_ref().and_then(|r| r.queue_weight).unwrap_or(1),
        max_queue_weight: accounts::MAX_QUEUE_WEIGHT,
        plan: record.and_then(|r| r.plan),
        keys,
        tasks,
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Deserialize)]
struct AccountChange {
    csrf: String,
    amount: Option<String>,
    plan: Option<String>,
    url: Option<String>,
    weight: Option<String>,
}

/// A top-up, a trial grant, a plan, a new key, a new webhook secret or endpoint, as the admin API makes
/// them; then back to the account's page (a reload does not send the change again). A new key or secret
/// rides there in a short-lived flash cookie.
async fn change_account(
    state: web::Data<Gateway>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<AccountChange>,
) -> Page {
    let by = signed_in_form(&state, &req, &form.csrf).await?.actor();
    let (name, change) = path.into_inner();
    let amount = || micros("amount", form.amount.as_deref().unwrap_or_default());
    let mut shown = None;
    let done = match change.as_str() {
        "top-up" => {
            accounts::credit(&state, &name, Credit::TopUp, amount()?, "console".into(), &by).await?;
            "top-up"
        }
        "free-trial" => {
            accounts::credit(&state, &name, Credit::FreeTrial, amount()?, "console".into(), &by).await?;
            "free-trial"
        }
        "plan" => {
            accounts::change_plan(&state, &name, form.plan.as_deref().unwrap_or_default().trim(), amount()?, &by)
                .await?;
            "plan"
        }
        "weight" => {
            let weight = form.weight.as_deref().unwrap_or_default().trim();
            let weight = weight.parse().map_err(|_| {
                ApiError::from(crate::domain::errors::Problem::invalid_parameter(
                    "weight",
                    format!("The queue weight must be a whole number from 1 to {}.", accounts::MAX_QUEUE_WEIGHT),
                ))
            })?;
            accounts::set_queue_weight(&state, &name, weight, &by).await?;
            "weight"
        }
        "keys" => {
            shown = Some(format!("key.{}", accounts::issue_key(&state, &name, &by).await?));
            "key"
        }
        "webhook-secret" => {
            shown = Some(format!("webhook-secret.{}", webhook_settings::rotate_secret(&state, &name, &by).await?.0));
            "webhook-secret"
        }
        "webhook-endpoint" => {
            let url = form.url.as_deref().map(str::trim).filter(|u| !u.is_empty()).map(str::to_string);
            webhook_settings::set_default_endpoint(&state, &name, url, &by).await?;
            "webhook-endpoint"
        }
        _ => {
            return Err(Failure::Refused(ApiError::new(crate::domain::errors::Code::not_found, "No such change.")));
        }
    };
    let response = redirect(&format!("{}?done={done}", account_path(&name)));
    match shown {
        Some(shown) => shown_once(&req, response, shown),
        None => Ok(response),
    }
}

async fn revoke_key(
    state: web::Data<Gateway>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<CsrfForm>,
) -> Page {
    let by = signed_in_form(&state, &req, &form.csrf).await?.actor();
    let (name, prefix) = path.into_inner();
    accounts::revoke(&state, &name, accounts::Revoked::Prefix(&prefix), &by).await?;
    Ok(redirect(&format!("{}?done=revoked", account_path(&name))))
}
