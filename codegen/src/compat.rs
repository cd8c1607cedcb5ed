//! Compatibility of the published contract: what changed between two OpenAPI documents of the gateway, each
//! change classified for the client teams that build on them.
//!
//! A request schema that accepts less than before is **breaking** (a model, field, alias or variant removed,
//! a type, enum or range narrowed, a field newly required, a default changed, a new cross-field rule), and so
//! is a response that promises less (a field removed or no longer always present, a type widened). Anything
//! that accepts more, or promises more, is **compatible**. Descriptions, titles and `x-` annotations are
//! not the contract and are not compared.
//!
//! The classifier reads the JSON Schema vocabulary the generator emits (`schema.rs`, `openapi.rs`), not
//! JSON Schema at large: general tools (json-schema-diff, oasdiff) skip `allOf` rules, `const` and defaults,
//! which is where this contract says most.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Whether a change can break a client built against the old contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Breaking,
    Compatible,
}

/// One difference between two published contracts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub severity: Severity,
    /// A model id, a response or webhook shape (`Task`, `TaskEvent`), or a route (`GET /v1/tasks`).
    pub subject: String,
    /// The field it concerns, dotted (`items[]` for an array's items); empty for the subject itself.
    pub field: String,
    /// What changed, in words.
    pub what: String,
}

impl Change {
    /// The change as `spec/compatibility.yaml` names an intended break: `field: what`, or `what`.
    pub fn description(&self) -> String {
        if self.field.is_empty() { self.what.clone() } else { format!("{}: {}", self.field, self.what) }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.description())
    }
}

/// Every change from the contract `old` to `new` (two OpenAPI documents), breaking ones first.
pub fn diff(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Changes::default();
    let (old_models, new_models) = (request_models(old), request_models(new));
    for model in old_models.difference(&new_models) {
        out.push(Severity::Breaking, model, "", "model removed");
    }
    for model in new_models.difference(&old_models) {
        out.push(Severity::Compatible, model, "", "model added");
    }
    for model in old_models.intersection(&new_models) {
        if let (Some(a), Some(b)) = (component(old, model), component(new, model)) {
            Request { out: &mut out, subject: model }.compare(a, b, "");
        }
    }
    routes(old, new, &mut out);
    for (name, a) in components(old).filter(|(name, _)| !old_models.contains(*name)) {
        match component(new, name) {
            Some(b) => Response { out: &mut out, subject: name }.compare(a, b, ""),
            None => out.push(Severity::Breaking, name, "", "shape removed"),
        }
    }
    for (name, _) in components(new).filter(|(name, _)| !new_models.contains(*name) && component(old, name).is_none()) {
        out.push(Severity::Compatible, name, "", "shape added");
    }
    let mut changes = out.0;
    changes.sort();
    changes.dedup();
    changes
}

#[derive(Default)]
struct Changes(Vec<Change>);

impl Changes {
    fn push(&mut self, severity: Severity, subject: &str, field: &str, what: impl Into<String>) {
        self.0.push(Change { severity, subject: subject.into(), field: field.into(), what: what.into() });
    }
}

fn components(doc: &Value) -> impl Iterator<Item = (&String, &Value)> {
    doc.pointer("/components/schemas").and_then(Value::as_object).into_iter().flatten()
}

fn component<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc.pointer("/components/schemas").and_then(|schemas| schemas.get(name))
}

/// The models a submit route takes: the components its request body names.
fn request_models(doc: &Value) -> BTreeSet<String> {
    let mut models = BTreeSet::new();
    for (_, _, operation) in operations(doc) {
        if let Some(Value::Array(refs)) = operation.pointer("/requestBody/content/application~1json/schema/oneOf") {
            models.extend(refs.iter().filter_map(|r| r["$ref"].as_str()).filter_map(ref_name).map(String::from));
        }
    }
    models
}

fn ref_name(reference: &str) -> Option<&str> {
    reference.strip_prefix("#/components/schemas/")
}

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

