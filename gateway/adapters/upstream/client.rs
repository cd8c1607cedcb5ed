//! HTTP calls to the upstream: create, query, cancel, list. One region's base URL and keys per call, never
//! another's.

use super::answers;
use super::connect::{ProxyChoice, Transport};
use crate::domain::catalog::{Media, ModelSpec, TaskMode};
use crate::domain::usage::Usage;
use crate::ports::upstream::{Created, Fetched, Observed, Upstream};
use crate::ports::upstream::{ListRequest, ListedStatus, ListedTask, TaskPage, UpstreamError};
use awc::http::Uri;
use awc::http::header::{
    ACCEPT_RANGES, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, HeaderValue, LAST_MODIFIED,
};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One region's upstream in the deployment's config: its address and the environment variable holding its
/// key(s).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// e.g. `https://upstream-cn.example` (the gateway appends the API root of spec/upstream.yaml).
    pub base_url: String,
    /// Environment variable with the region's API key; several keys may be given separated by commas.
    pub api_key_env: String,
    /// Seconds before an upstream call is abandoned.
    #[serde(default = "default_upstream_timeout")]
    pub timeout_seconds: u64,
    /// A PEM file of CA certificates trusted for this upstream, besides the system's roots (which
    /// `SSL_CERT_FILE` and `SSL_CERT_DIR` set, as for OpenSSL).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// An `http://[user:password@]host:port` proxy that tunnels every call (`CONNECT`); without it,
    /// `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` apply unless `NO_PROXY` names the upstream's host.
    #[serde(default)]
    pub proxy: Option<String>,
    /// Tasks pending or running at once per key (one upstream account) and model, where the account's
    /// tier differs from the spec's figures.
    #[serde(default)]
    pub concurrency: ConcurrencyConfig,
}

/// `upstreams.<region>.concurrency`: a cap for every model of the region, and caps per model code.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    #[serde(default)]
    pub default: Option<u32>,
    #[serde(default)]
    pub models: BTreeMap<String, u32>,
}

fn default_upstream_timeout() -> u64 {
    30
}

/// One region's upstream.
#[derive(Debug)]
pub struct RegionUpstream {
    pub region: &'static str,
    pub base_url: String,
    /// `Authorization` of each key, built once (marked sensitive: never shown in a debug print).
    authorizations: Vec<HeaderValue>,
    concurrency: ConcurrencyConfig,
    pub timeout: Duration,
    /// The address of each upstream route (`catalog::ROUTES`) under this base URL, parsed once: the calls
    /// that create tasks clone one instead of formatting and parsing it again.
    route_uris: HashMap<&'static str, Uri, foldhash::fast::RandomState>,
    transport: Transport,
}

/// How a region's upstream is reached, besides its base URL.
#[derive(Debug, Clone, Copy)]
pub struct Reach<'a> {
    /// A PEM file of CAs trusted for this upstream besides the system's.
    pub ca_file: Option<&'a Path>,
    pub proxy: ProxyChoice<'a>,
}

impl RegionUpstream {
    pub fn new(
        region: &'static str,
        base_url: &str,
        keys: &[String],
        timeout: Duration,
        reach: Reach<'_>,
    ) -> Result<RegionUpstream, String> {
        let authorizations = keys
            .iter()
            .enumerate()
            .map(|(index, key)| {
                let mut value = HeaderValue::try_from(format!("Bearer {key}")).map_err(|_| {
                    format!("upstream key {} of region {region} is not a valid header value", index + 1)
                })?;
                value.set_sensitive(true);
                Ok(value)
            })
            .collect::<Result<_, String>>()?;
        let base_url = base_url.trim_end_matches('/').to_string();
        let route_uris = crate::domain::catalog::ROUTES
            .iter()
            .map(|route| {
                let uri = Uri::try_from(address(&base_url, route.path))
                    .map_err(|e| format!("upstream base URL {base_url} does not make a valid address: {e}"))?;
                Ok((route.path, uri))
            })
            .collect::<Result<_, String>>()?;
        let transport = Transport::new(region, &base_url, reach.ca_file, reach.proxy)?;
        Ok(RegionUpstream {
            region,
            base_url,
            authorizations,
            concurrency: ConcurrencyConfig::default(),
            timeout,
            route_uris,
            transport,
        })
    }

