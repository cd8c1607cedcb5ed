//! Who is calling: the key a client presents, checked as every route checks it (known, not revoked, within
//! its requests per second).

use crate::domain::errors::{Code, Problem};
use crate::domain::tasks::KeyRecord;
use crate::ports::storage::Topology;
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use std::sync::Arc;

/// An authenticated caller: the record of the key it presented, shared with the key cache.
#[derive(Debug, Clone)]
pub struct Caller {
    key: Arc<KeyRecord>,
}

impl Caller {
    pub fn account(&self) -> &str {
        &self.key.account
    }

    /// First characters of the key used, for the usage log.
    pub fn key_prefix(&self) -> &str {
        &self.key.prefix
    }
}

/// The caller of the key with this hash, decided without a store call where that can be: its record is
/// cached and its requests are counted in memory (the usual case on the embedded store). `None` when the
/// store must be asked ([`authenticate`]).
pub fn authenticate_now(state: &Gateway, hash: [u8; 32]) -> Option<Result<Caller, Problem>> {
    if state.store.topology() == Topology::Shared {
        return None;
    }
    let record = state.store.cached_key(&hash)?;
    Some(admit(state, hash, Some(record)))
}

/// The caller of the key with this hash, through the store: refused as the API refuses it (revoked,
/// unknown, over its rate). The console's client sessions are checked so on every request.
pub async fn authenticate(state: &Gateway, hash: [u8; 32]) -> Result<Caller, ServiceError> {
    let record = state.store.key(&hash).await?;
    if state.store.topology() == Topology::Shared && record.as_ref().is_some_and(|r| !r.revoked) {
        let per_second = state.settings.limits.requests_per_second_per_key;
        if !state.store.admit_request(&hash, per_second).await? {
            return Err(crate::services::runtime::limits::rate_limited().into());
        }
    }
    Ok(admit(state, hash, record)?)
}

/// The caller of a live key, its request counted in memory unless the store counted it.
fn admit(state: &Gateway, hash: [u8; 32], record: Option<Arc<KeyRecord>>) -> Result<Caller, Problem> {
    match record {
        Some(record) if !record.revoked => {
            state.limits.request(hash)?;
            Ok(Caller { key: record })
        }
        _ => Err(Problem::new(Code::invalid_api_key, "The API key is not valid or has been revoked.")),
    }
}
