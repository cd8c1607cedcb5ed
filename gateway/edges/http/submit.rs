//! `POST` on the submit endpoints: one generic handler for all of them, mounted by the generated route table.
//!
//! Order of checks: key (extractor), body readable (extractor), idempotency replay, admission (model,
//! endpoint, schema, rules, typed struct), then the task is stored and forwarded.

use crate::adapters::upstream::{UpstreamError, client};
use crate::domain::admission::{Admitted, admit};
use crate::domain::billing::books::Shortfall;
use crate::domain::billing::{TaskBilling, equivalent, pricing};
use crate::domain::catalog::{EndpointSpec, Media, SyncResponse, TaskMode};
use crate::domain::errors::Code;
use crate::domain::tasks::{Hold, IdempotencyRecord, TaskRecord, TaskResult, TaskStatus};
use crate::domain::usage::Usage;
use crate::edges::http::auth::Caller;
use crate::edges::http::error::ApiError;
use crate::edges::http::peer::PeerSocket;
use crate::edges::http::request_id;
use crate::ports::storage::{Commit, IdempotencyClaim, Inserted};
use crate::services::gateway::Gateway;
use crate::services::tasks;
use crate::services::tasks::{OpenTask, results};
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
    state: web::Data<Gateway>,
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
    // A task the key may be taken over from: its first attempt ended without doing the work.
    let mut replacing = None;
    if let Some((key, body_hash)) = &idempotency
        && let Some(existing) = state.store.idempotency(key).await?
    {
        match replay(&state, &caller, endpoint, body_hash, &existing).await? {
            Replayed::Answer(answer) => return Ok(answer),
            Replayed::Redo(task_id) => replacing = Some(task_id),
        }
    }
    let admitted = admit(&state.registry, endpoint, body)?;
    state.limits.reserve(caller.account())?;
    // Given back unless the task is accepted (then the task's end gives it back).
    let slot = scopeguard::guard((), |()| state.limits.release(caller.account()));
    let callback_url = callback_url(&state, caller.account(), &admitted).await?;
    let mut task =
        tasks::new_task(caller.account(), caller.key_prefix(), &admitted, request_id, state.settings.max_task_seconds);
    task.callback_url = callback_url;
    let (quoted, units) = pricing::quote(admitted.model, &admitted.body);
    let baseline = state.settings.billing.equivalent_micros_per_million_tokens;
    let mut billing = TaskBilling { quoted, units, baseline, ..TaskBilling::default() };
    let hold = Hold { amount: quoted, trial_only: admitted.model.free_trial_only };
    let synchronous = admitted.model.task_mode == TaskMode::Sync;
    if synchronous && idempotency.is_none() && state.store.earmarks_in_memory() {
        // Written once, when it ends: its money is earmarked in memory meanwhile. A keyed request is stored
        // first (below), so that a retry while the upstream works finds it; so is every task where money is
        // decided in the database.
        let earmark = match state.store.earmark_now(caller.account(), hold) {
            Some(decided) => decided,
            None => state.store.earmark(caller.account(), hold).await?,
        };
        let earmark = earmark.map_err(|s| refusal(&admitted, s))?;
        (billing.hold, billing.earmarked) = (earmark.split().to_vec(), true);
        task.billing = Some(billing);
        ScopeGuard::into_inner(slot);
        let _handled = crate::support::metrics::task_handled();
        return run_sync(state, &req, endpoint, OpenTask::Unwritten(Box::new(task), earmark), &admitted).await;
    }
    task.billing = Some(billing);
    let idem = idempotency.clone().map(|(key, body_hash)| IdempotencyClaim {
        key,
        record: IdempotencyRecord { body_hash, task_id: task.task_id.clone() },
        replacing,
    });
    // Deferred: the task and its hold are durable with the write that ends this request (the upstream task
    // id, or the settlement), before any response names the task. A crash before then may still leave them
    // on disk (a checkpoint can commit them): no client heard of that task, and the next start ends it and
    // gives its hold back (`tasks::interrupted`); a keyed retry runs it again.
    // A write whose answer was lost may still have been made (a database that stopped as it committed): the
    // poller looks for the task once the store answers, and ends it, giving its hold back.
    let task_id = task.task_id.clone();
    let added = state.store.add_task(task, idem, Some(hold), Commit::Deferred).await;
    let task = match added.inspect_err(|_| state.poller.take_over(task_id))? {
        Inserted::Stored(task) => task,
        Inserted::Duplicate(existing) => {
            // Another attempt with this key got there first: answer as a retry of it would be answered.
            let body_hash = idempotency.as_ref().map(|(_, h)| h.as_str()).unwrap_or_default();
            return match replay(&state, &caller, endpoint, body_hash, &existing).await? {
                Replayed::Answer(answer) => Ok(answer),
                Replayed::Redo(_) => Err(in_progress()),
            };
        }
        Inserted::Shortfall(shortfall) => return Err(refusal(&admitted, shortfall)),
        Inserted::TooManyTasks(count) => return Err(crate::services::limits::too_many_tasks(count).into()),
    };
    ScopeGuard::into_inner(slot);
    let _handled = crate::support::metrics::task_handled();
    if synchronous {
        run_sync(state, &req, endpoint, task.into(), &admitted).await
    } else {
        let task = tasks::forward_async(&state, task, &admitted).await?;
        Ok(accepted(endpoint, &task))
    }
}

