//! Builds the upstream body `{"model", "input", "parameters"}` from a typed request.
//!
//! The generated `render` methods call [`EnvelopeBuilder::put`] once per field with the field's placement
//! from the spec; this module applies the model's envelope style and value transforms.

use crate::catalog::{Envelope, ModelSpec, Transform, ratio_of_size, tier_of_size};
use serde::Serialize;
use serde_json::{Map, Value};

/// Where a field goes upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Input,
    Parameters,
    /// The user message of `messages` bodies; `input` in plain bodies.
    Content,
    None,
}

/// The placement of one field, as generated from the spec.
#[derive(Debug)]
pub struct FieldOut {
    pub client: &'static str,
    pub upstream: &'static str,
    pub slot: Slot,
    pub messages_slot: Slot,
    pub transform: Option<Transform>,
}

/// A value the spec allowed but the upstream cannot be given (a size outside every tier).
#[derive(Debug, thiserror::Error)]
#[error("`{field}`: {message}")]
pub struct RenderError {
    pub field: &'static str,
    pub message: String,
}

/// Collects the rendered fields of one request for one model.
pub struct EnvelopeBuilder<'a> {
    model: &'a ModelSpec,
    input: Map<String, Value>,
    parameters: Map<String, Value>,
    images: Vec<Value>,
    texts: Vec<Value>,
}

impl<'a> EnvelopeBuilder<'a> {
    pub fn new(model: &'a ModelSpec) -> EnvelopeBuilder<'a> {
        EnvelopeBuilder { model, input: Map::new(), parameters: Map::new(), images: Vec::new(), texts: Vec::new() }
    }

    /// The variant tag (vace `function`) always goes to `input`.
    pub fn put_tag(&mut self, tag: &str, value: &str) {
        self.input.insert(tag.to_string(), Value::String(value.to_string()));
    }

    /// Places one field.
    pub fn put<T: Serialize>(&mut self, field: &FieldOut, value: &T) -> Result<(), RenderError> {
        let value =
            serde_json::to_value(value).map_err(|e| RenderError { field: field.client, message: e.to_string() })?;
        let messages = self.model.envelope == Envelope::Messages;
        let slot = if messages { field.messages_slot } else { field.slot };
        let transform =
            self.model.transforms.iter().find(|(name, _)| *name == field.client).map(|(_, t)| *t).or(field.transform);
        let target = match slot {
            Slot::None => return Ok(()),
            Slot::Parameters => &mut self.parameters,
            Slot::Input => &mut self.input,
            Slot::Content if messages => {
                match value {
                    Value::Array(items) => self.images.extend(items.into_iter().map(|url| object([("image", url)]))),
                    Value::String(_) => self.texts.push(object([("text", value)])),
                    other => self.images.push(object([("image", other)])),
                }
                return Ok(());
            }
            Slot::Content => &mut self.input,
        };
        match transform {
            None => {
                target.insert(field.upstream.to_string(), value);
            }
            Some(Transform::Uppercase) => {
                let upper = value.as_str().map(|s| Value::String(s.to_uppercase())).unwrap_or(value);
                target.insert(field.upstream.to_string(), upper);
            }
            Some(Transform::SizeToResolution) => {
                let tier = value.as_str().and_then(tier_of_size).ok_or_else(|| RenderError {
                    field: field.client,
                    message: format!("{value} is not a size of any resolution tier"),
                })?;
                target.insert(field.upstream.to_string(), tier.into());
            }
            Some(Transform::SizeToResolutionRatio) => {
                let (tier, ratio) = value.as_str().and_then(ratio_of_size).ok_or_else(|| RenderError {
                    field: field.client,
                    message: format!("{value} has no resolution and ratio on model `{}`", self.model.id),
                })?;
                target.insert("resolution".into(), tier.into());
                target.insert("ratio".into(), ratio.into());
            }
        }
        Ok(())
    }

    /// The finished body. `parameters` is always present, `{}` when empty.
    pub fn finish(mut self) -> Value {
        if !self.images.is_empty() || !self.texts.is_empty() {
            let mut content = self.images;
            content.extend(self.texts);
            let message = object([("role", "user".into()), ("content", Value::Array(content))]);
            self.input.insert("messages".into(), Value::Array(vec![message]));
        }
        object([
            ("model", self.model.model_code.into()),
            ("input", Value::Object(self.input)),
            ("parameters", Value::Object(self.parameters)),
        ])
    }
}

/// An object of `fields`, moved in: `json!` would serialize each value into a copy.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(name, value)| (name.to_string(), value)).collect())
}