    /// Keys of the region; their query limits add up.
    pub fn key_count(&self) -> usize {
        self.authorizations.len()
    }

    /// Overrides the spec's caps on running tasks; a model code the region does not serve is refused.
    pub fn with_concurrency(mut self, concurrency: ConcurrencyConfig) -> Result<RegionUpstream, String> {
        let served =
            |code: &str| crate::domain::catalog::MODELS.iter().any(|m| m.model_code == code && m.region == self.region);
        if let Some(code) = concurrency.models.keys().find(|code| !served(code)) {
            return Err(format!(
                "config: upstreams.{}.concurrency.models names `{code}`, which is not a model code served in {}",
                self.region, self.region
            ));
        }
        if concurrency.default == Some(0) || concurrency.models.values().any(|cap| *cap == 0) {
            return Err(format!("config: upstreams.{}.concurrency: a cap must be at least 1", self.region));
        }
        self.concurrency = concurrency;
        Ok(self)
    }

    /// The cap on running tasks of `model` per key.
    fn cap(&self, model: &ModelSpec) -> u32 {
        let configured = self.concurrency.models.get(model.model_code).copied().or(self.concurrency.default);
        configured.unwrap_or(model.concurrency)
    }

    /// The `Authorization` of key `index` (modulo the key count).
    fn authorization(&self, index: usize) -> HeaderValue {
        self.authorizations
            .get(index % self.authorizations.len().max(1))
            .cloned()
            .unwrap_or(HeaderValue::from_static(""))
    }
}

/// Every configured region.
#[derive(Debug, Default)]
pub struct Upstreams {
    regions: BTreeMap<String, RegionUpstream>,
}

impl Upstreams {
    /// Builds the regions `upstreams` configures, reading keys from the environment variables they name, and
    /// checks that `model_regions` pins no model to another region than its own.
    pub fn from_config(
        upstreams: &BTreeMap<String, UpstreamConfig>,
        model_regions: &BTreeMap<String, String>,
    ) -> Result<Upstreams, String> {
        let mut regions = BTreeMap::new();
        let mut seen_urls: BTreeMap<&str, &str> = BTreeMap::new();
        for (region, upstream) in upstreams {
            let Some(region) = crate::domain::catalog::REGIONS.iter().copied().find(|r| r == region) else {
                return Err(format!(
                    "config: unknown upstream region `{region}`; the regions are {}",
                    crate::domain::catalog::REGIONS.join(", ")
                ));
            };
            // Keys are region-bound: one base URL serving two regions would send one region's key to the other.
            if let Some(other) = seen_urls.insert(upstream.base_url.as_str(), region) {
                return Err(format!(
                    "config: regions `{other}` and `{region}` share the base URL {}; each region needs its own",
                    upstream.base_url
                ));
            }
            let keys: Vec<String> = std::env::var(&upstream.api_key_env)
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect();
            if keys.is_empty() {
                return Err(format!(
                    "config: upstream `{region}`: environment variable {} holds no key",
                    upstream.api_key_env
                ));
            }
            let timeout = Duration::from_secs(upstream.timeout_seconds);
            let reach = Reach {
                ca_file: upstream.ca_file.as_deref(),
                proxy: upstream.proxy.as_deref().map_or(ProxyChoice::FromEnvironment, ProxyChoice::Configured),
            };
            let upstream = RegionUpstream::new(region, &upstream.base_url, &keys, timeout, reach)
                .map_err(|e| format!("config: upstream `{region}`: {e}"))?
                .with_concurrency(upstream.concurrency.clone())?;
            regions.insert(region.to_string(), upstream);
        }
        for (model, region) in model_regions {
            let Some(spec) = ModelSpec::find(model) else {
                return Err(format!("config: model_regions names unknown model `{model}`"));
            };
            if spec.region != region {
                return Err(format!(
                    "config: model `{model}` belongs to region `{}` but model_regions sends it to `{region}`; \
                     model, upstream address and key must be of one region",
                    spec.region
                ));
            }
        }
        Ok(Upstreams { regions })
    }

