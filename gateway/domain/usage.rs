//! The upstream's `usage` report, kept as the JSON text it came in: a task stores it and answers with it as
//! it is, and pricing reads the few members it needs straight from the text, so no `Value` tree is built
//! on the way.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

/// An upstream's `usage`, whatever its members.
#[derive(Debug, Clone)]
pub struct Usage(Box<RawValue>);

/// The members of a `usage` that pricing and the equivalent-usage projection read. Each is the member as it
/// came (a wrong type reads as absent where it is used); `output_tokens` is `Some` whenever the member is
/// there at all, `null` included.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Delivered {
    pub duration: Option<Value>,
    pub video_duration: Option<Value>,
    /// Seconds of reference video the upstream counts into `duration` (r2v).
    pub input_video_duration: Option<Value>,
    #[serde(rename = "SR")]
    pub sr: Option<Value>,
    pub audio: Option<Value>,
    pub image_count: Option<Value>,
    pub input_tokens: Option<Value>,
    #[serde(deserialize_with = "present")]
    pub output_tokens: Option<Value>,
}

/// A member that is there, even as `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl Usage {
    /// The JSON text, as it came.
    pub fn json(&self) -> &RawValue {
        &self.0
    }

    /// As a `Value`, for the task views that merge it into a document.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// Whether it names `output_tokens` at all, even as `null`.
    pub fn names_output_tokens(&self) -> bool {
        self.may_name("output_tokens") && self.delivered().output_tokens.is_some()
    }

    /// False when the text cannot name `member`: it holds neither the name nor an escape that could spell it.
    /// A cheap test before a parse that tells for sure.
    pub fn may_name(&self, member: &str) -> bool {
        let holds = |needle: &[u8]| memchr::memmem::find(self.0.get().as_bytes(), needle).is_some();
        holds(member.as_bytes()) || holds(b"\\u")
    }

    /// The members pricing reads. A `usage` that is no object has none of them; one that names a member twice
    /// reads as its `Value` would (the last one counts).
    pub fn delivered(&self) -> Delivered {
        serde_json::from_str(self.0.get())
            .or_else(|_| serde_json::from_str::<Value>(self.0.get()).and_then(serde_json::from_value))
            .unwrap_or_default()
    }
}

impl From<&RawValue> for Usage {
    fn from(json: &RawValue) -> Self {
        Usage(json.to_owned())
    }
}

impl From<Box<RawValue>> for Usage {
    fn from(json: Box<RawValue>) -> Self {
        Usage(json)
    }
}

impl From<Value> for Usage {
    fn from(value: Value) -> Self {
        // A `Value` always renders as valid JSON.
        Usage(serde_json::value::to_raw_value(&value).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }
}

/// In JSON (the API, the admin views, older stores' records) the member as it is; in the store's
/// MessagePack, its text as bytes.
impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            self.0.serialize(serializer)
        } else {
            serializer.serialize_bytes(self.0.get().as_bytes())
        }
    }
}

/// Reads the stored bytes, or any JSON or MessagePack value: records written before the text was kept hold
/// the member itself.
impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UsageVisitor)
    }
}

struct UsageVisitor;

impl<'de> Visitor<'de> for UsageVisitor {
    type Value = Usage;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an upstream usage report")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Usage, E> {
        let text = std::str::from_utf8(bytes).map_err(E::custom)?;
        RawValue::from_string(text.to_owned()).map(Usage).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Usage, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Usage::from)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Usage, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Usage::from)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Usage, E> {
        Ok(Value::from(text).into())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Usage, E> {
        Ok(Value::from(v).into())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Usage, E> {
        Ok(Value::from(v).into())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Usage, E> {
        Ok(Value::from(v).into())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Usage, E> {
        Ok(Value::from(v).into())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Usage, E> {
        Ok(Value::Null.into())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage(json: &str) -> Usage {
        Usage::from(&*RawValue::from_string(json.into()).unwrap())
    }

    #[test]
    fn reads_the_priced_members_as_its_value_would() {
        let delivered = usage(r#"{"image_count":2,"size":"1024*1024","output_tokens":null,"SR":"x"}"#).delivered();
        assert_eq!(delivered.image_count, Some(json!(2)));
        assert_eq!(delivered.output_tokens, Some(Value::Null), "there, as null");
        assert_eq!(delivered.sr, Some(json!("x")), "the wrong type is the caller's to refuse");
        assert_eq!(usage(r#"{"image_count":1,"image_count":3}"#).delivered().image_count, Some(json!(3)));
        assert!(usage("[1]").delivered().image_count.is_none());
        assert!(usage("{}").delivered().output_tokens.is_none());
        assert!(usage(r#"{"output_tokens":null}"#).names_output_tokens());
        assert!(usage(r#"{"output\u005ftokens":0}"#).names_output_tokens(), "spelled with an escape");
        assert!(!usage(r#"{"detail":{"output_tokens":1}}"#).names_output_tokens(), "not at the top level");
        assert!(!usage(r#"{"image_count":1}"#).names_output_tokens());
    }

    #[test]
    fn is_its_text_in_messagepack_and_itself_in_json() {
        let text = r#"{"image_count":1,"ratio":1.5}"#;
        let stored = rmp_serde::to_vec(&usage(text)).unwrap();
        assert_eq!(stored[0], 0xc4, "MessagePack bytes");
        assert_eq!(rmp_serde::from_slice::<Usage>(&stored).unwrap().json().get(), text);
        assert_eq!(serde_json::to_string(&usage(text)).unwrap(), text);
        assert_eq!(serde_json::to_value(usage(text)).unwrap(), json!({"image_count": 1, "ratio": 1.5}));
        // As records kept it before: the member itself.
        let old = rmp_serde::to_vec(&json!({"image_count": 1, "ratio": 1.5})).unwrap();
        assert_eq!(rmp_serde::from_slice::<Usage>(&old).unwrap().json().get(), text);
        assert_eq!(serde_json::from_str::<Usage>(text).unwrap().json().get(), text);
        assert_eq!(serde_json::from_value::<Usage>(json!("n/a")).unwrap().json().get(), r#""n/a""#);
    }
}
