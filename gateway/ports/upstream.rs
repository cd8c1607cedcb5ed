//! The upstream port: how the use cases reach the upstream family, whatever its wire. An adapter
//! (`adapters::upstream`) speaks the family's protocol of `spec/upstream.yaml` and reads its answers into the
//! types here: what a create, a query and a list say, and each failure classified, so no use case reads a
//! vendor's field name or error code.

use crate::domain::catalog::{Media, ModelSpec};
use crate::domain::errors::{Code, ErrorCode};
use crate::domain::results::{FailedItem, TaskResult};
use crate::domain::tasks::{TaskError, TaskStatus};
use crate::domain::usage::{Measured, Usage};
use bytes::Bytes;
use std::borrow::Cow;

/// The upstream family, every region of it the deployment reaches.
#[async_trait::async_trait(?Send)]
pub trait Upstream: Send + Sync {
    /// Submits a job (an asynchronous model's) or runs it (a synchronous one's) with key `key` of the
    /// model's region: each key is one upstream account, with its own running slots.
    async fn create(&self, model: &ModelSpec, envelope: &Bytes, key: usize) -> Result<Created, UpstreamError>;
    /// What the upstream says of one task, asked with key `key` of `region` (modulo its key count): the
    /// caller paces each key.
    async fn query(
        &self,
        region: &str,
        key: usize,
        upstream_task_id: &str,
        media: Media,
    ) -> Result<Observed, UpstreamError>;
    /// A page of the tasks created in a window, asked with key `key` of `region`.
    async fn list(&self, region: &str, key: usize, request: &ListRequest) -> Result<TaskPage, UpstreamError>;
    /// Cancels a task the upstream has not started, with the key that created it.
    async fn cancel(&self, region: &str, key: usize, upstream_task_id: &str) -> Result<(), UpstreamError>;
    /// One of a task's result files, as `url` (the upstream's, signed by it) serves it, or the bytes of it a
    /// `Range` header asks for; any answer the upstream gives.
    async fn fetch(&self, region: &str, url: &str, range: Option<&str>) -> Result<Fetched, UpstreamError>;
    /// The error a task recorded (its `code` and message, for a model of `region`), classified again as when
    /// it was first answered.
    fn recorded(&self, code: &str, message: &str, region: &str) -> UpstreamError;
    /// How many tasks of `model` each key of its region may have pending or running at once (empty where
    /// the region is not configured).
    fn caps(&self, model: &ModelSpec) -> Vec<u32>;
    /// Regions the deployment reaches, with their keys' count: their query limits add up.
    fn regions(&self) -> Vec<(&'static str, usize)>;
    /// The longest a call may take, in any region.
    fn longest_timeout(&self) -> std::time::Duration;
}

/// What a create answered.
#[derive(Debug, Default)]
pub struct Created {
    /// The upstream's id of an asynchronous task.
    pub task_id: Option<String>,
    /// A synchronous job's result files, its usage report and what the report says was delivered.
    pub results: Vec<TaskResult>,
    pub failed: Vec<FailedItem>,
    pub usage: Option<Usage>,
    pub measured: Option<Measured>,
    /// The answer as it came, for the endpoints that pass it on.
    pub body: Bytes,
}

/// What one upstream answer says about a task.
#[derive(Debug)]
pub enum Observed {
    Pending,
    Running,
    /// Its result files (and the items it could not make), its usage report as it came, and what the report
    /// says was delivered.
    Succeeded {
        results: Vec<TaskResult>,
        failed: Vec<FailedItem>,
        usage: Option<Usage>,
        measured: Option<Measured>,
    },
    Failed(TaskError),
    Cancelled,
}

impl Observed {
    /// The gateway state an observation moves a task to.
    pub fn status(&self) -> TaskStatus {
        match self {
            Observed::Pending => TaskStatus::Queued,
            Observed::Running => TaskStatus::Running,
            Observed::Succeeded { .. } => TaskStatus::Success,
            Observed::Failed(_) => TaskStatus::Failed,
            Observed::Cancelled => TaskStatus::Cancelled,
        }
    }
}

/// A result file as the upstream answers for it: the status, the headers a download passes on, and the
/// bytes as they stream in.
pub struct Fetched {
    pub status: u16,
    pub content_type: Option<String>,
    pub content_length: Option<u64>,
    /// `Content-Range`, `ETag`, `Accept-Ranges` and `Last-Modified`, as the upstream sent them.
    pub passed_on: Vec<(&'static str, String)>,
    pub body: crate::ports::files::ByteStream,
}

/// A page of the tasks created in a time window.
#[derive(Debug, Clone, Copy)]
pub struct ListRequest {
    /// Epoch ms; sent rounded down to its second.
    pub start_ms: i64,
    /// Epoch ms; sent rounded up to a whole second, so every task created up to it is included.
    pub end_ms: i64,
    /// From 1.
    pub page_no: u64,
    pub page_size: u64,
}

/// One page of a task list, as the upstream answered it.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    pub total: u64,
    pub total_page: u64,
    pub tasks: Vec<ListedTask>,
}

/// A task as a list reports it: enough to tell whether it is worth a query.
#[derive(Debug, Clone)]
pub struct ListedTask {
    pub task_id: String,
    pub status: ListedStatus,
    /// Creation time, epoch ms.
    pub gmt_create: Option<i64>,
}

/// A listed task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedStatus {
    Pending,
    Running,
    /// Ended one way or another: only a task query tells which.
    Ended,
    /// A word this gateway does not know: worth a task query.
    Unrecognized,
}

