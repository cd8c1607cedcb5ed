//! JSON Schema (draft 2020-12) for every operation and every model.
//!
//! Two flavours come from the same data. `Published` is what client teams validate against: it accepts the
//! field aliases and spells out the cross-field rules. `Canonical` is what the gateway compiles: aliases are
//! already folded into their canonical names and cross-field rules are checked by the gateway's rule engine,
//! which names the offending field in plain words.

use crate::Spec;
use crate::spec::{Condition, Field, FieldType, Limit, Model, Operation, Rule};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Published,
    Canonical,
}

const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The schema of an operation, before any model narrows it.
pub fn operation_schema(spec: &Spec, op: &Operation, flavor: Flavor) -> Value {
    let _ = spec;
    let mut schema = object_schema(op, &BTreeMap::new(), flavor);
    schema.insert("$schema".into(), DRAFT.into());
    schema.insert("title".into(), format!("{} request", op.operation).into());
    schema.insert("description".into(), op.summary.clone().into());
    Value::Object(schema)
}

/// The schema of a request to one model: the operation narrowed by the model's limits.
pub fn model_schema(spec: &Spec, model: &Model, flavor: Flavor) -> Value {
    let op = &spec.operations[&model.operation.value];
    let mut schema = object_schema(op, &model.limits, flavor);
    let model_id = json!({"const": model.id.value, "description": "Public model id."});
    // The model's id in the properties of the object, or of each variant's.
    let objects: Vec<&mut Value> = match schema.get_mut("oneOf") {
        Some(Value::Array(branches)) => branches.iter_mut().collect(),
        _ => Vec::new(),
    };
    for branch in objects {
        if let Some(Value::Object(props)) = branch.get_mut("properties") {
            props.insert("model".into(), model_id.clone());
        }
    }
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.insert("model".into(), model_id);
    }
    schema.insert("$schema".into(), DRAFT.into());
    schema.insert("title".into(), format!("{} request", model.id.value).into());
    schema.insert("description".into(), model.summary.clone().into());
    if flavor == Flavor::Published {
        let version = schema_version(&Value::Object(schema.clone()));
        schema.insert("x-schema-version".into(), version.into());
    }
    Value::Object(schema)
}

