//! `equivalent_usage` (README, Money): a display-only conversion of a non-token list price into output
//! tokens with one global baseline, frozen on each task at submission.

use crate::domain::catalog::{BillingRule, ModelSpec};
use crate::domain::usage::{Measured, Reading, Usage};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::fmt::Write;

/// The projected output tokens, or `None` where the rules say nothing is mapped: a token-priced model, or
/// an upstream report that carries a raw output-token field at all (even `0`, `null` or garbage), which the
/// upstream's adapter reads into `measured` as anything but absent.
pub fn tokens(
    model: &ModelSpec,
    list_price: i64,
    baseline_per_million: u64,
    measured: Option<&Measured>,
) -> Option<u64> {
    if matches!(model.billing, BillingRule::PerToken { .. }) || baseline_per_million == 0 {
        return None;
    }
    if measured.is_some_and(|m| m.output_tokens != Reading::Absent) {
        return None;
    }
    Some((list_price.max(0) as u128 * 1_000_000 / baseline_per_million as u128) as u64)
}

/// The top-level object.
pub fn object(tokens: u64) -> Value {
    json!({"usage_basis": "price_equivalent", "output_tokens": tokens})
}

/// The images-standard answer's `usage`: the upstream's as it came (`{}` if none), with the projected
/// tokens and their basis added if there are any and it is an object. The members are appended to the text
/// unless the upstream named `usage_basis` itself (or may have, through an escape), which then reads as a
/// `Value` and is replaced.
pub fn answered(usage: Option<&Usage>, projected: Option<u64>) -> Cow<'_, Usage> {
    match (usage, projected) {
        (Some(usage), None) => Cow::Borrowed(usage),
        (None, None) => Cow::Owned(Value::Object(Default::default()).into()),
        (usage, Some(tokens)) => Cow::Owned(joined(usage, tokens)),
    }
}

fn joined(usage: Option<&Usage>, tokens: u64) -> Usage {
    let text = usage.map_or("{}", |usage| usage.json().get());
    if !usage.is_some_and(|usage| usage.may_name("usage_basis"))
        && let Some(members) = text.trim().strip_prefix('{').and_then(|t| t.strip_suffix('}'))
    {
        let mut joined = String::with_capacity(text.len() + 64);
        joined.push('{');
        joined.push_str(members);
        if !members.trim().is_empty() {
            joined.push(',');
        }
        let _ = write!(joined, r#""output_tokens":{tokens},"usage_basis":"price_equivalent"}}"#);
        if let Ok(joined) = serde_json::value::RawValue::from_string(joined) {
            return Usage::from(joined);
        }
    }
    let mut value = usage.map_or_else(|| Value::Object(Default::default()), Usage::to_value);
    if let Some(fields) = value.as_object_mut() {
        fields.insert("output_tokens".into(), tokens.into());
        fields.insert("usage_basis".into(), "price_equivalent".into());
    }
    value.into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn joined_to(usage: Option<Value>) -> Value {
        answered(usage.map(Usage::from).as_ref(), Some(7)).to_value()
    }

    #[test]
    fn the_projection_joins_the_upstream_usage_as_its_last_members() {
        let tail = json!({"output_tokens": 7, "usage_basis": "price_equivalent"});
        assert_eq!(joined_to(None), tail);
        assert_eq!(joined_to(Some(json!({}))), tail);
        let upstream: Usage = json!({"width": 1024, "image_count": 1}).into();
        let joined = answered(Some(&upstream), Some(7));
        assert_eq!(
            joined.json().get(),
            r#"{"width":1024,"image_count":1,"output_tokens":7,"usage_basis":"price_equivalent"}"#
        );
        // One basis, the gateway's; a usage that is no object is left as it came.
        assert_eq!(joined_to(Some(json!({"usage_basis": "x", "n": 1})))["usage_basis"], "price_equivalent");
        assert_eq!(joined_to(Some(json!({"usage_basis": "x", "n": 1}))).as_object().unwrap().len(), 3);
        assert_eq!(joined_to(Some(json!([1]))), json!([1]));
    }
}