    /// Each region without an upstream, with the models of the spec it leaves unserved.
    pub fn unserved(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        crate::domain::catalog::REGIONS
            .iter()
            .filter(|region| !self.regions.contains_key(**region))
            .map(|region| {
                (*region, crate::domain::catalog::MODELS.iter().filter(|m| m.region == *region).map(|m| m.id).collect())
            })
            .collect()
    }

    pub fn insert(&mut self, region: &str, upstream: RegionUpstream) {
        self.regions.insert(region.to_string(), upstream);
    }

    pub fn region(&self, region: &str) -> Result<&RegionUpstream, UpstreamError> {
        self.regions.get(region).ok_or_else(|| UpstreamError::NotConfigured(region.to_string()))
    }

    pub fn regions(&self) -> impl Iterator<Item = (&String, &RegionUpstream)> {
        self.regions.iter()
    }
}

/// The family of `spec/upstream.yaml`, every configured region of it, as the use cases reach it.
#[async_trait::async_trait(?Send)]
impl Upstream for Upstreams {
    async fn create(&self, model: &ModelSpec, envelope: &Bytes, key: usize) -> Result<Created, UpstreamError> {
        let answer = create(self, model, envelope, key).await?;
        let created = match model.task_mode {
            // An acceptance without a readable task id is refused by the caller, as one without any.
            TaskMode::Async => {
                let reported = answer.read::<answers::Reported>().unwrap_or_default();
                Created { task_id: reported.output.task_id.map(String::from), ..Created::default() }
            }
            TaskMode::Sync => {
                let reported: answers::Reported = answer.read()?;
                let results = answers::results(&reported.output, model.media);
                let failed = answers::failed(&reported.output);
                let usage = reported.usage.map(Usage::from);
                let measured = usage.as_ref().map(answers::measure);
                Created { task_id: None, results, failed, usage, measured, body: Bytes::new() }
            }
        };
        Ok(Created { body: answer.0, ..created })
    }

    async fn query(
        &self,
        region: &str,
        key: usize,
        upstream_task_id: &str,
        media: Media,
    ) -> Result<Observed, UpstreamError> {
        let answer = query(self.region(region)?, key, upstream_task_id).await?;
        Ok(answers::observe(answer.read()?, media))
    }

    async fn list(&self, region: &str, key: usize, request: &ListRequest) -> Result<TaskPage, UpstreamError> {
        list(self.region(region)?, key, request).await
    }

    async fn cancel(&self, region: &str, key: usize, upstream_task_id: &str) -> Result<(), UpstreamError> {
        cancel(self.region(region)?, key, upstream_task_id).await.map(drop)
    }

    async fn fetch(&self, region: &str, url: &str, range: Option<&str>) -> Result<Fetched, UpstreamError> {
        use futures_util::StreamExt;
        let upstream = self.region(region)?;
        let mut request = upstream.transport.client().get(url).timeout(DOWNLOAD_WITHIN);
        if let Some(range) = range {
            request = request.insert_header((awc::http::header::RANGE, range));
        }
        let response = request.send().await.map_err(|e| unsent(upstream, e))?;
        let headers = response.headers();
        let text =
            |name: &awc::http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let passed_on = [
            ("content-range", CONTENT_RANGE),
            ("etag", ETAG),
            ("accept-ranges", ACCEPT_RANGES),
            ("last-modified", LAST_MODIFIED),
        ]
        .into_iter()
        .filter_map(|(name, header)| Some((name, text(&header)?)))
        .collect();
        Ok(Fetched {
            status: response.status().as_u16(),
            content_type: text(&CONTENT_TYPE),
            content_length: text(&CONTENT_LENGTH).and_then(|v| v.parse().ok()),
            passed_on,
            body: Box::pin(response.map(|chunk| chunk.map_err(|e| e.to_string()))),
        })
    }

    fn recorded(&self, code: &str, message: &str, region: &str) -> UpstreamError {
        super::errors::recorded(code, message, region)
    }

    fn caps(&self, model: &ModelSpec) -> Vec<u32> {
        self.regions.get(model.region).map_or_else(Vec::new, |r| vec![r.cap(model); r.key_count()])
    }

    fn regions(&self) -> Vec<(&'static str, usize)> {
        self.regions.values().map(|upstream| (upstream.region, upstream.key_count())).collect()
    }

    fn longest_timeout(&self) -> Duration {
        self.regions.values().map(|upstream| upstream.timeout).max().unwrap_or_default()
    }
}

