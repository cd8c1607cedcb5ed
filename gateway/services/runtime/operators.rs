//! The operators: whoever holds the admin token may use the admin API and the operator's console.

use crate::domain::errors::{Code, Problem};

/// The admin token, if one is set; the admin API is off without one.
pub struct Operators {
    token: Option<String>,
}

impl Operators {
    pub fn new(token: Option<String>) -> Operators {
        Operators { token: token.filter(|token| !token.is_empty()) }
    }

    /// Whether `presented` is the admin token (compared in constant time); refused, why.
    pub fn check(&self, presented: Option<&str>) -> Result<(), Problem> {
        let Some(token) = self.token.as_deref() else {
            return Err(Problem::new(Code::admin_forbidden, "The admin API is disabled: no admin token is set."));
        };
        match presented {
            Some(presented) if constant_time_eq(token.as_bytes(), presented.as_bytes()) => Ok(()),
            _ => Err(Problem::new(Code::admin_forbidden, "A valid admin token is required.")),
        }
    }

    /// A digest of the token, which a session keeps so that a new token signs every operator out.
    pub fn token_digest(&self) -> Option<[u8; 32]> {
        use sha2::{Digest, Sha256};
        self.token.as_deref().map(|token| Sha256::digest(token.as_bytes()).into())
    }
}

/// Whether two secrets are equal, every byte compared whatever the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
