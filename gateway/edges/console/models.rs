//! The models page: each model's operation, price rule, limits and request schema, switched on or off
//! as the admin API switches it (on every replica).

use super::operator::{signed_in, signed_in_form};
use super::{CsrfForm, Page, html, redirect};
use crate::domain::catalog::BillingRule;
use crate::domain::errors::Code;
use crate::edges::web::error::ApiError;
use crate::services::runtime::Gateway;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde_json::{Map, Value};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/models", web::get().to(page))
        .route("/models/{model}/schema", web::get().to(schema))
        .route("/models/{model}/{switch}", web::post().to(switch));
}

struct Row {
    id: &'static str,
    summary: &'static str,
    operation: &'static str,
    /// The price rule in words, a line per tier or unit.
    prices: Vec<String>,
    placeholder: bool,
    /// The model's own limits in words, a line per field.
    limits: Vec<String>,
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
    let session = signed_in(&state, &req).await?;
    let models = crate::domain::catalog::MODELS
        .iter()
        .map(|m| Row {
            id: m.id,
            summary: m.summary,
            operation: m.operation.as_str(),
            prices: prices(&m.billing),
            placeholder: m.billing.placeholder(),
            limits: limits(m.limits_json),
            enabled: state.registry.is_enabled(m),
        })
        .collect();
    let page = ModelsPage { csrf: session.csrf, nav: super::OPERATOR_NAV.to_vec(), notice: None, models };
    Ok(html(StatusCode::OK, &page))
}

async fn schema(state: web::Data<Gateway>, req: HttpRequest, model: web::Path<String>) -> Page {
    signed_in(&state, &req).await?;
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
    let by = signed_in_form(&state, &req, &form.csrf).await?.actor();
    let (model, switch) = path.into_inner();
    crate::services::models::switch_model(&state, &model, &switch, &by).await?;
    Ok(redirect("/console/models"))
}

/// A price of the catalog (micro-units) as money.
fn amount(micros: u64) -> String {
    super::charts::money(i64::try_from(micros).unwrap_or(i64::MAX))
}

/// A price rule as a person reads it: "0.85 / s at 1080P with sound".
fn prices(rule: &BillingRule) -> Vec<String> {
    match rule {
        BillingRule::PerSecond { tiers, .. } => tiers
            .iter()
            .flat_map(|t| {
                let audio = t.audio.map(|p| format!("{} / s at {} with sound", amount(p), t.tier));
                let silent = t.silent.map(|p| format!("{} / s at {} silent", amount(p), t.tier));
                audio.into_iter().chain(silent)
            })
            .collect(),
        BillingRule::PerImage { price, .. } => vec![format!("{} / image", amount(*price))],
        BillingRule::PerCall { price, .. } => vec![format!("{} / call", amount(*price))],
        BillingRule::PerToken { price, .. } => vec![
            format!("{} / million input tokens", amount(price.input_per_million)),
            format!("{} / million output tokens", amount(price.output_per_million)),
        ],
    }
}

/// A model's limits (`GET /v1/models`' `limits`) as a person reads them: "duration 2-15 s, default 5".
fn limits(json: &str) -> Vec<String> {
    let limits: Map<String, Value> = serde_json::from_str(json).unwrap_or_default();
    limits.iter().map(|(field, limit)| limit_words(field, limit)).collect()
}

