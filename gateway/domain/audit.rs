//! The audit trail: who changed what, when, through which edge. Each operator change is written with its
//! entry in one store write, and an entry is never changed or removed afterwards (retention included).
//!
//! Operators sign in with tokens of their own, kept as hashes under a name; the admin token from the
//! environment is the operator [`ROOT`], who alone creates and revokes the others.

use crate::domain::billing::books::{EntryKind, Posting};
use crate::domain::deliveries::{Delivery, WebhookSettings};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The operator of the admin token from the environment.
pub const ROOT: &str = "root";

/// The operator of a command run on the data directory itself (`mediagate keys create`), with no gateway
/// and no token: whoever can read the data directory.
pub const LOCAL: &str = "local";

/// The `User-Agent` prefix `mediagate admin` sends, by which the admin API tells its changes (`cli`) from
/// other callers' (`api`).
pub const CLI_AGENT: &str = "mediagate-cli/";

/// Which edge a change came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// The admin HTTP API, called directly.
    Api,
    /// `mediagate admin …` (a client of the admin API that says so).
    Cli,
    /// The operator's console.
    Console,
}

impl Via {
    pub const ALL: [Via; 3] = [Via::Api, Via::Cli, Via::Console];

    pub fn as_str(self) -> &'static str {
        match self {
            Via::Api => "api",
            Via::Cli => "cli",
            Via::Console => "console",
        }
    }
}

/// Who makes a change, and through which edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub operator: String,
    pub via: Via,
}

impl Actor {
    pub fn new(operator: impl Into<String>, via: Via) -> Actor {
        Actor { operator: operator.into(), via }
    }

    /// A command on the data directory ([`LOCAL`]).
    pub fn local() -> Actor {
        Actor::new(LOCAL, Via::Cli)
    }
}

/// What kind of change an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    #[serde(rename = "account.open")]
    AccountOpen,
    #[serde(rename = "balance.top_up")]
    TopUp,
    #[serde(rename = "free_trial.grant")]
    FreeTrialGrant,
    #[serde(rename = "plan.set")]
    PlanSet,
    #[serde(rename = "weight.set")]
    WeightSet,
    #[serde(rename = "key.issue")]
    KeyIssue,
    #[serde(rename = "key.revoke")]
    KeyRevoke,
    #[serde(rename = "model.switch")]
    ModelSwitch,
    #[serde(rename = "webhook.secret_rotate")]
    WebhookSecretRotate,
    #[serde(rename = "webhook.endpoint_set")]
    WebhookEndpointSet,
    #[serde(rename = "delivery.replay")]
    DeliveryReplay,
    #[serde(rename = "operator.create")]
    OperatorCreate,
    #[serde(rename = "operator.revoke")]
    OperatorRevoke,
}

impl Action {
    pub const ALL: [Action; 13] = [
        Action::AccountOpen,
        Action::TopUp,
        Action::FreeTrialGrant,
        Action::PlanSet,
        Action::WeightSet,
        Action::KeyIssue,
        Action::KeyRevoke,
        Action::ModelSwitch,
        Action::WebhookSecretRotate,
        Action::WebhookEndpointSet,
        Action::DeliveryReplay,
        Action::OperatorCreate,
        Action::OperatorRevoke,
    ];

    /// The action a ledger entry an operator posts records, if it is one of theirs.
    pub fn for_entry(kind: EntryKind) -> Option<Action> {
        match kind {
            EntryKind::TopUp => Some(Action::TopUp),
            EntryKind::Grant => Some(Action::FreeTrialGrant),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::AccountOpen => "account.open",
            Action::TopUp => "balance.top_up",
            Action::FreeTrialGrant => "free_trial.grant",
            Action::PlanSet => "plan.set",
            Action::WeightSet => "weight.set",
            Action::KeyIssue => "key.issue",
            Action::KeyRevoke => "key.revoke",
            Action::ModelSwitch => "model.switch",
            Action::WebhookSecretRotate => "webhook.secret_rotate",
            Action::WebhookEndpointSet => "webhook.endpoint_set",
            Action::DeliveryReplay => "delivery.replay",
            Action::OperatorCreate => "operator.create",
            Action::OperatorRevoke => "operator.revoke",
        }
    }
}

