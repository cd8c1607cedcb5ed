//! Spec data the runtime reads as JSON tables: cross-field rules, per-model limits and defaults.

use crate::Spec;
use crate::spec::{Model, Operation};
use serde_json::{Map, Value, json};

/// An operation's cross-field rules: `{"common": [...], "variants": {"<tag value>": [...]}}`.
pub fn rules_json(op: &Operation) -> String {
    let variants: Map<String, Value> = op
        .variants
        .iter()
        .flat_map(|v| &v.cases)
        .map(|(case, variant)| (case.clone(), compact(json!(variant.rules))))
        .collect();
    json!({"common": compact(json!(op.rules)), "variants": variants}).to_string()
}

/// A model's limits as listed by `GET /v1/models`.
pub fn limits_json(model: &Model) -> String {
    compact(json!(model.limits)).to_string()
}

/// `(field, default as JSON, send it upstream when absent)` for every field with a default.
pub fn defaults(spec: &Spec, op: &Operation, model: &Model) -> Vec<(String, String, bool)> {
    spec.all_fields(op)
        .into_iter()
        .filter_map(|(name, field)| {
            let limit = model.limits.get(name);
            let default = limit.and_then(|l| l.default.as_ref()).or(field.default.as_ref())?;
            Some((name.to_string(), default.to_string(), limit.is_some_and(|l| l.send_default)))
        })
        .collect()
}

/// Drops nulls, unset flags and empty collections, so tables say only what is set.
pub fn compact(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, compact(v))).filter(|(k, v)| !is_unset(k, v)).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(compact).collect()),
        // YAML `2` arrives as 2.0 through f64 bounds; list it as the integer it is.
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                json!(f as i64)
            }
            _ => Value::Number(n),
        },
        other => other,
    }
}

/// Unset: null, an empty collection, or a flag left at `false` (a `false` that is a value stays).
fn is_unset(key: &str, v: &Value) -> bool {
    const FLAGS: &[&str] = &["forbidden", "required", "send_default", "open"];
    match v {
        Value::Null => true,
        Value::Bool(false) => FLAGS.contains(&key),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}
