//! Operators and the audit trail: who an admin token is, the named operators `root` creates and revokes, and
//! the trail of every change operators made.

use crate::domain::audit::{self, Actor, AuditEntry, AuditFilter, OperatorRecord, ROOT};
use crate::domain::clock::now_ms;
use crate::domain::errors::{Code, Problem};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use crate::services::runtime::operators::digest;

/// Entries a listing shows at most, per page.
pub const AUDIT_PAGE: usize = 1000;

/// The operator whose token has this digest ([`digest`]): `root` for the admin token, else a live named
/// operator; refused, why.
pub async fn operator_of(state: &Gateway, token_digest: &str) -> Result<String, ServiceError> {
    if state.operators.is_root(token_digest) {
        return Ok(ROOT.to_string());
    }
    match state.store.operator_by_token(token_digest).await? {
        Some(operator) if operator.live() => Ok(operator.name),
        Some(operator) => Err(Problem::new(
            Code::admin_forbidden,
            format!("The token of operator `{}` was revoked; ask root for a new one.", operator.name),
        )
        .into()),
        None => Err(no_operator(state).into()),
    }
}

/// The operator presenting `token`.
pub async fn authenticate(state: &Gateway, token: Option<&str>) -> Result<String, ServiceError> {
    match token {
        Some(token) => operator_of(state, &digest(token)).await,
        None => Err(no_operator(state).into()),
    }
}

/// Why a request that names no operator is refused.
fn no_operator(state: &Gateway) -> Problem {
    if state.operators.has_root() {
        Problem::new(Code::admin_forbidden, "A valid admin or operator token is required.")
    } else {
        Problem::new(Code::admin_forbidden, "The admin API is disabled: no admin token is set.")
    }
}

/// Only root manages operators, so a leaked operator token cannot mint others.
fn root_only(by: &Actor, what: &str) -> Result<(), Problem> {
    if by.operator == ROOT {
        Ok(())
    } else {
        Err(Problem::new(Code::admin_forbidden, format!("Only root (the admin token) may {what} operators.")))
    }
}

/// A new operator `name` and its token (`mgop-…`, shown once; the store keeps its digest).
pub async fn create(state: &Gateway, name: &str, by: &Actor) -> Result<(OperatorRecord, String), ServiceError> {
    root_only(by, "create")?;
    let name = name.trim();
    if let Some(refused) = audit::name_refused(name) {
        return Err(Problem::invalid_parameter("name", refused).into());
    }
    let token = format!("mgop-{}", hex::encode(rand::random::<[u8; 24]>()));
    let record = OperatorRecord {
        name: name.to_string(),
        token_hash: digest(&token),
        prefix: token.chars().take(9).collect(),
        created_at_ms: now_ms(),
        created_by: by.operator.clone(),
        revoked_at_ms: None,
    };
    state.store.add_operator(record.clone(), by).await.map_err(|e| ServiceError::from(e).with_param("name"))?;
    Ok((record, token))
}

/// Revokes the operator `name`: its token stops working at once, on every replica.
pub async fn revoke(state: &Gateway, name: &str, by: &Actor) -> Result<OperatorRecord, ServiceError> {
    root_only(by, "revoke")?;
    state
        .store
        .revoke_operator(name, now_ms(), by)
        .await?
        .ok_or_else(|| Problem::new(Code::not_found, format!("No live operator `{name}`.")).with_param("name").into())
}

/// Every named operator, revoked ones included, by name (an edge shows them without their digests:
/// [`OperatorRecord::shown`]).
pub async fn list(state: &Gateway) -> Result<Vec<OperatorRecord>, ServiceError> {
    let operators = state.store.operators().await?;
    state.store.caught_up().await?;
    Ok(operators)
}

/// The trail's entries `filter` keeps, oldest first, a page ([`AUDIT_PAGE`]) at most; whether more follow.
pub async fn trail(state: &Gateway, mut filter: AuditFilter) -> Result<(Vec<AuditEntry>, bool), ServiceError> {
    let limit = filter.limit.clamp(1, AUDIT_PAGE);
    filter.limit = limit + 1;
    let mut entries = state.store.audit_entries(&filter).await?;
    state.store.caught_up().await?;
    let more = entries.len() > limit;
    entries.truncate(limit);
    Ok((entries, more))
}

/// Every entry of the trail `filter` keeps (its `limit` aside), oldest first, read a page at a time: for an
/// export, and for the newest few.
pub async fn whole_trail(state: &Gateway, mut filter: AuditFilter) -> Result<Vec<AuditEntry>, ServiceError> {
    filter.limit = AUDIT_PAGE;
    let mut entries = Vec::new();
    loop {
        let (page, more) = trail(state, filter.clone()).await?;
        filter.after = page.last().map(|e| e.seq).or(filter.after);
        entries.extend(page);
        if !more {
            return Ok(entries);
        }
    }
}