/// One line of the audit trail. `before` and `after` hold what the change touched, as it was and as it is
/// (`null` where there was nothing before); never a secret, only a secret's fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its place in the trail, from 1, in the order the changes were written.
    pub seq: u64,
    pub at_ms: i64,
    pub operator: String,
    pub via: Via,
    pub action: Action,
    pub account: Option<String>,
    /// What in the account the change is about, where the account is not the whole of it: a key's prefix, a
    /// model, a delivery, an operator.
    pub target: Option<String>,
    pub before: Value,
    pub after: Value,
}

/// An entry before the store numbers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub actor: Actor,
    pub action: Action,
    pub account: Option<String>,
    pub target: Option<String>,
    pub before: Value,
    pub after: Value,
}

impl Change {
    pub fn new(actor: &Actor, action: Action, account: Option<&str>) -> Change {
        Change {
            actor: actor.clone(),
            action,
            account: account.map(str::to_string),
            target: None,
            before: Value::Null,
            after: Value::Null,
        }
    }

    pub fn target(mut self, target: impl Into<String>) -> Change {
        self.target = Some(target.into());
        self
    }

    pub fn values(mut self, before: Value, after: Value) -> Change {
        self.before = before;
        self.after = after;
        self
    }

    /// The change `posting` makes to a pot that held `before`, if an operator posts its kind.
    pub fn posting(actor: &Actor, posting: &Posting, before: i64) -> Option<Change> {
        let action = Action::for_entry(posting.kind)?;
        let pot = posting.pot;
        let after = before.checked_add(posting.delta);
        Some(Change::new(actor, action, Some(&posting.account)).values(
            json!({ "pot": pot, "available": before }),
            json!({ "pot": pot, "available": after, "amount": posting.delta, "note": posting.note }),
        ))
    }

    /// The revocation of the keys `prefixes` of `account`, asked for by `asked` (a prefix, or empty for all).
    pub fn keys_revoked(actor: &Actor, account: &str, asked: &str, prefixes: &[&str]) -> Change {
        let target = if asked.is_empty() { "all keys" } else { asked };
        Change::new(actor, Action::KeyRevoke, Some(account))
            .target(target)
            .values(json!({ "live": prefixes }), json!({ "revoked": prefixes }))
    }

    /// A model switched on or off; `before` is its switch before, `None` where the spec's default held.
    pub fn switched(actor: &Actor, model: &str, before: Option<bool>, enabled: bool) -> Change {
        Change::new(actor, Action::ModelSwitch, None)
            .target(model)
            .values(json!({ "enabled": before }), json!({ "enabled": enabled }))
    }

    /// A delivery sent again: its state and attempts before, and after.
    pub fn replayed(actor: &Actor, before: &Delivery, after: &Delivery) -> Change {
        let view =
            |d: &Delivery| json!({ "state": d.state.as_str(), "attempts": d.attempts.len(), "replays": d.replays });
        Change::new(actor, Action::DeliveryReplay, Some(&before.account))
            .target(&before.id)
            .values(view(before), view(after))
    }

    /// The entry numbered `seq`, written at `at_ms`.
    pub fn entry(self, seq: u64, at_ms: i64) -> AuditEntry {
        AuditEntry {
            seq,
            at_ms,
            operator: self.actor.operator,
            via: self.actor.via,
            action: self.action,
            account: self.account,
            target: self.target,
            before: self.before,
            after: self.after,
        }
    }
}

/// Which entries a listing keeps, oldest first, `limit` at most, after the entry `after`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub operator: Option<String>,
    pub action: Option<Action>,
    pub account: Option<String>,
    pub via: Option<Via>,
    /// Epoch milliseconds, inclusive.
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Entries after this `seq`: the next page.
    pub after: Option<u64>,
    pub limit: usize,
}

impl AuditFilter {
    pub fn keeps(&self, entry: &AuditEntry) -> bool {
        self.operator.as_ref().is_none_or(|o| *o == entry.operator)
            && self.action.is_none_or(|a| a == entry.action)
            && self.account.as_ref().is_none_or(|a| Some(a) == entry.account.as_ref())
            && self.via.is_none_or(|v| v == entry.via)
            && self.since.is_none_or(|since| entry.at_ms >= since)
            && self.until.is_none_or(|until| entry.at_ms <= until)
            && self.after.is_none_or(|after| entry.seq > after)
    }
}