fn operations(doc: &Value) -> impl Iterator<Item = (&String, &'static str, &Value)> {
    let paths = doc.get("paths").and_then(Value::as_object).into_iter().flatten();
    paths.flat_map(|(path, item)| METHODS.iter().filter_map(move |m| item.get(*m).map(|op| (path, *m, op))))
}

/// Routes removed or added, their parameters, and the request bodies written inline (not a model's).
fn routes(old: &Value, new: &Value, out: &mut Changes) {
    let find =
        |doc: &'_ Value, path: &str, method: &str| doc.pointer(&format!("/paths/{}/{method}", escape(path))).cloned();
    for (path, method, a) in operations(old) {
        let route = format!("{} {path}", method.to_uppercase());
        let Some(b) = find(new, path, method) else {
            out.push(Severity::Breaking, &route, "", "route removed");
            continue;
        };
        let params = |op: &Value| -> BTreeMap<String, Value> {
            let list = op.get("parameters").and_then(Value::as_array).into_iter().flatten();
            list.map(|p| {
                (format!("{} {}", p["in"].as_str().unwrap_or(""), p["name"].as_str().unwrap_or("")), p.clone())
            })
            .collect()
        };
        let (pa, pb) = (params(a), params(&b));
        for (name, param) in &pa {
            match pb.get(name) {
                None => out.push(Severity::Breaking, &route, name, "parameter removed"),
                Some(now) => {
                    if now["required"] == true && param["required"] != true {
                        out.push(Severity::Breaking, &route, name, "parameter now required");
                    }
                    Request { out, subject: &route }.compare(&param["schema"], &now["schema"], name);
                }
            }
        }
        for (name, param) in pb.iter().filter(|(name, _)| !pa.contains_key(*name)) {
            let severity = if param["required"] == true { Severity::Breaking } else { Severity::Compatible };
            let what = if severity == Severity::Breaking { "required parameter added" } else { "parameter added" };
            out.push(severity, &route, name, what);
        }
        let body = "/requestBody/content/application~1json/schema";
        if let (Some(x), Some(y)) = (a.pointer(body), b.pointer(body))
            && x.get("oneOf").is_none()
        {
            Request { out, subject: &route }.compare(x, y, "body");
        }
    }
    for (path, method, _) in operations(new) {
        if find(old, path, method).is_none() {
            out.push(Severity::Compatible, &format!("{} {path}", method.to_uppercase()), "", "route added");
        }
    }
}

/// A JSON Pointer token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn join(at: &str, name: &str) -> String {
    if at.is_empty() { name.to_string() } else { format!("{at}.{name}") }
}

fn types(schema: &Value) -> BTreeSet<String> {
    match schema.get("type") {
        Some(Value::String(t)) => BTreeSet::from([t.clone()]),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).map(String::from).collect(),
        _ => BTreeSet::new(),
    }
}

fn words(values: &[&Value]) -> String {
    values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

fn required(schema: &Value) -> BTreeSet<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// A `oneOf` branch's key: its title (a variant, `function = video_edit`), else its place.
fn branches(schema: &Value) -> BTreeMap<String, &Value> {
    let list = schema.get("oneOf").and_then(Value::as_array).into_iter().flatten();
    list.enumerate()
        .map(|(i, branch)| {
            (branch.get("title").and_then(Value::as_str).map_or_else(|| format!("#{i}"), String::from), branch)
        })
        .collect()
}

/// The request direction: a client sends it, so it must accept everything it accepted.
struct Request<'a> {
    out: &'a mut Changes,
    subject: &'a str,
}

