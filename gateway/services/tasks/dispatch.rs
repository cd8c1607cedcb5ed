//! Sending tasks upstream within its capacity: a create goes to a key with a free slot and, refused there
//! for capacity or failed without taking the job, to another; a task no key can take yet waits `queued`
//! (durably, with the body it is sent with) and is sent when [`Capacity`] grants it a slot. A task the
//! upstream failed for its own reasons (a transient code of `spec/upstream.yaml`) waits again, for
//! another key, while it has attempts and time left.

use super::lifecycle::{fail, finish};
use crate::domain::admission::Admitted;
use crate::domain::catalog::{ModelSpec, TRANSIENT_FAILURES};
use crate::domain::clock::now_ms;
use crate::domain::errors::Problem;
use crate::domain::tasks::{Attempt, TaskError, TaskRecord, TaskStatus};
use crate::ports::storage::{Commit, PolledBy, Storage, StoredTask, TaskRef};
use crate::ports::upstream::{Created, Refusal, UpstreamError};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use crate::services::runtime::capacity::{Capacity, Grant};
use crate::support::telemetry;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How long a key that refused or failed a create is not offered again.
const REFUSED_KEY_PAUSE: Duration = Duration::from_secs(1);
/// How often a line looks for slots another replica freed.
const SHARED_LOOK_EVERY: Duration = Duration::from_millis(250);
/// How often the lines are searched for tasks whose deadline passed while they waited.
const OVERDUE_EVERY: Duration = Duration::from_secs(1);
/// How long a task that could not be sent (the store failed) waits before it is read again.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// Splits the live tasks the store handed this process: those waiting for a slot join the line, those
/// the upstream has keep their slots counted; every task but the waiting ones is the poller's.
pub async fn sort_claimed(store: &dyn Storage, capacity: &Capacity, claimed: Vec<TaskRecord>) -> Vec<TaskRecord> {
    let mut polled = Vec::with_capacity(claimed.len());
    for task in claimed {
        let Some(model) = ModelSpec::find(&task.model) else {
            polled.push(task);
            continue;
        };
        if task.waits_for_slot() {
            let weight = queue_weight(store, &task.account).await;
            capacity.enqueue(&task, weight, model, Vec::new(), false).await;
            continue;
        }
        if let Some(key) = task.slot_key() {
            capacity.restore(&task.task_id, model, key);
        }
        polled.push(task);
    }
    polled
}

/// Puts back in line the tasks leased to this process that wait for a slot and that no line holds nor any
/// process sends: lost by a bug, or, where the store keeps the line, handed a slot by a replica that stopped
/// before sending them.
pub async fn rejoin_lost(state: &Gateway, waiting: Vec<TaskRecord>) {
    for task in state.capacity.lost(waiting).await {
        let Some(model) = ModelSpec::find(&task.model) else { continue };
        tracing::warn!(task_id = task.task_id, "a task waiting for an upstream slot was in no line; it waits again");
        let weight = queue_weight(&*state.store, &task.account).await;
        state.capacity.enqueue(&task, weight, model, Vec::new(), false).await;
    }
}

/// What sending a job came to.
pub enum Sent {
    /// Key `key` took it.
    Taken { key: usize, created: Created },
    /// Every key with a free slot refused it for capacity or failed it: it must wait. The slots are given
    /// back.
    NoKey,
    /// The upstream refused the job itself, or its answer was lost (a timeout after sending, when the job
    /// may exist): the slot is given back and the job is not sent again.
    Failed(UpstreamError),
}

/// Forwards an async task whose record is already stored (deferred), on a key with a free slot, and
/// records the upstream's task id; with no key free, the task waits in line, durably. A refused forward
/// ends the task as `failed` before the client hears of it.
pub async fn forward_async(
    state: &Gateway,
    task: Box<StoredTask>,
    admitted: &Admitted,
) -> Result<TaskRecord, ServiceError> {
    let model = admitted.model;
    let task_id = task.record.task_id.clone();
    let Some(key) = state.capacity.take(model, &[], false, &task_id).await else {
        return wait_for_slot(state, task.into(), model, &admitted.envelope).await;
    };
    let started_ms = now_ms();
    match send(state, model, &admitted.envelope, key, &task_id).await {
        Sent::Taken { key, created } => {
            let Some(upstream_id) = created.task_id else {
                state.capacity.give_back(model, key, &task_id);
                fail(state, task_id.as_str(), "UpstreamMalformed", "no task id in the upstream's answer").await?;
                return Err(UpstreamError::Malformed("no task id".into()).into());
            };
            // Durable: it also persists the task and its hold, written deferred before the forward. The body
            // is kept while the task is live, to send it again should the upstream fail it for its own reasons.
            let envelope = String::from_utf8_lossy(&admitted.envelope).into_owned();
            let accepted = Accepted { key, started_ms, upstream_id, by: PolledBy::Turn };
            taken(state, task.into(), model, accepted, Some(envelope))
                .await?
                .ok_or_else(|| Problem::internal("task vanished after forward").into())
        }
        Sent::NoKey => wait_for_slot(state, task.into(), model, &admitted.envelope).await,
        Sent::Failed(error) => {
            fail(state, task_id.as_str(), &error.code(), &error.detail()).await?;
            Err(error.into())
        }
    }
}