/// Longest a result file's download may take.
const DOWNLOAD_WITHIN: Duration = Duration::from_secs(30 * 60);

/// Submits a job (async) or runs it (sync). Returns the upstream's answer.
async fn create(
    upstreams: &Upstreams,
    model: &ModelSpec,
    envelope: &Bytes,
    key: usize,
) -> Result<Answer, UpstreamError> {
    let upstream = upstreams.region(model.region)?;
    let mut request = call_with_key(upstream, key, awc::http::Method::POST, model.route.path);
    let wire = &crate::domain::catalog::WIRE;
    if model.task_mode == TaskMode::Async {
        request = request.insert_header((wire.async_header.name, wire.async_header.value));
    }
    if model.data_inspection {
        request = request.insert_header((wire.data_inspection_header.name, wire.data_inspection_header.value));
    }
    // The job's trace goes on upstream (W3C trace context), when traces are on.
    if let Some(traceparent) = crate::support::telemetry::traceparent(&tracing::Span::current()) {
        request = request.insert_header(("traceparent", traceparent));
    }
    timed(async { answer(upstream, request.content_type("application/json").send_body(envelope.clone()).await).await })
        .await
}

/// An upstream call, its answer time recorded (the console's overview shows it).
async fn timed<T>(call: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let answered = call.await;
    crate::support::metrics::upstream_latency(started.elapsed());
    answered
}

/// A call to `path` under the region's API root, with key `key` (modulo the key count) and the timeout.
fn call_with_key(upstream: &RegionUpstream, key: usize, method: awc::http::Method, path: &str) -> awc::ClientRequest {
    let client = upstream.transport.client();
    match upstream.route_uris.get(path) {
        Some(uri) => client.request(method, uri.clone()),
        None => client.request(method, address(&upstream.base_url, path)),
    }
    .timeout(upstream.timeout)
    .insert_header((AUTHORIZATION, upstream.authorization(key)))
}

/// The address of `path` under the upstream's API root.
fn address(base_url: &str, path: &str) -> String {
    format!("{base_url}{}{path}", crate::domain::catalog::WIRE.api_root)
}

/// Reads one task with key `key` of the region (modulo its key count): the caller paces each key's queries.
async fn query(upstream: &RegionUpstream, key: usize, upstream_task_id: &str) -> Result<Answer, UpstreamError> {
    let path = format!("/tasks/{upstream_task_id}");
    timed(async { answer(upstream, call_with_key(upstream, key, awc::http::Method::GET, &path).send().await).await })
        .await
}

/// A listed task's status word (docs/upstream-protocol.md section 4): `SUSPENDED`, as some image models list, is
/// running; `SUCCEEDED`, `FAILED`, `CANCELED` (or `CANCELLED`) and `UNKNOWN` are ended.
fn listed_status(word: &str) -> ListedStatus {
    match word {
        "PENDING" => ListedStatus::Pending,
        "RUNNING" | "SUSPENDED" => ListedStatus::Running,
        "SUCCEEDED" | "FAILED" | "CANCELED" | "CANCELLED" | "UNKNOWN" => ListedStatus::Ended,
        _ => ListedStatus::Unrecognized,
    }
}

/// Lists tasks created in a window with key `key` of the region (modulo its key count).
async fn list(upstream: &RegionUpstream, key: usize, request: &ListRequest) -> Result<TaskPage, UpstreamError> {
    let path = format!(
        "/tasks?start_time={}&end_time={}&page_no={}&page_size={}",
        compact_time(request.start_ms, false),
        compact_time(request.end_ms, true),
        request.page_no.max(1),
        request.page_size.max(1)
    );
    let (status, body) = timed(async {
        raw_answer(upstream, call_with_key(upstream, key, awc::http::Method::GET, &path).send().await).await
    })
    .await?;
    if !(200..300).contains(&status) {
        return Err(error_of(status, &body));
    }
    task_page(&body)
}

/// `YYYYMMDDhhmmss` in UTC+8, the list's time format, rounded down or up to a whole second.
pub fn compact_time(ms: i64, round_up: bool) -> String {
    let seconds =
        if round_up { ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0) } else { ms.div_euclid(1000) };
    chrono::DateTime::from_timestamp(seconds + 8 * 3600, 0)
        .map(|t| t.naive_utc().format("%Y%m%d%H%M%S").to_string())
        .unwrap_or_default()
}