impl Request<'_> {
    fn breaking(&mut self, field: &str, what: impl Into<String>) {
        self.out.push(Severity::Breaking, self.subject, field, what);
    }

    fn compatible(&mut self, field: &str, what: impl Into<String>) {
        self.out.push(Severity::Compatible, self.subject, field, what);
    }

    fn compare(&mut self, a: &Value, b: &Value, at: &str) {
        if b == &Value::Bool(false) && a != &Value::Bool(false) {
            return self.breaking(at, "no longer accepted");
        }
        let (ta, tb) = (types(a), types(b));
        let lost: Vec<&String> = ta.difference(&tb).collect();
        if !tb.is_empty() && (ta.is_empty() || !lost.is_empty()) {
            self.breaking(at, format!("type narrowed from {} to {}", show(&ta), show(&tb)));
        } else if !ta.is_empty() && tb.is_superset(&ta) && tb != ta {
            self.compatible(at, format!("type widened from {} to {}", show(&ta), show(&tb)));
        }
        match (a.get("const"), b.get("const")) {
            (x, Some(y)) if x != Some(y) => self.breaking(at, format!("now only {y}")),
            (Some(_), None) => self.compatible(at, "no longer a constant"),
            _ => {}
        }
        self.enumeration(a, b, at);
        self.bounds(a, b, at);
        match (a.get("pattern"), b.get("pattern")) {
            (None, Some(p)) => self.breaking(at, format!("now must match {p}")),
            (Some(p), Some(q)) if p != q => self.breaking(at, format!("pattern changed from {p} to {q}")),
            (Some(_), None) => self.compatible(at, "pattern removed"),
            _ => {}
        }
        match (a.get("default"), b.get("default")) {
            (Some(x), Some(y)) if x != y => self.breaking(at, format!("default changed from {x} to {y}")),
            (Some(x), None) => self.breaking(at, format!("default {x} removed")),
            (None, Some(y)) => self.compatible(at, format!("default {y} added")),
            _ => {}
        }
        self.object(a, b, at);
        if let (Some(x), Some(y)) = (a.get("items"), b.get("items")) {
            self.compare(x, y, &format!("{at}[]"));
        }
        let (va, vb) = (branches(a), branches(b));
        for (key, x) in &va {
            match vb.get(key) {
                Some(y) => self.compare(x, y, &join(at, key)),
                None => self.breaking(&join(at, key), "variant removed"),
            }
        }
        for key in vb.keys().filter(|k| !va.contains_key(*k)) {
            self.compatible(&join(at, key), "variant added");
        }
    }

    fn enumeration(&mut self, a: &Value, b: &Value, at: &str) {
        let list = |s: &Value| s.get("enum").and_then(Value::as_array).cloned();
        match (list(a), list(b)) {
            (None, Some(y)) => self.breaking(at, format!("now limited to {}", words(&y.iter().collect::<Vec<_>>()))),
            (Some(x), Some(y)) => {
                let removed: Vec<&Value> = x.iter().filter(|v| !y.contains(v)).collect();
                let added: Vec<&Value> = y.iter().filter(|v| !x.contains(v)).collect();
                if !removed.is_empty() {
                    self.breaking(at, format!("no longer accepts {}", words(&removed)));
                }
                if !added.is_empty() {
                    self.compatible(at, format!("now also accepts {}", words(&added)));
                }
            }
            (Some(_), None) => self.compatible(at, "no longer limited to a list"),
            (None, None) => {}
        }
    }

    /// Lower bounds that rise and upper bounds that fall accept less.
    fn bounds(&mut self, a: &Value, b: &Value, at: &str) {
        for (key, lower) in [
            ("minimum", true),
            ("exclusiveMinimum", true),
            ("minLength", true),
            ("minItems", true),
            ("maximum", false),
            ("exclusiveMaximum", false),
            ("maxLength", false),
            ("maxItems", false),
        ] {
            let (x, y) = (a.get(key).and_then(Value::as_f64), b.get(key).and_then(Value::as_f64));
            let (shown_x, shown_y) = (a.get(key).map(Value::to_string), b.get(key).map(Value::to_string));
            match (x, y) {
                (None, Some(_)) => self.breaking(at, format!("{key} {} added", shown_y.unwrap_or_default())),
                (Some(_), None) => self.compatible(at, format!("{key} {} removed", shown_x.unwrap_or_default())),
                (Some(x), Some(y)) if x != y => {
                    let narrowed = if lower { y > x } else { y < x };
                    let (from, to) = (shown_x.unwrap_or_default(), shown_y.unwrap_or_default());
                    if narrowed {
                        self.breaking(at, format!("{key} narrowed from {from} to {to}"));
                    } else {
                        self.compatible(at, format!("{key} widened from {from} to {to}"));
                    }
                }
                _ => {}
            }
        }
    }

    fn object(&mut self, a: &Value, b: &Value, at: &str) {
        let empty = Map::new();
        let (pa, pb) = (properties(a).unwrap_or(&empty), properties(b).unwrap_or(&empty));
        for (name, x) in pa {
            let field = join(at, name);
            match pb.get(name) {
                Some(y) => self.compare(x, y, &field),
                None if x == &Value::Bool(false) => {}
                None => {
                    let alias = x.get("description").and_then(Value::as_str).is_some_and(|d| d.starts_with("Alias of"));
                    self.breaking(&field, if alias { "alias removed" } else { "field removed" });
                }
            }
        }
        for name in pb.keys().filter(|n| !pa.contains_key(*n)) {
            if pb.get(name) != Some(&Value::Bool(false)) {
                self.compatible(&join(at, name), "field added");
            }
        }
        let (ra, rb) = (required_names(a), required_names(b));
        for name in rb.difference(&ra) {
            self.breaking(&join(at, name), "now required");
        }
        for name in ra.difference(&rb).filter(|n| pb.contains_key(n.split(" or ").next().unwrap_or(""))) {
            self.compatible(&join(at, name), "no longer required");
        }
        if a.get("additionalProperties") != Some(&Value::Bool(false))
            && b.get("additionalProperties") == Some(&Value::Bool(false))
        {
            self.breaking(at, "unlisted members no longer accepted");
        }
        let (xa, xb) = (rules(a), rules(b));
        for (key, rule) in &xb {
            if !xa.contains_key(key) {
                self.breaking(at, format!("new rule: {}", rule_words(rule)));
            }
        }
        for (key, rule) in &xa {
            if !xb.contains_key(key) {
                self.compatible(at, format!("rule removed: {}", rule_words(rule)));
            }
        }
    }
}

