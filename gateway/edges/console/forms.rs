//! The playground's form, built from a model's published request schema and its record: a model added to
//! `spec/` gets its form with no console change. Required fields come first, then the model's inputs, its
//! options and the gateway's own fields; aliases are folded into their canonical field, fields the model
//! does not take are left out, and every list or object the schema describes gets inputs of its shape. The
//! browser sends what is filled in as the request's JSON, and the API's own validation answers it.

use crate::domain::catalog::ModelSpec;
use serde_json::Value;

/// One control of the form, or of a list item or object within it.
pub struct Field {
    pub name: String,
    /// What the field is for, with this model's range and default where it has them.
    pub hint: String,
    pub required: bool,
    pub section: Section,
    pub control: Control,
    /// The value the model takes when the field is left empty, shown as the placeholder.
    pub default: Option<String>,
}

/// Where a field stands in the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Required,
    Input,
    Option,
    /// The gateway's own fields (`callback_url`).
    Delivery,
}

impl Section {
    pub fn heading(self) -> &'static str {
        match self {
            Section::Required => "Required",
            Section::Input => "Inputs",
            Section::Option => "Options",
            Section::Delivery => "Delivery",
        }
    }
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
    /// A list of values, one per line; `numbers` when each line is a list of numbers (`255,0,0`).
    Lines {
        numbers: bool,
    },
    /// A list of objects, each with these fields, added one at a time.
    Items {
        fields: Vec<Field>,
        max: Option<u64>,
    },
    /// An object with these fields.
    Group {
        fields: Vec<Field>,
    },
    /// What the schema gives no shape for, as JSON.
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
            Control::Lines { numbers: false } => "lines",
            Control::Lines { numbers: true } => "number-lines",
            Control::Items { .. } => "items",
            Control::Group { .. } => "group",
            Control::Json => "json",
        }
    }
}

/// What this deployment allows where the spec's wording is stricter than it (the demo takes loopback
/// callbacks).
pub struct Deployment {
    pub private_callbacks: bool,
}

/// The form of `model`: its fields in sections, required ones first.
pub fn fields(model: &ModelSpec, deployment: &Deployment) -> Vec<Field> {
    let Ok(schema) = serde_json::from_str::<Value>(model.published_schema) else { return Vec::new() };
    let operation = model.operation.spec();
    let variants: Vec<&Value> = match schema["oneOf"].as_array() {
        Some(variants) => variants.iter().collect(),
        None => vec![&schema],
    };
    let aliases: Vec<&str> = operation.aliases.iter().map(|(alias, _)| *alias).collect();
    let mut fields: Vec<Field> = Vec::new();
    for variant in &variants {
        let Some(properties) = variant["properties"].as_object() else { continue };
        // `false`: a field the operation has and this model does not take.
        let offered = properties.iter().filter(|(name, property)| {
            name.as_str() != "model" && !aliases.contains(&name.as_str()) && **property != Value::Bool(false)
        });
        for (name, property) in offered {
            let constant = property.get("const").map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string));
            match (fields.iter_mut().find(|f| &f.name == name), constant) {
                (Some(Field { control: Control::Choice { options, .. }, .. }), Some(constant)) => {
                    options.push(constant);
                }
                (Some(_), _) => {}
                (None, constant) => {
                    let required = variants.iter().all(|v| required_in(&schema, v, name, operation.aliases));
                    let section = if required {
                        Section::Required
                    } else if !operation.fields.contains(&name.as_str()) {
                        Section::Delivery
                    } else if operation.parameters.contains(&name.as_str()) {
                        Section::Option
                    } else {
                        Section::Input
                    };
                    let mut field = field(name, property, required, section);
                    if let Some(constant) = constant {
                        field.control = Control::Choice { options: vec![constant], numeric: false };
                    }
                    if name == "callback_url" && deployment.private_callbacks {
                        field.hint = "Where to POST the task's end, signed with the account's webhook secret: an \
                                      http:// or https:// URL (this gateway also takes private and loopback \
                                      addresses)."
                            .into();
                    }
                    fields.push(field);
                }
            }
        }
    }
    // Long texts lead their section, the prompt first: they say what the job is.
    fields.sort_by_key(|f| (f.section, !matches!(f.control, Control::Text { long: true, .. }), f.name != "prompt"));
    fields
}

