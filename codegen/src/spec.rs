//! The spec's data model: what the YAML under `spec/` may say.
//!
//! Every struct denies unknown fields, so a typo in a spec file fails the build with file, line and column
//! instead of being ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// `spec/endpoints.yaml`: the public submit routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointsFile {
    pub endpoints: Vec<Endpoint>,
    /// Gateway fields every submission may carry, whatever its operation (never sent upstream).
    #[serde(default)]
    pub submission_fields: BTreeMap<String, Field>,
}

/// One public submit route and the operations it accepts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Identifier used in generated code and metrics, e.g. `videos_generations`.
    pub name: String,
    pub path: String,
    pub summary: String,
    /// `video` or `image`: picks the request-id prefix.
    pub media: Media,
    pub operations: Vec<Spanned<String>>,
    /// HTTP status of an asynchronous acceptance (200 or 202).
    pub async_status: u16,
    /// Body shape of a synchronous answer.
    pub sync_response: SyncResponse,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Media {
    Video,
    Image,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SyncResponse {
    /// The upstream result as it came (`output.choices[0].message.content[]`).
    Upstream,
    /// OpenAI images shape: `created`, `data[].url`, `usage`.
    ImagesStandard,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TaskMode {
    Sync,
    Async,
}

/// `spec/upstream.yaml`: how the upstream spells its protocol, its regions and its routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamFile {
    pub wire: Wire,
    pub regions: BTreeMap<String, Region>,
    pub routes: BTreeMap<String, Route>,
    /// Resolution tier -> the `W*H` sizes of that tier.
    pub sizes: BTreeMap<String, Vec<String>>,
    /// Resolution tier -> ratio -> `W*H`, for models that take `resolution` + `ratio` instead of `size`.
    pub ratio_sizes: BTreeMap<String, BTreeMap<String, String>>,
    pub capacity: Capacity,
}

/// What one upstream account may run at once, and which failures are worth sending again.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Tasks pending or running at once per upstream account and model, for a model record that names none.
    pub concurrency: u32,
    /// Codes of a FAILED task that say nothing of its input: the same job sent again usually succeeds.
    pub transient_failures: Vec<String>,
}

/// Names that differ from one deployment of the upstream family to the next.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wire {
    /// Prefix of every upstream path under a region's base URL, e.g. `/api/v1`.
    pub api_root: Spanned<String>,
    /// Sent on every call to an asynchronous model (a task is created, not run while the call waits).
    pub async_header: WireHeader,
    /// Sent on every call to a model whose spec asks for the upstream's content inspection.
    pub data_inspection_header: WireHeader,
}

/// A request header and the value the gateway sends in it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireHeader {
    pub name: Spanned<String>,
    pub value: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub summary: String,
}

/// One upstream path, its call mode and the regions that serve it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Path under `{base}/api/v1`.
    pub path: String,
    pub mode: TaskMode,
    pub regions: Vec<Spanned<String>>,
}

/// `spec/operations/<op>.yaml`: one capability entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    pub operation: String,
    pub media: Media,
    pub summary: String,
    /// Accept (and drop) request fields the spec does not list.
    #[serde(default)]
    pub open: bool,
    /// Fields common to every variant.
    pub fields: BTreeMap<String, Field>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Operations whose body shape depends on a tag field (vace `function`).
    #[serde(default)]
    pub variants: Option<Variants>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variants {
    /// The tag field, always required and always sent upstream in `input`.
    pub tag: String,
    pub summary: String,
    pub cases: BTreeMap<String, Variant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub summary: String,
    #[serde(default)]
    pub fields: BTreeMap<String, Field>,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    String,
    Integer,
    Number,
    Boolean,
    /// A URL or an upstream-accepted encoding: a string, or an object.
    Media,
    Array,
    Object,
}

/// One request field: its JSON type and bounds, and where it goes upstream.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Field {
    #[serde(rename = "type")]
    pub ty: Option<FieldType>,
    pub description: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub default: Option<Value>,
    #[serde(rename = "enum")]
    pub enumeration: Option<Vec<Value>>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<String>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    /// At most `max` array items match `pattern` (r2v: at most 3 of 5 references are videos).
    pub max_matching: Option<MaxMatching>,
    /// Item shape of an array.
    pub items: Option<Box<Field>>,
    /// Members of an object (or of array items that are objects).
    #[serde(default)]
    pub properties: BTreeMap<String, Field>,
    /// Object members not listed in `properties` are accepted.
    #[serde(default)]
    pub open: bool,
    /// Where the field goes in the upstream envelope.
    pub upstream: Option<Placement>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct MaxMatching {
    pub pattern: String,
    pub max: u64,
    /// What a matching item is, for messages and docs ("video").
    pub label: String,
}

/// Upstream placement of a field.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// `input`, `parameters`, `content` (the user message in `messages` bodies, else `input`), or `none`.
    pub to: Slot,
    /// Upstream name when it differs from the client's.
    pub name: Option<String>,
    /// Where the field goes in `messages` bodies, when it differs from `to`.
    pub messages_to: Option<Slot>,
    /// A value conversion applied while rendering.
    pub transform: Option<Transform>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    Input,
    Parameters,
    Content,
    None,
}

