//! HTTP calls to the upstream: create, query, cancel. One region's base URL and keys per call, never
//! another's.

use super::errors::UpstreamError;
use crate::catalog::{ModelSpec, TaskMode};
use crate::config::Config;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// One region's upstream.
#[derive(Debug)]
pub struct RegionUpstream {
    pub base_url: String,
    keys: Vec<String>,
    next_key: AtomicUsize,
    pub timeout: Duration,
}

impl RegionUpstream {
    pub fn new(base_url: &str, keys: Vec<String>, timeout: Duration) -> RegionUpstream {
        RegionUpstream {
            base_url: base_url.trim_end_matches('/').to_string(),
            keys,
            next_key: AtomicUsize::new(0),
            timeout,
        }
    }

    /// Keys of the region; their query limits add up.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Round-robin over the region's keys.
    fn key(&self) -> &str {
        let i = self.next_key.fetch_add(1, Ordering::Relaxed);
        &self.keys[i % self.keys.len()]
    }
}

/// Every configured region.
#[derive(Debug, Default)]
pub struct Upstreams {
    regions: BTreeMap<String, RegionUpstream>,
}

impl Upstreams {
    /// Builds the regions of `config`, reading keys from the environment variables it names.
    pub fn from_config(config: &Config) -> Result<Upstreams, String> {
        let mut regions = BTreeMap::new();
        let mut seen_urls: BTreeMap<&str, &str> = BTreeMap::new();
        for (region, upstream) in &config.upstreams {
            if !crate::catalog::REGIONS.contains(&region.as_str()) {
                return Err(format!("config: unknown upstream region `{region}`"));
            }
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
            regions.insert(region.clone(), RegionUpstream::new(&upstream.base_url, keys, timeout));
        }
        for (model, region) in &config.model_regions {
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

thread_local! {
    // awc's client is not Send: one per worker thread, each with its own connection pool.
    static CLIENT: awc::Client = awc::Client::builder()
        .disable_redirects()
        .timeout(Duration::from_secs(120))
        .finish();
}

fn client() -> awc::Client {
    CLIENT.with(Clone::clone)
}

/// Submits a job (async) or runs it (sync). Returns the upstream's JSON answer.
pub async fn create(upstreams: &Upstreams, model: &ModelSpec, envelope: &Value) -> Result<Value, UpstreamError> {
    let upstream = upstreams.region(model.region)?;
    let mut request = call(upstream, awc::http::Method::POST, model.route.path);
    if model.task_mode == TaskMode::Async {
        request = request.insert_header(("X-Upstream-Async", "enable"));
    }
    if model.data_inspection {
        request = request.insert_header(("X-Upstream-DataInspection", "enable"));
    }
    answer(request.send_json(envelope).await).await
}

/// A call to `path` under the region's `/api/v1`, with its key and timeout.
fn call(upstream: &RegionUpstream, method: awc::http::Method, path: &str) -> awc::ClientRequest {
    client()
        .request(method, format!("{}/api/v1{path}", upstream.base_url))
        .timeout(upstream.timeout)
        .insert_header(("Authorization", format!("Bearer {}", upstream.key())))
}

/// Reads one task.
pub async fn query(upstream: &RegionUpstream, upstream_task_id: &str) -> Result<Value, UpstreamError> {
    answer(call(upstream, awc::http::Method::GET, &format!("/tasks/{upstream_task_id}")).send().await).await
}

/// Cancels a PENDING task.
pub async fn cancel(upstream: &RegionUpstream, upstream_task_id: &str) -> Result<Value, UpstreamError> {
    answer(call(upstream, awc::http::Method::POST, &format!("/tasks/{upstream_task_id}/cancel")).send().await).await
}

async fn answer<S>(sent: Result<awc::ClientResponse<S>, awc::error::SendRequestError>) -> Result<Value, UpstreamError>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, actix_web::error::PayloadError>> + Unpin,
{
    let mut response = sent.map_err(|e| match e {
        awc::error::SendRequestError::Timeout => UpstreamError::Timeout,
        other => UpstreamError::Transport(other.to_string()),
    })?;
    let status = response.status().as_u16();
    let body = response.body().limit(16 * 1024 * 1024).await.map_err(|e| UpstreamError::Transport(e.to_string()))?;
    let value: Value = serde_json::from_slice(&body).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
    // A non-2xx answer, or a 200 with a top-level `code` and no `output`, is an error.
    let is_error = !(200..300).contains(&status) || (value.get("code").is_some() && value.get("output").is_none());
    if is_error {
        let code = value.get("code").and_then(Value::as_str).unwrap_or("UnknownError").to_string();
        let message = value.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
        return Err(UpstreamError::Answered { status, code, message });
    }
    Ok(value)
}