/// A list answer as sent: read field by field straight from the bytes (a page can hold a thousand tasks),
/// unknown fields skipped.
#[derive(serde::Deserialize)]
struct RawPage<'a> {
    #[serde(default)]
    total: Option<Value>,
    #[serde(default)]
    total_page: Option<Value>,
    /// Under `data`, or `tasks` as one SDK version of the protocol names it.
    #[serde(default, borrow, alias = "tasks")]
    data: Option<Vec<RawListed<'a>>>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(serde::Deserialize)]
struct RawListed<'a> {
    #[serde(borrow)]
    task_id: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(default)]
    gmt_create: Option<Value>,
}

/// Reads a list answer; an answer with a `code` and no `data` is the upstream's error.
fn task_page(body: &[u8]) -> Result<TaskPage, UpstreamError> {
    let raw: RawPage = serde_json::from_slice(body).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
    let Some(data) = raw.data else {
        let code = raw.code.unwrap_or_else(|| "UnknownError".into());
        return Err(super::errors::answered(200, code, raw.message.unwrap_or_default()));
    };
    let number = |v: Option<&Value>| v.and_then(|n| n.as_i64().or_else(|| n.as_str().and_then(|s| s.parse().ok())));
    let count = |v: Option<&Value>| number(v).map_or(0, |n| n.max(0) as u64);
    let tasks = data
        .into_iter()
        .map(|item| ListedTask {
            task_id: item.task_id.into_owned(),
            status: listed_status(&item.status),
            gmt_create: number(item.gmt_create.as_ref()),
        })
        .collect();
    Ok(TaskPage { total: count(raw.total.as_ref()), total_page: count(raw.total_page.as_ref()), tasks })
}

/// Cancels a PENDING task.
async fn cancel(upstream: &RegionUpstream, key: usize, upstream_task_id: &str) -> Result<Answer, UpstreamError> {
    let path = format!("/tasks/{upstream_task_id}/cancel");
    answer(upstream, call_with_key(upstream, key, awc::http::Method::POST, &path).send().await).await
}

/// An upstream's answer that is not an error, as it came: read into the typed view a caller needs (a
/// `Value` only where the whole answer is passed on), so the busy paths build no `Value` tree.
#[derive(Debug)]
struct Answer(bytes::Bytes);

impl Answer {
    fn read<'a, T: serde::Deserialize<'a>>(&'a self) -> Result<T, UpstreamError> {
        serde_json::from_slice(&self.0).map_err(|e| UpstreamError::Malformed(e.to_string()))
    }
}

/// The fields that tell an error answer from a result; the rest is skipped unread.
#[derive(Default, serde::Deserialize)]
struct Verdict<'a> {
    #[serde(default, borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    output: Option<serde::de::IgnoredAny>,
}

async fn answer<S>(
    upstream: &RegionUpstream,
    sent: Result<awc::ClientResponse<S>, awc::error::SendRequestError>,
) -> Result<Answer, UpstreamError>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, actix_web::error::PayloadError>> + Unpin,
{
    let (status, body) = raw_answer(upstream, sent).await?;
    checked(status, body)
}

/// The answer, or the upstream's error it carries.
fn checked(status: u16, body: bytes::Bytes) -> Result<Answer, UpstreamError> {
    let success = (200..300).contains(&status);
    // A 2xx answer whose bytes hold no `"code"` (nor an escape that could spell it) has no top-level `code`:
    // it is a result, and only its reader parses it.
    let holds = |needle: &[u8]| memchr::memmem::find(&body, needle).is_some();
    if success && !holds(b"\"code\"") && !holds(b"\\u") {
        return Ok(Answer(body));
    }
    let verdict: Verdict = serde_json::from_slice(&body).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
    // A non-2xx answer, or a 200 with a top-level `code` and no `output`, is an error.
    if !success || (verdict.code.is_some() && verdict.output.is_none()) {
        return Err(error_from(status, verdict));
    }
    Ok(Answer(body))
}

