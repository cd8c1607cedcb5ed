//! The audit trail's filters as the admin API's query string and the console's form give them.

use crate::domain::audit::{Action, AuditFilter, Via};
use crate::edges::web::error::ApiError;
use crate::edges::web::one_of;
use crate::services::operators::AUDIT_PAGE;
use serde::Deserialize;

/// The trail's filters, as the admin API, the CLI and the console's form take them.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TrailQuery {
    pub operator: Option<String>,
    pub action: Option<String>,
    pub account: Option<String>,
    pub via: Option<String>,
    /// Epoch milliseconds, inclusive.
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// The `seq` of the last entry of the page before.
    pub after: Option<u64>,
    pub limit: Option<usize>,
    /// `json` (a page, the default) or `jsonl` (every entry kept, one per line).
    pub format: Option<String>,
}

impl TrailQuery {
    /// The filter these fields name; an empty field names nothing.
    pub fn filter(&self) -> Result<AuditFilter, ApiError> {
        fn given(field: &Option<String>) -> Option<&str> {
            field.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let action = given(&self.action).map(|a| one_of("action", a, &Action::ALL, Action::as_str)).transpose()?;
        let via = given(&self.via).map(|v| one_of("via", v, &Via::ALL, Via::as_str)).transpose()?;
        Ok(AuditFilter {
            operator: given(&self.operator).map(str::to_string),
            action,
            account: given(&self.account).map(str::to_string),
            via,
            since: self.since,
            until: self.until,
            after: self.after,
            limit: self.limit.unwrap_or(100).clamp(1, AUDIT_PAGE),
        })
    }
}