/// Sends `envelope` with key `key`, whose slot the caller took, and on to the other keys with a free slot
/// while one refuses it for capacity or fails without taking it. With no other key free, a failure (a 5xx,
/// a broken connection) is tried again on the same key, twice, after a pause; a refusal for capacity waits.
pub async fn send(state: &Gateway, model: &'static ModelSpec, envelope: &Bytes, mut key: usize, holder: &str) -> Sent {
    let mut tried = Vec::new();
    let (mut pause, mut again) = (Duration::from_millis(100), 2);
    loop {
        crate::support::metrics::upstream_call("create");
        let create = state.upstream.create(model, envelope, key);
        let error = match create.instrument(telemetry::step("upstream.create", None)).await {
            Ok(created) => return Sent::Taken { key, created },
            Err(error) => error,
        };
        crate::support::metrics::upstream_error("create");
        if !error.try_another_key() {
            state.capacity.give_back(model, key, holder);
            return Sent::Failed(error);
        }
        tracing::warn!(model = model.id, key, error = %error, "upstream key refused or failed a create");
        let refused = matches!(error, UpstreamError::Answered { refusal: Refusal::RateLimited, .. });
        tried.push(key);
        if let Some(next) = state.capacity.take(model, &tried, true, holder).await {
            crate::support::metrics::failover("refused");
            state.capacity.give_back_later(model, key, holder, REFUSED_KEY_PAUSE);
            key = next;
        } else if refused {
            state.capacity.give_back_later(model, key, holder, REFUSED_KEY_PAUSE);
            return Sent::NoKey;
        } else if again > 0 {
            tokio::time::sleep(pause).await;
            (pause, again) = (pause * 4, again - 1);
            tried.pop();
        } else {
            state.capacity.give_back(model, key, holder);
            return Sent::Failed(error);
        }
    }
}

/// Stores a task that no key can take yet as waiting for a slot (durably: its acceptance is about to be
/// answered), with the body it will be sent with, and puts it in line.
pub async fn wait_for_slot(
    state: &Gateway,
    task: TaskRef,
    model: &'static ModelSpec,
    envelope: &Bytes,
) -> Result<TaskRecord, ServiceError> {
    let body = String::from_utf8_lossy(envelope).into_owned();
    let waiting = state
        .store
        .change_task(task, &[TaskStatus::Queued], Commit::Durable, Box::new(move |t| t.envelope = Some(body)))
        .await?
        .ok_or_else(|| crate::domain::errors::Problem::internal("the task ended before it was queued"))?;
    let weight = queue_weight(&*state.store, &waiting.account).await;
    state.capacity.enqueue(&waiting, weight, model, Vec::new(), false).await;
    Ok(waiting)
}

/// The account's share of the slots while its tasks wait: 1 unless an operator set it (or it cannot be read).
pub async fn queue_weight(store: &dyn Storage, account: &str) -> u32 {
    store.account(account).await.ok().flatten().and_then(|a| a.queue_weight).unwrap_or(1)
}

/// A create the upstream accepted: on which key, when it was sent, the upstream's id, and who polls it.
struct Accepted {
    key: usize,
    started_ms: i64,
    upstream_id: String,
    by: PolledBy,
}

