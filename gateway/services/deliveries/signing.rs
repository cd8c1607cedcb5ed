//! Standard Webhooks signatures (`standardwebhooks`, the specification's own library): the headers of a
//! delivery, signed by every secret of the account not retired, and new `whsec_` secrets.

use rand::RngCore;

/// A new secret: `whsec_` and 32 random bytes in base64.
pub fn new_secret() -> String {
    use base64::Engine;
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key))
}

/// `webhook-signature`: one `v1,<base64>` per secret, separated by spaces.
pub fn signature<'s>(
    secrets: impl Iterator<Item = &'s str>,
    id: &str,
    timestamp_s: i64,
    body: &[u8],
) -> Result<String, String> {
    let mut signatures = Vec::new();
    for secret in secrets {
        let webhook = standardwebhooks::Webhook::new(secret).map_err(|e| format!("webhook secret: {e}"))?;
        signatures.push(webhook.sign(id, timestamp_s, body).map_err(|e| format!("signing: {e}"))?);
    }
    Ok(signatures.join(" "))
}
