//! The family's error codes (docs/upstream-protocol.md section 6) classified: what kind of refusal each is, for
//! the port's [`UpstreamError`]. Codes are matched by family and never passed through as the client's code.

use crate::ports::upstream::{Refusal, UpstreamError};

/// An error answer of the family: its status, code and message, classified.
pub fn answered(status: u16, code: String, message: String) -> UpstreamError {
    let refusal = refusal_of(&code);
    UpstreamError::Answered { status, code, message, refusal }
}

/// The error a task recorded, as it was first answered.
pub fn recorded(code: &str, detail: &str, region: &str) -> UpstreamError {
    UpstreamError::of_gateway(code, detail, region).unwrap_or_else(|| answered(0, code.into(), detail.into()))
}

/// What kind of refusal a code of the family is.
fn refusal_of(code: &str) -> Refusal {
    let family = |prefix: &str| code == prefix || code.starts_with(&format!("{prefix}."));
    if code == "DataInspectionFailed" || code.ends_with(".DataInspection") {
        Refusal::ContentBlocked
    } else if family("InvalidParameter")
        || family("BadRequest")
        || code == "InvalidURL"
        || code == "InvalidImageResolution"
    {
        Refusal::Rejected
    } else if code == "AllocationQuota.FreeTierOnly" || code == "Throttling.AllocationQuota" {
        Refusal::QuotaExhausted
    } else if family("Throttling") {
        Refusal::RateLimited
    } else if code == "ModelUnavailable" || code == "Arrearage" {
        Refusal::Unavailable
    } else if code == "UnsupportedOperation" {
        Refusal::NotCancellable
    } else {
        // InvalidApiKey, AccessDenied, Model.AccessDenied, InternalError.*: the gateway's problem, not the client's.
        Refusal::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::errors::{Code, ErrorCode};

    /// Each family of codes, with the client's code it becomes and whether a retry may mend it.
    #[test]
    fn codes_are_classified_by_family() {
        let cases = [
            (400, "InvalidParameter.FileDownload", Code::upstream_rejected, false),
            (400, "DataInspectionFailed", Code::upstream_content_blocked, false),
            (400, "InvalidParameter.DataInspection", Code::upstream_content_blocked, false),
            (403, "AllocationQuota.FreeTierOnly", Code::upstream_quota_exhausted, false),
            (429, "Throttling.AllocationQuota", Code::upstream_quota_exhausted, false),
            (429, "Throttling.RateQuota", Code::upstream_rate_limited, true),
            (503, "ModelUnavailable", Code::upstream_unavailable, true),
            (500, "InternalError.Algo", Code::upstream_error, true),
            (401, "InvalidApiKey", Code::upstream_error, false),
        ];
        for (status, code, expected, transient) in cases {
            let error = answered(status, code.into(), "message".into());
            assert_eq!((error.error_code(), error.is_transient()), (expected, transient), "{code}");
        }
        assert_eq!(recorded("UpstreamTimeout", "", "cn-beijing").code(), "UpstreamTimeout");
        assert_eq!(recorded("DataInspectionFailed", "no", "cn-beijing").error_code(), Code::upstream_content_blocked);
    }
}