/// Records that key `key` took the task (its upstream id, the attempt, the body for a later resend),
/// durably, and hands it to the poller; `None` if the task ended meanwhile (cancelled while it was sent).
async fn taken(
    state: &Gateway,
    task: TaskRef,
    model: &'static ModelSpec,
    accepted: Accepted,
    envelope: Option<String>,
) -> Result<Option<TaskRecord>, ServiceError> {
    let Accepted { key, started_ms, upstream_id, by } = accepted;
    let task_id = task.task_id().to_string();
    let first_poll = now_ms() + state.settings.poller.schedule().first(model.expected_seconds);
    let id = upstream_id.clone();
    let forwarded = state
        .store
        .forwarded(
            task,
            by,
            Box::new(move |t| {
                t.upstream_task_id = Some(id.clone());
                t.next_poll_ms = first_poll;
                t.updated_ms = now_ms();
                if envelope.is_some() {
                    t.envelope = envelope;
                }
                let attempt = Attempt { key: key as u32, started_ms, upstream_task_id: Some(id), failed: None };
                match t.attempts.last_mut() {
                    Some(last) if last.upstream_task_id.is_none() && last.failed.is_none() => *last = attempt,
                    _ => t.attempts.push(attempt),
                }
            }),
        )
        .await
        .inspect_err(|_| {
            // Not recorded: the task ends as interrupted once the store answers, and nothing will end it here
            // to give its slot back. The upstream's job runs on meanwhile; should a create go over the cap
            // for it, the upstream refuses it and the job waits again.
            state.poller.take_over(task_id.clone());
            state.capacity.give_back(model, key, &task_id);
        })?;
    let Some(forwarded) = forwarded else {
        // Ended while it was sent (a cancel): the upstream's job is not wanted.
        let _ = state.upstream.cancel(model.region, key, &upstream_id).await;
        state.capacity.give_back(model, key, &task_id);
        return Ok(None);
    };
    state.capacity.hold(&task_id, model, key, forwarded.polled_here);
    if forwarded.polled_here {
        state.poller.schedule(forwarded.task.clone());
    }
    Ok(Some(forwarded.task))
}

/// Sends the queued tasks granted a slot, until the process ends. Call once, on the actix system.
pub async fn run(state: Arc<Gateway>) {
    let mut overdue_checked = std::time::Instant::now();
    loop {
        // Where replicas share the slots, one may free on another replica: the line looks again shortly.
        tokio::select! {
            () = state.capacity.granted.notified() => {}
            () = tokio::time::sleep(SHARED_LOOK_EVERY) => {}
        }
        state.capacity.hand_on_shared().await;
        if overdue_checked.elapsed() >= OVERDUE_EVERY {
            overdue_checked = std::time::Instant::now();
            for (task_id, model) in state.capacity.overdue(now_ms()).await {
                tokio::task::spawn_local(time_out_waiting(state.clone(), task_id, model));
            }
        }
        for grant in state.capacity.take_granted() {
            tokio::task::spawn_local(send_granted(state.clone(), grant));
        }
    }
}

async fn send_granted(state: Arc<Gateway>, grant: Grant) {
    let Grant { task_id, model, key, tried } = grant;
    crate::support::failpoint::reached("after-turn");
    let _sent = scopeguard::guard((state.clone(), task_id.clone()), |(state, task_id)| state.capacity.sent(&task_id));
    let sent = match state.store.task(&task_id).await {
        Ok(Some(task)) if task.waits_for_slot() => {
            // Sent after waiting in line: traced under the job's submit.
            let span = telemetry::step("job.send", task.trace.as_deref());
            send_waiting(&state, task, model, key, tried.clone()).instrument(span).await
        }
        Ok(_) => return state.capacity.give_back(model, key, &task_id),
        Err(e) => {
            state.capacity.give_back(model, key, &task_id);
            Err(e.into())
        }
    };
    // The slot went back with the error; the task, if it still waits, waits again.
    if let Err(e) = sent {
        tracing::warn!(task_id, error = %e, "a queued task could not be sent; it waits again");
        requeue(&state, &task_id, model, tried).await;
    }
}

/// Puts a task back at the head of its account's line once the store answers, if it still waits.
/// Ends a task whose deadline passed while it waited in line (its hold given back); should the store fail,
/// it waits again, to be ended on a later look.
async fn time_out_waiting(state: Arc<Gateway>, task_id: String, model: &'static ModelSpec) {
    if let Err(e) = waited_too_long(&state, &task_id).await {
        tracing::warn!(task_id, error = %e, "could not time out a task that waited past its deadline");
        requeue(&state, &task_id, model, Vec::new()).await;
    }
}

async fn waited_too_long(state: &Gateway, task_id: &str) -> Result<(), ServiceError> {
    let error = TaskError {
        code: "timeout".into(),
        message: "The task waited for an upstream slot until its model's deadline; nothing was charged.".into(),
    };
    finish(state, task_id, TaskStatus::Timeout, move |t| t.error = Some(error)).await?;
    Ok(())
}