/// The fields (in form order) grouped under their sections' headings.
pub fn sections(fields: Vec<Field>) -> Vec<(&'static str, Vec<Field>)> {
    let mut sections: Vec<(Section, Vec<Field>)> = Vec::new();
    for field in fields {
        match sections.last_mut() {
            Some((section, members)) if *section == field.section => members.push(field),
            _ => sections.push((field.section, vec![field])),
        }
    }
    sections.into_iter().map(|(section, members)| (section.heading(), members)).collect()
}

/// Whether every request must carry `name` (or one of its aliases): by the schema's `required`, the
/// variant's, or an `allOf` member that is a choice between `name` and its aliases.
fn required_in(schema: &Value, variant: &Value, name: &str, aliases: &[(&str, &str)]) -> bool {
    let named = |n: &str| n == name || aliases.iter().any(|(alias, canonical)| *canonical == name && *alias == n);
    let listed = |s: &Value| s["required"].as_array().is_some_and(|r| r.iter().any(|n| n == name));
    let choice = |member: &Value| {
        member["oneOf"].as_array().or_else(|| member["anyOf"].as_array()).is_some_and(|options| {
            !options.is_empty()
                && options
                    .iter()
                    .all(|o| o["required"].as_array().is_some_and(|r| r.iter().any(|n| n.as_str().is_some_and(named))))
        })
    };
    listed(schema)
        || listed(variant)
        || [schema, variant].iter().any(|s| s["allOf"].as_array().is_some_and(|members| members.iter().any(choice)))
}

fn field(name: &str, property: &Value, required: bool, section: Section) -> Field {
    let control = control(name, property);
    Field {
        name: name.to_string(),
        hint: hint(property, &control),
        required,
        section,
        default: property.get("default").map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_string)),
        control,
    }
}

/// The description, less what the schema's words say only to tools, plus this model's range.
fn hint(property: &Value, control: &Control) -> String {
    let description = property["description"].as_str().unwrap_or_default();
    // A pixel rule is stated for people and again as `x-pixels` for tools: only the first is kept.
    let mut hint = match description.find(" (`x-pixels`") {
        Some(cut) => format!("{}.", &description[..cut]),
        None => description.to_string(),
    };
    let range = match control {
        Control::Number { min: Some(min), max: Some(max), .. } => Some(format!("{min}-{max}")),
        Control::Number { min: Some(min), .. } => Some(format!("at least {min}")),
        Control::Number { max: Some(max), .. } => Some(format!("at most {max}")),
        Control::Lines { .. } | Control::Items { .. } => items(property),
        _ => None,
    };
    if let Some(range) = range {
        hint.push_str(&format!(" This model: {range}"));
        if let Some(default) = property.get("default") {
            hint.push_str(&format!(", default {default}"));
        }
        hint.push('.');
    }
    hint
}

/// How many items a list takes, in words.
fn items(property: &Value) -> Option<String> {
    match (property["minItems"].as_u64(), property["maxItems"].as_u64()) {
        (Some(low), Some(high)) if low == high => Some(format!("{low} item(s)")),
        (Some(low), Some(high)) => Some(format!("{low}-{high} items")),
        (None, Some(high)) => Some(format!("up to {high} items")),
        (Some(low), None) => Some(format!("at least {low} items")),
        (None, None) => None,
    }
}

fn control(name: &str, property: &Value) -> Control {
    if let Some(options) = property["enum"].as_array().filter(|options| options.len() > 1) {
        let numeric = options.iter().all(Value::is_number);
        let options = options.iter().map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_string)).collect();
        return Control::Choice { options, numeric };
    }
    // A value of several types that may be a string (a URL, or an object of options) is typed as one.
    let typed = match &property["type"] {
        Value::Array(types) if types.iter().any(|t| t == "string") => Some("string"),
        other => other.as_str(),
    };
    match typed {
        Some("string") => Control::Text { long: name.ends_with("prompt"), max_length: property["maxLength"].as_u64() },
        Some(kind @ ("integer" | "number")) => Control::Number {
            integer: kind == "integer",
            min: property["minimum"].as_f64(),
            max: property["maximum"].as_f64(),
        },
        Some("boolean") => Control::Flag,
        Some("array") => match property["items"]["type"].as_str() {
            Some("string") => Control::Lines { numbers: false },
            Some("array") => Control::Lines { numbers: true },
            Some("object") => {
                Control::Items { fields: members(&property["items"]), max: property["maxItems"].as_u64() }
            }
            _ => Control::Json,
        },
        Some("object") if property["properties"].is_object() => Control::Group { fields: members(property) },
        _ => Control::Json,
    }
}

