//! A client team's pages, for the account of the key it signed in with: its pots, spend and tasks, and the
//! playground, which submits through the public API's own handler with the session's key as the caller.

use super::charts::{self, BarChart};
use super::forms::{self, Control, Field};
use super::session::{self, Session};
use super::{Failure, Page, html};
use crate::domain::catalog::ModelSpec;
use crate::domain::errors::Code;
use crate::domain::listing::TaskQuery;
use crate::domain::tasks::TaskRecord;
use crate::domain::usage_log::UsageFilter;
use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::runtime::Gateway;
use crate::services::submit::{self, Submission, Submitted};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;
use serde_json::Value;

const NAV: &[(&str, &str)] = super::CLIENT_NAV;
/// Tasks the home page lists.
const RECENT_TASKS: usize = 20;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/home", web::get().to(home))
        .route("/playground", web::get().to(playground))
        .route("/playground", web::post().to(submit))
        .route("/playground/quote", web::post().to(quote))
        .route("/playground/tasks/{task_id}", web::get().to(task));
}

/// The request's client session and its key's caller; a key refused since (revoked) is refused here too.
async fn signed_in(state: &Gateway, req: &HttpRequest) -> Result<(Session, Caller), Failure> {
    let session = session::of_request(req).ok_or(Failure::SignedOut)?;
    let caller = session::client(state, &session).await?;
    Ok((session, caller))
}

#[derive(Template)]
#[template(path = "home.html")]
struct Home {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    account: String,
    balance: String,
    plan_pot: String,
    free_trial: String,
    chart: BarChart,
    tasks: Vec<TaskRecord>,
}

async fn home(state: web::Data<Gateway>, req: HttpRequest) -> Page {
    let (session, caller) = signed_in(&state, &req).await?;
    let account = caller.account().to_string();
    let now = crate::domain::clock::now_ms();
    let since = now - charts::DAYS as i64 * 24 * 3600 * 1000;
    let filter = UsageFilter { account: Some(account.clone()), since: Some(since), ..UsageFilter::default() };
    let lines = state.store.usage(filter).await?;
    let funds = state.store.funds(&account).await?;
    let tasks = state.store.list_tasks(TaskQuery::recent(&account, RECENT_TASKS)).await?;
    state.store.caught_up().await?;
    let page = Home {
        csrf: session.csrf,
        nav: NAV.to_vec(),
        notice: None,
        account,
        balance: charts::money(funds.balance),
        plan_pot: charts::money(funds.plan),
        free_trial: charts::money(funds.free_trial),
        chart: charts::spend_chart("Spend per day", &charts::spend_per_day(&lines, now)),
        tasks,
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Template)]
#[template(path = "playground.html")]
struct Playground {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    models: Vec<(&'static str, &'static str)>,
    model: &'static str,
    media: &'static str,
    sections: Vec<(&'static str, Vec<Field>)>,
}

#[derive(Deserialize)]
struct Chosen {
    model: Option<String>,
}

async fn playground(state: web::Data<Gateway>, req: HttpRequest, chosen: web::Query<Chosen>) -> Page {
    let (session, _) = signed_in(&state, &req).await?;
    let models: Vec<&'static ModelSpec> = state.registry.enabled_models().collect();
    let model = match chosen.model.as_deref() {
        Some(id) => state.registry.enabled(id)?,
        None => *models.first().ok_or_else(|| ApiError::new(Code::model_not_found, "No model is enabled."))?,
    };
    let deployment = forms::Deployment { private_callbacks: state.settings.webhooks.allow_private_callbacks };
    let page = Playground {
        csrf: session.csrf,
        nav: NAV.to_vec(),
        notice: None,
        models: models.iter().map(|m| (m.id, m.summary)).collect(),
        model: model.id,
        media: model.media.as_str(),
        sections: forms::sections(forms::fields(model, &deployment)),
    };
    Ok(html(StatusCode::OK, &page))
}

/// A request from the playground, answered as the API answers it (JSON, the one error envelope).
async fn submit(state: web::Data<Gateway>, req: HttpRequest, body: web::Json<Value>) -> Result<HttpResponse, ApiError> {
    let (session, caller) = signed_in(&state, &req).await.map_err(refused_json)?;
    session::check_csrf(&req, &session, None)?;
    let model = body["model"].as_str().ok_or_else(|| ApiError::invalid_parameter("model", "Choose a model."))?;
    let endpoint = state.registry.enabled(model)?.endpoint();
    let request_id = crate::edges::web::request_id::generate(match endpoint.media {
        crate::domain::catalog::Media::Video => "vid-",
        crate::domain::catalog::Media::Image => "img-",
    });
    let submission =
        Submission { endpoint, caller: &caller, body: body.into_inner(), idempotency_key: None, request_id };
    let answer = submit::submit(&state.into_inner(), submission, std::future::pending()).await;
    // The playground follows the task, whichever way it was answered.
    let (Submitted::Accepted(task) | Submitted::Ended(task) | Submitted::Finished { task, .. }) = answer.result?;
    crate::edges::web::request_id::set(task.request_id.clone());
    Ok(HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(crate::services::tasks::views::view(&task)))
}

/// What the form's request would cost, in units and words, and whether the account can pay it now; or why
/// it would be refused (the API's envelope).
async fn quote(state: web::Data<Gateway>, req: HttpRequest, body: web::Json<Value>) -> Result<HttpResponse, ApiError> {
    let (session, caller) = signed_in(&state, &req).await.map_err(refused_json)?;
    session::check_csrf(&req, &session, None)?;
    let quote = crate::services::quotes::quote(&state, caller.account(), None, body.into_inner()).await?;
    let mut text = format!("{} for {}", charts::money(quote.amount), units_in_words(&quote.units));
    if !quote.fundable {
        text.push_str(&format!(", and the account is short by {}", charts::money(quote.short_by)));
    }
    Ok(HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .json(serde_json::json!({"price": quote.amount, "fundable": quote.fundable, "text": text})))
}

/// What a price is for: "5 s at 1080P with sound", "2 images".
fn units_in_words(units: &crate::domain::billing::pricing::Units) -> String {
    let mut words = Vec::new();
    if let Some(seconds) = units.seconds {
        words.push(format!("{seconds} s"));
    }
    if let Some(resolution) = &units.resolution {
        words.push(format!("at {resolution}"));
    }
    match units.audio {
        Some(true) => words.push("with sound".into()),
        Some(false) => words.push("silent".into()),
        None => {}
    }
    if let Some(images) = units.images {
        words.push(format!("{images} image{}", if images == 1 { "" } else { "s" }));
    }
    if let Some(calls) = units.calls {
        words.push(format!("{calls} call{}", if calls == 1 { "" } else { "s" }));
    }
    if let Some(tokens) = units.output_tokens {
        words.push(format!("up to {tokens} output tokens"));
    }
    if words.is_empty() { "the request".into() } else { words.join(" ") }
}

/// One of the client's tasks, as `GET /v1/tasks/{id}` shows it.
async fn task(
    state: web::Data<Gateway>,
    req: HttpRequest,
    task_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (_, caller) = signed_in(&state, &req).await.map_err(refused_json)?;
    let task = crate::services::tasks::cancel::owned_task(&state, caller.account(), &task_id).await?;
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(crate::services::tasks::views::view(&task)))
}

fn refused_json(failure: Failure) -> ApiError {
    match failure {
        Failure::SignedOut => ApiError::new(Code::invalid_api_key, "Sign in to the console again."),
        Failure::Refused(error) => error,
    }
}
