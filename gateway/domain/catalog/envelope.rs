//! Builds the upstream body `{"model", "input", "parameters"}` from a typed request, as JSON text.
//!
//! The generated `render` methods call [`EnvelopeBuilder::put`] once per field with the field's placement
//! from the spec; this module applies the model's envelope style and value transforms. Each value is
//! written straight into its object's JSON text: no `Value` tree to build, drop and serialize again.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

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

/// Upstream body shape of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    Plain,
    Messages,
}

/// Value conversions applied while rendering the upstream envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Uppercase,
    SizeToResolution,
    SizeToResolutionRatio,
}

/// What rendering needs to know of one model and of the upstream's size tables (the catalog fills it in:
/// `ModelSpec::style`), so that this module names nothing generated.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub model_id: &'static str,
    pub model_code: &'static str,
    pub envelope: Envelope,
    /// Per client field, a transform that overrides the operation's.
    pub transforms: &'static [(&'static str, Transform)],
    /// Resolution tier -> its `W*H` sizes.
    pub size_tiers: &'static [(&'static str, &'static [&'static str])],
    /// `(tier, ratio, W*H size)`.
    pub ratio_sizes: &'static [(&'static str, &'static str, &'static str)],
}

impl Style {
    fn tier_of(&self, size: &str) -> Option<&'static str> {
        self.size_tiers.iter().find(|(_, sizes)| sizes.contains(&size)).map(|(tier, _)| *tier)
    }

    fn ratio_of(&self, size: &str) -> Option<(&'static str, &'static str)> {
        self.ratio_sizes.iter().find(|(_, _, s)| *s == size).map(|(tier, ratio, _)| (*tier, *ratio))
    }
}

/// Collects the rendered fields of one request for one model.
pub struct EnvelopeBuilder<'a> {
    model: &'a Style,
    input: Members,
    parameters: Members,
    /// The user message's content items: images first, then texts.
    images: Members,
    texts: Members,
}

impl<'a> EnvelopeBuilder<'a> {
    pub fn new(model: &'a Style) -> EnvelopeBuilder<'a> {
        EnvelopeBuilder {
            model,
            input: Members::default(),
            parameters: Members::default(),
            images: Members::default(),
            texts: Members::default(),
        }
    }

    /// The variant tag (vace `function`) always goes to `input`.
    pub fn put_tag(&mut self, tag: &'static str, value: &str) {
        self.input.member(tag, &value);
    }

    /// Places one field.
    pub fn put<T: Serialize>(&mut self, field: &FieldOut, value: &T) -> Result<(), RenderError> {
        let messages = self.model.envelope == Envelope::Messages;
        let slot = if messages { field.messages_slot } else { field.slot };
        let transform =
            self.model.transforms.iter().find(|(name, _)| *name == field.client).map(|(_, t)| *t).or(field.transform);
        let target = match slot {
            Slot::None => return Ok(()),
            Slot::Parameters => &mut self.parameters,
            Slot::Input => &mut self.input,
            Slot::Content if !messages => &mut self.input,
            Slot::Content => {
                // One or a few per request: read back as a value to tell a text from a list of images.
                match serde_json::to_value(value).map_err(|e| render_error(field, e))? {
                    Value::Array(items) => items.iter().for_each(|url| self.images.item("image", url)),
                    text @ Value::String(_) => self.texts.item("text", &text),
                    other => self.images.item("image", &other),
                }
                return Ok(());
            }
        };
        match transform {
            None => target.try_member(field.upstream, value).map_err(|e| render_error(field, e))?,
            Some(transform) => {
                let value = serde_json::to_value(value).map_err(|e| render_error(field, e))?;
                let size = value.as_str();
                match transform {
                    Transform::Uppercase => match size {
                        Some(text) => target.member(field.upstream, &text.to_uppercase()),
                        None => target.member(field.upstream, &value),
                    },
                    Transform::SizeToResolution => {
                        let tier = size.and_then(|size| self.model.tier_of(size)).ok_or_else(|| RenderError {
                            field: field.client,
                            message: format!("{value} is not a size of any resolution tier"),
                        })?;
                        target.member(field.upstream, &tier);
                    }
                    Transform::SizeToResolutionRatio => {
                        let (tier, ratio) =
                            size.and_then(|size| self.model.ratio_of(size)).ok_or_else(|| RenderError {
                                field: field.client,
                                message: format!(
                                    "{value} has no resolution and ratio on model `{}`",
                                    self.model.model_id
                                ),
                            })?;
                        target.member("resolution", &tier);
                        target.member("ratio", &ratio);
                    }
                }
            }
        }
        Ok(())
    }

    /// The finished body. `parameters` is always present, `{}` when empty.
    pub fn finish(self) -> Bytes {
        let (input, parameters) = (self.input.joined(), self.parameters.joined());
        let (images, texts) = (self.images.joined(), self.texts.joined());
        let mut body = Vec::with_capacity(96 + input.len() + parameters.len() + images.len() + texts.len());
        body.extend_from_slice(b"{\"model\":");
        write_json(&mut body, self.model.model_code);
        body.extend_from_slice(b",\"input\":{");
        body.extend_from_slice(input);
        if !images.is_empty() || !texts.is_empty() {
            if !input.is_empty() {
                body.push(b',');
            }
            body.extend_from_slice(b"\"messages\":[{\"role\":\"user\",\"content\":[");
            body.extend_from_slice(images);
            if !images.is_empty() && !texts.is_empty() {
                body.push(b',');
            }
            body.extend_from_slice(texts);
            body.extend_from_slice(b"]}]");
        }
        body.extend_from_slice(b"},\"parameters\":{");
        body.extend_from_slice(parameters);
        body.extend_from_slice(b"}}");
        Bytes::from(body)
    }
}

/// Bytes a part of the envelope starts with room for: most parts' whole text, written in one allocation
/// instead of a few as the text doubles from 8 bytes.
const PART_ROOM: usize = 128;

/// JSON text: an object's members (`"name":value,` each) or a list's items (`item,` each).
#[derive(Default)]
struct Members {
    text: Vec<u8>,
    /// Each member's name and where its text starts. A name written again replaces the member it names,
    /// as a map would: several request fields may fill one upstream member (`size` or `resolution`).
    names: Vec<(&'static str, usize)>,
}

impl Members {
    /// The text without its last comma.
    fn joined(&self) -> &[u8] {
        self.text.strip_suffix(b",").unwrap_or(&self.text)
    }

