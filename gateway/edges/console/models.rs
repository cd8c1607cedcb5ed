//! The models page: each model's operation, price rule, limits and request schema, switched on or off
//! as the admin API switches it (on every replica).

use super::operator::{signed_in, signed_in_form};
use super::{CsrfForm, Page, html, redirect};
use crate::domain::errors::Code;
use crate::edges::web::error::ApiError;
use crate::services::Gateway;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/models", web::get().to(page))
        .route("/models/{model}/schema", web::get().to(schema))
        .route("/models/{model}/{switch}", web::post().to(switch));
}

struct Row {
    id: &'static str,
    summary: &'static str,
    operation: &'static str,
    billing: String,
    limits: &'static str,
    enabled: bool,
}

#[derive(Template)]
#[template(path = "models.html")]
struct ModelsPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    models: Vec<Row>,
}

async fn page(state: web::Data<Gateway>, req: HttpRequest) -> Page {
    let session = signed_in(&state, &req)?;
    let models = crate::domain::catalog::MODELS
        .iter()
        .map(|m| Row {
            id: m.id,
            summary: m.summary,
            operation: m.operation.as_str(),
            billing: crate::services::models::billing_rule(m).to_string(),
            limits: m.limits_json,
            enabled: state.registry.is_enabled(m),
        })
        .collect();
    let page = ModelsPage { csrf: session.csrf, nav: super::OPERATOR_NAV.to_vec(), notice: None, models };
    Ok(html(StatusCode::OK, &page))
}

async fn schema(state: web::Data<Gateway>, req: HttpRequest, model: web::Path<String>) -> Page {
    signed_in(&state, &req)?;
    let spec = crate::domain::catalog::ModelSpec::find(&model)
        .ok_or_else(|| ApiError::new(Code::model_not_found, format!("No model `{model}`.")))?;
    Ok(HttpResponse::Ok().content_type("application/schema+json").body(spec.published_schema))
}

async fn switch(
    state: web::Data<Gateway>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<CsrfForm>,
) -> Page {
    signed_in_form(&state, &req, &form.csrf)?;
    let (model, switch) = path.into_inner();
    let enabled = match switch.as_str() {
        "enable" => true,
        "disable" => false,
        _ => return Err(ApiError::new(Code::not_found, "Use /enable or /disable.").into()),
    };
    crate::services::models::set_model_enabled(&state, &model, enabled).await?;
    Ok(redirect("/console/models"))
}
