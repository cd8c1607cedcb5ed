//! `equivalent_usage` (service spec 4.6): a display-only conversion of a non-token list price into output
//! tokens with one global baseline, frozen on each task at submission.

use crate::catalog::{BillingRule, ModelSpec};
use serde_json::{Value, json};

/// The projected output tokens, or `None` where the rules say nothing is mapped: a token-priced model, or
/// an upstream `usage` that carries a raw output-token field at all (even `0`, `null` or garbage).
pub fn tokens(model: &ModelSpec, list_price: i64, baseline_per_million: u64, usage: Option<&Value>) -> Option<u64> {
    if matches!(model.billing, BillingRule::PerToken { .. }) || baseline_per_million == 0 {
        return None;
    }
    if usage.and_then(Value::as_object).is_some_and(|u| u.contains_key("output_tokens")) {
        return None;
    }
    Some((list_price.max(0) as u128 * 1_000_000 / baseline_per_million as u128) as u64)
}

/// The top-level object.
pub fn object(tokens: u64) -> Value {
    json!({"usage_basis": "price_equivalent", "output_tokens": tokens})
}
