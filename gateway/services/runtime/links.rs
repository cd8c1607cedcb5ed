//! Result links: `{public_url}/v1/files/{task_id}/{index}?expires=…&signature=…`, an HMAC-SHA256 of the
//! task, the result's index and the expiry under the gateway's link secret. A browser or a `<video>` tag
//! fetches a result with one, no API key needed, until it expires; a link altered anywhere is refused.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub struct Links {
    base: String,
    /// Keyed with the secret once; cloned per link.
    keyed: Hmac<Sha256>,
}

impl Links {
    pub fn new(base: &str, secret: &[u8]) -> Result<Links, String> {
        let keyed = Hmac::<Sha256>::new_from_slice(secret).map_err(|e| format!("link secret: {e}"))?;
        Ok(Links { base: base.trim_end_matches('/').to_string(), keyed })
    }

    /// The link to result `index` of `task_id`, valid until `expires_ms` (whole seconds, rounded down).
    pub fn link(&self, task_id: &str, index: usize, expires_ms: i64) -> String {
        let expires = expires_ms.div_euclid(1000);
        let signature = hex::encode(self.mac(task_id, index, expires).finalize().into_bytes());
        format!("{}/v1/files/{task_id}/{index}?expires={expires}&signature={signature}", self.base)
    }

    /// Whether `signature` is this gateway's for the link, compared in constant time (expiry aside).
    pub fn verify(&self, task_id: &str, index: usize, expires: i64, signature: &str) -> bool {
        hex::decode(signature).is_ok_and(|bytes| self.mac(task_id, index, expires).verify_slice(&bytes).is_ok())
    }

    fn mac(&self, task_id: &str, index: usize, expires: i64) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(format!("{task_id}\n{index}\n{expires}").as_bytes());
        mac
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_link_verifies_and_any_change_to_it_does_not() {
        let links = Links::new("http://gw/", b"secret").unwrap();
        let link = links.link("task-1", 0, 2_000_999);
        assert!(link.starts_with("http://gw/v1/files/task-1/0?expires=2000&signature="), "{link}");
        let signature = link.rsplit('=').next().unwrap();
        assert!(links.verify("task-1", 0, 2000, signature));
        assert!(!links.verify("task-1", 1, 2000, signature));
        assert!(!links.verify("task-2", 0, 2000, signature));
        assert!(!links.verify("task-1", 0, 2001, signature));
        assert!(!links.verify("task-1", 0, 2000, &signature.replace('a', "b").replace('0', "1")));
        assert!(!Links::new("http://gw", b"other").unwrap().verify("task-1", 0, 2000, signature));
    }
}
