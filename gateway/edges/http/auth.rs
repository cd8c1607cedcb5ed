//! API-key authentication: `Authorization: Bearer K`, `x-api-key: K` or `x-alt-api-key: K`, checked by the
//! use case (`services::auth`).

use crate::domain::audit::{Actor, CLI_AGENT, Via};
use crate::domain::errors::Code;
use crate::edges::web::error::ApiError;
use crate::services::auth::{self, Caller};
use crate::services::runtime::Gateway;
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::{Either, LocalBoxFuture};
use std::future::{Ready, ready};

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

/// The caller of a `/v1` route: at once when the key is cached and its requests are counted in memory (no
/// store call), else through the store.
impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Either<Ready<Result<Caller, ApiError>>, LocalBoxFuture<'static, Result<Caller, ApiError>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let (state, hash) = match presented(req) {
            Ok(presented) => presented,
            Err(refused) => return Either::Left(ready(Err(refused))),
        };
        if let Some(decided) = auth::authenticate_now(state, hash) {
            return Either::Left(ready(decided.map_err(ApiError::from)));
        }
        let state = state.clone();
        Either::Right(Box::pin(async move { Ok(auth::authenticate(&state, hash).await?) }))
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

/// A request carrying an operator's token (the admin token is `root`'s): who makes its change, and through
/// which edge. `mediagate admin` names itself in its `User-Agent`, so its changes read `cli` on the trail.
pub struct Admin(pub Actor);

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let Some(state) = req.app_data::<web::Data<Gateway>>().cloned() else {
            return Box::pin(ready(Err(ApiError::internal("no app state"))));
        };
        let token = presented_key(req).map(str::to_string);
        let agent = req.headers().get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let via = if agent.starts_with(CLI_AGENT) { Via::Cli } else { Via::Api };
        Box::pin(async move {
            let operator = crate::services::operators::authenticate(&state, token.as_deref()).await?;
            Ok(Admin(Actor::new(operator, via)))
        })
    }
}