async fn requeue(state: &Gateway, task_id: &str, model: &'static ModelSpec, tried: Vec<usize>) {
    loop {
        match state.store.task(task_id).await {
            Ok(Some(task)) if task.waits_for_slot() => {
                return state.capacity.enqueue(&task, 1, model, tried, true).await;
            }
            Ok(_) => return,
            Err(_) => tokio::time::sleep(STORE_RETRY).await,
        }
    }
}

async fn send_waiting(
    state: &Gateway,
    task: TaskRecord,
    model: &'static ModelSpec,
    key: usize,
    tried: Vec<usize>,
) -> Result<(), ServiceError> {
    let task_id = task.task_id.clone();
    if now_ms() >= task.deadline_ms {
        state.capacity.give_back(model, key, &task_id);
        return waited_too_long(state, &task_id).await;
    }
    // The attempt is on disk before the job is sent: should this process stop before the answer is
    // recorded, the task is not sent blindly again (the job may exist upstream); it ends as interrupted.
    let started_ms = now_ms();
    let attempt = Attempt { key: key as u32, started_ms, upstream_task_id: None, failed: None };
    let sending = state
        .store
        .change_task(
            TaskRef::Id(task_id.clone()),
            &[TaskStatus::Queued],
            Commit::Durable,
            Box::new(move |t| t.attempts.push(attempt)),
        )
        .await;
    let Some(sending) = sending.inspect_err(|_| state.capacity.give_back(model, key, &task_id))? else {
        state.capacity.give_back(model, key, &task_id);
        return Ok(());
    };
    let envelope = Bytes::from(sending.envelope.clone().unwrap_or_default());
    match send(state, model, &envelope, key, &task_id).await {
        Sent::Taken { key, created } => match created.task_id {
            Some(upstream_id) => {
                let accepted = Accepted { key, started_ms, upstream_id, by: PolledBy::Sender };
                taken(state, TaskRef::Id(task_id), model, accepted, None).await?;
            }
            None => {
                state.capacity.give_back(model, key, &task_id);
                fail(state, task_id.as_str(), "UpstreamMalformed", "no task id in the upstream's answer").await?;
            }
        },
        Sent::NoKey => {
            let mut tried = tried;
            tried.push(key);
            let waiting = state
                .store
                .change_task(
                    TaskRef::Id(task_id.clone()),
                    &[TaskStatus::Queued],
                    Commit::Durable,
                    // Nothing took it: the attempt never was.
                    Box::new(|t| drop(t.attempts.pop_if(|a| a.upstream_task_id.is_none()))),
                )
                .await?;
            if waiting.is_some() {
                state.capacity.enqueue(&sending, 1, model, tried, true).await;
            }
        }
        Sent::Failed(error) => {
            fail(state, task_id.as_str(), &error.code(), &error.detail()).await?;
        }
    }
    Ok(())
}

/// Whether a task the upstream failed with `error` is sent again instead: a transient code, attempts
/// left and time before its deadline. If so, it waits for a slot again (another key first) and `true`.
pub async fn retry_transient(state: &Gateway, task_id: &str, error: &TaskError) -> Result<bool, ServiceError> {
    if !TRANSIENT_FAILURES.contains(&error.code.as_str()) {
        return Ok(false);
    }
    let Some(task) = state.store.task(task_id).await? else { return Ok(false) };
    let Some(model) = ModelSpec::find(&task.model) else { return Ok(false) };
    let attempts = task.attempts.len() as u32;
    if task.envelope.is_none() || attempts > state.settings.transient_retries || now_ms() >= task.deadline_ms {
        return Ok(false);
    }
    let Some(key) = task.slot_key() else { return Ok(false) };
    let code = error.code.clone();
    let waiting = state
        .store
        .change_task(
            TaskRef::Polled(task_id.to_string()),
            &[TaskStatus::Queued, TaskStatus::Running],
            Commit::Durable,
            Box::new(move |t| {
                t.status = TaskStatus::Queued;
                t.upstream_task_id = None;
                t.running_ms = None;
                t.updated_ms = now_ms();
                if let Some(last) = t.attempts.last_mut() {
                    last.failed = Some(code);
                }
            }),
        )
        .await?;
    let Some(waiting) = waiting else { return Ok(false) };
    crate::support::metrics::failover("transient");
    tracing::info!(task_id, key, code = error.code, "upstream failed the task for its own reasons; sending it again");
    state.capacity.release(task_id, model, key);
    state.capacity.enqueue(&waiting, 1, model, vec![key], true).await;
    Ok(true)
}
