//! The audit page: the trail of operator changes, filtered, newest page first, exported as JSON lines;
//! and the named operators, which root creates (the token shown once) and revokes here.

use super::operator::{signed_in, signed_in_form};
use super::session::Session;
use super::{CsrfForm, Page, html};
use crate::domain::audit::{Action, AuditEntry, OperatorRecord, ROOT, Via};
use crate::edges::web::trail::TrailQuery;
use crate::services::operators;
use crate::services::runtime::Gateway;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;
use serde_json::Value;

/// Entries the page lists.
const LISTED: usize = 200;

/// Fields of the trail's values that are micro-units, shown in units.
const MONEY: [&str; 3] = ["available", "amount", "allowance"];

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/audit", web::get().to(page))
        .route("/audit.jsonl", web::get().to(export))
        .route("/operators", web::post().to(create))
        .route("/operators/{name}/revoke", web::post().to(revoke));
}

#[derive(Deserialize, Default, Clone)]
struct Filter {
    #[serde(default)]
    operator: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    account: String,
    #[serde(default)]
    via: String,
}

impl Filter {
    fn query(&self) -> TrailQuery {
        let given = |v: &str| Some(v.trim().to_string()).filter(|v| !v.is_empty());
        TrailQuery {
            operator: given(&self.operator),
            action: given(&self.action),
            account: given(&self.account),
            via: given(&self.via),
            ..TrailQuery::default()
        }
    }

    /// The filter as a query string, for the export link.
    fn encoded(&self) -> String {
        let pairs =
            [("operator", &self.operator), ("action", &self.action), ("account", &self.account), ("via", &self.via)];
        let given: Vec<(&str, &str)> =
            pairs.iter().filter(|(_, v)| !v.trim().is_empty()).map(|(k, v)| (*k, v.trim())).collect();
        serde_urlencoded::to_string(given).unwrap_or_default()
    }
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    /// A new operator's token, shown once.
    token: Option<(String, String)>,
    filter: Filter,
    actions: Vec<&'static str>,
    vias: Vec<&'static str>,
    entries: Vec<AuditEntry>,
    more: bool,
    root: bool,
    operators: Vec<OperatorRecord>,
}

impl AuditPage {
    fn time(&self, ms: &i64) -> String {
        crate::domain::clock::local_time(*ms)
    }

    /// What an entry changed, a line per field (`field: before → after`; one that stayed empty is left
    /// out), money in units and times as times.
    fn changes(&self, entry: &AuditEntry) -> Vec<String> {
        let shown = |field: &str, value: Option<&Value>| match value {
            None | Some(Value::Null) => "—".to_string(),
            Some(Value::Number(n)) if MONEY.contains(&field) => {
                n.as_i64().map(super::charts::money).unwrap_or_default()
            }
            Some(Value::Number(n)) if field.ends_with("_ms") => {
                n.as_i64().map(crate::domain::clock::local_time).unwrap_or_default()
            }
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(items)) => {
                let items: Vec<&str> =
                    items.iter().map(|i| i.get("fingerprint").unwrap_or(i).as_str().unwrap_or_default()).collect();
                format!("[{}]", items.join(", "))
            }
            Some(other) => other.to_string(),
        };
        let fields =
            |value: &Value| value.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        let mut names = fields(&entry.before);
        names.extend(fields(&entry.after).into_iter().filter(|f| entry.before.get(f).is_none()));
        names
            .iter()
            .filter_map(|f| {
                let (before, after) = (entry.before.get(f), entry.after.get(f));
                let empty = |v: Option<&Value>| v.is_none_or(Value::is_null);
                match (empty(before), empty(after)) {
                    (true, true) => None,
                    _ if before == after => Some(format!("{f}: {}", shown(f, after))),
                    _ => Some(format!("{f}: {} → {}", shown(f, before), shown(f, after))),
                }
            })
            .collect()
    }
}

async fn page(state: web::Data<Gateway>, req: HttpRequest, filter: web::Query<Filter>) -> Page {
    let session = signed_in(&state, &req).await?;
    listing(&state, session, filter.into_inner(), None, None).await
}

async fn listing(
    state: &Gateway,
    session: Session,
    filter: Filter,
    notice: Option<String>,
    token: Option<(String, String)>,
) -> Page {
    let mut entries = operators::whole_trail(state, filter.query().filter()?).await?;
    let more = entries.len() > LISTED;
    entries.drain(..entries.len().saturating_sub(LISTED));
    entries.reverse();
    let page = AuditPage {
        root: session.operator.as_deref() == Some(ROOT),
        csrf: session.csrf,
        nav: super::OPERATOR_NAV.to_vec(),
        notice,
        token,
        filter,
        actions: Action::ALL.iter().map(|a| a.as_str()).collect(),
        vias: Via::ALL.iter().map(|v| v.as_str()).collect(),
        entries,
        more,
        operators: operators::list(state).await?,
    };
    Ok(html(StatusCode::OK, &page))
}

/// Every entry the filter keeps, oldest first, one JSON object a line (as `GET /admin/v1/audit?format=jsonl`).
async fn export(state: web::Data<Gateway>, req: HttpRequest, filter: web::Query<Filter>) -> Page {
    signed_in(&state, &req).await?;
    let mut body = String::new();
    for entry in operators::whole_trail(&state, filter.query().filter()?).await? {
        body.push_str(&serde_json::to_string(&entry).unwrap_or_default());
        body.push('\n');
    }
    Ok(HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .insert_header(("Content-Disposition", "attachment; filename=\"audit.jsonl\""))
        .body(body))
}

#[derive(Deserialize)]
struct NewOperator {
    csrf: String,
    name: String,
}

async fn create(state: web::Data<Gateway>, req: HttpRequest, form: web::Form<NewOperator>) -> Page {
    let session = signed_in_form(&state, &req, &form.csrf).await?;
    let (operator, token) = operators::create(&state, &form.name, &session.actor()).await?;
    let notice = Some(format!("Operator {} is created.", operator.name));
    listing(&state, session, Filter::default(), notice, Some((operator.name, token))).await
}

async fn revoke(
    state: web::Data<Gateway>,
    req: HttpRequest,
    name: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> Page {
    let session = signed_in_form(&state, &req, &form.csrf).await?;
    let operator = operators::revoke(&state, &name, &session.actor()).await?;
    let notice = Some(format!("Operator {}'s token is revoked.", operator.name));
    listing(&state, session, Filter::default(), notice, None).await
}