/// A published schema's version: the first 16 hex digits of the SHA-256 of its JSON (without the version),
/// so a client can tell that a model's contract changed (also the `ETag` of `/v1/models/{id}/schema`).
pub fn schema_version(schema: &Value) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(schema.to_string());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn object_schema(op: &Operation, limits: &BTreeMap<String, Limit>, flavor: Flavor) -> Map<String, Value> {
    if flavor == Flavor::Published && op.variants.is_some() {
        return published_variants(op, limits);
    }
    let (mut props, mut required) = properties(&op.fields, limits, flavor);
    let mut all_of: Vec<Value> = Vec::new();
    if flavor == Flavor::Published {
        all_of.extend(op.rules.iter().map(rule_schema));
        all_of.extend(alias_rules(&op.fields));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    if let Some(variants) = &op.variants {
        let tags: Vec<Value> = variants.cases.keys().map(|k| k.clone().into()).collect();
        props.insert(variants.tag.clone(), json!({"type": "string", "enum": tags, "description": variants.summary}));
        required.push(variants.tag.clone());
        // Every variant's field name, so that unknown fields are refused by name with `additionalProperties`
        // and other variants' fields are forbidden inside each branch.
        let variant_fields: Vec<&String> =
            variants.cases.values().flat_map(|c| c.fields.keys()).filter(|k| !op.fields.contains_key(*k)).collect();
        for name in &variant_fields {
            props.insert((*name).clone(), Value::Bool(true));
        }
        for (tag, case) in &variants.cases {
            let (mut case_props, case_required) = properties(&case.fields, limits, flavor);
            for name in variant_fields.iter().filter(|n| !case.fields.contains_key(**n)) {
                case_props.insert((*name).clone(), Value::Bool(false));
            }
            let mut then = Map::new();
            then.insert("properties".into(), Value::Object(case_props));
            if !case_required.is_empty() {
                then.insert("required".into(), json!(case_required));
            }
            then.insert("description".into(), case.summary.clone().into());
            all_of.push(json!({
                "if": {"properties": {&variants.tag: {"const": tag}}, "required": [&variants.tag]},
                "then": then,
            }));
        }
    }
    schema.insert("properties".into(), Value::Object(props));
    required.sort();
    schema.insert("required".into(), json!(required));
    if !all_of.is_empty() {
        schema.insert("allOf".into(), Value::Array(all_of));
    }
    if !op.open {
        schema.insert("additionalProperties".into(), false.into());
    }
    schema
}

/// The published schema of an operation with variants (vace `function`): a `oneOf` of complete objects, one
/// per variant, told apart by the tag's `const` (a discriminated union, which client generators and
/// schemathesis can read), each with the common fields, its own, their rules and no others.
fn published_variants(op: &Operation, limits: &BTreeMap<String, Limit>) -> Map<String, Value> {
    let Some(variants) = &op.variants else { return Map::new() };
    let (common, common_required) = properties(&op.fields, limits, Flavor::Published);
    let mut common_rules: Vec<Value> = op.rules.iter().map(rule_schema).collect();
    common_rules.extend(alias_rules(&op.fields));
    let branches: Vec<Value> = variants
        .cases
        .iter()
        .map(|(tag, case)| {
            let (own, own_required) = properties(&case.fields, limits, Flavor::Published);
            let mut props = common.clone();
            props.extend(own);
            props.insert(variants.tag.clone(), json!({"const": tag, "description": variants.summary}));
            let mut required: Vec<String> = common_required.iter().chain(&own_required).cloned().collect();
            required.push(variants.tag.clone());
            required.sort();
            required.dedup();
            let mut rules = common_rules.clone();
            rules.extend(case.rules.iter().map(rule_schema));
            rules.extend(alias_rules(&case.fields));
            let mut branch = Map::new();
            branch.insert("type".into(), "object".into());
            branch.insert("title".into(), format!("{} = {tag}", variants.tag).into());
            branch.insert("description".into(), case.summary.clone().into());
            branch.insert("properties".into(), Value::Object(props));
            branch.insert("required".into(), json!(required));
            if !rules.is_empty() {
                branch.insert("allOf".into(), Value::Array(rules));
            }
            if !op.open {
                branch.insert("additionalProperties".into(), false.into());
            }
            Value::Object(branch)
        })
        .collect();
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("oneOf".into(), Value::Array(branches));
    schema
}

/// Properties and required names of a set of fields under a model's limits.
fn properties(
    fields: &BTreeMap<String, Field>,
    limits: &BTreeMap<String, Limit>,
    flavor: Flavor,
) -> (Map<String, Value>, Vec<String>) {
    let mut props = Map::new();
    let mut required = Vec::new();
    for (name, field) in fields {
        let limit = limits.get(name);
        if limit.is_some_and(|l| l.forbidden) {
            // `false` rather than omission, so the error names the field and says this model does not take it.
            props.insert(name.clone(), Value::Bool(false));
            if flavor == Flavor::Published {
                for alias in &field.aliases {
                    props.insert(alias.clone(), Value::Bool(false));
                }
            }
            continue;
        }
        let schema = field_schema(field, limit);
        let is_required = field.required || limit.is_some_and(|l| l.required);
        if flavor == Flavor::Published && !field.aliases.is_empty() {
            for alias in &field.aliases {
                let mut alias_schema = schema.clone();
                if let Value::Object(m) = &mut alias_schema {
                    m.insert("description".into(), format!("Alias of `{name}`.").into());
                }
                props.insert(alias.clone(), alias_schema);
            }
        } else if is_required {
            required.push(name.clone());
        }
        props.insert(name.clone(), schema);
    }
    (props, required)
}

/// Published schemas: a field with aliases takes exactly one of its names, and needs one if it is required.
fn alias_rules(fields: &BTreeMap<String, Field>) -> Vec<Value> {
    let mut rules = Vec::new();
    for (name, field) in fields.iter().filter(|(_, f)| !f.aliases.is_empty()) {
        let names: Vec<&String> = std::iter::once(name).chain(&field.aliases).collect();
        let one_each: Vec<Value> = names.iter().map(|n| json!({"required": [n]})).collect();
        if field.required {
            rules.push(json!({"oneOf": one_each}));
        } else {
            rules.push(json!({"not": {"anyOf": pairs(&names)}}));
        }
    }
    rules
}

fn pairs(names: &[&String]) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            out.push(json!({"required": [a, b]}));
        }
    }
    out
}