fn limit_words(field: &str, limit: &Value) -> String {
    let number = |key: &str| limit.get(key).and_then(Value::as_f64);
    let text = |value: &Value| value.as_str().map_or_else(|| value.to_string(), str::to_string);
    if limit.get("forbidden").and_then(Value::as_bool) == Some(true) {
        return format!("{field}: not taken");
    }
    // Seconds are the one unit a bare number leaves unsaid.
    let unit = if field.ends_with("duration") { " s" } else { "" };
    let mut parts = Vec::new();
    if limit.get("required").and_then(Value::as_bool) == Some(true) {
        parts.push("required".to_string());
    }
    match (number("minimum"), number("maximum")) {
        (Some(low), Some(high)) if low == high => parts.push(format!("{low}{unit} only")),
        (Some(low), Some(high)) => parts.push(format!("{low}-{high}{unit}")),
        (Some(low), None) => parts.push(format!("at least {low}{unit}")),
        (None, Some(high)) => parts.push(format!("at most {high}{unit}")),
        (None, None) => {}
    }
    if let Some(values) = limit.get("enum").and_then(Value::as_array) {
        parts.push(format!("one of {}", values.iter().map(text).collect::<Vec<_>>().join(", ")));
    }
    if let Some(pixels) = limit.get("pixels") {
        let megapixels = |key: &str| pixels.get(key).and_then(Value::as_f64).map(|p| format!("{:.2}", p / 1e6));
        let aspect = |key: &str| pixels.get(key).and_then(Value::as_f64).map(|a| a.to_string());
        if let (Some(low), Some(high)) = (megapixels("min_pixels"), megapixels("max_pixels")) {
            parts.push(format!("{low}-{high} megapixels"));
        }
        if let (Some(low), Some(high)) = (aspect("min_aspect"), aspect("max_aspect")) {
            parts.push(format!("width / height {low}-{high}"));
        }
    }
    if let Some(length) = number("max_length") {
        parts.push(format!("up to {length} characters"));
    }
    match (number("min_items"), number("max_items")) {
        (Some(low), Some(high)) => parts.push(format!("{low}-{high} items")),
        (None, Some(high)) => parts.push(format!("up to {high} items")),
        (Some(low), None) => parts.push(format!("at least {low} items")),
        (None, None) => {}
    }
    if let Some(default) = limit.get("default") {
        parts.push(format!("default {}", text(default)));
    }
    format!("{field} {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::catalog::{TierPrice, TokenPrice};

    #[test]
    fn prices_read_in_units_with_as_many_decimals_as_they_have() {
        for (micros, words) in [
            (850_000, "0.85"),
            (25_000, "0.025"),
            (1_000_000, "1.00"),
            (0, "0.00"),
            (1, "0.000001"),
            (12_300_000, "12.30"),
        ] {
            assert_eq!(amount(micros), words, "{micros}");
        }
        const TIERS: &[TierPrice] = &[TierPrice { tier: "1080P", audio: Some(850_000), silent: Some(600_000) }];
        let rule = BillingRule::PerSecond { placeholder: false, tiers: TIERS };
        assert_eq!(prices(&rule), ["0.85 / s at 1080P with sound", "0.60 / s at 1080P silent"]);
        let tokens = TokenPrice { input_per_million: 2_000_000, output_per_million: 8_000_000, hold_output_tokens: 0 };
        let rule = BillingRule::PerToken { placeholder: true, price: tokens };
        assert_eq!(prices(&rule), ["2.00 / million input tokens", "8.00 / million output tokens"]);
        assert_eq!(prices(&BillingRule::PerImage { placeholder: true, price: 40_000 }), ["0.04 / image"]);
    }

    #[test]
    fn limits_read_as_words() {
        let table = [
            (r#"{"duration": {"minimum": 2, "maximum": 15, "default": 5}}"#, "duration 2-15 s, default 5"),
            (r#"{"n": {"minimum": 1, "maximum": 1, "default": 1}}"#, "n 1 only, default 1"),
            (
                r#"{"size": {"enum": ["1664*928", "1328*1328"], "default": "1664*928"}}"#,
                "size one of 1664*928, 1328*1328, default 1664*928",
            ),
            (
                r#"{"size": {"pixels": {"min_pixels": 262144, "max_pixels": 4194304, "min_aspect": 0.25, "max_aspect": 4.0}}}"#,
                "size 0.26-4.19 megapixels, width / height 0.25-4",
            ),
            (r#"{"prompt": {"max_length": 800}}"#, "prompt up to 800 characters"),
            (r#"{"seed": {"forbidden": true}}"#, "seed: not taken"),
            (r#"{"img_urls": {"required": true, "min_items": 1, "max_items": 3}}"#, "img_urls required, 1-3 items"),
        ];
        for (json, words) in table {
            assert_eq!(limits(json), [words], "{json}");
        }
    }
}
