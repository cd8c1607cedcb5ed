//! The one error catalogue of the HTTP edge.
//!
//! Every error a client can see has a stable `code`, one HTTP status and one `type`, and is rendered in the
//! OpenAI-style envelope `{"error": {"message", "type", "code", "param", "request_id"}}`. Messages written
//! here are for clients; upstream keys, hosts and raw bodies never reach them.

use crate::domain::validate::Violation;
use crate::edges::http::request_id;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;
use std::fmt;

macro_rules! catalogue {
    ($($code:ident => ($status:literal, $type:literal)),* $(,)?) => {
        /// Every client-visible error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum ErrorCode { $($code),* }

        impl ErrorCode {
            /// Every code, for docs and tests.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$code),*];

            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$code => stringify!($code)),* }
            }

            pub fn status(self) -> StatusCode {
                match self { $(ErrorCode::$code => StatusCode::from_u16($status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)),* }
            }

            pub fn error_type(self) -> &'static str {
                match self { $(ErrorCode::$code => $type),* }
            }
        }
    };
}

catalogue! {
    invalid_json => (400, "invalid_request_error"),
    invalid_body => (400, "invalid_request_error"),
    invalid_parameter => (400, "invalid_request_error"),
    missing_model => (400, "invalid_request_error"),
    invalid_model_operation => (400, "invalid_request_error"),
    invalid_idempotency_key => (400, "invalid_request_error"),
    missing_api_key => (401, "authentication_error"),
    invalid_api_key => (401, "authentication_error"),
    insufficient_balance => (402, "billing_error"),
    model_disabled => (403, "permission_error"),
    free_trial_exhausted => (403, "permission_error"),
    admin_forbidden => (403, "permission_error"),
    invalid_link => (403, "permission_error"),
    not_found => (404, "not_found_error"),
    model_not_found => (404, "not_found_error"),
    task_not_found => (404, "not_found_error"),
    account_not_found => (404, "not_found_error"),
    result_not_found => (404, "not_found_error"),
    result_expired => (410, "not_found_error"),
    method_not_allowed => (405, "invalid_request_error"),
    task_not_cancellable => (409, "conflict_error"),
    idempotency_conflict => (409, "conflict_error"),
    request_in_progress => (409, "conflict_error"),
    conflict => (409, "conflict_error"),
    result_not_ready => (409, "conflict_error"),
    payload_too_large => (413, "invalid_request_error"),
    unsupported_media_type => (415, "invalid_request_error"),
    range_not_satisfiable => (416, "invalid_request_error"),
    rate_limited => (429, "rate_limit_error"),
    client_closed_request => (499, "invalid_request_error"),
    too_many_tasks => (429, "rate_limit_error"),
    upstream_rate_limited => (429, "rate_limit_error"),
    upstream_rejected => (400, "upstream_error"),
    upstream_content_blocked => (400, "upstream_error"),
    upstream_quota_exhausted => (403, "upstream_error"),
    internal_error => (500, "server_error"),
    upstream_error => (502, "upstream_error"),
    upstream_unavailable => (503, "upstream_error"),
    storage_unavailable => (503, "server_error"),
    image_models_unavailable => (503, "server_error"),
    upstream_timeout => (504, "upstream_error"),
}

/// A client-facing error.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub param: Option<String>,
    /// Every violation, when the request broke several rules at once.
    pub violations: Vec<Violation>,
    /// Seconds, for 429 and 503 answers.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
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
        ApiError::new(ErrorCode::invalid_parameter, message).with_param(param)
    }

    /// A 400 listing every violation; `param` is the first one's field.
    pub fn invalid(violations: Vec<Violation>) -> ApiError {
        let message = violations.iter().map(|v| v.message.as_str()).collect::<Vec<_>>().join("; ");
        let param = violations.first().map(|v| v.param.clone()).filter(|p| !p.is_empty());
        ApiError { code: ErrorCode::invalid_parameter, message, param, violations, retry_after: None }
    }

    /// A failure of our own (store, task join); the detail goes to the log, not to the client.
    pub fn internal(detail: impl fmt::Display) -> ApiError {
        tracing::error!(request_id = %request_id::current(), error = %detail, "internal error");
        ApiError::new(ErrorCode::internal_error, "The gateway failed to complete the request; it is safe to retry.")
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
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

impl From<crate::ports::storage::StoreError> for ApiError {
    fn from(e: crate::ports::storage::StoreError) -> ApiError {
        use crate::ports::storage::Refusal;
        match e.refusal() {
            None if e.is_unavailable() => {
                tracing::error!(request_id = %request_id::current(), error = %e, "store unavailable");
                ApiError::new(
                    ErrorCode::storage_unavailable,
                    "The gateway cannot store anything right now, so it accepted nothing; retry later.",
                )
                .with_retry_after(5)
            }
            None => ApiError::internal(e),
            Some(Refusal::TooLarge) => ApiError::new(ErrorCode::invalid_parameter, e.reason()),
            Some(Refusal::Conflict) => ApiError::new(ErrorCode::conflict, e.reason()),
        }
    }
}
