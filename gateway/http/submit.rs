//! `POST` on the submit endpoints: one generic handler for all of them, mounted by the generated route table.
//!
//! Order of checks: key (extractor), body readable (extractor), idempotency replay, admission (model,
//! endpoint, schema, rules, typed struct), then the task is stored and forwarded.

use crate::admission::{Admitted, admit};
use crate::billing::{TaskBilling, equivalent, pricing};
use crate::catalog::{EndpointSpec, Media, SyncResponse, TaskMode};
use crate::error::{ApiError, ErrorCode};
use crate::http::auth::Caller;
use crate::http::peer::PeerSocket;
use crate::http::request_id;
use crate::state::AppState;
use crate::store::ledger::Shortfall;
use crate::store::{Commit, Hold, IdempotencyRecord, Inserted, TaskRecord, TaskResult, TaskStatus};
use crate::tasks::{self, OpenTask, results};
use crate::upstream::{Usage, client};
use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use scopeguard::ScopeGuard;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

pub async fn submit(
    endpoint: web::Data<&'static EndpointSpec>,
    caller: Caller,
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let endpoint: &'static EndpointSpec = endpoint.get_ref();
    let request_id = request_id::generate(match endpoint.media {
        Media::Video => "vid-",
        Media::Image => "img-",
    });
    request_id::set(request_id.clone());
    let body = body.into_inner();
    let idempotency = idempotency(&req, &caller, &body)?;
    if let Some((key, body_hash)) = &idempotency
        && let Some(existing) = state.store.idempotency(key)?
    {
        return replay(&state, &caller, endpoint, body_hash, &existing).await;
    }
    let admitted = admit(&state.registry, endpoint, body)?;
    state.limits.reserve(caller.account())?;
    // Given back unless the task is accepted (then the task's end gives it back).
    let slot = scopeguard::guard((), |()| state.limits.release(caller.account()));
    let mut task = tasks::new_task(&caller, &admitted, request_id, state.config.max_task_seconds);
    let (quoted, units) = pricing::quote(admitted.model, &admitted.body);
    let baseline = state.config.billing.equivalent_micros_per_million_tokens;
    let mut billing = TaskBilling { quoted, units, baseline, ..TaskBilling::default() };
    let hold = Hold { amount: quoted, trial_only: admitted.model.free_trial_only };
    let synchronous = admitted.model.task_mode == TaskMode::Sync;
    if synchronous && idempotency.is_none() {
        // Written once, when it ends: its money is earmarked in memory meanwhile. A keyed request is stored
        // first (below), so that a retry while the upstream works finds it.
        let earmark = state.store.earmark(caller.account(), hold).await?.map_err(|s| refusal(&admitted, s))?;
        (billing.hold, billing.earmarked) = (earmark.split().to_vec(), true);
        task.billing = Some(billing);
        ScopeGuard::into_inner(slot);
        crate::metrics::task_accepted();
        return run_sync(state, &req, endpoint, OpenTask::Unwritten(Box::new(task), earmark), &admitted).await;
    }
    task.billing = Some(billing);
    let idem = idempotency
        .clone()
        .map(|(key, body_hash)| (key, IdempotencyRecord { body_hash, task_id: task.task_id.clone() }));
    // Deferred: the task and its hold reach the disk with the durable write that ends this request (the
    // upstream task id, or the settlement), before any response names the task. A crash before then
    // leaves nothing: no client heard of the task, and no hold stays stranded.
    let task = match state.store.add_task(task, idem, Some(hold), Commit::Deferred).await? {
        Inserted::Stored(task) => task,
        Inserted::Duplicate(existing) => {
            let body_hash = idempotency.as_ref().map(|(_, h)| h.as_str()).unwrap_or_default();
            return replay(&state, &caller, endpoint, body_hash, &existing).await;
        }
        Inserted::Shortfall(shortfall) => return Err(refusal(&admitted, shortfall)),
    };
    ScopeGuard::into_inner(slot);
    crate::metrics::task_accepted();
    if synchronous {
        run_sync(state, &req, endpoint, task.into(), &admitted).await
    } else {
        let task = tasks::forward_async(&state, task, &admitted).await?;
        Ok(accepted(endpoint, &task))
    }
}

/// The answer to a request its account cannot fund.
fn refusal(admitted: &Admitted, shortfall: Shortfall) -> ApiError {
    match shortfall {
        Shortfall::Insufficient { needed, available } => ApiError::new(
            ErrorCode::insufficient_balance,
            format!("This request costs {needed} micro-units; the account has {available} available. Top up and retry."),
        ),
        Shortfall::TrialExhausted { needed, available } => ApiError::new(
            ErrorCode::free_trial_exhausted,
            format!(
                "Model `{}` is free-trial only and the free trial is used up ({available} of the {needed} micro-units needed are left); it cannot be called on a paid basis.",
                admitted.model.id
            ),
        )
        .with_param("model"),
    }
}

fn accepted(endpoint: &EndpointSpec, task: &TaskRecord) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(endpoint.async_status).unwrap_or(StatusCode::OK))
        .json(tasks::acceptance(task))
}

/// `(store key, body hash)` for a request carrying `Idempotency-Key`; keys are scoped to the account.
fn idempotency(req: &HttpRequest, caller: &Caller, body: &Value) -> Result<Option<(String, String)>, ApiError> {
    // A name made once: looking up a `&str` builds a `HeaderName`, which copies a non-standard name.
    const IDEMPOTENCY_KEY: header::HeaderName = header::HeaderName::from_static("idempotency-key");
    let Some(header) = req.headers().get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = header.to_str().ok().filter(|k| !k.is_empty() && k.len() <= 255).ok_or_else(|| {
        ApiError::new(ErrorCode::invalid_idempotency_key, "`Idempotency-Key` must be 1-255 visible ASCII characters.")
    })?;
    let body_hash = hex::encode(Sha256::digest(body.to_string()));
    Ok(Some((format!("{}\n{key}", caller.account()), body_hash)))
}

