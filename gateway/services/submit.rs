//! Submitting a job: one use case for every submit endpoint, whichever edge asks (the HTTP API, the
//! console's playground).
//!
//! Order of checks: idempotency replay, admission (model, endpoint, schema, rules, typed struct), the
//! account's limits and funds; then the task is stored and forwarded (an asynchronous one), or run and
//! ended (a synchronous one).

use crate::domain::admission::{Admitted, admit};
use crate::domain::billing::TaskBilling;
use crate::domain::billing::books::Shortfall;
use crate::domain::billing::pricing;
use crate::domain::catalog::{EndpointSpec, ModelSpec, SyncResponse, TaskMode};
use crate::domain::errors::{Code, Problem};
use crate::domain::tasks::{Hold, IdempotencyRecord, TaskError, TaskRecord, TaskStatus};
use crate::ports::storage::{Commit, IdempotencyClaim, Inserted, Topology};
use crate::ports::upstream::{Created, UpstreamError};
use crate::services::auth::Caller;
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use crate::services::tasks::{self, lifecycle::OpenTask};
use crate::support::telemetry;
use scopeguard::ScopeGuard;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tracing::Instrument;

/// One submission, as an edge read it.
pub struct Submission<'a> {
    pub endpoint: &'static EndpointSpec,
    pub caller: &'a Caller,
    pub body: Value,
    /// The client's `Idempotency-Key`, if it sent one (1-255 visible ASCII characters: see [`idempotency_key`]).
    pub idempotency_key: Option<&'a str>,
    /// This request's id: the task's, if one is made.
    pub request_id: String,
}

