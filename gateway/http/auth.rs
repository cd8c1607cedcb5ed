//! API-key authentication: `Authorization: Bearer K`, `x-api-key: K` or `x-alt-api-key: K`.

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;
use crate::store::KeyRecord;
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;
use std::sync::Arc;

/// The authenticated caller of a `/v1` route: the record of the key it presented, shared with the key cache.
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

/// The key a request presents, from whichever of the three headers carries one.
pub fn presented_key(req: &HttpRequest) -> Option<&str> {
    let headers = req.headers();
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    bearer
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .or_else(|| headers.get("x-alt-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { authenticate(&req).await })
    }
}

async fn authenticate(req: &HttpRequest) -> Result<Caller, ApiError> {
    let key = presented_key(req).ok_or_else(|| {
        ApiError::new(
            ErrorCode::missing_api_key,
            "No API key: send `Authorization: Bearer <key>`, `x-api-key: <key>` or `x-alt-api-key: <key>`.",
        )
    })?;
    let state = req.app_data::<web::Data<AppState>>().ok_or_else(|| ApiError::internal("no app state"))?;
    let hash = crate::store::hash_key(key);
    match state.store.key(&hash).await? {
        Some(record) if !record.revoked => {
            if !state.store.counts_requests() {
                state.limits.request(hash)?;
            } else if !state.store.admit_request(&hash, state.config.limits.requests_per_second_per_key).await? {
                return Err(crate::limits::rate_limited());
            }
            Ok(Caller { key: record })
        }
        _ => Err(ApiError::new(ErrorCode::invalid_api_key, "The API key is not valid or has been revoked.")),
    }
}
