//! The webhooks page: deliveries of task ends, newest first, with their attempts, each sent again on
//! demand as the admin API replays it.

use super::operator::{signed_in, signed_in_form};
use super::{CsrfForm, Page, html};
use crate::domain::deliveries::{Delivery, DeliveryFilter, DeliveryState};
use crate::services::runtime::Gateway;
use crate::services::webhook_settings::replay_delivery;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use askama::Template;
use serde::Deserialize;

/// Deliveries the page lists.
const LISTED: usize = 100;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/webhooks", web::get().to(page)).route("/webhooks/{id}/replay", web::post().to(replay));
}

#[derive(Deserialize, Default)]
struct Filter {
    #[serde(default)]
    account: String,
    #[serde(default)]
    state: String,
}

#[derive(Template)]
#[template(path = "webhooks.html")]
struct WebhooksPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    filter: Filter,
    states: Vec<&'static str>,
    deliveries: Vec<Delivery>,
}

impl WebhooksPage {
    fn time(&self, ms: &i64) -> String {
        crate::domain::clock::local_time(*ms)
    }
}

async fn page(state: web::Data<Gateway>, req: HttpRequest, filter: web::Query<Filter>) -> Page {
    let session = signed_in(&state, &req).await?;
    listing(&state, session.csrf, filter.into_inner(), None).await
}

async fn listing(state: &Gateway, csrf: String, filter: Filter, notice: Option<String>) -> Page {
    let wanted = match filter.state.trim() {
        "" => None,
        name => Some(crate::edges::web::one_of("state", name, &DeliveryState::ALL, DeliveryState::as_str)?),
    };
    let account = Some(filter.account.trim().to_string()).filter(|a| !a.is_empty());
    let query = DeliveryFilter { account, task_id: None, state: wanted, limit: LISTED };
    let deliveries = state.store.deliveries(query).await?;
    state.store.caught_up().await?;
    let states = DeliveryState::ALL.iter().map(|s| s.as_str()).collect();
    let page = WebhooksPage { csrf, nav: super::OPERATOR_NAV.to_vec(), notice, filter, states, deliveries };
    Ok(html(StatusCode::OK, &page))
}

async fn replay(state: web::Data<Gateway>, req: HttpRequest, id: web::Path<String>, form: web::Form<CsrfForm>) -> Page {
    let session = signed_in_form(&state, &req, &form.csrf).await?;
    let delivery = replay_delivery(&state, &id, &session.actor()).await?;
    let notice = format!("Delivery {} is sent again now.", delivery.id);
    listing(&state, session.csrf, Filter::default(), Some(notice)).await
}
