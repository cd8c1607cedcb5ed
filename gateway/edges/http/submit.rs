//! `POST` on the submit endpoints: one generic handler for all of them, mounted from the catalog's endpoints.
//! It reads the request (the caller, the body, `Idempotency-Key`), hands it to the submit use case
//! (`services::submit`), and answers in the endpoint's shape.

use crate::domain::billing::equivalent;
use crate::domain::catalog::{EndpointSpec, Media, ModelSpec, SyncResponse};
use crate::domain::results::{FailedItem, TaskResult};
use crate::domain::tasks::TaskRecord;
use crate::domain::usage::Usage;
use crate::edges::http::peer::PeerSocket;
use crate::edges::web::error::ApiError;
use crate::edges::web::request_id;
use crate::services::auth::Caller;
use crate::services::runtime::Gateway;
use crate::services::submit::{self, Submission, Submitted};
use crate::services::tasks;
use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

pub async fn submit(
    endpoint: web::Data<&'static EndpointSpec>,
    caller: Caller,
    state: web::Data<Gateway>,
    req: HttpRequest,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let endpoint: &'static EndpointSpec = endpoint.get_ref();
    if !req.query_string().is_empty() {
        return Err(unknown_query_parameter(req.query_string()));
    }
    let request_id = request_id::generate(match endpoint.media {
        Media::Video => "vid-",
        Media::Image => "img-",
    });
    request_id::set(request_id.clone());
    // A name made once: looking up a `&str` builds a `HeaderName`, which copies a non-standard name.
    const IDEMPOTENCY_KEY: header::HeaderName = header::HeaderName::from_static("idempotency-key");
    let idempotency_key =
        req.headers().get(IDEMPOTENCY_KEY).map(|key| submit::idempotency_key(key.as_bytes())).transpose()?;
    // actix-web keeps running a handler after its client closed the connection: the socket is watched meanwhile.
    let gone = async {
        match req.conn_data::<PeerSocket>() {
            Some(peer) => peer.gone().await,
            None => std::future::pending().await,
        }
    };
    let submission = Submission { endpoint, caller: &caller, body: body.into_inner(), idempotency_key, request_id };
    let state = state.into_inner();
    let answer = submit::submit(&state, submission, gone).await;
    if let Some(first) = answer.replayed_as {
        request_id::set(first);
    }
    match answer.result? {
        Submitted::Accepted(task) => Ok(accepted(endpoint, &task, tasks::views::queue_place(&state, &task).await)),
        Submitted::Finished { task, model, upstream } => sync_answer(endpoint, model, &task, upstream),
        Submitted::Ended(task) => Ok(HttpResponse::Ok().json(tasks::views::view(&task))),
    }
}

/// The refusal of a query string on a submit route, which takes none: ignoring one would run (and charge) a
/// job its client meant otherwise, `?dry_run=true` above all.
fn unknown_query_parameter(query: &str) -> ApiError {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
    let name = pairs.into_iter().map(|(name, _)| name).next().unwrap_or_else(|| query.to_string());
    let hint = if name == "dry_run" {
        " To learn what a job would cost without running it, POST `{\"endpoint\": …, \"request\": …}` to /v1/quotes."
    } else {
        ""
    };
    let message = format!(
        "Unknown query parameter `{name}`: the submit routes take none; every option goes in the JSON body.{hint}"
    );
    ApiError::invalid_parameter(name, message)
}

/// An acceptance, with the task's place in line when it waits for an upstream slot.
fn accepted(endpoint: &EndpointSpec, task: &TaskRecord, place: Option<Value>) -> HttpResponse {
    let mut body = tasks::views::acceptance(task);
    if let Some(place) = place {
        body["queue"] = place;
    }
    HttpResponse::build(StatusCode::from_u16(endpoint.async_status).unwrap_or(StatusCode::OK)).json(body)
}

