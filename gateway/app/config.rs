//! Deployment configuration (YAML, `--config FILE`); every field has a default so the gateway starts
//! without a file. Upstream keys are read from environment variables the config names, never from files.

use crate::adapters::files::S3Config;
use crate::adapters::upstream::UpstreamConfig;
use crate::services::runtime::settings::{BillingConfig, LimitsConfig, PollerConfig, WebhooksConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// Upstream per region: base URL and the environment variable holding that region's key(s).
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// Pins a model to a region's upstream; start-up refuses any pin that differs from the model's own region.
    pub model_regions: BTreeMap<String, String>,
    /// Environment variable holding the admin API token; the admin API is off when it is unset.
    pub admin_token_env: String,
    /// The admin token itself, where the process has one of its own (the demo makes one); else the
    /// environment variable's, read once at start.
    #[serde(skip)]
    pub admin_token: Option<String>,
    pub poller: PollerConfig,
    pub limits: LimitsConfig,
    pub billing: BillingConfig,
    /// Caps every model's deadline (seconds); 0 keeps the spec's deadlines.
    pub max_task_seconds: u64,
    /// Times a task the upstream failed with a transient code (`spec/upstream.yaml`) is sent again, to
    /// another key where there is one, within its deadline; 0 fails it at once.
    pub transient_retries: u32,
    /// On PostgreSQL, the upstream's slots are counted in the database, so that the replicas together never
    /// send a key over its cap; off, each replica counts its own (and the upstream refuses what goes over,
    /// which then waits again).
    pub shared_upstream_slots: bool,
    /// Memory for finished tasks' rendered answers to `GET /v1/tasks/{id}` (bytes); 0 keeps none.
    pub finished_task_cache_bytes: u64,
    /// Serve HTTPS on `listen` (for deployments with no load balancer in front to end TLS).
    pub tls: Option<ListenerTls>,
    /// Where durable state lives: the embedded store in `data_dir` unless a PostgreSQL URL is given.
    pub store: StoreConfig,
    pub webhooks: WebhooksConfig,
    pub results: ResultsConfig,
    pub retention: RetentionConfig,
}

/// How long finished work is kept (README, Retention), as durations: `90d`, `12h`, `30m`, `1s`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Finished tasks, from their end: then purged with their idempotency records and deliveries, each
    /// leaving its usage line. A task whose results' copy is still served is kept.
    #[serde(deserialize_with = "duration")]
    pub tasks: std::time::Duration,
    /// Webhook deliveries no longer pending, from their creation.
    #[serde(deserialize_with = "duration")]
    pub deliveries: std::time::Duration,
    /// `Idempotency-Key` records, from their task's creation: a retry after this runs again.
    #[serde(deserialize_with = "duration")]
    pub idempotency: std::time::Duration,
}

impl Default for RetentionConfig {
    fn default() -> RetentionConfig {
        let ms = |ms: i64| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        let policy = crate::domain::retention::Retention::default();
        RetentionConfig {
            tasks: ms(policy.tasks_ms),
            deliveries: ms(policy.deliveries_ms),
            idempotency: ms(policy.idempotency_ms),
        }
    }
}

impl RetentionConfig {
    pub fn policy(&self) -> crate::domain::retention::Retention {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        crate::domain::retention::Retention {
            tasks_ms: ms(self.tasks),
            deliveries_ms: ms(self.deliveries),
            idempotency_ms: ms(self.idempotency),
        }
    }
}

/// A duration as people write one (`90d`, `12h`, `30m`, `1s`), of at least a second.
fn duration<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<std::time::Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    let parsed = humantime::parse_duration(text.trim()).map_err(|e| {
        serde::de::Error::custom(format!("`{text}` is not a duration ({e}); write one such as 90d, 12h, 30m or 1s"))
    })?;
    if parsed < std::time::Duration::from_secs(1) {
        return Err(serde::de::Error::custom(format!("`{text}` is shorter than the least retention, 1s")));
    }
    Ok(parsed)
}

