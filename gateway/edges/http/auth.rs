//! API-key authentication: `Authorization: Bearer K`, `x-api-key: K` or `x-alt-api-key: K`.

use crate::domain::errors::Code;
use crate::domain::tasks::KeyRecord;
use crate::edges::http::error::ApiError;
use crate::services::gateway::Gateway;
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::{Either, LocalBoxFuture};
use std::future::{Ready, ready};
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
    type Future = Either<Ready<Result<Caller, ApiError>>, LocalBoxFuture<'static, Result<Caller, ApiError>>>;

    /// At once when the key is cached and its requests are counted in memory (no store call: the usual
    /// case on the embedded store); else through the store.
    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let (state, hash) = match presented(req) {
            Ok(presented) => presented,
            Err(refused) => return Either::Left(ready(Err(refused))),
        };
        if !state.store.keeps_limits()
            && let Some(record) = state.store.cached_key(&hash)
        {
            return Either::Left(ready(admit(state, hash, Some(record))));
        }
        let state = state.clone();
        Either::Right(Box::pin(async move { Caller::of_key(&state, hash).await }))
    }
}

impl Caller {
    /// The caller of the key with this hash, through the store: refused as the API refuses it (revoked,
    /// unknown, over its rate). The console's client sessions are checked so on every request.
    pub async fn of_key(state: &Gateway, hash: [u8; 32]) -> Result<Caller, ApiError> {
        let record = state.store.key(&hash).await?;
        if state.store.keeps_limits() && record.as_ref().is_some_and(|r| !r.revoked) {
            let per_second = state.settings.limits.requests_per_second_per_key;
            if !state.store.admit_request(&hash, per_second).await? {
                return Err(crate::services::limits::rate_limited().into());
            }
        }
        admit(state, hash, record)
    }
}

/// The app state and the hash of the key the request presents.
fn presented(req: &HttpRequest) -> Result<(&web::Data<Gateway>, [u8; 32]), ApiError> {
    let key = presented_key(req).ok_or_else(|| {
        ApiError::new(
            Code::missing_api_key,
            "No API key: send `Authorization: Bearer <key>`, `x-api-key: <key>` or `x-alt-api-key: <key>`.",
        )
    })?;
    let state = req.app_data::<web::Data<Gateway>>().ok_or_else(|| ApiError::internal("no app state"))?;
    Ok((state, crate::domain::tasks::hash_key(key)))
}

/// The caller of a live key, its request counted in memory unless the store counted it.
fn admit(state: &Gateway, hash: [u8; 32], record: Option<Arc<KeyRecord>>) -> Result<Caller, ApiError> {
    match record {
        Some(record) if !record.revoked => {
            state.limits.request(hash)?;
            Ok(Caller { key: record })
        }
        _ => Err(ApiError::new(Code::invalid_api_key, "The API key is not valid or has been revoked.")),
    }
}
