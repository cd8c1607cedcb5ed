//! An account's tasks, filtered by status, model and days, a page at a time; and a task's page: its timeline
//! (submitted, accepted upstream, each state it reached, settled), its results previewed, and its whole
//! record with its billing. An operator sees any account's, a client its own.

use super::{Page, Viewer, html};
use crate::domain::catalog::Media;
use crate::domain::errors::Code;
use crate::domain::listing::{ListPosition, TaskQuery};
use crate::domain::tasks::{TaskRecord, TaskStatus};
use crate::edges::web::error::ApiError;
use crate::services::runtime::Gateway;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use askama::Template;
use serde::{Deserialize, Serialize};

/// Tasks one page lists.
const PAGE: usize = 50;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/tasks", web::get().to(list)).route("/tasks/{task_id}", web::get().to(page));
}

/// The list's filter, as typed (days as `YYYY-MM-DD`); empty means any. `after`: the last task of the page
/// before.
#[derive(Deserialize, Serialize, Default, Clone)]
struct Filter {
    #[serde(default)]
    account: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    after: String,
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct ListPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    operator: bool,
    filter: Filter,
    statuses: Vec<&'static str>,
    tasks: Vec<TaskRecord>,
    /// The query of the next (older) page, if there is one.
    older: Option<String>,
}

async fn list(state: web::Data<Gateway>, req: HttpRequest, filter: web::Query<Filter>) -> Page {
    let viewer = Viewer::of(&state, &req).await?;
    let mut filter = filter.into_inner();
    if let Some(own) = viewer.account() {
        filter.account = own.to_string();
    }
    let account = filter.account.trim().to_string();
    let mut tasks = Vec::new();
    if !account.is_empty() {
        let (created_since, created_until) = super::days(&filter.since, &filter.until)?;
        let status = match filter.status.trim() {
            "" => None,
            name => Some(crate::edges::web::one_of("status", name, &TaskStatus::ALL, TaskStatus::as_str)?),
        };
        let after = match filter.after.trim() {
            "" => None,
            task_id => state.store.task(task_id).await?.filter(|t| t.account == account).map(|t| ListPosition::of(&t)),
        };
        let query = TaskQuery {
            after,
            status,
            model: Some(filter.model.trim().to_string()).filter(|m| !m.is_empty()),
            created_since,
            created_until,
            ..TaskQuery::recent(&account, PAGE + 1)
        };
        tasks = state.store.list_tasks(query).await?;
        state.store.caught_up().await?;
    }
    let older = (tasks.len() > PAGE).then(|| {
        tasks.truncate(PAGE);
        let last = tasks.last().map(|t| t.task_id.clone()).unwrap_or_default();
        serde_urlencoded::to_string(Filter { after: last, ..filter.clone() }).unwrap_or_default()
    });
    let page = ListPage {
        csrf: viewer.session().csrf.clone(),
        nav: viewer.nav(),
        notice: None,
        operator: viewer.account().is_none(),
        filter,
        statuses: TaskStatus::ALL.iter().map(|s| s.as_str()).collect(),
        tasks,
        older,
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    operator: bool,
    task: TaskRecord,
    timeline: Vec<(String, String)>,
    previews: Vec<String>,
    video: bool,
    /// `(what, how much)`: the quote, and once settled what was charged and from which pot.
    billing: Vec<(String, String)>,
    view: String,
}

async fn page(state: web::Data<Gateway>, req: HttpRequest, task_id: web::Path<String>) -> Page {
    let viewer = Viewer::of(&state, &req).await?;
    let task = match viewer.account() {
        Some(account) => crate::services::tasks::cancel::owned_task(&state, account, &task_id).await?,
        None => state
            .store
            .task(&task_id)
            .await?
            .ok_or_else(|| ApiError::new(Code::task_not_found, format!("No task `{task_id}`.")))?,
    };
    state.store.caught_up().await?;
    let mut view = crate::services::tasks::views::view(&task);
    if viewer.account().is_none() {
        view["billing"] = serde_json::to_value(&task.billing).unwrap_or_default();
        view["upstream_task_id"] = task.upstream_task_id.clone().into();
    }
    let previews =
        view["results"].as_array().into_iter().flatten().filter_map(|r| r["url"].as_str()).map(str::to_string);
    let page = TaskPage {
        csrf: viewer.session().csrf.clone(),
        nav: viewer.nav(),
        notice: None,
        operator: viewer.account().is_none(),
        timeline: timeline(&task),
        previews: previews.collect(),
        video: task.media == Media::Video,
        billing: billing(&task),
        view: serde_json::to_string_pretty(&view).unwrap_or_default(),
        task,
    };
    Ok(html(StatusCode::OK, &page))
}

/// The task's money as a person reads it, in units.
fn billing(task: &TaskRecord) -> Vec<(String, String)> {
    let money = super::charts::money;
    let Some(billing) = &task.billing else { return Vec::new() };
    let mut rows = vec![("Quoted".to_string(), money(billing.quoted))];
    if let Some(settled) = &billing.settlement {
        rows.push(("Settled".into(), settled.outcome.clone()));
        rows.push(("List price of what was delivered".into(), money(settled.list_price)));
        rows.push(("Charged".into(), money(settled.charged)));
        for (pot, amount) in &settled.by_pot {
            rows.push((format!("from the {}", pot.label()), money(*amount)));
        }
    }
    rows
}

/// What the record tells of the task's life, in order.
fn timeline(task: &TaskRecord) -> Vec<(String, String)> {
    let time = crate::domain::clock::local_time;
    let mut events = vec![(task.created_at.clone(), format!("submitted ({})", task.request_id))];
    if let Some(upstream) = &task.upstream_task_id {
        events.push((String::new(), format!("accepted upstream as {upstream}")));
    }
    if let Some(running) = task.running_ms {
        events.push((time(running), "running".to_string()));
    }
    match task.finished_ms {
        Some(finished) => events.push((time(finished), format!("ended: {}", task.status.as_str()))),
        None => events.push((time(task.updated_ms), format!("now {}", task.status.as_str()))),
    }
    if let Some(settlement) = task.billing.as_ref().and_then(crate::domain::billing::summary) {
        let outcome = settlement["outcome"].as_str().unwrap_or("settled").to_string();
        let charged = settlement["charged"].as_i64().map(super::charts::money).unwrap_or_default();
        events.push((String::new(), format!("settled: {outcome}, charged {charged}")));
    }
    events
}
