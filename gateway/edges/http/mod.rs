//! The HTTP edge: middleware, extractors and routes.

pub mod admin;
pub mod admin_audit;
pub mod admin_webhooks;
pub mod auth;
mod content;
pub mod models;
pub mod ops;
pub mod peer;
pub mod quotes;
pub mod submit;
pub mod tasks;

use crate::domain::errors::Code;
use crate::edges::web::error::ApiError;
use crate::edges::web::request_id;
use crate::services::runtime::Gateway;
use actix_web::error::JsonPayloadError;
use actix_web::{HttpRequest, web};
use std::borrow::Cow;

/// Mounts every route with the shared state and the JSON body rules.
pub fn configure(state: web::Data<Gateway>, max_body_bytes: usize) -> impl Fn(&mut web::ServiceConfig) + Clone {
    move |cfg: &mut web::ServiceConfig| {
        let limit = max_body_bytes;
        cfg.app_data(state.clone())
            .app_data(web::JsonConfig::default().limit(limit).error_handler(json_error))
            .app_data(web::QueryConfig::default().error_handler(|e, _| {
                ApiError::new(Code::invalid_parameter, format!("The query string is not valid: {e}")).into()
            }))
            .app_data(
                web::PathConfig::default().error_handler(|e, _| ApiError::new(Code::not_found, e.to_string()).into()),
            )
            // Routes are tried in this order and a dynamic one costs a regex match: the busiest first.
            .configure(submit_routes)
            .configure(tasks::configure)
            .configure(quotes::configure)
            .configure(content::configure)
            .configure(ops::configure)
            .configure(models::configure)
            .configure(admin::configure)
            .default_service(web::to(not_found));
    }
}

/// Mounts the submit endpoints of the catalog; every one is served by the same generic handler.
fn submit_routes(cfg: &mut web::ServiceConfig) {
    for endpoint in crate::domain::catalog::ENDPOINTS {
        cfg.service(
            web::resource(endpoint.path)
                .app_data(web::Data::new(endpoint))
                .route(web::post().to(submit::submit))
                .default_service(web::to(post_only)),
        );
    }
}

/// Each way a body can be unreadable gets its own code.
fn json_error(error: JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    let api = match &error {
        JsonPayloadError::OverflowKnownLength { length, limit } => {
            ApiError::new(Code::payload_too_large, format!("The body is {length} bytes; the limit is {limit}."))
        }
        JsonPayloadError::Overflow { limit } => {
            ApiError::new(Code::payload_too_large, format!("The body is larger than the limit of {limit} bytes."))
        }
        JsonPayloadError::ContentType => {
            ApiError::new(Code::unsupported_media_type, "Send the body as `Content-Type: application/json`.")
        }
        JsonPayloadError::Deserialize(e) => {
            ApiError::new(Code::invalid_json, format!("The body is not valid JSON: {e}"))
        }
        other => ApiError::new(Code::invalid_json, format!("The body could not be read: {other}")),
    };
    api.into()
}

/// The one middleware: runs each request in its request id's scope ([`request_id::scope`]), stamps the id
/// on the response (`X-Request-Id`), and records the request in the metrics (by matched route pattern) and
/// the access log.
pub async fn edge_middleware(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let (response, id) = request_id::scope(next.call(req)).await;
    let mut response = response?;
    let status = response.status().as_u16();
    let route = route_label(response.request(), status);
    let seconds = started.elapsed().as_secs_f64();
    crate::support::metrics::request(&route, status, seconds);
    tracing::info!(target: "mediagate::access", request_id = %id, %method, route = &*route, status, ms = seconds * 1000.0, "request");
    // From the id's own bytes (made to size, so no copy); `from_str` would copy them.
    if let Ok(value) = actix_web::http::header::HeaderValue::try_from(id) {
        response.headers_mut().insert(request_id::HEADER, value);
    }
    Ok(response)
}

/// The matched route's pattern, rebuilt from the path and its captured segments: `HttpRequest::match_pattern`
/// would match the path against every route again (regular expressions for dynamic ones) on every request.
fn route_label(req: &HttpRequest, status: u16) -> Cow<'_, str> {
    let captured = req.match_info();
    if captured.segment_count() == 0 {
        // A static route, or no route at all (only the fallback answers 404 without captures).
        if status == 404 && req.match_pattern().is_none() {
            return "unmatched".into();
        }
        return req.path().into();
    }
    // Captures appear in path order: replace them from the last one back, each before the previous.
    let mut label = req.path().to_string();
    let mut end = label.len();
    let captures: Vec<(&str, &str)> = captured.iter().collect();
    for (name, value) in captures.into_iter().rev() {
        match label[..end].rfind(value) {
            Some(start) if !value.is_empty() => {
                label.replace_range(start..start + value.len(), &format!("{{{name}}}"));
                end = start;
            }
            // A percent-decoded capture does not appear verbatim: ask the router.
            _ => return req.match_pattern().map_or_else(|| "unmatched".into(), Cow::Owned),
        }
    }
    label.into()
}

async fn not_found(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::new(Code::not_found, format!("No route for {} {}.", req.method(), req.path())))
}

/// Mounts `path` with `routes` (each a method's name and its route), answering any other method with a 405
/// that names the allowed ones in `Allow`.
pub fn mount(cfg: &mut web::ServiceConfig, path: &str, routes: Vec<(&'static str, actix_web::Route)>) {
    let allow: std::sync::Arc<str> = routes.iter().map(|(method, _)| *method).collect::<Vec<_>>().join(", ").into();
    let resource = routes.into_iter().fold(web::resource(path), |resource, (_, route)| resource.route(route));
    cfg.service(resource.default_service(web::to(move |req: HttpRequest| method_not_allowed(req, allow.clone()))));
}

/// A known path asked with the wrong method: 405 in the envelope, with `Allow`.
async fn method_not_allowed(req: HttpRequest, allow: std::sync::Arc<str>) -> actix_web::HttpResponse {
    use actix_web::ResponseError;
    let message = format!("{} does not accept {}; it accepts {allow}.", req.path(), req.method());
    let mut response = ApiError::new(Code::method_not_allowed, message).error_response();
    if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&allow) {
        response.headers_mut().insert(actix_web::http::header::ALLOW, value);
    }
    response
}

/// The 304 of a request whose `If-None-Match` names `etag` (quoted, as sent) or `*`, if it does.
fn not_modified(req: &HttpRequest, etag: &str) -> Option<actix_web::HttpResponse> {
    use actix_web::http::header;
    let asked = req.headers().get(header::IF_NONE_MATCH)?.to_str().ok()?;
    asked
        .split(',')
        .any(|tag| tag.trim() == etag || tag.trim() == "*")
        .then(|| actix_web::HttpResponse::NotModified().insert_header((header::ETAG, etag)).finish())
}

/// The 405 of a submit endpoint, which takes `POST` only (mounted by the generated route table).
pub async fn post_only(req: HttpRequest) -> actix_web::HttpResponse {
    method_not_allowed(req, "POST".into()).await
}