/// Copies of succeeded tasks' result files in the gateway's own storage, and the links that serve them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResultsConfig {
    /// Copy each result file; off, results point at the upstream's files (and still download through
    /// `GET /v1/tasks/{id}/content` while the upstream keeps them).
    pub mirror: bool,
    /// How long copies and result links last (days).
    pub retention_days: u64,
    /// S3-compatible storage for the copies; unset, they go under `dir`. Credentials come from the standard
    /// AWS environment variables.
    pub s3: Option<S3Config>,
    /// The directory copies go to without `s3`: `data_dir/results` when unset. Replicas sharing a database
    /// need S3 or one directory they all mount.
    pub dir: Option<PathBuf>,
    /// The gateway's address as clients reach it, which result links start with; `http://` and `listen`
    /// (`https://` with `tls`) when unset.
    pub public_url: Option<String>,
    /// Environment variable holding the secret result links are signed with. Unset, a secret made on first
    /// start is kept in `data_dir/link-secret`, or in the database, for every replica sharing it.
    pub link_secret_env: String,
    /// Wait before each retry of a failed copy (milliseconds); after the last, the results keep the
    /// upstream's links.
    pub retry_delays_ms: Vec<u64>,
}

impl Default for ResultsConfig {
    fn default() -> ResultsConfig {
        ResultsConfig {
            mirror: true,
            retention_days: 30,
            s3: None,
            dir: None,
            public_url: None,
            link_secret_env: "MEDIAGATE_LINK_SECRET".into(),
            retry_delays_ms: vec![1_000, 10_000, 60_000, 300_000, 1_800_000, 3_600_000],
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/dbname` (`?sslmode=require` for TLS): every replica with the same
    /// URL serves as one gateway. `--database-url` and `MEDIAGATE_DATABASE_URL` override it.
    pub url: Option<String>,
    /// Connections each replica keeps to the database.
    pub pool_size: usize,
    /// A PEM file of CA certificates trusted for the database's TLS, besides the system's.
    pub ca_file: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig { url: None, pool_size: 16, ca_file: None }
    }
}

impl StoreConfig {
    /// How to reach PostgreSQL, when a URL is set.
    pub fn postgres(&self, limits: &LimitsConfig) -> Option<crate::adapters::store::postgres::Options> {
        let url = self.url.clone().filter(|url| !url.trim().is_empty())?;
        Some(crate::adapters::store::postgres::Options {
            url,
            pool_size: self.pool_size,
            ca_file: self.ca_file.clone(),
            max_in_flight_per_account: limits.max_in_flight_per_account,
        })
    }
}

/// The listener's certificate chain and private key, both PEM.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./mediagate-data"),
            max_body_bytes: 10 * 1024 * 1024,
            workers: 0,
            upstreams: BTreeMap::new(),
            model_regions: BTreeMap::new(),
            admin_token_env: "MEDIAGATE_ADMIN_TOKEN".into(),
            admin_token: None,
            poller: PollerConfig::default(),
            limits: LimitsConfig::default(),
            billing: BillingConfig::default(),
            max_task_seconds: 0,
            transient_retries: 2,
            shared_upstream_slots: true,
            finished_task_cache_bytes: 64 * 1024 * 1024,
            tls: None,
            store: StoreConfig::default(),
            webhooks: WebhooksConfig::default(),
            results: ResultsConfig::default(),
            retention: RetentionConfig::default(),
        }
    }
}

/// A config error in an operator's words: a value of the wrong kind says what kind it must be, not the Rust
/// type it would be read into.
struct InWords;

impl serde_saphyr::MessageFormatter for InWords {
    fn format_message<'a>(&self, error: &'a serde_saphyr::Error) -> std::borrow::Cow<'a, str> {
        let expected = match error {
            serde_saphyr::Error::InvalidScalar { ty, .. } => match *ty {
                "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more",
                "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
                "f32" | "f64" => "a number",
                "bool" => "true or false",
                "char" => "a single character",
                _ => return serde_saphyr::UserMessageFormatter.format_message(error),
            },
            _ => return serde_saphyr::UserMessageFormatter.format_message(error),
        };
        format!("this must be {expected}").into()
    }
}

impl Config {
    /// Reads a config file; unknown keys are errors with their line.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_saphyr::from_str(&text).map_err(|e| {
            let name = path.display().to_string();
            let options = serde_saphyr::render_options! {
                formatter: &InWords,
                source_name: Some(name.as_str()),
            };
            e.render_with_options(options)
        })
    }
}