/// The fields of an object's schema, required ones first.
fn members(object: &Value) -> Vec<Field> {
    let Some(properties) = object["properties"].as_object() else { return Vec::new() };
    let required = |name: &str| object["required"].as_array().is_some_and(|r| r.iter().any(|n| n == name));
    let mut fields: Vec<Field> =
        properties.iter().map(|(name, property)| field(name, property, required(name), Section::Input)).collect();
    fields.sort_by_key(|f| !f.required);
    fields
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::domain::catalog::{MODELS, ModelSpec};

    const DEMO: Deployment = Deployment { private_callbacks: true };

    fn form(model: &str) -> Vec<Field> {
        fields(ModelSpec::find(model).unwrap(), &DEMO)
    }

    fn named<'a>(fields: &'a [Field], name: &str) -> &'a Field {
        fields.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no field {name}"))
    }

    #[test]
    fn every_model_has_a_form_in_sections_with_no_json_box_where_the_schema_has_a_shape() {
        for model in MODELS {
            let fields = fields(model, &DEMO);
            assert!(!fields.is_empty(), "{}", model.id);
            assert!(fields.windows(2).all(|pair| pair[0].section <= pair[1].section), "{}", model.id);
            assert!(fields.iter().all(|f| f.name != "model"), "{}", model.id);
            for alias in model.operation.spec().aliases.iter().map(|(alias, _)| *alias) {
                assert!(fields.iter().all(|f| f.name != alias), "{}: alias {alias} has a field", model.id);
            }
            let boxes: Vec<&str> =
                fields.iter().filter(|f| matches!(f.control, Control::Json)).map(|f| f.name.as_str()).collect();
            assert!(boxes.is_empty(), "{}: JSON boxes for {boxes:?}", model.id);
            assert!(fields.iter().all(|f| !f.hint.contains("x-pixels")), "{}", model.id);
        }
    }

    /// The form the issue found wanting: `image_url` required and first, its alias gone, `template` (not
    /// taken) gone, the prompt leading the inputs, this model's duration range, a callback hint true here.
    #[test]
    fn an_image_to_video_form_guides() {
        let fields = form("alpha2.6-i2v_i2v");
        assert_eq!((fields[0].name.as_str(), fields[0].required), ("image_url", true));
        assert!(fields.iter().all(|f| f.name != "img_url" && f.name != "template"));
        let inputs: Vec<&str> =
            fields.iter().filter(|f| f.section == Section::Input).map(|f| f.name.as_str()).collect();
        assert_eq!(inputs.first(), Some(&"prompt"), "{inputs:?}");
        let duration = named(&fields, "duration");
        assert_eq!(duration.section, Section::Option);
        assert!(duration.hint.ends_with("This model: 2-15, default 5."), "{}", duration.hint);
        assert_eq!(duration.default.as_deref(), Some("5"));
        let callback = named(&fields, "callback_url");
        assert_eq!(callback.section, Section::Delivery);
        assert!(callback.hint.contains("loopback addresses"), "{}", callback.hint);
    }

    #[test]
    fn lists_and_objects_get_inputs_of_their_shape() {
        let r2v = form("alpha2.7-r2v");
        let Control::Items { fields, max } = &named(&r2v, "media").control else { panic!("media is a list of items") };
        assert_eq!(*max, Some(5));
        assert!(matches!(named(fields, "type").control, Control::Choice { .. }) && named(fields, "url").required);
        assert_eq!(named(&form("beta-image-2.0-pro_i2i"), "images").control.kind(), "lines");
        assert_eq!(named(&form("alphax-sketch-to-image-lite_sketch"), "sketch_color").control.kind(), "number-lines");
        assert!(matches!(
            named(&form("alphax-background-generation-v2_background"), "reference_edge").control,
            Control::Group { .. }
        ));

        let vace = form("alpha2.1-vace-plus_vace");
        let Control::Choice { options, .. } = &named(&vace, "function").control else { panic!("function is a choice") };
        assert!(named(&vace, "function").required && options.contains(&"image_reference".to_string()));
    }
}
