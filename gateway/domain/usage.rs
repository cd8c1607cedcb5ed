//! What the upstream reports a task used: its `usage` report, kept as the JSON text it came in (a task
//! stores it and answers with it as it is), and what it says was delivered, in the domain's terms
//! ([`Measured`]), which is what pricing reads.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

/// An upstream's `usage`, whatever its members.
#[derive(Debug, Clone)]
pub struct Usage(Box<RawValue>);

/// What the upstream says was delivered, in the domain's terms: read from its `usage` by the upstream's
/// adapter, which knows its member names. Pricing reads this and never the report itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Seconds of video billed (input and output).
    pub seconds: Reading<f64>,
    /// Seconds of reference video counted into `seconds` (r2v), which the request did not state.
    pub input_video_seconds: Reading<f64>,
    /// The resolution tier delivered (`720P`).
    pub resolution: Option<String>,
    pub audio: Option<bool>,
    pub images: Reading<u64>,
    pub input_tokens: Reading<u64>,
    pub output_tokens: Reading<u64>,
}

/// One count of a usage report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub enum Reading<T> {
    /// The report does not say.
    #[default]
    Absent,
    Count(T),
    /// The report says something that is no count (negative, not a number, not whole where it must be).
    Unusable,
}

impl Measured {
    /// A report that says nothing: the request is priced as quoted.
    pub const NOTHING: Measured = Measured {
        seconds: Reading::Absent,
        input_video_seconds: Reading::Absent,
        resolution: None,
        audio: None,
        images: Reading::Absent,
        input_tokens: Reading::Absent,
        output_tokens: Reading::Absent,
    };
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

    /// False when the text cannot name `member`: it holds neither the name nor an escape that could spell it.
    /// A cheap test before a parse that tells for sure.
    pub fn may_name(&self, member: &str) -> bool {
        let holds = |needle: &[u8]| memchr::memmem::find(self.0.get().as_bytes(), needle).is_some();
        holds(member.as_bytes()) || holds(b"\\u")
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
