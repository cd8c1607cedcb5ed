//! Error answers: any layer's error (an [`ErrorCode`]) rendered in the OpenAI-style envelope
//! `{"error": {"message", "type", "code", "param", "request_id"}}`, with its code's one HTTP status. The codes
//! and their types are the domain's catalogue (`domain::errors`); the statuses are here, where HTTP is.

use crate::domain::errors::{Code, ErrorCode};
use crate::domain::validate::Violation;
use crate::edges::web::request_id;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;
use std::fmt;

/// The HTTP status of each code.
pub fn status(code: Code) -> StatusCode {
    let status = match code {
        Code::invalid_json
        | Code::invalid_body
        | Code::invalid_parameter
        | Code::missing_model
        | Code::invalid_model_operation
        | Code::invalid_idempotency_key
        | Code::upstream_rejected
        | Code::upstream_content_blocked => 400,
        Code::missing_api_key | Code::invalid_api_key => 401,
        Code::insufficient_balance => 402,
        Code::model_disabled
        | Code::free_trial_exhausted
        | Code::admin_forbidden
        | Code::invalid_link
        | Code::upstream_quota_exhausted => 403,
        Code::not_found
        | Code::model_not_found
        | Code::task_not_found
        | Code::account_not_found
        | Code::result_not_found => 404,
        Code::method_not_allowed => 405,
        Code::task_not_cancellable
        | Code::idempotency_conflict
        | Code::request_in_progress
        | Code::conflict
        | Code::result_not_ready => 409,
        Code::result_expired => 410,
        Code::payload_too_large => 413,
        Code::unsupported_media_type => 415,
        Code::range_not_satisfiable => 416,
        Code::rate_limited | Code::too_many_tasks | Code::upstream_rate_limited => 429,
        Code::client_closed_request => 499,
        Code::internal_error => 500,
        Code::upstream_error => 502,
        Code::upstream_unavailable | Code::storage_unavailable | Code::image_models_unavailable => 503,
        Code::upstream_timeout => 504,
    };
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub param: Option<String>,
    /// Every violation, when the request broke several rules at once.
    pub violations: Vec<Violation>,
    /// Seconds, for 429 and 503 answers.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError { code, message: message.into(), param: None, violations: Vec::new(), retry_after: None }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> ApiError {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    /// A 400 for one bad parameter, named.
    pub fn invalid_parameter(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::new(Code::invalid_parameter, message).with_param(param)
    }

    /// A 400 listing every violation; `param` is the first one's field.
    pub fn invalid(violations: Vec<Violation>) -> ApiError {
        let message = violations.iter().map(|v| v.message.as_str()).collect::<Vec<_>>().join("; ");
        let param = violations.first().map(|v| v.param.clone()).filter(|p| !p.is_empty());
        ApiError { code: Code::invalid_parameter, message, param, violations, retry_after: None }
    }

    /// A failure of our own (store, task join); the detail goes to the log, not to the client.
    pub fn internal(detail: impl fmt::Display) -> ApiError {
        ApiError::from(crate::domain::errors::Problem::internal(detail))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status(self.code)
    }

    fn error_response(&self) -> HttpResponse {
        let mut error = json!({
            "message": self.message,
            "type": self.code.error_type(),
            "code": self.code.as_str(),
            "param": self.param,
            "request_id": request_id::current(),
        });
        if self.violations.len() > 1 {
            error["violations"] = json!(self.violations);
        }
        let mut response = HttpResponse::build(self.status_code());
        if let Some(seconds) = self.retry_after {
            response.insert_header((header::RETRY_AFTER, HeaderValue::from(seconds)));
        }
        response.insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")));
        response.json(json!({"error": error}))
    }
}

/// Any layer's error as an answer; a failure of the gateway's own is logged with its detail here, under the
/// request's id.
impl<E: ErrorCode> From<E> for ApiError {
    fn from(error: E) -> ApiError {
        if let Some(detail) = error.logged() {
            let code = error.error_code().as_str();
            tracing::error!(request_id = %request_id::current(), code, error = %detail, "request failed");
        }
        ApiError {
            code: error.error_code(),
            message: error.message().into_owned(),
            param: error.param().map(String::from),
            violations: error.violations().to_vec(),
            retry_after: error.retry_after(),
        }
    }
}