/// The answer of a finished synchronous task, in its endpoint's shape, with equivalent usage where the rules
/// allow. `upstream` is the upstream's answer when there is one (read only for the shape that passes it
/// on); a replay rebuilds it from the task.
fn sync_answer(
    endpoint: &EndpointSpec,
    model: &ModelSpec,
    finished: &TaskRecord,
    upstream: Option<Value>,
) -> Result<HttpResponse, ApiError> {
    // Display only: the list price of what was delivered, converted with the baseline frozen on the task.
    let projected = finished.billing.as_ref().and_then(|billing| {
        let list_price = billing.settlement.as_ref()?.list_price;
        equivalent::tokens(model, list_price, billing.baseline, finished.measured.as_ref())
    });
    let mut response = HttpResponse::Ok();
    if projected.is_some() {
        response.insert_header((header::CACHE_CONTROL, header::HeaderValue::from_static("no-store")));
    }
    Ok(match endpoint.sync_response {
        SyncResponse::ImagesStandard => {
            let usage = equivalent::answered(finished.usage.as_ref(), projected);
            let answer = ImagesAnswer {
                task_id: &finished.task_id,
                created: finished.ended_ms() / 1000,
                data: ImageUrls(&finished.results),
                failed_results: &finished.failed_items,
                usage: usage.json(),
            };
            // Written into room for all of it (`json` would start at 128 bytes and double twice): the
            // usage, each URL with its `{"url":""}`, and the rest.
            let room = 64 + answer.usage.get().len() + finished.results.iter().map(|r| r.url.len() + 12).sum::<usize>();
            let mut body = Vec::with_capacity(room);
            serde_json::to_writer(&mut body, &answer).map_err(|e| ApiError::internal(format!("answer: {e}")))?;
            response
                .insert_header((header::CONTENT_TYPE, header::HeaderValue::from_static("application/json")))
                .body(body)
        }
        SyncResponse::Upstream => {
            let answer = upstream.unwrap_or_else(|| rebuilt_upstream_answer(finished));
            let mut body = upstream_shape(answer, finished);
            if let Some(tokens) = projected {
                body["equivalent_usage"] = equivalent::object(tokens);
            }
            response.json(body)
        }
    })
}

/// A synchronous upstream answer (`multimodal-generation`'s `choices`) made again from what its task kept.
fn rebuilt_upstream_answer(task: &TaskRecord) -> Value {
    let content: Vec<Value> = task.results.iter().map(|r| serde_json::json!({"image": r.url})).collect();
    serde_json::json!({
        "output": {"choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": content}}]},
        "usage": task.usage.as_ref().map(Usage::to_value).unwrap_or_default(),
    })
}

/// The answer of an images endpoint in the standard shape, serialized as it stands (no `Value` copy), with
/// the task it is kept as.
#[derive(Serialize)]
struct ImagesAnswer<'a> {
    task_id: &'a str,
    created: i64,
    data: ImageUrls<'a>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    failed_results: &'a [FailedItem],
    usage: &'a RawValue,
}

/// The results as `[{"url": ...}]`, written from the task's own list.
struct ImageUrls<'a>(&'a [TaskResult]);

impl Serialize for ImageUrls<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct ImageUrl<'a> {
            url: &'a str,
        }
        serializer.collect_seq(self.0.iter().map(|result| ImageUrl { url: &result.url }))
    }
}

/// The upstream's answer with the gateway's request id and task id, and its images (content items carrying
/// `image_url`) at the task's own links, in the upstream's order (the order the task's results were read in).
fn upstream_shape(mut answer: Value, task: &TaskRecord) -> Value {
    let mut links = task.results.iter().map(|result| Value::from(result.url.as_str()));
    if let Some(choices) = answer.pointer_mut("/output/choices").and_then(Value::as_array_mut) {
        for item in choices
            .iter_mut()
            .filter_map(|c| c.pointer_mut("/message/content"))
            .filter_map(Value::as_array_mut)
            .flatten()
        {
            if let Some(object) = item.as_object_mut()
                && let Some(url) = object.remove("image").or_else(|| object.remove("image_url"))
            {
                object.insert("image_url".into(), links.next().unwrap_or(url));
            }
        }
    }
    answer["request_id"] = task.request_id.as_str().into();
    answer["task_id"] = task.task_id.as_str().into();
    if !task.failed_items.is_empty() {
        answer["failed_results"] = serde_json::json!(task.failed_items);
    }
    answer
}
