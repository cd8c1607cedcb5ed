//! The error catalogue: every code a client can see, with its `type`, and the one trait every layer's errors
//! are mapped onto it by ([`ErrorCode`], as meilisearch maps its errors). Each code's HTTP status is the
//! HTTP edge's business (`edges::web::error`); the words a client reads are written where the error is
//! made, and name neither an upstream's host nor its key.

use crate::domain::validate::Violation;
use std::borrow::Cow;

macro_rules! catalogue {
    ($($code:ident => $type:literal),* $(,)?) => {
        /// Every client-visible error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum Code { $($code),* }

        impl Code {
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$code => stringify!($code)),* }
            }

            /// The error's `type` in the envelope: the family a client may branch on.
            pub fn error_type(self) -> &'static str {
                match self { $(Code::$code => $type),* }
            }
        }
    };
}

catalogue! {
    invalid_json => "invalid_request_error",
    invalid_body => "invalid_request_error",
    invalid_parameter => "invalid_request_error",
    missing_model => "invalid_request_error",
    invalid_model_operation => "invalid_request_error",
    invalid_idempotency_key => "invalid_request_error",
    missing_api_key => "authentication_error",
    invalid_api_key => "authentication_error",
    insufficient_balance => "billing_error",
    model_disabled => "permission_error",
    free_trial_exhausted => "permission_error",
    admin_forbidden => "permission_error",
    invalid_link => "permission_error",
    not_found => "not_found_error",
    model_not_found => "not_found_error",
    task_not_found => "not_found_error",
    account_not_found => "not_found_error",
    result_not_found => "not_found_error",
    result_expired => "not_found_error",
    method_not_allowed => "invalid_request_error",
    task_not_cancellable => "conflict_error",
    idempotency_conflict => "conflict_error",
    request_in_progress => "conflict_error",
    conflict => "conflict_error",
    result_not_ready => "conflict_error",
    payload_too_large => "invalid_request_error",
    unsupported_media_type => "invalid_request_error",
    range_not_satisfiable => "invalid_request_error",
    rate_limited => "rate_limit_error",
    client_closed_request => "invalid_request_error",
    too_many_tasks => "rate_limit_error",
    upstream_rate_limited => "rate_limit_error",
    upstream_rejected => "upstream_error",
    upstream_content_blocked => "upstream_error",
    upstream_quota_exhausted => "upstream_error",
    internal_error => "server_error",
    upstream_error => "upstream_error",
    upstream_unavailable => "upstream_error",
    storage_unavailable => "server_error",
    image_models_unavailable => "server_error",
    upstream_timeout => "upstream_error",
}

/// An error as a client sees it: its code and the words it reads. Every layer's error type implements this,
/// and the HTTP edge renders any of them through it.
pub trait ErrorCode {
    fn error_code(&self) -> Code;
    /// What the client reads.
    fn message(&self) -> Cow<'_, str>;
    /// The request field the client should look at.
    fn param(&self) -> Option<&str> {
        None
    }
    /// Seconds after which a retry may succeed.
    fn retry_after(&self) -> Option<u64> {
        None
    }
    /// Every rule a request broke, when it broke several.
    fn violations(&self) -> &[Violation] {
        &[]
    }
    /// What the log gets and the client never sees: the detail of a failure of the gateway's own.
    fn logged(&self) -> Option<String> {
        None
    }
}

/// A refusal described in words: the domain's and the use cases' own errors (a bad parameter, a missing
/// account, a request a rule forbids), and the gateway's own failures, whose detail only the log sees.
#[derive(Debug, Clone)]
pub struct Problem {
    pub code: Code,
    pub message: String,
    pub param: Option<String>,
    pub violations: Vec<Violation>,
    pub retry_after: Option<u64>,
    /// For the log only.
    pub detail: Option<String>,
}

impl Problem {
    pub fn new(code: Code, message: impl Into<String>) -> Problem {
        Problem { code, message: message.into(), param: None, violations: Vec::new(), retry_after: None, detail: None }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Problem {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Problem {
        self.retry_after = Some(seconds);
        self
    }

    /// A 400 for one bad parameter, named.
    pub fn invalid_parameter(param: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem::new(Code::invalid_parameter, message).with_param(param)
    }

    /// A 400 listing every violation; `param` is the first one's field.
    pub fn invalid(violations: Vec<Violation>) -> Problem {
        let message = violations.iter().map(|v| v.message.as_str()).collect::<Vec<_>>().join("; ");
        let param = violations.first().map(|v| v.param.clone()).filter(|p| !p.is_empty());
        Problem { param, violations, ..Problem::new(Code::invalid_parameter, message) }
    }

    /// A failure of the gateway's own: the client is told it may retry, `detail` goes to the log.
    pub fn internal(detail: impl std::fmt::Display) -> Problem {
        Problem {
            detail: Some(detail.to_string()),
            ..Problem::new(Code::internal_error, "The gateway failed to complete the request; it is safe to retry.")
        }
    }

    /// Any error as the client would see it, to add what the caller knows (a parameter).
    pub fn of(error: &(impl ErrorCode + ?Sized)) -> Problem {
        Problem {
            code: error.error_code(),
            message: error.message().into_owned(),
            param: error.param().map(String::from),
            violations: error.violations().to_vec(),
            retry_after: error.retry_after(),
            detail: error.logged(),
        }
    }
}

impl ErrorCode for Problem {
    fn error_code(&self) -> Code {
        self.code
    }

    fn message(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.message)
    }

    fn param(&self) -> Option<&str> {
        self.param.as_deref()
    }

    fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    fn violations(&self) -> &[Violation] {
        &self.violations
    }

    fn logged(&self) -> Option<String> {
        self.detail.clone()
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}
