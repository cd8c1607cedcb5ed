//! The playground's form, built from a model's published request schema: a model added to `spec/` gets
//! its form with no console change. The browser sends what is filled in as the request's JSON, and the
//! API's own validation answers it.

use serde_json::Value;

/// One control of the form.
pub struct Field {
    pub name: String,
    pub description: String,
    pub required: bool,
    pub control: Control,
}

pub enum Control {
    /// A one-line text; `long` for prompts.
    Text {
        long: bool,
        max_length: Option<u64>,
    },
    /// A whole or decimal number within bounds.
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
    },
    /// One of the values (strings or numbers, as text).
    Choice {
        options: Vec<String>,
        numeric: bool,
    },
    Flag,
    /// Anything else (lists, objects) as JSON.
    Json,
}

impl Control {
    /// How the browser turns the control's text into JSON (`data-kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Control::Text { .. } => "string",
            Control::Number { .. } | Control::Choice { numeric: true, .. } => "number",
            Control::Choice { .. } => "string",
            Control::Flag => "boolean",
            Control::Json => "json",
        }
    }
}

/// The fields of a published schema, required ones first; `model` (a constant) is left out. A schema of
/// variants (`oneOf`, as `function` picks one) gets the fields of them all, the property telling them apart
/// as a choice of its constants; the API answers for fields a variant does not take.
pub fn fields(schema: &str) -> Vec<Field> {
    let Ok(schema) = serde_json::from_str::<Value>(schema) else { return Vec::new() };
    let variants: Vec<&Value> = match schema["oneOf"].as_array() {
        Some(variants) => variants.iter().collect(),
        None => vec![&schema],
    };
    let required_in = |variant: &Value, name: &str| {
        [variant, &schema].iter().any(|s| s["required"].as_array().is_some_and(|r| r.iter().any(|n| n == name)))
    };
    let mut fields: Vec<Field> = Vec::new();
    for variant in &variants {
        let Some(properties) = variant["properties"].as_object() else { continue };
        for (name, property) in properties.iter().filter(|(name, _)| name.as_str() != "model") {
            let constant = property.get("const").map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string));
            match (fields.iter_mut().find(|f| &f.name == name), constant) {
                (Some(Field { control: Control::Choice { options, .. }, .. }), Some(constant)) => {
                    options.push(constant);
                }
                (Some(_), _) => {}
                (None, constant) => fields.push(Field {
                    name: name.clone(),
                    description: property["description"].as_str().unwrap_or_default().to_string(),
                    required: variants.iter().all(|v| required_in(v, name)),
                    control: match constant {
                        Some(constant) => Control::Choice { options: vec![constant], numeric: false },
                        None => control(name, property),
                    },
                }),
            }
        }
    }
    fields.sort_by_key(|field| !field.required);
    fields
}

fn control(name: &str, property: &Value) -> Control {
    if let Some(options) = property["enum"].as_array().filter(|options| options.len() > 1) {
        let numeric = options.iter().all(Value::is_number);
        let options = options.iter().map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_string)).collect();
        return Control::Choice { options, numeric };
    }
    match property["type"].as_str() {
        Some("string") => Control::Text { long: name.ends_with("prompt"), max_length: property["maxLength"].as_u64() },
        Some(kind @ ("integer" | "number")) => Control::Number {
            integer: kind == "integer",
            min: property["minimum"].as_f64(),
            max: property["maximum"].as_f64(),
        },
        Some("boolean") => Control::Flag,
        _ => Control::Json,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_model_has_a_form_with_its_required_fields_first() {
        for model in crate::domain::catalog::MODELS {
            let fields = fields(model.published_schema);
            assert!(!fields.is_empty(), "{}", model.id);
            let first_optional = fields.iter().position(|f| !f.required).unwrap_or(fields.len());
            assert!(fields[first_optional..].iter().all(|f| !f.required), "{}", model.id);
        }
        let t2v = crate::domain::catalog::ModelSpec::find("alpha2.6-t2v_t2v").unwrap();
        let fields = fields(t2v.published_schema);
        let prompt = fields.iter().find(|f| f.name == "prompt").unwrap();
        assert!(prompt.required && matches!(prompt.control, Control::Text { long: true, .. }));
        let duration = fields.iter().find(|f| f.name == "duration").unwrap();
        assert_eq!(duration.control.kind(), "number");
        let size = fields.iter().find(|f| f.name == "size").unwrap();
        assert!(matches!(&size.control, Control::Choice { numeric: false, .. }));
        assert!(fields.iter().all(|f| f.name != "model"));

        let vace = crate::domain::catalog::ModelSpec::find("alpha2.1-vace-plus_vace").unwrap();
        let fields = super::fields(vace.published_schema);
        let function = fields.iter().find(|f| f.name == "function").unwrap();
        let Control::Choice { options, .. } = &function.control else { panic!("function is a choice") };
        assert!(function.required && options.len() > 1 && options.contains(&"image_reference".to_string()));
    }
}