/// The submission's `callback_url`, once it is known to be a URL deliveries may go to and the account can
/// sign them.
async fn callback_url(state: &Gateway, account: &str, admitted: &Admitted) -> Result<Option<String>, ApiError> {
    let Some(Value::String(url)) = admitted.body.get("callback_url") else { return Ok(None) };
    let refused = |message: String| ApiError::invalid_parameter("callback_url", message);
    crate::services::deliveries::callbacks::check(url, state.settings.webhooks.allow_private_callbacks)
        .await
        .map_err(refused)?;
    let settings = state.store.webhook_settings(account).await?.unwrap_or_default();
    if settings.signing_secrets(crate::domain::clock::now_ms()).next().is_none() {
        return Err(refused(format!(
            "Account `{account}` has no webhook secret to sign deliveries with yet; ask the operator for one."
        )));
    }
    Ok(Some(url.clone()))
}

/// The answer to a request its account cannot fund.
fn refusal(admitted: &Admitted, shortfall: Shortfall) -> ApiError {
    match shortfall {
        Shortfall::Insufficient { needed, available } => ApiError::new(
            Code::insufficient_balance,
            format!("This request costs {needed} micro-units; the account has {available} available. Top up and retry."),
        ),
        Shortfall::TrialExhausted { needed, available } => ApiError::new(
            Code::free_trial_exhausted,
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
        ApiError::new(Code::invalid_idempotency_key, "`Idempotency-Key` must be 1-255 visible ASCII characters.")
    })?;
    let body_hash = hex::encode(Sha256::digest(body.to_string()));
    Ok(Some((format!("{}\n{key}", caller.account()), body_hash)))
}

/// What a retry with a used `Idempotency-Key` gets.
enum Replayed {
    /// What the first attempt answered, or its task's true state now.
    Answer(HttpResponse),
    /// The first attempt ended without doing its work (this task): the retry does it, taking the key over.
    Redo(String),
}