/// A retry with a used key: the original task if the body is the same, else a conflict.
async fn replay(
    state: &AppState,
    caller: &Caller,
    endpoint: &EndpointSpec,
    body_hash: &str,
    existing: &IdempotencyRecord,
) -> Result<HttpResponse, ApiError> {
    if body_hash != existing.body_hash {
        return Err(ApiError::new(
            ErrorCode::idempotency_conflict,
            "This Idempotency-Key was used with a different body; use a new key for a new request.",
        ));
    }
    // The first request may still be waiting for its task to be committed and reach the disk; read it and
    // answer no sooner than it can.
    state.store.caught_up().await?;
    let task = tasks::owned_task(state, caller, &existing.task_id)?;
    request_id::set(task.request_id.clone());
    // An async task replays its acceptance; a synchronous one, whose answer was its result, its task view.
    let synchronous = crate::catalog::ModelSpec::find(&task.model).is_some_and(|m| m.task_mode == TaskMode::Sync);
    if synchronous { Ok(HttpResponse::Ok().json(tasks::view(&task))) } else { Ok(accepted(endpoint, &task)) }
}

/// Ends a synchronous task as `cancelled`: its client went away, so it is not charged.
async fn abandon(state: &AppState, task: OpenTask) -> Result<(), ApiError> {
    tasks::finish(state, task, TaskStatus::Cancelled, |t| {
        t.error = Some(crate::store::TaskError {
            code: "client_disconnected".into(),
            message: "The client disconnected before the result was ready; nothing was charged.".into(),
        });
    })
    .await
    .map(|_| ())
}

async fn run_sync(
    state: web::Data<AppState>,
    req: &HttpRequest,
    endpoint: &EndpointSpec,
    task: OpenTask,
    admitted: &Admitted,
) -> Result<HttpResponse, ApiError> {
    // Abandoned if the handler future is dropped mid-call (server shutdown).
    let guard = scopeguard::guard(task, |task| {
        let state = state.clone();
        actix_web::rt::spawn(async move {
            let _ = abandon(&state, task).await;
        });
    });
    crate::metrics::upstream_call("create");
    let call = client::create(&state.upstreams, admitted.model, &admitted.envelope);
    // actix-web keeps running a handler after its client closed the connection: watch the socket meanwhile.
    let answer = match req.conn_data::<PeerSocket>() {
        Some(peer) => tokio::select! {
            answer = call => answer,
            () = peer.gone() => {
                abandon(&state, ScopeGuard::into_inner(guard)).await?;
                return Err(ApiError::new(ErrorCode::client_closed_request, "The client closed the connection."));
            }
        },
        None => call.await,
    };
    let task = ScopeGuard::into_inner(guard);
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => {
            crate::metrics::upstream_error("create");
            tasks::fail(&state, task, &error.code(), "the upstream refused the request").await?;
            return Err(error.into());
        }
    };
    let reported: results::Reported = match answer.read() {
        Ok(reported) => reported,
        Err(error) => {
            tasks::fail(&state, task, &error.code(), "the upstream answered something unreadable").await?;
            return Err(error.into());
        }
    };
    let found = results::results(&reported.output, admitted.model.media);
    let usage = reported.usage.map(Usage::from);
    // The answer claims the result and its charge: both must be on disk first, or the client gets an error.
    let finished = tasks::finish(&state, task, TaskStatus::Success, move |t| {
        t.results = found;
        t.usage = usage;
    })
    .await?
    .ok_or_else(|| ApiError::internal("the synchronous task was not recorded"))?;
    // Display only: the list price of what was delivered, converted with the baseline frozen on the task.
    let projected = finished.billing.as_ref().and_then(|billing| {
        let list_price = billing.settlement.as_ref()?.list_price;
        equivalent::tokens(admitted.model, list_price, billing.baseline, finished.usage.as_ref())
    });
    let mut response = HttpResponse::Ok();
    if projected.is_some() {
        response.insert_header((header::CACHE_CONTROL, header::HeaderValue::from_static("no-store")));
    }
    Ok(match endpoint.sync_response {
        SyncResponse::ImagesStandard => {
            let usage = equivalent::answered(finished.usage.as_ref(), projected);
            let answer = ImagesAnswer {
                created: finished.ended_ms() / 1000,
                data: ImageUrls(&finished.results),
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
            let mut body = upstream_shape(answer.read()?, &finished.request_id);
            if let Some(tokens) = projected {
                body["equivalent_usage"] = equivalent::object(tokens);
            }
            response.json(body)
        }
    })
}

/// The answer of an images endpoint in the standard shape, serialized as it stands (no `Value` copy).
#[derive(Serialize)]
struct ImagesAnswer<'a> {
    created: i64,
    data: ImageUrls<'a>,
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

/// The upstream's answer with the gateway's request id, and content items carrying `image_url`.
fn upstream_shape(mut answer: Value, request_id: &str) -> Value {
    if let Some(choices) = answer.pointer_mut("/output/choices").and_then(Value::as_array_mut) {
        for item in choices
            .iter_mut()
            .filter_map(|c| c.pointer_mut("/message/content"))
            .filter_map(Value::as_array_mut)
            .flatten()
        {
            if let Some(object) = item.as_object_mut()
                && let Some(url) = object.remove("image")
            {
                object.insert("image_url".into(), url);
            }
        }
    }
    answer["request_id"] = request_id.into();
    answer
}