/// The schema of one field, narrowed by a model limit when there is one.
pub fn field_schema(field: &Field, limit: Option<&Limit>) -> Value {
    let mut s = Map::new();
    match field.ty {
        Some(FieldType::String) => s.insert("type".into(), "string".into()),
        Some(FieldType::Integer) => s.insert("type".into(), "integer".into()),
        Some(FieldType::Number) => s.insert("type".into(), "number".into()),
        Some(FieldType::Boolean) => s.insert("type".into(), "boolean".into()),
        Some(FieldType::Media) => s.insert("type".into(), json!(["string", "object"])),
        Some(FieldType::Array) => s.insert("type".into(), "array".into()),
        Some(FieldType::Object) => s.insert("type".into(), "object".into()),
        None => None,
    };
    s.insert("description".into(), field.description.clone().into());
    let limit = limit.cloned().unwrap_or_default();
    let enumeration = limit.enumeration.as_ref().or(field.enumeration.as_ref());
    if let Some(values) = enumeration {
        s.insert("enum".into(), Value::Array(values.clone()));
    }
    let minimum = max_of(field.minimum, limit.minimum);
    let maximum = min_of(field.maximum, limit.maximum);
    if let Some(v) = minimum {
        s.insert("minimum".into(), number(v));
    }
    if let Some(v) = maximum {
        s.insert("maximum".into(), number(v));
    }
    if let Some(v) = field.min_length {
        s.insert("minLength".into(), v.into());
    }
    if let Some(v) = min_of_u(field.max_length, limit.max_length) {
        s.insert("maxLength".into(), v.into());
    }
    if let Some(p) = &field.pattern {
        s.insert("pattern".into(), p.clone().into());
    }
    if let Some(v) = max_of_u(field.min_items, limit.min_items) {
        s.insert("minItems".into(), v.into());
    }
    if let Some(v) = min_of_u(field.max_items, limit.max_items) {
        s.insert("maxItems".into(), v.into());
    }
    if let Some(m) = &field.max_matching {
        s.insert("contains".into(), json!({"pattern": m.pattern}));
        s.insert("minContains".into(), 0.into());
        s.insert("maxContains".into(), m.max.into());
    }
    if let Some(items) = &field.items {
        s.insert("items".into(), field_schema(items, None));
    }
    if !field.properties.is_empty() {
        let props: Map<String, Value> =
            field.properties.iter().map(|(k, f)| (k.clone(), field_schema(f, None))).collect();
        let required: Vec<&String> = field.properties.iter().filter(|(_, f)| f.required).map(|(k, _)| k).collect();
        s.insert("properties".into(), Value::Object(props));
        if !required.is_empty() {
            s.insert("required".into(), json!(required));
        }
        if !field.open {
            s.insert("additionalProperties".into(), false.into());
        }
    }
    if let Some(pixels) = &limit.pixels {
        // JSON Schema cannot state a pixel count or an aspect ratio: said in words, and as `x-pixels`.
        let rule = format!(
            " Width times height must be {} to {} pixels, and width / height {} to {} (`x-pixels`: checked by the gateway, not by this schema).",
            pixels.min_pixels, pixels.max_pixels, pixels.min_aspect, pixels.max_aspect
        );
        if let Some(Value::String(description)) = s.get_mut("description") {
            description.push_str(&rule);
        }
        s.insert(
            "x-pixels".into(),
            json!({
                "min_pixels": pixels.min_pixels, "max_pixels": pixels.max_pixels,
                "min_aspect": pixels.min_aspect, "max_aspect": pixels.max_aspect,
            }),
        );
    }
    if let Some(default) = limit.default.as_ref().or(field.default.as_ref()) {
        s.insert("default".into(), default.clone());
    }
    Value::Object(s)
}

/// A cross-field rule as JSON Schema, for the published flavour.
fn rule_schema(rule: &Rule) -> Value {
    let mut then = Map::new();
    let mut required: Vec<&String> = rule.require.iter().collect();
    let mut props = Map::new();
    for name in &rule.forbid {
        props.insert(name.clone(), Value::Bool(false));
    }
    for (name, value) in &rule.equal {
        props.insert(name.clone(), json!({"const": value}));
        required.push(name);
    }
    if !props.is_empty() {
        then.insert("properties".into(), Value::Object(props));
    }
    if !required.is_empty() {
        then.insert("required".into(), json!(required));
    }
    let mut all = Vec::new();
    if !rule.any_of.is_empty() {
        all.push(json!({"anyOf": rule.any_of.iter().map(|n| json!({"required": [n]})).collect::<Vec<_>>()}));
    }
    if rule.at_most_one_of.len() > 1 {
        let names: Vec<&String> = rule.at_most_one_of.iter().collect();
        all.push(json!({"not": {"anyOf": pairs(&names)}}));
    }
    if !all.is_empty() {
        then.insert("allOf".into(), Value::Array(all));
    }
    then.insert("description".into(), rule.description.clone().into());
    match &rule.when {
        None => Value::Object(then),
        Some(when) => json!({"if": condition_schema(when), "then": then}),
    }
}

fn condition_schema(when: &Condition) -> Value {
    if let Some(name) = &when.present {
        json!({"required": [name]})
    } else if let Some(name) = &when.absent {
        json!({"not": {"required": [name]}})
    } else {
        json!({"properties": {when.field.clone().unwrap_or_default(): {"const": when.equals}}, "required": [when.field]})
    }
}

fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 { json!(v as i64) } else { json!(v) }
}
fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}
fn min_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
fn max_of_u(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.max(b)
}
fn min_of_u(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