/// A retry with a used key and the same body gets what the first attempt answered: an async task's
/// acceptance while it is live, a synchronous result in the endpoint's shape, a refused create's error with
/// its status; a task that ended since, its true state. Never an acceptance of what cannot finish: a first
/// attempt still under way is a 409 to retry, and one that did no work (interrupted by a restart, or its
/// client gone) is done again. Another body with the key is a conflict.
async fn replay(
    state: &Gateway,
    caller: &Caller,
    endpoint: &EndpointSpec,
    body_hash: &str,
    existing: &IdempotencyRecord,
) -> Result<Replayed, ApiError> {
    if body_hash != existing.body_hash {
        return Err(ApiError::new(
            Code::idempotency_conflict,
            "This Idempotency-Key was used with a different body; use a new key for a new request.",
        ));
    }
    // The first request may still be waiting for its task to be committed and reach the disk; read it and
    // answer no sooner than it can.
    state.store.caught_up().await?;
    let task = tasks::owned_task(state, caller.account(), &existing.task_id).await?;
    if tasks::interrupted(state, &task).await? {
        tasks::end_interrupted(state, &task.task_id).await?;
        return Ok(Replayed::Redo(task.task_id));
    }
    if tasks::did_no_work(&task) {
        return Ok(Replayed::Redo(task.task_id));
    }
    // From here the answer is the first attempt's, so it names that attempt's request id. A redo above keeps
    // this request's own: it is the id of the task that does the work.
    request_id::set(task.request_id.clone());
    let model = crate::domain::catalog::ModelSpec::find(&task.model);
    let synchronous = model.is_some_and(|m| m.task_mode == TaskMode::Sync);
    let answer = match task.status {
        TaskStatus::Queued | TaskStatus::Running if !synchronous && task.upstream_task_id.is_some() => {
            accepted(endpoint, &task)
        }
        TaskStatus::Queued | TaskStatus::Running => return Err(in_progress()),
        TaskStatus::Failed if task.upstream_task_id.is_none() => {
            // Refused before the upstream took it: the first answer was this error.
            let (code, message) = task.error.as_ref().map_or(("UnknownError", ""), |e| (&e.code, &e.message));
            return Err(UpstreamError::recorded(code, message, model.map_or("", |m| m.region)).into());
        }
        TaskStatus::Success if synchronous => match model {
            Some(model) => sync_answer(endpoint, model, &task, None)?,
            None => HttpResponse::Ok().json(tasks::view(&task)),
        },
        _ => HttpResponse::Ok().json(tasks::view(&task)),
    };
    Ok(Replayed::Answer(answer))
}

fn in_progress() -> ApiError {
    ApiError::new(
        Code::request_in_progress,
        "The first request with this Idempotency-Key is still being processed; retry shortly with the same key.",
    )
    .with_retry_after(1)
}

/// Ends a synchronous task as `cancelled`: its client went away, so it is not charged.
async fn abandon(state: &Gateway, task: OpenTask) -> Result<(), ApiError> {
    tasks::finish(state, task, TaskStatus::Cancelled, |t| {
        t.error = Some(crate::domain::tasks::TaskError {
            code: tasks::CLIENT_DISCONNECTED.into(),
            message: "The client disconnected before the result was ready; nothing was charged.".into(),
        });
    })
    .await
    .map(|_| ())
    .map_err(ApiError::from)
}

async fn run_sync(
    state: web::Data<Gateway>,
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
    crate::support::metrics::upstream_call("create");
    let call = client::create(&state.upstreams, admitted.model, &admitted.envelope);
    // actix-web keeps running a handler after its client closed the connection: watch the socket meanwhile.
    let answer = match req.conn_data::<PeerSocket>() {
        Some(peer) => tokio::select! {
            answer = call => answer,
            () = peer.gone() => {
                abandon(&state, ScopeGuard::into_inner(guard)).await?;
                return Err(ApiError::new(Code::client_closed_request, "The client closed the connection."));
            }
        },
        None => call.await,
    };
    let task = ScopeGuard::into_inner(guard);
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => {
            crate::support::metrics::upstream_error("create");
            tasks::fail(&state, task, &error.code(), &error.detail()).await?;
            return Err(error.into());
        }
    };
    let reported: results::Reported = match answer.read() {
        Ok(reported) => reported,
        Err(error) => {
            tasks::fail(&state, task, &error.code(), &error.detail()).await?;
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
    sync_answer(endpoint, admitted.model, &finished, Some(&answer))
}

/// The answer of a finished synchronous task, in its endpoint's shape, with equivalent usage where the rules
/// allow. `upstream` is the upstream's answer when there is one (read only for the shape that passes it
/// on); a replay rebuilds it from the task.
fn sync_answer(
    endpoint: &EndpointSpec,
    model: &crate::domain::catalog::ModelSpec,
    finished: &TaskRecord,
    upstream: Option<&client::Answer>,
) -> Result<HttpResponse, ApiError> {
    // Display only: the list price of what was delivered, converted with the baseline frozen on the task.
    let projected = finished.billing.as_ref().and_then(|billing| {
        let list_price = billing.settlement.as_ref()?.list_price;
        equivalent::tokens(model, list_price, billing.baseline, finished.usage.as_ref())
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
            let answer = match upstream {
                Some(answer) => answer.read()?,
                None => rebuilt_upstream_answer(finished),
            };
            let mut body = upstream_shape(answer, &finished.request_id);
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
