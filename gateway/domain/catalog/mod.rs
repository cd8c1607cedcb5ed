//! The spec, compiled in: static tables generated from `spec/` by the codegen crate, and the types they use.
//!
//! Runtime code asks these tables what differs between models and operations; it never names one.

mod generated {
    #![allow(clippy::all, missing_docs, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/generated.rs"));
}

pub use generated::*;

pub mod envelope;

pub use envelope::{Envelope, Transform};

/// Whether a model or endpoint makes videos or images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Media {
    Video,
    Image,
}

impl Media {
    pub fn as_str(self) -> &'static str {
        match self {
            Media::Video => "video",
            Media::Image => "image",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskMode {
    Sync,
    Async,
}

impl TaskMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskMode::Sync => "sync",
            TaskMode::Async => "async",
        }
    }
}

/// Body shape of a synchronous answer on an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncResponse {
    Upstream,
    ImagesStandard,
}

/// Sound of a video model's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audio {
    Always,
    /// `audio=false` is honoured.
    Optional,
    None,
}

#[derive(Debug, Clone, Copy)]
pub struct PixelRange {
    pub min_pixels: u64,
    pub max_pixels: u64,
    pub min_aspect: f64,
    pub max_aspect: f64,
}

#[derive(Debug)]
pub struct EndpointSpec {
    pub name: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    pub media: Media,
    pub operations: &'static [OperationId],
    pub async_status: u16,
    pub sync_response: SyncResponse,
}

/// How the upstream spells its protocol (`wire` in spec/upstream.yaml).
#[derive(Debug)]
pub struct UpstreamWire {
    /// Prefix of every upstream path under a region's base URL.
    pub api_root: &'static str,
    /// Sent on calls to asynchronous models.
    pub async_header: WireHeader,
    /// Sent on calls to models whose spec asks for content inspection.
    pub data_inspection_header: WireHeader,
}

#[derive(Debug, Clone, Copy)]
pub struct WireHeader {
    pub name: &'static str,
    pub value: &'static str,
}

#[derive(Debug)]
pub struct RouteSpec {
    pub name: &'static str,
    /// Path under `{base}{WIRE.api_root}`.
    pub path: &'static str,
    pub mode: TaskMode,
    pub regions: &'static [&'static str],
}

#[derive(Debug)]
pub struct OperationSpec {
    pub id: OperationId,
    pub name: &'static str,
    pub summary: &'static str,
    pub media: Media,
    /// The field that selects a variant (vace `function`).
    pub variant_tag: Option<&'static str>,
    /// `(alias, canonical name)`.
    pub aliases: &'static [(&'static str, &'static str)],
    /// Every field of the operation (of all its variants), by name; a submission's other fields are the
    /// gateway's own (`callback_url`).
    pub fields: &'static [&'static str],
    /// The fields that tune the job (the upstream's `parameters`), as against its inputs.
    pub parameters: &'static [&'static str],
    /// Cross-field rules, see `validate::rules`.
    pub rules_json: &'static str,
    pub published_schema: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub struct TierPrice {
    pub tier: &'static str,
    pub audio: Option<u64>,
    pub silent: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
pub struct TokenPrice {
    pub input_per_million: u64,
    pub output_per_million: u64,
    pub hold_output_tokens: u64,
}

/// A model's pricing rule (billing_rules); amounts in micro-units.
#[derive(Debug, Clone, Copy)]
pub enum BillingRule {
    PerSecond { placeholder: bool, tiers: &'static [TierPrice] },
    PerImage { placeholder: bool, price: u64 },
    PerCall { placeholder: bool, price: u64 },
    PerToken { placeholder: bool, price: TokenPrice },
}

impl BillingRule {
    /// The price is a placeholder until the back office sets the real one.
    pub fn placeholder(&self) -> bool {
        match *self {
            BillingRule::PerSecond { placeholder, .. }
            | BillingRule::PerImage { placeholder, .. }
            | BillingRule::PerCall { placeholder, .. }
            | BillingRule::PerToken { placeholder, .. } => placeholder,
        }
    }
}

/// One model record.
#[derive(Debug)]
pub struct ModelSpec {
    pub id: &'static str,
    pub model_code: &'static str,
    pub operation: OperationId,
    pub media: Media,
    pub task_mode: TaskMode,
    pub region: &'static str,
    pub route: &'static RouteSpec,
    pub envelope: Envelope,
    pub summary: &'static str,
    /// Enabled when the store has no override.
    pub enabled: bool,
    pub free_trial_only: bool,
    pub audio: Audio,
    /// Sends the data-inspection header of `WIRE` (erase).
    pub data_inspection: bool,
    pub deadline_seconds: u64,
    pub expected_seconds: u64,
    /// Tasks pending or running at once per upstream account (key): the upstream refuses a create over it.
    pub concurrency: u32,
    pub transforms: &'static [(&'static str, Transform)],
    pub pixel_limits: &'static [(&'static str, PixelRange)],
    /// `(field, default as JSON, send upstream when absent)`.
    pub defaults: &'static [(&'static str, &'static str, bool)],
    pub billing: BillingRule,
    pub limits_json: &'static str,
    pub canonical_schema: &'static str,
    pub published_schema: &'static str,
    /// The published schema's `x-schema-version`: a hash of its content.
    pub schema_version: &'static str,
}

impl ModelSpec {
    /// Looks a model up by public id.
    pub fn find(id: &str) -> Option<&'static ModelSpec> {
        MODELS.iter().find(|m| m.id == id)
    }

    /// The endpoint that accepts this model's operation.
    pub fn endpoint(&self) -> &'static EndpointSpec {
        EndpointSpec::of(self.operation)
    }

    /// What rendering its upstream envelope needs to know of it.
    pub fn style(&self) -> envelope::Style {
        envelope::Style {
            model_id: self.id,
            model_code: self.model_code,
            envelope: self.envelope,
            transforms: self.transforms,
            size_tiers: SIZE_TIERS,
            ratio_sizes: RATIO_SIZES,
        }
    }

    /// The default of `field` as JSON text, if the spec gives one.
    pub fn default_of(&self, field: &str) -> Option<&'static str> {
        self.defaults.iter().find(|(f, _, _)| *f == field).map(|(_, v, _)| *v)
    }
}

impl EndpointSpec {
    /// The endpoint that accepts `operation`; the spec check guarantees exactly one.
    pub fn of(operation: OperationId) -> &'static EndpointSpec {
        ENDPOINTS.iter().find(|e| e.operations.contains(&operation)).unwrap_or(&ENDPOINTS[0])
    }
}

/// The resolution tier (`720P`) of a `W*H` size.
pub fn tier_of_size(size: &str) -> Option<&'static str> {
    SIZE_TIERS.iter().find(|(_, sizes)| sizes.contains(&size)).map(|(tier, _)| *tier)
}
