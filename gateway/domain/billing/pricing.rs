//! Prices from a model's billing rule (billing_rules).

use crate::domain::catalog::{Audio, BillingRule, ModelSpec, tier_of_size};
use crate::domain::usage::{Measured, Reading};
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
            (money(i128::from(price) * i128::from(n)), Units { images: Some(n), ..Units::default() })
        }
        BillingRule::PerCall { price, .. } => (money(i128::from(price)), Units { calls: Some(1), ..Units::default() }),
        BillingRule::PerToken { price, .. } => {
            let units = Units { output_tokens: Some(price.hold_output_tokens), ..Units::default() };
            (tokens(price.output_per_million, price.hold_output_tokens), units)
        }
    }
}

fn tokens(per_million: u64, count: u64) -> i64 {
    money((u128::from(per_million) * u128::from(count)).div_ceil(1_000_000).min(i128::MAX as u128) as i128)
}

fn per_second(model: &ModelSpec, units: &Units) -> i64 {
    let BillingRule::PerSecond { tiers, .. } = model.billing else {
        return 0;
    };
    let tier = units.resolution.as_deref().and_then(|r| tiers.iter().find(|t| t.tier == r)).or(tiers.last());
    let Some(tier) = tier else { return 0 };
    let audio = units.audio.unwrap_or(true);
    let price = if audio { tier.audio.or(tier.silent) } else { tier.silent.or(tier.audio) }.unwrap_or(0);
    // A float's cast saturates (and NaN is 0); the clamp keeps it within what money may be.
    money((units.seconds.unwrap_or(0.0) * price as f64).round() as i128)
}

/// What a finished task is priced at.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivered {
    pub amount: i64,
    pub units: Units,
    /// The upstream's `usage` made no sense (a negative, non-numeric or non-finite count, or more than the
    /// request asked for): the task is priced as quoted instead.
    pub usage_unusable: bool,
}

/// The list price of what the upstream says it delivered, falling back to the quoted units where it says
/// nothing. A report that makes no sense prices the request as quoted (`quoted` micro-units for `units`):
/// a count that is none, or more than the request asked for.
pub fn actual(model: &ModelSpec, quoted: i64, units: &Units, measured: &Measured) -> Delivered {
    let as_quoted = || Delivered { amount: quoted, units: units.clone(), usage_unusable: true };
    match model.billing {
        BillingRule::PerSecond { .. } => {
            let mut priced = units.clone();
            let seconds = match measured.seconds {
                Reading::Count(seconds) => Some(seconds),
                Reading::Absent => None,
                Reading::Unusable => return as_quoted(),
            };
            if let Some(seconds) = seconds {
                // The seconds also count the reference video's, which the request did not state.
                let input = match measured.input_video_seconds {
                    Reading::Count(input) => input,
                    _ => 0.0,
                };
                if seconds > units.seconds.unwrap_or(f64::MAX) + input {
                    return as_quoted();
                }
                priced.seconds = Some(seconds);
            }
            if let Some(resolution) = &measured.resolution {
                priced.resolution = Some(resolution.clone());
            }
            if let Some(audio) = measured.audio {
                priced.audio = Some(audio);
            }
            Delivered { amount: per_second(model, &priced), units: priced, usage_unusable: false }
        }
        BillingRule::PerImage { price, .. } => {
            // A partial failure is still a success upstream; only the delivered images count.
            let images = match measured.images {
                Reading::Count(images) if images <= units.images.unwrap_or(u64::MAX) => images,
                Reading::Absent => units.images.unwrap_or(0),
                _ => return as_quoted(),
            };
            let amount = money(i128::from(price) * i128::from(images));
            Delivered { amount, units: Units { images: Some(images), ..Units::default() }, usage_unusable: false }
        }
        BillingRule::PerCall { price, .. } => {
            Delivered { amount: money(i128::from(price)), units: units.clone(), usage_unusable: false }
        }
        BillingRule::PerToken { price, .. } => {
            let token = |reading: Reading<u64>| match reading {
                Reading::Count(count) => Some(count),
                Reading::Absent => Some(0),
                Reading::Unusable => None,
            };
            let (Some(input), Some(output)) = (token(measured.input_tokens), token(measured.output_tokens)) else {
                return as_quoted();
            };
            let amount = money(
                i128::from(tokens(price.input_per_million, input))
                    + i128::from(tokens(price.output_per_million, output)),
            );
            Delivered {
                amount,
                units: Units { input_tokens: Some(input), output_tokens: Some(output), ..Units::default() },
                usage_unusable: false,
            }
        }
    }
}

/// An amount clamped into `[0, MAX_MICROS]`: a price beyond the maximum cannot be held, so it is refused
/// at the hold rather than wrapped.
fn money(amount: i128) -> i64 {
    amount.clamp(0, i128::from(super::micros::MAX_MICROS)) as i64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::domain::catalog::{MODELS, TokenPrice};
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
        let measured =
            Measured { input_tokens: Reading::Count(1_500), output_tokens: Reading::Count(250), ..Measured::default() };
        let delivered = actual(&model, hold, &units, &measured);
        assert_eq!(delivered.amount, 3_000 + 2_000);
        assert_eq!((delivered.units.input_tokens, delivered.units.output_tokens), (Some(1_500), Some(250)));
    }

    /// Usage that makes no sense prices the request as quoted, and says so; usage that does, prices it.
    #[test]
    fn usage_that_makes_no_sense_is_priced_as_quoted() {
        let video = MODELS.iter().find(|m| m.id == "alpha2.6-t2v_t2v").unwrap();
        let (quoted, units) = quote(video, json!({"duration": 10, "size": "1280*720"}).as_object().unwrap());
        let seconds = |seconds: Reading<f64>, input: Reading<f64>| {
            actual(video, quoted, &units, &Measured { seconds, input_video_seconds: input, ..Measured::default() })
        };
        for nonsense in [Reading::Unusable, Reading::Count(11.0)] {
            let delivered = seconds(nonsense, Reading::Absent);
            assert!(delivered.usage_unusable, "{nonsense:?}");
            assert_eq!(delivered.amount, quoted, "{nonsense:?}");
        }
        let fewer = seconds(Reading::Count(4.0), Reading::Absent);
        assert!(!fewer.usage_unusable && fewer.amount < quoted && fewer.amount > 0);
        // A reference video's seconds count in (r2v): more than asked, and still sensible.
        assert!(!seconds(Reading::Count(12.0), Reading::Count(2.0)).usage_unusable);

        let image = MODELS.iter().find(|m| m.id == "beta-image-2.0-pro_t2i").unwrap();
        let (quoted, units) = quote(image, json!({"n": 2}).as_object().unwrap());
        let images = |images| actual(image, quoted, &units, &Measured { images, ..Measured::default() });
        for nonsense in [Reading::Unusable, Reading::Count(3)] {
            assert_eq!((images(nonsense).amount, images(nonsense).usage_unusable), (quoted, true));
        }
        assert_eq!(images(Reading::Count(1)).amount, quoted / 2);
    }
}