/// The required members, with a required field taken by any of its names (`image_url or image`) as one.
fn required_names(schema: &Value) -> BTreeSet<String> {
    let mut names = required(schema);
    for rule in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        if let Some(group) = alias_group(rule) {
            names.insert(group.join(" or "));
        }
    }
    names
}

/// `{"oneOf": [{"required": [a]}, {"required": [b]}]}`: one of a field's names is required.
fn alias_group(rule: &Value) -> Option<Vec<String>> {
    let branches = rule.get("oneOf")?.as_array()?;
    if rule.as_object()?.len() != 1 {
        return None;
    }
    branches
        .iter()
        .map(|b| match (b.as_object().map(Map::len), b.get("required").and_then(Value::as_array)) {
            (Some(1), Some(names)) if names.len() == 1 => names[0].as_str().map(String::from),
            _ => None,
        })
        .collect()
}

/// The cross-field rules of an object (its `allOf`, alias groups aside), keyed by their meaning: the rule
/// less its description.
fn rules(schema: &Value) -> BTreeMap<String, Value> {
    let list = schema.get("allOf").and_then(Value::as_array).into_iter().flatten();
    list.filter(|rule| alias_group(rule).is_none())
        .map(|rule| (without_descriptions(rule).to_string(), rule.clone()))
        .collect()
}

fn without_descriptions(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, _)| *k != "description").map(|(k, v)| (k.clone(), without_descriptions(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_descriptions).collect()),
        other => other.clone(),
    }
}

fn rule_words(rule: &Value) -> String {
    let said = rule.pointer("/then/description").or_else(|| rule.get("description")).and_then(Value::as_str);
    said.map_or_else(|| without_descriptions(rule).to_string(), String::from)
}

fn show(types: &BTreeSet<String>) -> String {
    if types.is_empty() { "any".into() } else { types.iter().cloned().collect::<Vec<_>>().join(" or ") }
}

/// The response direction: the gateway sends it, so it must still say everything it said.
struct Response<'a> {
    out: &'a mut Changes,
    subject: &'a str,
}

