//! Console sessions: a signed cookie, no server-side state, so any replica serves any session.
//!
//! The cookie holds who signed in, until when, and a CSRF token, under an HMAC-SHA256 keyed from the
//! gateway's link secret. It is `HttpOnly`, `SameSite=Strict` and `Path=/console`, `Secure` where the
//! gateway serves TLS. Who it names is checked again on every request: an operator session holds a digest
//! of its operator's token (changing the admin token signs root out, revoking an operator signs it out),
//! and a client session the hash of its API key, which goes through the API's own key check (a revoked key
//! is refused at once).

use crate::domain::audit::{Actor, Via};
use crate::domain::errors::Code;
use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::runtime::Gateway;
use crate::services::runtime::operators::constant_time_eq;
use actix_web::HttpRequest;
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const COOKIE: &str = "mediagate_console";
/// How long a session lasts.
const LIFETIME_S: i64 = 8 * 3600;

/// Who a session is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Signed in with an operator's token (the admin token is root's); holds a digest of it.
    Operator { token_digest: String },
    /// Signed in with an API key; holds the key's hash.
    Client { key_hash: [u8; 32] },
}

/// A session read from a valid cookie (its signature and expiry checked; not yet who it names).
#[derive(Debug, Clone)]
pub struct Session {
    pub role: Role,
    pub csrf: String,
    /// The operator the session's token was found to be ([`operator`]), once checked.
    pub operator: Option<String>,
}

impl Session {
    /// Who the session's changes are by, on the audit trail.
    pub fn actor(&self) -> Actor {
        Actor::new(self.operator.clone().unwrap_or_default(), Via::Console)
    }
}

/// Signs and reads session cookies.
pub struct Sessions {
    keyed: Hmac<Sha256>,
    /// Cookies are `Secure`: browsers reach the gateway over HTTPS.
    secure: bool,
}

impl Sessions {
    /// Sessions under a key derived from `secret` (the link secret), so a link's signature never passes
    /// as a session's.
    pub fn new(secret: &[u8], secure: bool) -> Result<Sessions, String> {
        let mut derive = Hmac::<Sha256>::new_from_slice(secret).map_err(|e| format!("console secret: {e}"))?;
        derive.update(b"mediagate console sessions");
        let key = derive.finalize().into_bytes();
        let keyed = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| format!("console secret: {e}"))?;
        Ok(Sessions { keyed, secure })
    }

    /// Whether cookies are `Secure`.
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// A new session's cookie, valid for [`LIFETIME_S`] from `now_s`.
    pub fn start(&self, role: &Role, now_s: i64) -> Cookie<'static> {
        let csrf = hex::encode(rand::random::<[u8; 16]>());
        let (kind, subject) = match role {
            Role::Operator { token_digest } => ("operator", token_digest.clone()),
            Role::Client { key_hash } => ("client", hex::encode(key_hash)),
        };
        let payload = format!("{kind}.{subject}.{}.{csrf}", now_s + LIFETIME_S);
        let signature = hex::encode(self.mac(&payload).finalize().into_bytes());
        Cookie::build(COOKIE, format!("{payload}.{signature}"))
            .path("/console")
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure)
            .max_age(CookieDuration::seconds(LIFETIME_S))
            .finish()
    }

    /// The session a cookie value holds, if its signature is this gateway's and it has not expired.
    pub fn read(&self, value: &str, now_s: i64) -> Option<Session> {
        let (payload, signature) = value.rsplit_once('.')?;
        let signature = hex::decode(signature).ok()?;
        self.mac(payload).verify_slice(&signature).ok()?;
        let mut parts = payload.split('.');
        let (kind, subject, expires, csrf) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || expires.parse::<i64>().ok()? <= now_s {
            return None;
        }
        let role = match kind {
            "operator" => Role::Operator { token_digest: subject.to_string() },
            "client" => Role::Client { key_hash: hex::decode(subject).ok()?.try_into().ok()? },
            _ => return None,
        };
        Some(Session { role, csrf: csrf.to_string(), operator: None })
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(payload.as_bytes());
        mac
    }
}

/// A cookie that ends the session.
pub fn ended() -> Cookie<'static> {
    let mut cookie = Cookie::build(COOKIE, "").path("/console").http_only(true).same_site(SameSite::Strict).finish();
    cookie.make_removal();
    cookie
}

/// The request's session, if it carries a valid one.
pub fn of_request(req: &HttpRequest) -> Option<Session> {
    let cookie = req.cookie(COOKIE)?;
    let sessions = req.app_data::<actix_web::web::Data<Sessions>>()?;
    sessions.read(cookie.value(), crate::domain::clock::now_ms() / 1000)
}

/// An operator's session, its token still one of a live operator (the admin token still the gateway's):
/// the session with its operator named.
pub async fn operator(state: &Gateway, mut session: Session) -> Result<Session, ApiError> {
    let Role::Operator { token_digest } = &session.role else {
        return Err(ApiError::new(Code::admin_forbidden, "Sign in with the admin token or an operator token."));
    };
    session.operator = Some(crate::services::operators::operator_of(state, token_digest).await?);
    Ok(session)
}

/// A client's session, as the API's caller of its key (refused as the API refuses the key).
pub async fn client(state: &Gateway, session: &Session) -> Result<Caller, ApiError> {
    let Role::Client { key_hash } = &session.role else {
        return Err(ApiError::new(Code::invalid_api_key, "Sign in with an API key."));
    };
    Ok(crate::services::auth::authenticate(state, *key_hash).await?)
}

/// A state change's CSRF token, from its form field or `X-CSRF-Token`, matches the session's; and the
/// browser, where it says, sent it from this origin.
pub fn check_csrf(req: &HttpRequest, session: &Session, presented: Option<&str>) -> Result<(), ApiError> {
    cross_site_refused(req)?;
    let header = req.headers().get("x-csrf-token").and_then(|v| v.to_str().ok());
    let presented = presented.or(header).unwrap_or_default();
    if constant_time_eq(presented.as_bytes(), session.csrf.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(Code::admin_forbidden, "The form is stale: reload the page and try again."))
    }
}

/// Refuses a request the browser says came from another site (signing in included, where no session
/// and no token exist yet).
pub fn cross_site_refused(req: &HttpRequest) -> Result<(), ApiError> {
    let site = req.headers().get("sec-fetch-site").and_then(|v| v.to_str().ok());
    match site {
        Some("same-origin" | "none") | None => Ok(()),
        Some(_) => Err(ApiError::new(Code::admin_forbidden, "Console forms are accepted from the console only.")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_reads_back_until_it_expires_and_not_once_altered() {
        let sessions = Sessions::new(b"secret", false).unwrap();
        let role = Role::Client { key_hash: [7; 32] };
        let cookie = sessions.start(&role, 1_000);
        assert!(cookie.http_only().unwrap_or(false));
        assert_eq!(cookie.same_site(), Some(SameSite::Strict));
        let read = sessions.read(cookie.value(), 1_001).unwrap();
        assert_eq!(read.role, role);
        assert_eq!(read.csrf.len(), 32);
        assert!(sessions.read(cookie.value(), 1_000 + LIFETIME_S).is_none(), "expired");
        let altered = cookie.value().replacen("client", "operator", 1);
        assert!(sessions.read(&altered, 1_001).is_none());
        assert!(Sessions::new(b"other", false).unwrap().read(cookie.value(), 1_001).is_none());
    }
}