/// The status and body of an answer.
async fn raw_answer<S>(
    upstream: &RegionUpstream,
    sent: Result<awc::ClientResponse<S>, awc::error::SendRequestError>,
) -> Result<(u16, bytes::Bytes), UpstreamError>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, actix_web::error::PayloadError>> + Unpin,
{
    let mut response = sent.map_err(|e| unsent(upstream, e))?;
    let status = response.status().as_u16();
    let body = response.body().limit(16 * 1024 * 1024).await.map_err(|e| UpstreamError::Transport(e.to_string()))?;
    Ok((status, body))
}

/// Why a call got no answer. A refused TLS handshake is logged here, once per call, with the region and
/// the reason (never the host), because only the operator can mend it.
fn unsent(upstream: &RegionUpstream, error: awc::error::SendRequestError) -> UpstreamError {
    use awc::error::{ConnectError, SendRequestError};
    let refusal = match &error {
        SendRequestError::Timeout => return UpstreamError::Timeout,
        SendRequestError::Connect(ConnectError::Io(io)) => crate::support::tls::handshake_failure(io),
        _ => None,
    };
    match refusal {
        Some(reason) => {
            tracing::error!(region = upstream.region, reason, "upstream TLS handshake failed");
            UpstreamError::Tls(reason)
        }
        None => UpstreamError::Transport(error.to_string()),
    }
}

/// The upstream's error answer (its body need not be JSON).
fn error_of(status: u16, body: &[u8]) -> UpstreamError {
    error_from(status, serde_json::from_slice(body).unwrap_or_default())
}

fn error_from(status: u16, verdict: Verdict<'_>) -> UpstreamError {
    let code = verdict.code.map_or_else(|| "UnknownError".into(), Cow::into_owned);
    let message = verdict.message.map(Cow::into_owned).unwrap_or_default();
    super::errors::answered(status, code, message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_task_list_is_read_under_data_or_tasks() {
        for member in ["data", "tasks"] {
            let body = format!(
                r#"{{"total": 1, "total_page": 1, "{member}": [{{"task_id": "t1", "status": "RUNNING", "gmt_create": 5}}]}}"#
            );
            let page = task_page(body.as_bytes()).unwrap();
            assert_eq!((page.total, page.tasks.len(), page.tasks[0].task_id.as_str()), (1, 1, "t1"), "{member}");
        }
        assert!(task_page(br#"{"code": "Throttling", "message": "slow down"}"#).is_err());
    }

    fn verdict(status: u16, body: &'static str) -> Result<(), String> {
        checked(status, bytes::Bytes::from_static(body.as_bytes())).map(drop).map_err(|e| e.code())
    }

    #[test]
    fn a_base_url_is_checked_once_at_start_and_each_route_addressed_under_it() {
        let keys = ["k".to_string()];
        let reach = Reach { ca_file: None, proxy: ProxyChoice::Direct };
        let new = |base| RegionUpstream::new("cn-beijing", base, &keys, Duration::from_secs(1), reach);
        let upstream = new("http://up.example/cn/").unwrap();
        let route = &crate::domain::catalog::ROUTES[0];
        let root = crate::domain::catalog::WIRE.api_root;
        assert_eq!(upstream.route_uris[route.path].to_string(), format!("http://up.example/cn{root}{}", route.path));
        assert!(new("http://bad host").is_err());
    }

    #[test]
    fn an_answer_is_an_error_when_not_2xx_or_a_top_level_code_comes_without_output() {
        assert_eq!(verdict(200, r#"{"request_id":"r","output":{"task_id":"t"}}"#), Ok(()));
        assert_eq!(verdict(200, r#"{"output":{"task_status":"FAILED","code":"DataInspectionFailed"}}"#), Ok(()));
        assert_eq!(verdict(200, r#"{"code":"Throttling","message":"slow down"}"#), Err("Throttling".into()));
        // A key spelled with an escape is still the key.
        assert_eq!(verdict(200, r#"{"\u0063ode":"Throttling"}"#), Err("Throttling".into()));
        assert_eq!(verdict(400, r#"{"code":"InvalidParameter","message":"bad"}"#), Err("InvalidParameter".into()));
        assert_eq!(verdict(500, r#"{"output":{}}"#), Err("UnknownError".into()));
        assert_eq!(verdict(502, "<html>bad gateway</html>"), Err("UpstreamMalformed".into()));
    }
}