/// What went wrong talking to the upstream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream answered with an error, classified by the adapter (its code is kept to be recorded).
    #[error("upstream answered {status} {code}")]
    Answered { status: u16, code: String, message: String, refusal: Refusal },
    /// No answer in time.
    #[error("upstream timed out")]
    Timeout,
    /// Could not connect or the connection broke before an answer.
    #[error("upstream unreachable: {0}")]
    Transport(String),
    /// The TLS handshake failed (an unknown issuer, an expired certificate, a name mismatch, ...): the
    /// reason, which names no host.
    #[error("upstream TLS handshake failed: {0}")]
    Tls(String),
    /// An answer that is not the protocol's shape.
    #[error("upstream answered something unreadable: {0}")]
    Malformed(String),
    /// No base URL or key is configured for the region.
    #[error("no upstream configured for region {0}")]
    NotConfigured(String),
    /// Every key's slots for the model stayed busy as long as a call may wait for one.
    #[error("every upstream key is busy with this model")]
    Busy,
}

/// What kind of refusal an upstream's error answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Content inspection refused the input or output.
    ContentBlocked,
    /// The request itself is wrong (a parameter, a media URL): `message` names what, and nothing else.
    Rejected,
    /// A free-trial quota is used up.
    QuotaExhausted,
    /// Too many requests or tasks: worth trying again shortly.
    RateLimited,
    /// The model is unavailable (or the account in arrears): worth trying again later.
    Unavailable,
    /// A cancel of a task the upstream has started.
    NotCancellable,
    /// The upstream's own failure, or the gateway's (a key, an access rule).
    Failed,
}

impl UpstreamError {
    /// Worth sending to another upstream account at once: the key was refused for its capacity or rate, the
    /// upstream failed without taking the job, or it could not be reached. Never a timeout, after which the
    /// job may have been created.
    pub fn try_another_key(&self) -> bool {
        match self {
            UpstreamError::Answered { status, refusal, .. } => {
                *refusal == Refusal::RateLimited
                    || (matches!(status, 500 | 502 | 503 | 504) && *refusal == Refusal::Failed)
            }
            UpstreamError::Transport(_) => true,
            _ => false,
        }
    }

    /// Worth trying again later: rate limits, server errors, transport failures.
    pub fn is_transient(&self) -> bool {
        match self {
            UpstreamError::Answered { status, refusal, .. } => {
                matches!(status, 429 | 500 | 502 | 503 | 504) && *refusal != Refusal::QuotaExhausted
            }
            UpstreamError::Timeout | UpstreamError::Transport(_) | UpstreamError::Busy => true,
            // Retrying at once cannot mend a certificate.
            UpstreamError::Tls(_) | UpstreamError::Malformed(_) | UpstreamError::NotConfigured(_) => false,
        }
    }

    /// What a task that failed on this error records beside its code: the upstream's own message, or a
    /// plain phrase (never a host or a key). [`Upstream::recorded`] reads the two back.
    pub fn detail(&self) -> String {
        match self {
            UpstreamError::Answered { message, .. } => message.clone(),
            UpstreamError::Timeout => "the upstream did not answer in time".into(),
            UpstreamError::Transport(_) => "the upstream is unreachable".into(),
            UpstreamError::Tls(reason) => reason.clone(),
            UpstreamError::Malformed(_) => "the upstream answered something unreadable".into(),
            UpstreamError::NotConfigured(region) => format!("no upstream is configured for region {region}"),
            UpstreamError::Busy => "every upstream account was busy with this model".into(),
        }
    }

