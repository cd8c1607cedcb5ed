//! The root operator: whoever holds the admin token from the environment. Named operators, with tokens of
//! their own, are kept in the store (`services::operators`).

/// The admin token's digest, if one is set.
pub struct Operators {
    root: Option<String>,
}

impl Operators {
    pub fn new(token: Option<String>) -> Operators {
        Operators { root: token.filter(|token| !token.is_empty()).map(|token| digest(&token)) }
    }

    /// Whether an admin token is set.
    pub fn has_root(&self) -> bool {
        self.root.is_some()
    }

    /// Whether `digest` is the admin token's (compared in constant time).
    pub fn is_root(&self, digest: &str) -> bool {
        self.root.as_deref().is_some_and(|root| constant_time_eq(root.as_bytes(), digest.as_bytes()))
    }
}

/// The digest kept of an operator's token (SHA-256, hex): what the store holds and a console session carries.
pub fn digest(token: &str) -> String {
    hex::encode(crate::domain::tasks::hash_key(token))
}

/// Whether two secrets are equal, every byte compared whatever the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
