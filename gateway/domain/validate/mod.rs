//! Request validation: aliases folded into canonical names, the model's compiled JSON Schema, the
//! operation's cross-field rules and size checks, every violation reported at once with the field it is about.

mod rules;
mod violation;

pub use rules::RuleSet;
pub use violation::Violation;

use crate::domain::catalog::{ModelSpec, OperationSpec};
use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

/// A model's validator, compiled once at start-up.
pub struct ModelValidator {
    model: &'static ModelSpec,
    schema: jsonschema::Validator,
    rules: RuleSet,
    /// Top-level field -> its description, to explain errors whose keyword alone says little.
    descriptions: std::collections::HashMap<String, String>,
}

impl ModelValidator {
    /// Compiles the model's canonical schema and its operation's rules.
    pub fn compile(model: &'static ModelSpec) -> Result<ModelValidator, String> {
        let schema: Value =
            serde_json::from_str(model.canonical_schema).map_err(|e| format!("schema of {}: {e}", model.id))?;
        let descriptions = schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.get("description")?.as_str()?.to_string())))
            .collect();
        let schema = jsonschema::draft202012::new(&schema).map_err(|e| format!("schema of {}: {e}", model.id))?;
        let rules = RuleSet::parse(model.operation.spec()).map_err(|e| format!("rules of {}: {e}", model.id))?;
        Ok(ModelValidator { model, schema, rules, descriptions })
    }

    /// Checks `body` in place: aliases are renamed to their canonical field, then every check runs.
    pub fn validate(&self, body: &mut Map<String, Value>) -> Result<(), Vec<Violation>> {
        let mut violations = fold_aliases(self.model.operation.spec(), body);
        let value = Value::Object(std::mem::take(body));
        violations.extend(self.schema.iter_errors(&value).map(|e| self.describe(&e)));
        if let Value::Object(map) = value {
            *body = map;
        }
        if violations.is_empty() {
            let tag = self.model.operation.spec().variant_tag.and_then(|t| body.get(t)).and_then(Value::as_str);
            violations.extend(self.rules.check(body, tag));
            violations.extend(pixel_checks(self.model, body));
        }
        violations.dedup();
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }

    /// A schema error in words a client can act on, naming the field.
    fn describe(&self, error: &jsonschema::ValidationError<'_>) -> Violation {
        let path = dotted(error.instance_path().as_str());
        match error.kind() {
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                Violation::new(join(&path, name), format!("`{}` is required", join(&path, name)))
            }
            ValidationErrorKind::AdditionalProperties { unexpected }
            | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                let names = unexpected.join("`, `");
                let first = unexpected.first().map(String::as_str).unwrap_or_default();
                Violation::new(join(&path, first), format!("unknown field `{names}`"))
            }
            ValidationErrorKind::FalseSchema => Violation::new(
                &path,
                format!("`{path}` is not accepted by model `{}` with this request", self.model.id),
            ),
            ValidationErrorKind::Contains => {
                let field = path.split(['.', '[']).next().unwrap_or_default();
                let rule = self.descriptions.get(field).map(String::as_str).unwrap_or("see the model's schema");
                Violation::new(&path, format!("`{path}` breaks its item limits: {rule}"))
            }
            ValidationErrorKind::Enum { options } => {
                let options = options.as_array().map(Vec::as_slice).unwrap_or_default();
                let message = match options {
                    [only] => format!("`{path}` can only be {only} with model `{}`", self.model.id),
                    _ => format!("`{path}` must be one of {}", listed(options)),
                };
                Violation::new(&path, message)
            }
            ValidationErrorKind::Constant { expected_value } => {
                Violation::new(&path, format!("`{path}` can only be {expected_value} with model `{}`", self.model.id))
            }
            ValidationErrorKind::Pattern { pattern } => {
                let form = pattern_words(pattern)
                    .or_else(|| self.descriptions.get(path.as_str()).map(String::as_str))
                    .unwrap_or("see the model's schema");
                Violation::new(&path, format!("`{path}` is not in its form: {form}"))
            }
            _ => Violation::new(&path, format!("`{path}`: {}", error.masked())),
        }
    }
}

/// Values as a client would type them: `"720P", "1080P"`.
fn listed(options: &[Value]) -> String {
    options.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")
}

/// The spec's URL patterns in words (a client should not have to read a regex).
fn pattern_words(pattern: &str) -> Option<&'static str> {
    match pattern {
        "^[Hh][Tt][Tt][Pp][Ss]?://" => Some("an http:// or https:// URL"),
        "^https?://" => Some("an http:// or https:// URL"),
        "^(https?://|data:)" => Some("an http:// or https:// URL, or a data: URI"),
        r"^[1-9][0-9]{0,4}\*[1-9][0-9]{0,4}$" => Some("`<width>*<height>` in pixels, such as 1280*720"),
        _ => None,
    }
}

/// Renames aliases (i2v `img_url` -> `image_url`); both names at once is an error.
fn fold_aliases(op: &OperationSpec, body: &mut Map<String, Value>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (alias, canonical) in op.aliases {
        if let Some(value) = body.remove(*alias) {
            if body.contains_key(*canonical) {
                violations.push(Violation::new(
                    *alias,
                    format!("send either `{canonical}` or its alias `{alias}`, not both"),
                ));
            } else {
                body.insert((*canonical).to_string(), value);
            }
        }
    }
    violations
}

/// `W*H` sizes whose pixel count and aspect ratio must lie within a model's range.
fn pixel_checks(model: &ModelSpec, body: &Map<String, Value>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (field, range) in model.pixel_limits {
        let Some(size) = body.get(*field).and_then(Value::as_str) else {
            continue;
        };
        let parsed = size.split_once('*').and_then(|(w, h)| Some((w.parse::<u64>().ok()?, h.parse::<u64>().ok()?)));
        let ok = parsed.is_some_and(|(w, h)| {
            let pixels = w * h;
            let aspect = w as f64 / h.max(1) as f64;
            (range.min_pixels..=range.max_pixels).contains(&pixels)
                && aspect >= range.min_aspect
                && aspect <= range.max_aspect
        });
        if !ok {
            violations.push(Violation::new(*field, format!(
                "`{field}` must be `<width>*<height>` with {}..={} pixels in total and an aspect ratio between {} and {}",
                range.min_pixels, range.max_pixels, range.min_aspect, range.max_aspect
            )));
        }
    }
    violations
}

/// `/media/0/url` -> `media[0].url`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.chars().all(|c| c.is_ascii_digit()) && !segment.is_empty() {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}