/// What a submission became.
pub enum Submitted {
    /// An asynchronous task accepted (or, on a replay, still live).
    Accepted(TaskRecord),
    /// A synchronous task finished: its record, and the upstream's answer where the endpoint passes it on
    /// (`None` on a replay, which rebuilds it from the task).
    Finished { task: TaskRecord, model: &'static ModelSpec, upstream: Option<Value> },
    /// A replay of a task that has ended since: it is answered as it stands.
    Ended(TaskRecord),
}

/// What a submission answers.
pub struct Answer {
    pub result: Result<Submitted, ServiceError>,
    /// When the answer is a replay of the first attempt's: that attempt's request id, which it names.
    pub replayed_as: Option<String>,
}

/// Submits `submission`; a synchronous call is abandoned (its task cancelled, nothing charged) if `gone`
/// resolves first: the edge's sign that its client went away.
pub async fn submit(state: &Arc<Gateway>, submission: Submission<'_>, gone: impl Future<Output = ()>) -> Answer {
    let mut replayed_as = None;
    // The root of the job's trace; the task keeps its context for every later step.
    let span = telemetry::step("job.submit", None);
    let result = run(state, submission, gone, &mut replayed_as).instrument(span).await;
    Answer { result, replayed_as }
}

async fn run(
    state: &Arc<Gateway>,
    submission: Submission<'_>,
    gone: impl Future<Output = ()>,
    answered_as: &mut Option<String>,
) -> Result<Submitted, ServiceError> {
    let Submission { endpoint, caller, body, idempotency_key, request_id } = submission;
    let idempotency = idempotency_key.map(|key| {
        let body_hash = hex::encode(Sha256::digest(body.to_string()));
        (format!("{}\n{key}", caller.account()), body_hash)
    });
    // A task the key may be taken over from: its first attempt ended without doing the work.
    let mut replacing = None;
    if let Some((key, body_hash)) = &idempotency
        && let Some(existing) = state.store.idempotency(key).await?
    {
        match replay(state, caller, body_hash, &existing, answered_as).await? {
            Replayed::Answer(answer) => return Ok(*answer),
            Replayed::Redo(task_id) => replacing = Some(task_id),
        }
    }
    let admitted = telemetry::step("job.admission", None).in_scope(|| admit(&state.registry, endpoint, body))?;
    state.limits.reserve(caller.account())?;
    // Given back unless the task is accepted (then the task's end gives it back).
    let slot = scopeguard::guard((), |()| state.limits.release(caller.account()));
    let callback_url = callback_url(state, caller.account(), &admitted).await?;
    let mut task = tasks::lifecycle::new_task(
        caller.account(),
        caller.key_prefix(),
        &admitted,
        request_id,
        state.settings.max_task_seconds,
    );
    task.callback_url = callback_url;
    let (quoted, units) = pricing::quote(admitted.model, &admitted.body);
    let baseline = state.settings.billing.equivalent_micros_per_million_tokens;
    let mut billing = TaskBilling { quoted, units, baseline, ..TaskBilling::default() };
    let hold = Hold { amount: quoted, trial_only: admitted.model.free_trial_only };
    let synchronous = admitted.model.task_mode == TaskMode::Sync;
    if synchronous && idempotency.is_none() && state.store.topology() == Topology::Owned {
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
        return run_sync(
            state,
            endpoint,
            OpenTask::Unwritten(Box::new(task), earmark),
            &admitted,
            caller.account(),
            gone,
        )
        .await;
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
    // gives its hold back (`tasks::lifecycle::interrupted`); a keyed retry runs it again.
    // A write whose answer was lost may still have been made (a database that stopped as it committed): the
    // poller looks for the task once the store answers, and ends it, giving its hold back.
    let task_id = task.task_id.clone();
    let added = state
        .store
        .add_task(task, idem, Some(hold), Commit::Deferred)
        .instrument(telemetry::step("job.store", None))
        .await;
    let task = match added.inspect_err(|_| state.poller.take_over(task_id))? {
        Inserted::Stored(task) => task,
        Inserted::Duplicate(existing) => {
            // Another attempt with this key got there first: answer as a retry of it would be answered.
            let body_hash = idempotency.as_ref().map(|(_, h)| h.as_str()).unwrap_or_default();
            return match replay(state, caller, body_hash, &existing, answered_as).await? {
                Replayed::Answer(answer) => Ok(*answer),
                Replayed::Redo(_) => Err(in_progress().into()),
            };
        }
        Inserted::Shortfall(shortfall) => return Err(refusal(&admitted, shortfall).into()),
        Inserted::TooManyTasks(count) => return Err(crate::services::runtime::limits::too_many_tasks(count).into()),
    };
    ScopeGuard::into_inner(slot);
    let _handled = crate::support::metrics::task_handled();
    if synchronous {
        run_sync(state, endpoint, task.into(), &admitted, caller.account(), gone).await
    } else {
        Ok(Submitted::Accepted(tasks::dispatch::forward_async(state, task, &admitted).await?))
    }
}

/// Checks an `Idempotency-Key` as a client sent it: 1-255 visible ASCII characters.
pub fn idempotency_key(key: &[u8]) -> Result<&str, Problem> {
    std::str::from_utf8(key)
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
        .ok_or_else(|| {
            Problem::new(Code::invalid_idempotency_key, "`Idempotency-Key` must be 1-255 visible ASCII characters.")
        })
}

/// The submission's `callback_url`, once it is known to be a URL deliveries may go to and the account can
/// sign them.
pub(crate) async fn callback_url(
    state: &Gateway,
    account: &str,
    admitted: &Admitted,
) -> Result<Option<String>, ServiceError> {
    let Some(Value::String(url)) = admitted.body.get("callback_url") else { return Ok(None) };
    let refused = |message: String| Problem::invalid_parameter("callback_url", message);
    crate::services::deliveries::callbacks::check(url, state.settings.webhooks.allow_private_callbacks)
        .await
        .map_err(refused)?;
    let settings = state.store.webhook_settings(account).await?.unwrap_or_default();
    if settings.signing_secrets(crate::domain::clock::now_ms()).next().is_none() {
        return Err(refused(format!(
            "Account `{account}` has no webhook secret to sign deliveries with yet; ask the operator for one."
        ))
        .into());
    }
    Ok(Some(url.clone()))
}

/// The answer to a request its account cannot fund.
fn refusal(admitted: &Admitted, shortfall: Shortfall) -> Problem {
    match shortfall {
        Shortfall::Insufficient { needed, available } => Problem::new(
            Code::insufficient_balance,
            format!("This request costs {needed} micro-units; the account has {available} available. Top up and retry."),
        ),
        Shortfall::TrialExhausted { needed, available } => Problem::new(
            Code::free_trial_exhausted,
            format!(
                "Model `{}` is free-trial only and the free trial is used up ({available} of the {needed} micro-units needed are left); it cannot be called on a paid basis.",
                admitted.model.id
            ),
        )
        .with_param("model"),
    }
}

/// What a retry with a used `Idempotency-Key` gets.
enum Replayed {
    /// What the first attempt answered, or its task's true state now.
    Answer(Box<Submitted>),
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
    body_hash: &str,
    existing: &IdempotencyRecord,
    answered_as: &mut Option<String>,
) -> Result<Replayed, ServiceError> {
    if body_hash != existing.body_hash {
        return Err(Problem::new(
            Code::idempotency_conflict,
            "This Idempotency-Key was used with a different body; use a new key for a new request.",
        )
        .into());
    }
    // The first request may still be waiting for its task to be committed and reach the disk; read it and
    // answer no sooner than it can.
    state.store.caught_up().await?;
    let task = tasks::cancel::owned_task(state, caller.account(), &existing.task_id).await?;
    if tasks::lifecycle::interrupted(state, &task).await? {
        tasks::lifecycle::end_interrupted(state, &task.task_id).await?;
        return Ok(Replayed::Redo(task.task_id));
    }
    if tasks::lifecycle::did_no_work(&task) {
        return Ok(Replayed::Redo(task.task_id));
    }
    // From here the answer is the first attempt's, so it names that attempt's request id. A redo above keeps
    // this request's own: it is the id of the task that does the work.
    *answered_as = Some(task.request_id.clone());
    let model = ModelSpec::find(&task.model);
    let synchronous = model.is_some_and(|m| m.task_mode == TaskMode::Sync);
    Ok(Replayed::Answer(Box::new(match task.status {
        TaskStatus::Queued | TaskStatus::Running
            if !synchronous && (task.upstream_task_id.is_some() || task.waits_for_slot()) =>
        {
            Submitted::Accepted(task)
        }
        TaskStatus::Queued | TaskStatus::Running => return Err(in_progress().into()),
        TaskStatus::Failed if task.upstream_task_id.is_none() => {
            // Refused before the upstream took it: the first answer was this error.
            let (code, message) = task.error.as_ref().map_or(("UnknownError", ""), |e| (&e.code, &e.message));
            return Err(state.upstream.recorded(code, message, model.map_or("", |m| m.region)).into());
        }
        TaskStatus::Success if synchronous => match model {
            Some(model) => Submitted::Finished { task, model, upstream: None },
            None => Submitted::Ended(task),
        },
        _ => Submitted::Ended(task),
    })))
}

fn in_progress() -> Problem {
    Problem::new(
        Code::request_in_progress,
        "The first request with this Idempotency-Key is still being processed; retry shortly with the same key.",
    )
    .with_retry_after(1)
}

/// Ends a synchronous task as `cancelled`: its client went away, so it is not charged.
async fn abandon(state: &Gateway, task: OpenTask) -> Result<(), ServiceError> {
    tasks::lifecycle::finish(state, task, TaskStatus::Cancelled, |t| {
        t.error = Some(TaskError {
            code: tasks::lifecycle::CLIENT_DISCONNECTED.into(),
            message: "The client disconnected before the result was ready; nothing was charged.".into(),
        });
    })
    .await
    .map(|_| ())
}

async fn run_sync(
    state: &Arc<Gateway>,
    endpoint: &EndpointSpec,
    task: OpenTask,
    admitted: &Admitted,
    account: &str,
    gone: impl Future<Output = ()>,
) -> Result<Submitted, ServiceError> {
    // Abandoned if the caller's future is dropped mid-call (server shutdown).
    let guard = scopeguard::guard(task, |task| {
        let state = state.clone();
        tokio::task::spawn_local(async move {
            let _ = abandon(&state, task).await;
        });
    });
    let model = admitted.model;
    let holder = guard.task_id().to_string();
    let mut gone = std::pin::pin!(gone);
    let key = match state.capacity.take(model, &[], false, &holder).await {
        Some(key) => key,
        None => {
            // Every key's slots are busy: the call waits its turn, at most as long as the upstream call may take.
            let weight = tasks::dispatch::queue_weight(&*state.store, account).await;
            let mut line = state
                .capacity
                .wait(crate::services::runtime::capacity::Waiting { name: account, weight }, model, &holder)
                .await;
            // Some(key), or None with whether the client left.
            let (turn, left) = tokio::select! {
                turn = tokio::time::timeout(state.upstream.longest_timeout(), &mut line) => {
                    (turn.ok().and_then(Result::ok), false)
                }
                () = &mut gone => (None, true),
            };
            match turn {
                Some(key) => key,
                None => {
                    // A slot handed over just as the wait ended goes back.
                    state.capacity.forget(&holder, model);
                    line.close();
                    if let Ok(key) = line.try_recv() {
                        state.capacity.give_back(model, key, &holder);
                    }
                    if left {
                        abandon(state, ScopeGuard::into_inner(guard)).await?;
                        return Err(
                            Problem::new(Code::client_closed_request, "The client closed the connection.").into()
                        );
                    }
                    let busy = UpstreamError::Busy;
                    tasks::lifecycle::fail(state, ScopeGuard::into_inner(guard), &busy.code(), &busy.detail()).await?;
                    return Err(busy.into());
                }
            }
        }
    };
    let call = tasks::dispatch::send(state, model, &admitted.envelope, key, &holder);
    let sent = tokio::select! {
        sent = call => sent,
        () = &mut gone => {
            // The call is dropped, and with it its slot.
            state.capacity.give_back(model, key, &holder);
            abandon(state, ScopeGuard::into_inner(guard)).await?;
            return Err(Problem::new(Code::client_closed_request, "The client closed the connection.").into());
        }
    };
    let task = ScopeGuard::into_inner(guard);
    let answer = match sent {
        tasks::dispatch::Sent::Taken { key, created } => {
            state.capacity.give_back(model, key, &holder);
            Ok(created)
        }
        tasks::dispatch::Sent::NoKey => Err(UpstreamError::Busy),
        tasks::dispatch::Sent::Failed(error) => Err(error),
    };
    let Created { results, failed, usage, measured, body, .. } = match answer {
        Ok(created) => created,
        Err(error) => {
            tasks::lifecycle::fail(state, task, &error.code(), &error.detail()).await?;
            return Err(error.into());
        }
    };
    // The answer claims the result and its charge: both must be on disk first, or the client gets an error.
    let finished = tasks::lifecycle::finish(state, task, TaskStatus::Success, move |t| {
        t.record_results(results, failed);
        t.usage = usage;
        t.measured = measured;
    })
    .await?
    .ok_or_else(|| Problem::internal("the synchronous task was not recorded"))?;
    // Only the endpoints that pass the upstream's answer on read it whole.
    let upstream = match endpoint.sync_response {
        SyncResponse::Upstream => Some(serde_json::from_slice(&body).map_err(Problem::internal)?),
        SyncResponse::ImagesStandard => None,
    };
    Ok(Submitted::Finished { task: finished, model: admitted.model, upstream })
}
