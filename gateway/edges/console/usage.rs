//! The usage page: usage lines filtered by account (an operator's choice; a client's own), model and
//! days, as a spend chart, a table and a CSV export (the admin API's CSV).

use super::charts::{self, BarChart};
use super::{Page, Viewer, html};
use crate::domain::usage_log::UsageFilter;
use crate::edges::web::error::ApiError;
use crate::services::runtime::Gateway;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Lines the page's table shows, newest first (the chart and the CSV take them all).
const TABLE_LINES: usize = 200;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/usage", web::get().to(page)).route("/usage.csv", web::get().to(csv));
}

/// The page's filter, as typed (days as `YYYY-MM-DD`); empty means any.
#[derive(Deserialize, Serialize, Default)]
struct Filter {
    #[serde(default)]
    account: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
}

impl Filter {
    /// The store's filter: a client's own account whatever was asked; days from their local midnight.
    fn for_store(&self, viewer: &Viewer) -> Result<UsageFilter, ApiError> {
        let some = |text: &str| Some(text.trim().to_string()).filter(|t| !t.is_empty());
        let (since, until) = super::days(&self.since, &self.until)?;
        Ok(UsageFilter {
            account: viewer.account().map(str::to_string).or_else(|| some(&self.account)),
            model: some(&self.model),
            since,
            until,
        })
    }
}

/// One row of the table.
struct Line {
    at: String,
    account: String,
    model: String,
    task_id: String,
    status: String,
    charged: String,
}

#[derive(Template)]
#[template(path = "usage.html")]
struct UsagePage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    operator: bool,
    filter: Filter,
    query: String,
    models: Vec<&'static str>,
    chart: BarChart,
    lines: Vec<Line>,
}

async fn page(state: web::Data<Gateway>, req: HttpRequest, filter: web::Query<Filter>) -> Page {
    let viewer = Viewer::of(&state, &req).await?;
    let filter = filter.into_inner();
    let lines = state.store.usage(filter.for_store(&viewer)?).await?;
    state.store.caught_up().await?;
    let until = filter.for_store(&viewer)?.until.unwrap_or_else(crate::domain::clock::now_ms);
    let text = |line: &Value, field: &str| line[field].as_str().unwrap_or_default().to_string();
    let page = UsagePage {
        csrf: viewer.session().csrf.clone(),
        nav: viewer.nav(),
        notice: None,
        operator: viewer.account().is_none(),
        query: serde_urlencoded::to_string(&filter).unwrap_or_default(),
        filter,
        models: crate::domain::catalog::MODELS.iter().map(|m| m.id).collect(),
        chart: charts::spend_chart("Spend per day", &charts::spend_per_day(&lines, until)),
        lines: lines
            .iter()
            .rev()
            .take(TABLE_LINES)
            .map(|line| Line {
                at: text(line, "at"),
                account: text(line, "account"),
                model: text(line, "model"),
                task_id: text(line, "task_id"),
                status: text(line, "status"),
                charged: charts::money(line["charged"].as_i64().unwrap_or_default()),
            })
            .collect(),
    };
    Ok(html(StatusCode::OK, &page))
}

async fn csv(state: web::Data<Gateway>, req: HttpRequest, filter: web::Query<Filter>) -> Page {
    let viewer = Viewer::of(&state, &req).await?;
    let lines = state.store.usage(filter.for_store(&viewer)?).await?;
    state.store.caught_up().await?;
    Ok(HttpResponse::Ok()
        .content_type("text/csv")
        .insert_header(("Content-Disposition", "attachment; filename=\"usage.csv\""))
        .body(crate::services::accounts::usage_csv(&lines)?))
}