    fn try_member<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), serde_json::Error> {
        self.forget(name);
        self.text.reserve(PART_ROOM);
        let start = self.text.len();
        write_json(&mut self.text, name);
        self.text.push(b':');
        serde_json::to_writer(&mut self.text, value).inspect_err(|_| self.text.truncate(start))?;
        self.text.push(b',');
        self.names.push((name, start));
        Ok(())
    }

    /// A member whose value always serializes (a string or a `Value`).
    fn member<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) {
        let _ = self.try_member(name, value);
    }

    fn forget(&mut self, name: &str) {
        let Some(index) = self.names.iter().position(|(named, _)| *named == name) else { return };
        let start = self.names[index].1;
        let end = self.names.get(index + 1).map_or(self.text.len(), |(_, next)| *next);
        self.text.drain(start..end);
        self.names.remove(index);
        for (_, later) in &mut self.names[index..] {
            *later -= end - start;
        }
    }

    /// A content item `{"<kind>":value}`.
    fn item(&mut self, kind: &str, value: &Value) {
        self.text.reserve(PART_ROOM);
        self.text.push(b'{');
        write_json(&mut self.text, kind);
        self.text.push(b':');
        write_json(&mut self.text, value);
        self.text.extend_from_slice(b"},");
    }
}

/// Writes a value that always serializes (a string or a `Value`: writing to memory cannot fail).
fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(out, value);
}

fn render_error(field: &FieldOut, error: serde_json::Error) -> RenderError {
    RenderError { field: field.client, message: error.to_string() }
}

#[cfg(test)]
mod tests {
    use super::Members;
    use serde_json::json;

    #[test]
    fn a_member_written_again_replaces_the_first_wherever_it_stands() {
        let mut members = Members::default();
        members.member("size", "1280*720");
        members.member("resolution", "720P");
        members.member("duration", &5);
        members.member("resolution", "1080P");
        members.member("size", "1920*1080");
        let text = [b"{".as_slice(), members.joined(), b"}"].concat();
        assert_eq!(String::from_utf8_lossy(&text), r#"{"duration":5,"resolution":"1080P","size":"1920*1080"}"#);
        let mut items = Members::default();
        items.item("image", &json!("http://a/1.png"));
        items.item("text", &json!("a \"quoted\" prompt"));
        assert_eq!(
            String::from_utf8_lossy(items.joined()),
            r#"{"image":"http://a/1.png"},{"text":"a \"quoted\" prompt"}"#
        );
    }
}