impl Response<'_> {
    fn compare(&mut self, a: &Value, b: &Value, at: &str) {
        let (ra, rb) = (a.get("$ref"), b.get("$ref"));
        if ra != rb {
            self.out.push(
                Severity::Breaking,
                self.subject,
                at,
                format!("now a different shape ({} to {})", show_ref(ra), show_ref(rb)),
            );
            return;
        }
        let (ta, tb) = (types(a), types(b));
        let new: Vec<&String> = tb.difference(&ta).collect();
        if !ta.is_empty() && (tb.is_empty() || !new.is_empty()) {
            self.out.push(
                Severity::Breaking,
                self.subject,
                at,
                format!("type changed from {} to {}", show(&ta), show(&tb)),
            );
        }
        if a.get("const") != b.get("const") {
            self.out.push(
                Severity::Breaking,
                self.subject,
                at,
                format!(
                    "constant changed to {}",
                    b.get("const").map(Value::to_string).unwrap_or_else(|| "any value".into())
                ),
            );
        }
        let list = |s: &Value| s.get("enum").and_then(Value::as_array).cloned();
        if let (Some(x), Some(y)) = (list(a), list(b)) {
            let added: Vec<&Value> = y.iter().filter(|v| !x.contains(v)).collect();
            if !added.is_empty() {
                self.out.push(Severity::Compatible, self.subject, at, format!("may now also be {}", words(&added)));
            }
        }
        let empty = Map::new();
        let (pa, pb) = (properties(a).unwrap_or(&empty), properties(b).unwrap_or(&empty));
        for (name, x) in pa {
            match pb.get(name) {
                Some(y) => self.compare(x, y, &join(at, name)),
                None => self.out.push(Severity::Breaking, self.subject, &join(at, name), "field removed"),
            }
        }
        for name in pb.keys().filter(|n| !pa.contains_key(*n)) {
            self.out.push(Severity::Compatible, self.subject, &join(at, name), "field added");
        }
        let (qa, qb) = (required(a), required(b));
        for name in qa.difference(&qb).filter(|n| pb.contains_key(*n)) {
            self.out.push(Severity::Breaking, self.subject, &join(at, name), "no longer always present");
        }
        for name in qb.difference(&qa) {
            self.out.push(Severity::Compatible, self.subject, &join(at, name), "now always present");
        }
        if let (Some(x), Some(y)) = (a.get("items"), b.get("items")) {
            self.compare(x, y, &format!("{at}[]"));
        }
    }
}

