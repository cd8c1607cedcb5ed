//! The admin API's operators (created and revoked by root, each token shown once) and the audit trail,
//! listed a page at a time or exported whole as JSON lines.

use super::auth::Admin;
use crate::edges::web::error::ApiError;
use crate::edges::web::trail::TrailQuery;
use crate::services::operators;
use crate::services::runtime::Gateway;
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    use super::mount;
    mount(cfg, "/operators", vec![("GET", web::get().to(list)), ("POST", web::post().to(create))]);
    mount(cfg, "/operators/{name}/revoke", vec![("POST", web::post().to(revoke))]);
    mount(cfg, "/audit", vec![("GET", web::get().to(trail))]);
}

async fn list(_: Admin, state: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let listed: Vec<_> = operators::list(&state).await?.iter().map(|o| o.shown()).collect();
    Ok(HttpResponse::Ok().json(json!({"data": listed})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewOperator {
    name: String,
}

async fn create(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    body: web::Json<NewOperator>,
) -> Result<HttpResponse, ApiError> {
    let (operator, token) = operators::create(&state, &body.name, &by).await?;
    Ok(HttpResponse::Created().json(json!({
        "operator": operator.shown(),
        "token": token,
        "note": "Shown once; store it now. It signs in to the admin API, the CLI and the console as this operator.",
    })))
}

async fn revoke(
    Admin(by): Admin,
    state: web::Data<Gateway>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let operator = operators::revoke(&state, &name, &by).await?;
    Ok(HttpResponse::Ok().json(json!({"operator": operator.shown()})))
}

async fn trail(_: Admin, state: web::Data<Gateway>, query: web::Query<TrailQuery>) -> Result<HttpResponse, ApiError> {
    // A bigger `limit` reads as the most a page holds.
    let filter = query.filter()?;
    match query.format.as_deref().unwrap_or("json") {
        "json" => {
            let (entries, has_more) = operators::trail(&state, filter).await?;
            let last_seq = entries.last().map(|e| e.seq);
            Ok(HttpResponse::Ok().json(json!({"data": entries, "has_more": has_more, "last_seq": last_seq})))
        }
        "jsonl" => {
            let mut body = String::new();
            for entry in operators::whole_trail(&state, filter).await? {
                body.push_str(&serde_json::to_string(&entry).map_err(|e| ApiError::internal(e.to_string()))?);
                body.push('\n');
            }
            Ok(HttpResponse::Ok().content_type("application/x-ndjson").body(body))
        }
        other => Err(ApiError::invalid_parameter("format", format!("Unknown format `{other}`; use json or jsonl."))),
    }
}
