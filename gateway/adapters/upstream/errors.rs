//! Upstream failures and their mapping onto the gateway's error catalogue (upstream-protocol.md section 6).
//!
//! Upstream codes are matched by family, never passed through: a client sees the gateway's code and a
//! message written here, and neither upstream hosts, keys nor raw bodies.

use crate::domain::errors::{Code, ErrorCode};
use std::borrow::Cow;

/// What went wrong talking to the upstream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream answered with an error body.
    #[error("upstream answered {status} {code}")]
    Answered { status: u16, code: String, message: String },
    /// No answer in time.
    #[error("upstream timed out")]
    Timeout,
    /// Could not connect or the connection broke before an answer.
    #[error("upstream unreachable: {0}")]
    Transport(String),
    /// The TLS handshake failed (an unknown issuer, an expired certificate, a name mismatch, ...): the
    /// reason, which names no host.
    #[error("upstream TLS handshake failed: {0}")]
    Tls(String),
    /// An answer that is not the protocol's shape.
    #[error("upstream answered something unreadable: {0}")]
    Malformed(String),
    /// No base URL or key is configured for the region.
    #[error("no upstream configured for region {0}")]
    NotConfigured(String),
}

impl UpstreamError {
    /// Worth trying again later: rate limits, server errors, transport failures.
    pub fn is_transient(&self) -> bool {
        match self {
            UpstreamError::Answered { status, code, .. } => {
                matches!(status, 429 | 500 | 502 | 503 | 504) && !is_quota(code)
            }
            UpstreamError::Timeout | UpstreamError::Transport(_) => true,
            // Retrying at once cannot mend a certificate.
            UpstreamError::Tls(_) | UpstreamError::Malformed(_) | UpstreamError::NotConfigured(_) => false,
        }
    }

    /// What a task that failed on this error records beside its code: the upstream's own message, or a
    /// plain phrase (never a host or a key). [`UpstreamError::recorded`] reads the two back.
    pub fn detail(&self) -> String {
        match self {
            UpstreamError::Answered { message, .. } => message.clone(),
            UpstreamError::Timeout => "the upstream did not answer in time".into(),
            UpstreamError::Transport(_) => "the upstream is unreachable".into(),
            UpstreamError::Tls(reason) => reason.clone(),
            UpstreamError::Malformed(_) => "the upstream answered something unreadable".into(),
            UpstreamError::NotConfigured(region) => format!("no upstream is configured for region {region}"),
        }
    }

    /// The error a task recorded (its `code` and `detail`, for a model of `region`), as the client first got it.
    pub fn recorded(code: &str, detail: &str, region: &str) -> UpstreamError {
        match code {
            "UpstreamTimeout" => UpstreamError::Timeout,
            "UpstreamUnreachable" => UpstreamError::Transport(detail.into()),
            "UpstreamTlsFailed" => UpstreamError::Tls(detail.into()),
            "UpstreamMalformed" => UpstreamError::Malformed(detail.into()),
            "UpstreamNotConfigured" => UpstreamError::NotConfigured(region.into()),
            code => UpstreamError::Answered { status: 0, code: code.into(), message: detail.into() },
        }
    }

    /// The upstream's code, or a gateway code for failures without one.
    pub fn code(&self) -> String {
        match self {
            UpstreamError::Answered { code, .. } => code.clone(),
            UpstreamError::Timeout => "UpstreamTimeout".into(),
            UpstreamError::Transport(_) => "UpstreamUnreachable".into(),
            UpstreamError::Tls(_) => "UpstreamTlsFailed".into(),
            UpstreamError::Malformed(_) => "UpstreamMalformed".into(),
            UpstreamError::NotConfigured(_) => "UpstreamNotConfigured".into(),
        }
    }
}

fn is_quota(code: &str) -> bool {
    code == "AllocationQuota.FreeTierOnly" || code == "Throttling.AllocationQuota"
}

/// How the gateway words an upstream failure: its code, the client's message and when to retry.
struct Described {
    code: Code,
    message: Cow<'static, str>,
    retry_after: Option<u64>,
}

impl Described {
    fn new(code: Code, message: impl Into<Cow<'static, str>>) -> Described {
        Described { code, message: message.into(), retry_after: None }
    }

    fn retry_after(mut self, seconds: u64) -> Described {
        self.retry_after = Some(seconds);
        self
    }
}

impl UpstreamError {
    fn described(&self) -> Described {
        match self {
            UpstreamError::Answered { code, message, .. } => map_code(code, message),
            UpstreamError::Timeout => {
                Described::new(Code::upstream_timeout, "The upstream did not answer in time; retry later.")
            }
            UpstreamError::Transport(_) => {
                Described::new(Code::upstream_unavailable, "The upstream is unreachable; retry later.").retry_after(5)
            }
            UpstreamError::Tls(_) => Described::new(
                Code::upstream_unavailable,
                "The upstream could not be reached securely (its certificate was refused); retry later.",
            )
            .retry_after(60),
            UpstreamError::Malformed(_) => {
                Described::new(Code::upstream_error, "The upstream answered something unreadable.")
            }
            UpstreamError::NotConfigured(region) => Described::new(
                Code::upstream_unavailable,
                format!(
                    "No upstream is configured for region `{region}`, which serves this model; the operator sets \
                     `upstreams.{region}` (base_url, api_key_env) in the gateway's config."
                ),
            )
            .retry_after(60),
        }
    }
}

impl ErrorCode for UpstreamError {
    fn error_code(&self) -> Code {
        self.described().code
    }

    fn message(&self) -> Cow<'_, str> {
        self.described().message
    }

    fn retry_after(&self) -> Option<u64> {
        self.described().retry_after
    }
}

/// An upstream error code in the gateway's words. Only parameter complaints keep the upstream's text,
/// because that text names the offending parameter and nothing about the upstream itself.
fn map_code(code: &str, message: &str) -> Described {
    let family = |prefix: &str| code == prefix || code.starts_with(&format!("{prefix}."));
    if code == "DataInspectionFailed" || code.ends_with(".DataInspection") {
        Described::new(Code::upstream_content_blocked, "The upstream's content inspection refused the input or output.")
    } else if family("InvalidParameter")
        || family("BadRequest")
        || code == "InvalidURL"
        || code == "InvalidImageResolution"
    {
        Described::new(
            Code::upstream_rejected,
            format!("The upstream rejected the request ({code}): {}", clip(message)),
        )
    } else if is_quota(code) {
        Described::new(Code::upstream_quota_exhausted, "The upstream's free-trial quota for this model is used up.")
    } else if family("Throttling") {
        Described::new(Code::upstream_rate_limited, "The upstream is rate limiting; retry shortly.").retry_after(2)
    } else if code == "ModelUnavailable" || code == "Arrearage" {
        Described::new(Code::upstream_unavailable, "The model is unavailable upstream; retry later.").retry_after(30)
    } else {
        // InvalidApiKey, AccessDenied, Model.AccessDenied, InternalError.*: the gateway's problem, not the client's.
        Described::new(Code::upstream_error, format!("The upstream failed the request ({code})."))
    }
}

fn clip(message: &str) -> String {
    let cleaned: String = message.chars().filter(|c| !c.is_control()).take(200).collect();
    if cleaned.contains("://") { "see the parameter rules of this model".into() } else { cleaned }
}
