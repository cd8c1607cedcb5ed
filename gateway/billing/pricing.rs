//! Prices from a model's billing rule (billing_rules).

use crate::catalog::{Audio, BillingRule, ModelSpec, tier_of_size};
use crate::upstream::Usage;
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a request is billed for. Shown with only the units that apply; stored with every field in its place,
/// as stored records are positional (`store::encode`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Units {
    pub seconds: Option<f64>,
    pub resolution: Option<String>,
    pub audio: Option<bool>,
    pub images: Option<u64>,
    pub calls: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

impl Serialize for Units {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let shown = serializer.is_human_readable();
        let mut out = serializer.serialize_struct("Units", 7)?;
        macro_rules! fields {
            ($($name:ident),*) => {$(
                match &self.$name {
                    None if shown => out.skip_field(stringify!($name))?,
                    value => out.serialize_field(stringify!($name), value)?,
                }
            )*};
        }
        fields!(seconds, resolution, audio, images, calls, input_tokens, output_tokens);
        out.end()
    }
}

/// Fields that carry an image count, in the order they are consulted.
const COUNT_FIELDS: &[&str] = &["n", "generate_num"];

fn field(model: &ModelSpec, body: &Map<String, Value>, name: &str) -> Option<Value> {
    body.get(name).cloned().or_else(|| model.default_of(name).and_then(|d| serde_json::from_str(d).ok()))
}

/// The list price of a request before it is forwarded, and its units.
pub fn quote(model: &ModelSpec, body: &Map<String, Value>) -> (i64, Units) {
    match model.billing {
        BillingRule::PerSecond { tiers, .. } => {
            let seconds = field(model, body, "duration").and_then(|v| v.as_f64()).unwrap_or(5.0);
            let resolution = field(model, body, "resolution")
                .and_then(|v| v.as_str().map(str::to_uppercase))
                .or_else(|| {
                    field(model, body, "size").and_then(|v| v.as_str().and_then(tier_of_size).map(String::from))
                })
                // Unknown tier: price at the dearest, so the hold always covers the job.
                .or_else(|| tiers.last().map(|t| t.tier.to_string()));
            let audio = match model.audio {
                Audio::Always => true,
                Audio::None => false,
                Audio::Optional => body.get("audio").and_then(Value::as_bool).unwrap_or(true),
            };
            let units = Units { seconds: Some(seconds), resolution, audio: Some(audio), ..Units::default() };
            (per_second(model, &units), units)
        }
        BillingRule::PerImage { price, .. } => {
            let n = COUNT_FIELDS.iter().find_map(|f| field(model, body, f)).and_then(|v| v.as_u64()).unwrap_or(1);
            (price as i64 * n as i64, Units { images: Some(n), ..Units::default() })
        }
        BillingRule::PerCall { price, .. } => (price as i64, Units { calls: Some(1), ..Units::default() }),
        BillingRule::PerToken { price, .. } => {
            let units = Units { output_tokens: Some(price.hold_output_tokens), ..Units::default() };
            (tokens(price.output_per_million, price.hold_output_tokens), units)
        }
    }
}

fn tokens(per_million: u64, count: u64) -> i64 {
    ((per_million as u128 * count as u128).div_ceil(1_000_000)) as i64
}

fn per_second(model: &ModelSpec, units: &Units) -> i64 {
    let BillingRule::PerSecond { tiers, .. } = model.billing else {
        return 0;
    };
    let tier = units.resolution.as_deref().and_then(|r| tiers.iter().find(|t| t.tier == r)).or(tiers.last());
    let Some(tier) = tier else { return 0 };
    let audio = units.audio.unwrap_or(true);
    let price = if audio { tier.audio.or(tier.silent) } else { tier.silent.or(tier.audio) }.unwrap_or(0);
    (units.seconds.unwrap_or(0.0) * price as f64).round() as i64
}

/// The list price of what the upstream says it delivered (its `usage`), falling back to the quoted units.
pub fn actual(model: &ModelSpec, quoted: &Units, usage: Option<&Usage>) -> (i64, Units) {
    let usage = usage.map(Usage::delivered).unwrap_or_default();
    match model.billing {
        BillingRule::PerSecond { .. } => {
            let mut units = quoted.clone();
            // Bill `duration` (input + output seconds), else `video_duration`.
            let number = |member: &Option<Value>| member.as_ref().and_then(Value::as_f64);
            if let Some(seconds) = number(&usage.duration).or_else(|| number(&usage.video_duration)) {
                units.seconds = Some(seconds);
            }
            if let Some(sr) = usage.sr.as_ref().and_then(Value::as_u64) {
                units.resolution = Some(format!("{sr}P"));
            }
            if let Some(audio) = usage.audio.as_ref().and_then(Value::as_bool) {
                units.audio = Some(audio);
            }
            (per_second(model, &units), units)
        }
        BillingRule::PerImage { price, .. } => {
            // A partial failure is still a success upstream; only the delivered images count.
            let images = usage.image_count.as_ref().and_then(Value::as_u64).or(quoted.images).unwrap_or(0);
            (price as i64 * images as i64, Units { images: Some(images), ..Units::default() })
        }
        BillingRule::PerCall { price, .. } => (price as i64, quoted.clone()),
        BillingRule::PerToken { price, .. } => {
            let input = usage.input_tokens.as_ref().and_then(Value::as_u64).unwrap_or(0);
            let output = usage.output_tokens.as_ref().and_then(Value::as_u64).unwrap_or(0);
            let amount = tokens(price.input_per_million, input) + tokens(price.output_per_million, output);
            (amount, Units { input_tokens: Some(input), output_tokens: Some(output), ..Units::default() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{MODELS, TokenPrice};
    use serde_json::json;

    /// No seed model is token-priced, so the per-token rule is proven here on a model built for the test.
    #[test]
    fn per_token_holds_the_output_allowance_and_settles_on_actual_tokens() {
        let price =
            TokenPrice { input_per_million: 2_000_000, output_per_million: 8_000_000, hold_output_tokens: 1_000 };
        let model = ModelSpec { billing: BillingRule::PerToken { placeholder: true, price }, ..MODELS[0] };
        let (hold, units) = quote(&model, &Map::new());
        assert_eq!(hold, 8_000);
        assert_eq!(units.output_tokens, Some(1_000));
        let usage: Usage = json!({"input_tokens": 1_500, "output_tokens": 250}).into();
        let (amount, actual) = actual(&model, &units, Some(&usage));
        assert_eq!(amount, 3_000 + 2_000);
        assert_eq!((actual.input_tokens, actual.output_tokens), (Some(1_500), Some(250)));
    }
}
