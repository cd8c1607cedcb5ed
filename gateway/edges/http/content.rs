//! Result downloads: `GET /v1/tasks/{task_id}/content?index=N` under the task's own authentication, and
//! `GET /v1/files/{task_id}/{index}?expires=…&signature=…`, the signed link a task's result `url` is, with
//! no key. A mirrored file is served from the gateway's storage (ranges, `ETag`; or a redirect to a
//! presigned URL on S3); one not mirrored (yet, or at all) streams from the upstream's URL.

use crate::domain::clock::now_ms;
use crate::domain::errors::Code;
use crate::domain::results::MirroredFile;
use crate::domain::tasks::{TaskRecord, TaskStatus};
use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::copies;
use crate::services::runtime::Gateway;
use crate::services::tasks;
use actix_web::body::SizedStream;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, ByteRangeSpec, Header, Range};
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::TryStreamExt;
use serde::Deserialize;

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::mount(
        cfg,
        "/v1/tasks/{task_id}/content",
        vec![("GET", web::get().to(content)), ("HEAD", web::head().to(content))],
    );
    super::mount(
        cfg,
        "/v1/files/{task_id}/{index}",
        vec![("GET", web::get().to(linked)), ("HEAD", web::head().to(linked))],
    );
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContentParams {
    index: Option<String>,
}

async fn content(
    caller: Caller,
    state: web::Data<Gateway>,
    request: HttpRequest,
    task_id: web::Path<String>,
    params: web::Query<ContentParams>,
) -> Result<HttpResponse, ApiError> {
    let index = match params.index.as_deref() {
        None => 0,
        Some(index) => index.parse().map_err(|_| {
            ApiError::invalid_parameter("index", format!("`index` is a result's place from 0; got `{index}`."))
        })?,
    };
    let task = tasks::cancel::owned_task(&state, caller.account(), &task_id).await?;
    serve(&state, &request, &task, index).await
}

#[derive(Deserialize)]
struct LinkParams {
    expires: Option<String>,
    signature: Option<String>,
}

async fn linked(
    state: web::Data<Gateway>,
    request: HttpRequest,
    path: web::Path<(String, String)>,
    params: web::Query<LinkParams>,
) -> Result<HttpResponse, ApiError> {
    let (task_id, index) = path.into_inner();
    let refused = |why: &str| ApiError::new(Code::invalid_link, format!("This result link {why}."));
    let expires = params.expires.as_deref().and_then(|expires| expires.parse::<i64>().ok());
    let (Some(expires), Some(signature), Ok(index)) = (expires, params.signature.as_deref(), index.parse()) else {
        return Err(refused("is incomplete"));
    };
    if !state.copies.links.verify(&task_id, index, expires, signature) {
        return Err(refused("is not signed by this gateway"));
    }
    if now_ms().div_euclid(1000) > expires {
        return Err(refused("has expired"));
    }
    let task = state.store.task(&task_id).await?.ok_or_else(|| refused("names no task"))?;
    serve(&state, &request, &task, index).await
}

/// Result `index` of `task`, from wherever it is now.
async fn serve(
    state: &Gateway,
    request: &HttpRequest,
    task: &TaskRecord,
    index: usize,
) -> Result<HttpResponse, ApiError> {
    if !task.status.is_terminal() {
        let message =
            format!("Task `{}` is {}; its results are served once it succeeds.", task.task_id, task.status.as_str());
        return Err(ApiError::new(Code::result_not_ready, message));
    }
    let Some(result) = task.results.get(index) else {
        let message = match task.status {
            TaskStatus::Success => {
                format!("Task `{}` has {} result(s); there is no index {index}.", task.task_id, task.results.len())
            }
            status => format!("Task `{}` ended {} and has no results.", task.task_id, status.as_str()),
        };
        return Err(ApiError::new(Code::result_not_found, message).with_param("index"));
    };
    let mirror = task.mirror.as_ref();
    if let Some(file) = mirror.and_then(|m| m.file(index)) {
        if mirror.is_some_and(|m| now_ms() > m.expires_ms) {
            let message = format!("Result {index} of task `{}` has expired.", task.task_id);
            return Err(ApiError::new(Code::result_expired, message));
        }
        return from_storage(state, request, file).await;
    }
    // No copy: the upstream's file, as it gave it (kept aside while a copy is pending).
    let source = mirror.and_then(|m| m.sources.get(index)).unwrap_or(result);
    from_upstream(state, request, task, &source.url, &source.kind).await
}