/// Value conversions the renderer knows; a model may override the operation's choice.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    /// `720p` -> `720P`.
    Uppercase,
    /// `W*H` -> its resolution tier in `resolution`.
    SizeToResolution,
    /// `W*H` -> `resolution` + `ratio` (2.7 family), from the size table.
    SizeToResolutionRatio,
}

/// A cross-field rule.
#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub description: String,
    /// Condition; a rule without one always applies.
    #[serde(default)]
    pub when: Option<Condition>,
    /// Fields that must then be present.
    #[serde(default)]
    pub require: Vec<String>,
    /// Fields that must then be absent.
    #[serde(default)]
    pub forbid: Vec<String>,
    /// Fields that must then hold exactly this value.
    #[serde(default)]
    pub equal: BTreeMap<String, Value>,
    /// At least one of these must be present.
    #[serde(default)]
    pub any_of: Vec<String>,
    /// At most one of these may be present.
    #[serde(default)]
    pub at_most_one_of: Vec<String>,
    /// These arrays must have the same length when both are present.
    #[serde(default)]
    pub same_length: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// The field is present.
    pub present: Option<String>,
    /// The field is absent.
    pub absent: Option<String>,
    /// The field equals `equals`.
    pub field: Option<String>,
    pub equals: Option<Value>,
}

/// `spec/models/*.yaml`: a list of model records.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsFile {
    pub models: Vec<Model>,
}

/// One public model id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub id: Spanned<String>,
    pub model_code: String,
    pub operation: Spanned<String>,
    #[serde(rename = "type")]
    pub media: Media,
    pub task_mode: TaskMode,
    pub region: Spanned<String>,
    pub route: Spanned<String>,
    /// Upstream body shape: `plain` (`input` + `parameters`) or `messages` (one user message).
    #[serde(default = "default_envelope")]
    pub envelope: Envelope,
    pub summary: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Ask the upstream for its data inspection (`X-Upstream-DataInspection: enable`) on every call.
    #[serde(default)]
    pub data_inspection: bool,
    /// No paid calls: only the account's free-trial grant funds this model.
    #[serde(default)]
    pub free_trial_only: bool,
    /// Sound of the output: `always`, `optional` (`audio=false` is honoured) or `none`.
    #[serde(default = "default_audio")]
    pub audio: Audio,
    /// Seconds after which an unfinished task ends in `timeout`.
    pub deadline_seconds: u64,
    /// Typical run time, used by the poller to decide when a job is worth asking about.
    pub expected_seconds: u64,
    /// Tasks of this model pending or running at once per upstream account; `capacity.concurrency` of
    /// `spec/upstream.yaml` when absent.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Per-field narrowing of the operation's parameters.
    #[serde(default)]
    pub limits: BTreeMap<String, Limit>,
    /// Per-field transform overrides for this model.
    #[serde(default)]
    pub transforms: BTreeMap<String, Transform>,
    pub billing: Billing,
}

fn default_envelope() -> Envelope {
    Envelope::Plain
}
fn default_audio() -> Audio {
    Audio::None
}
fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    Plain,
    Messages,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Audio {
    Always,
    Optional,
    None,
}

/// A per-model narrowing of one field.
#[derive(Debug, Deserialize, Serialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    #[serde(rename = "enum")]
    pub enumeration: Option<Vec<Value>>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub default: Option<Value>,
    /// The model does not take this field.
    #[serde(default)]
    pub forbidden: bool,
    /// The model needs this field.
    #[serde(default)]
    pub required: bool,
    /// `W*H` sizes: total pixels and aspect ratio within a range.
    pub pixels: Option<PixelRange>,
    /// Send `default` upstream when the client leaves the field out, because the upstream's own default
    /// differs from the one this gateway documents (alpha2.6-t2i `n`).
    #[serde(default)]
    pub send_default: bool,
}

#[derive(Debug, Deserialize, Serialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct PixelRange {
    pub min_pixels: u64,
    pub max_pixels: u64,
    /// Smallest width/height ratio.
    pub min_aspect: f64,
    /// Largest width/height ratio.
    pub max_aspect: f64,
}

/// A model's pricing rule (billing_rules): exactly one basis. Amounts are integer micro-units (1e-6 of
/// the currency), so no float ever touches money.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Billing {
    /// Figures are placeholders until the back office supplies real ones.
    #[serde(default)]
    pub placeholder: bool,
    /// Seconds billed by the upstream (`duration`, else `video_duration`) times the tier's price.
    pub per_second: Option<BTreeMap<String, SecondPrice>>,
    /// Each successful image.
    pub per_image: Option<u64>,
    /// Each call, whatever it produced.
    pub per_call: Option<u64>,
    /// Per million tokens.
    pub per_token: Option<TokenPrice>,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct TokenPrice {
    pub input_per_million: u64,
    pub output_per_million: u64,
    /// Output tokens held for a submission before the actual count is known.
    pub hold_output_tokens: u64,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct SecondPrice {
    pub audio: Option<u64>,
    pub silent: Option<u64>,
}