    /// The upstream's code, or a gateway code for failures without one.
    pub fn code(&self) -> String {
        match self {
            UpstreamError::Answered { code, .. } => code.clone(),
            UpstreamError::Timeout => "UpstreamTimeout".into(),
            UpstreamError::Transport(_) => "UpstreamUnreachable".into(),
            UpstreamError::Tls(_) => "UpstreamTlsFailed".into(),
            UpstreamError::Malformed(_) => "UpstreamMalformed".into(),
            UpstreamError::NotConfigured(_) => "UpstreamNotConfigured".into(),
            UpstreamError::Busy => "UpstreamBusy".into(),
        }
    }

    /// A failure of the gateway's own kind read back from its recorded code, or `None` for an upstream's.
    pub fn of_gateway(code: &str, detail: &str, region: &str) -> Option<UpstreamError> {
        Some(match code {
            "UpstreamTimeout" => UpstreamError::Timeout,
            "UpstreamUnreachable" => UpstreamError::Transport(detail.into()),
            "UpstreamTlsFailed" => UpstreamError::Tls(detail.into()),
            "UpstreamMalformed" => UpstreamError::Malformed(detail.into()),
            "UpstreamNotConfigured" => UpstreamError::NotConfigured(region.into()),
            "UpstreamBusy" => UpstreamError::Busy,
            _ => return None,
        })
    }

    fn described(&self) -> (Code, Cow<'static, str>, Option<u64>) {
        match self {
            UpstreamError::Answered { code, message, refusal, .. } => match refusal {
                Refusal::ContentBlocked => (
                    Code::upstream_content_blocked,
                    "The upstream's content inspection refused the input or output.".into(),
                    None,
                ),
                Refusal::Rejected => (
                    Code::upstream_rejected,
                    format!("The upstream rejected the request ({code}): {}", clip(message)).into(),
                    None,
                ),
                Refusal::QuotaExhausted => (
                    Code::upstream_quota_exhausted,
                    "The upstream's free-trial quota for this model is used up.".into(),
                    None,
                ),
                Refusal::RateLimited => {
                    (Code::upstream_rate_limited, "The upstream is rate limiting; retry shortly.".into(), Some(2))
                }
                Refusal::Unavailable => {
                    (Code::upstream_unavailable, "The model is unavailable upstream; retry later.".into(), Some(30))
                }
                Refusal::NotCancellable | Refusal::Failed => {
                    (Code::upstream_error, format!("The upstream failed the request ({code}).").into(), None)
                }
            },
            UpstreamError::Timeout => {
                (Code::upstream_timeout, "The upstream did not answer in time; retry later.".into(), None)
            }
            UpstreamError::Transport(_) => {
                (Code::upstream_unavailable, "The upstream is unreachable; retry later.".into(), Some(5))
            }
            UpstreamError::Tls(_) => (
                Code::upstream_unavailable,
                "The upstream could not be reached securely (its certificate was refused); retry later.".into(),
                Some(60),
            ),
            UpstreamError::Malformed(_) => {
                (Code::upstream_error, "The upstream answered something unreadable.".into(), None)
            }
            UpstreamError::Busy => (
                Code::upstream_rate_limited,
                "Every upstream account is busy with this model; retry shortly.".into(),
                Some(2),
            ),
            UpstreamError::NotConfigured(region) => (
                Code::upstream_unavailable,
                format!(
                    "No upstream is configured for region `{region}`, which serves this model; the operator sets \
                     `upstreams.{region}` (base_url, api_key_env) in the gateway's config."
                )
                .into(),
                Some(60),
            ),
        }
    }
}

/// An upstream's message shown to a client: only a parameter complaint's, which names the offending
/// parameter and nothing of the upstream itself; a message naming an address is replaced.
fn clip(message: &str) -> String {
    let cleaned: String = message.chars().filter(|c| !c.is_control()).take(200).collect();
    if cleaned.contains("://") { "see the parameter rules of this model".into() } else { cleaned }
}

impl ErrorCode for UpstreamError {
    fn error_code(&self) -> Code {
        self.described().0
    }

    fn message(&self) -> Cow<'_, str> {
        self.described().1
    }

    fn retry_after(&self) -> Option<u64> {
        self.described().2
    }
}