async fn from_storage(state: &Gateway, request: &HttpRequest, file: &MirroredFile) -> Result<HttpResponse, ApiError> {
    let files = &state.copies.files;
    if let Some(url) = files.presigned(&file.key).await {
        let url = url.map_err(unreadable)?;
        return Ok(HttpResponse::Found().insert_header((header::LOCATION, url)).finish());
    }
    let etag = format!("\"{}\"", file.sha256);
    if let Some(unchanged) = super::not_modified(request, &etag) {
        return Ok(unchanged);
    }
    let range = requested_range(request, file.size)?;
    let status = if range.is_some() { StatusCode::PARTIAL_CONTENT } else { StatusCode::OK };
    let object = copies::read(state, file, range).await?;
    let length = range.map_or(file.size, |(first, last)| last - first + 1);
    let mut response = HttpResponse::build(status);
    response
        .insert_header((header::CONTENT_TYPE, file.content_type.as_str()))
        .insert_header((header::ETAG, etag))
        .insert_header((header::ACCEPT_RANGES, "bytes"));
    if let Some((first, last)) = range {
        response.insert_header((header::CONTENT_RANGE, format!("bytes {first}-{last}/{}", file.size)));
    }
    Ok(inert(&mut response).body(SizedStream::new(length, object.map_err(std::io::Error::other))))
}

/// A storage failure other than a missing object: logged whole, answered without the storage's details
/// (paths, buckets), as a retry may succeed.
fn unreadable(error: impl std::fmt::Display) -> ApiError {
    tracing::error!(request_id = %crate::edges::web::request_id::current(), %error, "a result's copy cannot be read");
    ApiError::new(Code::storage_unavailable, "The result's copy cannot be read right now; retry later.")
        .with_retry_after(5)
}

/// Result bytes are the upstream's, served from the gateway's origin (the console's too): the browser must
/// neither guess another type for them nor run them as a page of that origin.
fn inert(response: &mut actix_web::HttpResponseBuilder) -> &mut actix_web::HttpResponseBuilder {
    response
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CONTENT_SECURITY_POLICY, "sandbox"))
}

/// The one byte range a `Range` header asks for, inclusive, if it asks for one (several are answered
/// whole, as HTTP allows); a range past the end is a 416.
fn requested_range(request: &HttpRequest, size: u64) -> Result<Option<(u64, u64)>, ApiError> {
    let Ok(Range::Bytes(specs)) = Range::parse(request) else { return Ok(None) };
    let [spec] = specs.as_slice() else { return Ok(None) };
    match ByteRangeSpec::to_satisfiable_range(spec, size) {
        Some(range) => Ok(Some(range)),
        None => Err(ApiError::new(
            Code::range_not_satisfiable,
            format!("The range asked for is outside the file's {size} bytes."),
        )
        .with_param("Range")),
    }
}

/// Streams a result from the upstream's URL, passing the client's `Range` on and the upstream's answer
/// (status, type, length, range, tag) back.
async fn from_upstream(
    state: &Gateway,
    request: &HttpRequest,
    task: &TaskRecord,
    url: &str,
    kind: &str,
) -> Result<HttpResponse, ApiError> {
    let unavailable = |message: String| ApiError::new(Code::upstream_unavailable, message);
    let range = request.headers().get(header::RANGE).and_then(|range| range.to_str().ok());
    let answer = copies::fetch(state, task, url, range).await.map_err(unavailable)?;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    match answer.status {
        200 | 206 => {}
        416 => return Err(ApiError::new(Code::range_not_satisfiable, "The range asked for is outside the file.")),
        403 | 404 | 410 => {
            let message = "The upstream no longer has this result, and the gateway kept no copy of it.";
            return Err(ApiError::new(Code::result_expired, message));
        }
        other => {
            return Err(ApiError::new(Code::upstream_error, format!("The upstream answered {other} for the result.")));
        }
    }
    let mut response = HttpResponse::build(status);
    for (name, value) in &answer.passed_on {
        response.insert_header((*name, value.as_str()));
    }
    let content_type = answer.content_type.as_deref().unwrap_or_else(|| copies::default_content_type(kind));
    response.insert_header((header::CONTENT_TYPE, content_type));
    // Past the head, a failure can only cut the body short.
    let body = answer.body.map_err(std::io::Error::other);
    inert(&mut response);
    Ok(match answer.content_length {
        Some(length) => response.body(SizedStream::new(length, body)),
        None => response.streaming(body),
    })
}