/// A named operator, as stored: the hash of its token, never the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorRecord {
    pub name: String,
    /// SHA-256 of the token, hex.
    pub token_hash: String,
    /// The token's first characters, to tell tokens apart.
    pub prefix: String,
    pub created_at_ms: i64,
    pub created_by: String,
    pub revoked_at_ms: Option<i64>,
}

impl OperatorRecord {
    pub fn live(&self) -> bool {
        self.revoked_at_ms.is_none()
    }

    /// What the audit trail and listings show of it (its hash left out).
    pub fn shown(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "prefix": self.prefix,
            "created_at_ms": self.created_at_ms,
            "created_by": self.created_by,
            "revoked_at_ms": self.revoked_at_ms,
        })
    }
}

/// Why an operator's name is refused, if it is: 1-64 of `a-z 0-9 . _ -`, and never [`ROOT`] or [`LOCAL`].
pub fn name_refused(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        Some(format!("`name` must be 1-64 characters of a-z, 0-9, `.`, `_` and `-`; `{name}` is not."))
    } else if name == ROOT || name == LOCAL {
        Some(format!("`{name}` is reserved: `root` is the admin token's operator, `local` the data directory's."))
    } else {
        None
    }
}

/// What the trail shows of an account's webhook settings: its endpoint, and its secrets (newest first) by
/// fingerprint, with when each retires.
pub fn webhook_view(settings: &WebhookSettings) -> Value {
    let secrets: Vec<Value> = settings
        .secrets
        .iter()
        .map(|s| json!({ "fingerprint": fingerprint(&s.secret), "retires_ms": s.retires_ms }))
        .collect();
    json!({ "endpoint": settings.endpoint, "secrets": secrets })
}

/// A short fingerprint of a secret, for the trail to tell secrets apart without holding one.
pub fn fingerprint(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(secret.as_bytes())[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, operator: &str, action: Action, account: Option<&str>, at_ms: i64) -> AuditEntry {
        Change::new(&Actor::new(operator, Via::Api), action, account).entry(seq, at_ms)
    }

    #[test]
    fn a_filter_keeps_what_each_of_its_fields_names() {
        let e = entry(5, "alice", Action::TopUp, Some("acme"), 1_000);
        let cases: [(AuditFilter, bool); 10] = [
            (AuditFilter::default(), true),
            (AuditFilter { operator: Some("alice".into()), ..Default::default() }, true),
            (AuditFilter { operator: Some("bob".into()), ..Default::default() }, false),
            (AuditFilter { action: Some(Action::PlanSet), ..Default::default() }, false),
            (AuditFilter { account: Some("acme".into()), ..Default::default() }, true),
            (AuditFilter { account: Some("other".into()), ..Default::default() }, false),
            (AuditFilter { via: Some(Via::Console), ..Default::default() }, false),
            (AuditFilter { since: Some(1_000), until: Some(1_000), ..Default::default() }, true),
            (AuditFilter { since: Some(1_001), ..Default::default() }, false),
            (AuditFilter { after: Some(5), ..Default::default() }, false),
        ];
        for (filter, kept) in cases {
            assert_eq!(filter.keeps(&e), kept, "{filter:?}");
        }
    }

    #[test]
    fn an_entry_without_an_account_is_not_kept_by_an_account_filter() {
        let e = entry(1, "root", Action::ModelSwitch, None, 0);
        assert!(!AuditFilter { account: Some("acme".into()), ..Default::default() }.keeps(&e));
    }

    #[test]
    fn action_names_read_back_as_their_serde_names() {
        for action in Action::ALL {
            assert_eq!(serde_json::to_value(action).ok(), Some(Value::from(action.as_str())));
        }
    }

    #[test]
    fn operator_names_are_plain_and_not_reserved() {
        for (name, refused) in
            [("alice", false), ("ops.team-2_x", false), ("", true), ("Alice", true), ("a b", true), ("root", true)]
        {
            assert_eq!(name_refused(name).is_some(), refused, "{name}");
        }
        assert!(name_refused(&"a".repeat(65)).is_some());
    }
}