fn show_ref(reference: Option<&Value>) -> String {
    reference.and_then(Value::as_str).and_then(ref_name).unwrap_or("inline").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(model: Value, task: Value) -> Value {
        json!({
            "paths": {"/v1/videos/generations": {"post": {"requestBody": {"content": {"application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/m"}]}}}}}}},
            "components": {"schemas": {"m": model, "Task": task}},
        })
    }

    fn changes(old: Value, new: Value) -> Vec<String> {
        let task = json!({"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}});
        diff(&doc(old, task.clone()), &doc(new, task)).iter().map(|c| format!("{:?} {c}", c.severity)).collect()
    }

    fn object(props: Value, required: Value) -> Value {
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    }

    #[test]
    fn a_request_that_accepts_less_is_breaking_and_one_that_accepts_more_is_not() {
        let base = || {
            object(
                json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}, "r": {"enum": ["a", "b"]}}),
                json!([]),
            )
        };
        let cases: Vec<(Value, &str)> = vec![
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 1, "maximum": 8, "default": 5}, "r": {"enum": ["a", "b"]}}),
                    json!([]),
                ),
                "Breaking m: d: maximum narrowed from 10 to 8",
            ),
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 0, "maximum": 10, "default": 5}, "r": {"enum": ["a", "b"]}}),
                    json!([]),
                ),
                "Compatible m: d: minimum widened from 1 to 0",
            ),
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 6}, "r": {"enum": ["a", "b"]}}),
                    json!([]),
                ),
                "Breaking m: d: default changed from 5 to 6",
            ),
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}, "r": {"enum": ["a"]}}),
                    json!([]),
                ),
                "Breaking m: r: no longer accepts \"b\"",
            ),
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}, "r": {"enum": ["a", "b", "c"]}}),
                    json!([]),
                ),
                "Compatible m: r: now also accepts \"c\"",
            ),
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}, "r": {"enum": ["a", "b"]}}),
                    json!(["r"]),
                ),
                "Breaking m: r: now required",
            ),
            (
                object(json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}}), json!([])),
                "Breaking m: r: field removed",
            ),
            (
                object(json!({"d": {"type": "string"}, "r": {"enum": ["a", "b"]}}), json!([])),
                "Breaking m: d: type narrowed from integer to string",
            ),
            (
                object(
                    json!({"d": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}, "r": {"enum": ["a", "b"]}, "x": {"type": "string"}}),
                    json!([]),
                ),
                "Compatible m: x: field added",
            ),
        ];
        for (new, expected) in cases {
            let found = changes(base(), new);
            assert!(found.iter().any(|c| c == expected), "{expected}: {found:?}");
        }
        assert!(changes(base(), base()).is_empty());
    }

    #[test]
    fn an_alias_a_model_a_variant_and_a_rule_are_part_of_the_contract() {
        let aliased = object(
            json!({"image_url": {"type": "string"}, "image": {"type": "string", "description": "Alias of `image_url`."}}),
            json!([]),
        );
        let plain = object(json!({"image_url": {"type": "string"}}), json!([]));
        assert_eq!(changes(aliased.clone(), plain.clone()), ["Breaking m: image: alias removed"]);
        let mut required = plain.clone();
        required["allOf"] = json!([{"oneOf": [{"required": ["image_url"]}, {"required": ["image"]}]}]);
        assert_eq!(
            changes(aliased.clone(), required.clone()).first().map(String::as_str),
            Some("Breaking m: image: alias removed")
        );
        assert!(changes(aliased, required).contains(&"Breaking m: image_url or image: now required".to_string()));
        let mut ruled = plain.clone();
        ruled["allOf"] = json!([{"if": {"required": ["a"]}, "then": {"required": ["b"], "description": "a needs b"}}]);
        assert_eq!(changes(plain.clone(), ruled.clone()), ["Breaking m: new rule: a needs b"]);
        assert_eq!(changes(ruled, plain.clone()), ["Compatible m: rule removed: a needs b"]);
        let variants = |titles: &[&str]| json!({"type": "object", "oneOf": titles.iter().map(|t| json!({"title": t, "type": "object"})).collect::<Vec<_>>()});
        assert_eq!(
            changes(variants(&["f = a", "f = b"]), variants(&["f = a"])),
            ["Breaking m: f = b: variant removed"]
        );
        let old = doc(plain.clone(), json!({}));
        let mut new = old.clone();
        new["paths"]["/v1/videos/generations"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"] =
            json!([]);
        assert_eq!(diff(&old, &new)[0].to_string(), "m: model removed");
    }

    #[test]
    fn a_response_that_promises_less_is_breaking() {
        let model = object(json!({}), json!([]));
        let task = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required});
        let old = doc(model.clone(), task(json!({"id": {"type": "string"}, "n": {"type": "integer"}}), json!(["id"])));
        let cases = [
            (task(json!({"id": {"type": "string"}}), json!(["id"])), "Breaking Task: n: field removed"),
            (
                task(json!({"id": {"type": "string"}, "n": {"type": "integer"}}), json!([])),
                "Breaking Task: id: no longer always present",
            ),
            (
                task(json!({"id": {"type": ["string", "null"]}, "n": {"type": "integer"}}), json!(["id"])),
                "Breaking Task: id: type changed from string to null or string",
            ),
            (
                task(json!({"id": {"type": "string"}, "n": {"type": "integer"}, "m": {}}), json!(["id"])),
                "Compatible Task: m: field added",
            ),
        ];
        for (new_task, expected) in cases {
            let found: Vec<String> =
                diff(&old, &doc(model.clone(), new_task)).iter().map(|c| format!("{:?} {c}", c.severity)).collect();
            assert_eq!(found, [expected]);
        }
    }
}
