//! A request id on every response (`X-Request-Id`) and in every error body.
//!
//! The id lives in a task-local for the duration of the request, so error rendering deep in the stack can
//! read it without threading it through every call. Submit handlers replace it with the task's request id.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use std::cell::RefCell;

tokio::task_local! {
    static REQUEST_ID: RefCell<String>;
}

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The current request's id, or `-` outside a request.
pub fn current() -> String {
    REQUEST_ID.try_with(|id| id.borrow().clone()).unwrap_or_else(|_| "-".into())
}

/// Replaces the current request's id (a submit uses the id it stores on the task).
pub fn set(id: &str) {
    let _ = REQUEST_ID.try_with(|current| *current.borrow_mut() = id.to_string());
}

/// A fresh id with the given prefix.
pub fn generate(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// Middleware: opens the request's scope and stamps the header on the way out.
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let (response, id) = REQUEST_ID
        .scope(RefCell::new(generate("req-")), async {
            let response = next.call(req).await;
            (response, current())
        })
        .await;
    let mut response = response?;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    Ok(response)
}
