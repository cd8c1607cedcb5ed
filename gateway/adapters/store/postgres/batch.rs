//! Task changes, written in batches. A task's end updates its account's rows (the count of unfinished
//! tasks, and the pots its settlement moves), and PostgreSQL holds a row's lock until its transaction
//! commits: one transaction per task end would write an account's task ends one commit at a time, and its
//! submissions would queue behind them. Changes that arrive while a batch is being written go together in
//! the next one, so an account's rows are locked once per batch.
//!
//! Rows are locked in one order (tasks, then accounts, then pots, each by key), as submissions lock
//! accounts then pots and the statements that lock many tasks (claims, a replica leaving) lock them by id
//! or skip the locked ones, so no two transactions wait for each other in a cycle.

use super::replicas::Replica;
use super::{db_error, group, ledger};
use crate::adapters::store::{decode, encode};
use crate::domain::tasks::{TaskRecord, TaskStatus};
use crate::ports::storage::{PolledBy, StoreError, TaskChange};
use deadpool_postgres::{Object, Pool, Transaction};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most changes one transaction writes.
const BATCH_AT_MOST: usize = 512;

/// What a change resolves to: the task as written, `None` if it had moved on (or is not this replica's to
/// write), or why it could not be written.
type Outcome = Result<Option<Written>, StoreError>;

/// A task as a change wrote it.
pub(super) struct Written {
    pub task: TaskRecord,
    /// For a forward: whether this replica polls the task (else it was handed to the one that does).
    pub polled_here: bool,
}

/// The task a change is for, and what it must find.
pub(super) struct Target {
    pub task_id: String,
    /// Statuses the task must be in (a compare-and-swap).
    pub expected: Vec<TaskStatus>,
    /// The replica whose lease the task must be under, for a poller's change.
    pub fence: Option<Arc<str>>,
    /// For a forward (the upstream's acceptance of a queued task, which may not end it): this replica, which
    /// leases the task to the replica that polls it.
    pub forward: Option<(Replica, PolledBy)>,
}

/// A change queued for the writer, and where its outcome goes.
type Queued = (Target, TaskChange, oneshot::Sender<Outcome>);

/// Queues task changes for the batch writer; cheap to clone.
#[derive(Clone)]
pub(super) struct Batcher {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Batcher {
    /// Starts the batch writer on the current runtime (the database's).
    pub(super) fn start(pool: Pool) -> Batcher {
        let (queue, mut changes) = mpsc::unbounded_channel::<Queued>();
        tokio::spawn(async move {
            while let Some(batch) = group::next(&mut changes, BATCH_AT_MOST).await {
                let mut replies = Vec::with_capacity(batch.len());
                let (targets, closures): (Vec<Target>, Vec<TaskChange>) = batch
                    .into_iter()
                    .map(|(target, change, reply)| {
                        replies.push(reply);
                        (target, change)
                    })
                    .unzip();
                let pool = pool.clone();
                let written = group::isolated(async move {
                    match pool.get().await {
                        Ok(mut client) => write(&mut client, targets, closures).await,
                        Err(e) => Err(StoreError::unavailable(format!("database: {e}"))),
                    }
                });
                group::answer(replies, written.await);
            }
        });
        Batcher { queue }
    }

    /// Writes `change` to `target` with the next batch; resolves once that batch is committed.
    pub(super) async fn write(&self, target: Target, change: TaskChange) -> Outcome {
        let stopped = || StoreError::new("the database's task writer stopped");
        let (reply, outcome) = oneshot::channel();
        self.queue.send((target, change, reply)).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// A locked task as the batch has changed it so far.
struct Locked {
    task: TaskRecord,
    lease_owner: Option<String>,
    changed: bool,
}

/// Writes `changes` in one transaction, each applied to the task as the ones before it left it; a change
/// whose settlement the pots refuse is left out (and answered with the refusal). An error of the database
/// fails the whole batch.
async fn write(
    client: &mut Object,
    changes: Vec<Target>,
    closures: Vec<TaskChange>,
) -> Result<Vec<Outcome>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let mut tasks = lock_tasks(&tx, &changes).await?;
    // Each change on a copy first: which tasks end, and so which accounts' rows to lock, is known only then.
    // `after[i]`: the change before change i in the batch that changed the same task.
    let (mut proposed, mut after) = (Vec::with_capacity(changes.len()), Vec::with_capacity(changes.len()));
    let mut latest: HashMap<&str, (usize, TaskRecord)> = HashMap::new();
    for ((index, change), apply) in changes.iter().enumerate().zip(closures) {
        let previous = latest.get(change.task_id.as_str());
        after.push(previous.map(|(before, _)| *before));
        let current = match (previous, tasks.get(&change.task_id)) {
            (Some((_, task)), Some(locked)) => Some((task, locked)),
            (None, Some(locked)) => Some((&locked.task, locked)),
            (_, None) => None,
        };
        let Some((current, locked)) = current else {
            proposed.push(None);
            continue;
        };
        let leased = change.fence.as_deref().is_none_or(|fence| locked.lease_owner.as_deref() == Some(fence));
        if !change.expected.contains(&current.status) || !leased {
            proposed.push(None);
            continue;
        }
        let mut task = current.clone();
        apply(&mut task);
        if change.forward.is_some() && task.status.is_terminal() {
            proposed.push(None);
            continue;
        }
        latest.insert(change.task_id.as_str(), (index, task.clone()));
        proposed.push(Some(task));
    }
    let ending: Vec<&str> =
        proposed.iter().flatten().filter(|t| t.status.is_terminal()).map(|t| t.account.as_str()).collect();
    lock_accounts(&tx, &ending).await?;
    let mut pots = ledger::lock_funds(&tx, &ending).await?;

    // In order: a change is kept if the pots take its settlement and the change it was applied after was kept.
    let (mut outcomes, mut postings, mut ended) =
        (Vec::<Outcome>::with_capacity(changes.len()), Vec::new(), BTreeMap::new());
    let mut leases = Vec::new();
    for ((change, proposed), after) in changes.iter().zip(proposed).zip(after) {
        // What it was compared with (and applied to) was never written: its outcome is not known.
        if after.is_some_and(|before| outcomes.get(before).is_some_and(Result::is_err)) {
            outcomes.push(Err(StoreError::new("a change before it in the same batch was refused; try again")));
            continue;
        }
        let (Some(mut task), Some(locked)) = (proposed, tasks.get_mut(&change.task_id)) else {
            outcomes.push(Ok(None));
            continue;
        };
        let settled = if task.status.is_terminal() { task.settle().unwrap_or_default() } else { Default::default() };
        crate::adapters::store::unusable_usage_noted(&task, &settled);
        let settlement = settled.postings;
        let mut moved = pots.clone();
        if let Some(refused) = settlement.iter().find_map(|p| ledger::move_pots(&mut moved, p).err()) {
            outcomes.push(Err(refused));
            continue;
        }
        pots = moved;
        postings.extend(settlement);
        if task.status.is_terminal() {
            *ended.entry(task.account.clone()).or_insert(0i32) += 1;
        }
        let polled_here = match &change.forward {
            Some((replica, PolledBy::Sender)) => {
                // The replica that took it from the line may not be the one it was leased to at submission.
                leases.push((task.task_id.clone(), replica.id.clone(), false));
                true
            }
            Some((replica, PolledBy::Turn)) => {
                let poller = replica.poller_for(task.created_ms);
                let here = poller == replica.id;
                if !here {
                    leases.push((task.task_id.clone(), poller, true));
                }
                here
            }
            None => true,
        };
        outcomes.push(Ok(Some(Written { task: task.clone(), polled_here })));
        (locked.task, locked.changed) = (task, true);
    }

    let written: Vec<&TaskRecord> = tasks.values().filter(|l| l.changed).map(|l| &l.task).collect();
    store_tasks(&tx, &written).await?;
    lease(&tx, &leases).await?;
    // Every change that ends a task moves it from a live status: the ends written are these.
    let finished: Vec<&TaskRecord> = written.iter().copied().filter(|t| t.status.is_terminal()).collect();
    super::webhooks::enqueue(&tx, &finished).await?;
    super::mirrors::enqueue(&tx, &finished).await?;
    ledger::insert_entries(&tx, postings.iter()).await?;
    ledger::store_funds(&tx, &pots).await?;
    uncount(&tx, &ended).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(outcomes)
}

/// Locks the changes' tasks, in id order.
async fn lock_tasks(tx: &Transaction<'_>, changes: &[Target]) -> Result<HashMap<String, Locked>, StoreError> {
    let ids: Vec<&str> = changes.iter().map(|c| c.task_id.as_str()).collect();
    let rows = tx
        .query(
            "SELECT task_id, record, lease_owner FROM tasks WHERE task_id = ANY($1) ORDER BY task_id FOR UPDATE",
            &[&ids],
        )
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|row| Ok((row.get(0), Locked { task: decode(row.get(1))?, lease_owner: row.get(2), changed: false })))
        .collect()
}

/// Locks the accounts' rows, in name order, before their pots (as a submission does).
async fn lock_accounts(tx: &Transaction<'_>, accounts: &[&str]) -> Result<(), StoreError> {
    if accounts.is_empty() {
        return Ok(());
    }
    tx.execute(
        "SELECT 1 FROM accounts WHERE name IN (SELECT unnest($1::text[])) ORDER BY name FOR UPDATE",
        &[&accounts],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Writes the tasks' rows from their records, with one statement.
async fn store_tasks(tx: &Transaction<'_>, tasks: &[&TaskRecord]) -> Result<(), StoreError> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = tasks.iter().map(|t| t.task_id.as_str()).collect();
    let statuses: Vec<&str> = tasks.iter().map(|t| t.status.as_str()).collect();
    let ended: Vec<Option<i64>> = tasks.iter().map(|t| t.status.is_terminal().then(|| t.ended_ms())).collect();
    let upstream: Vec<Option<&str>> = tasks.iter().map(|t| t.upstream_task_id.as_deref()).collect();
    let next_poll: Vec<i64> = tasks.iter().map(|t| t.next_poll_ms).collect();
    let records = tasks.iter().map(|t| encode(*t)).collect::<Result<Vec<_>, _>>()?;
    tx.execute(
        "UPDATE tasks SET status = u.status, ended_ms = u.ended_ms, upstream_task_id = u.upstream_task_id, \
         next_poll_ms = u.next_poll_ms, record = u.record \
         FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bytea[]) \
         AS u(task_id, status, ended_ms, upstream_task_id, next_poll_ms, record) WHERE tasks.task_id = u.task_id",
        &[&ids, &statuses, &ended, &upstream, &next_poll, &records],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Leases forwarded tasks (id, replica, handed) to the replicas that poll them; a task `handed` to another
/// replica is taken with that one's next claim.
async fn lease(tx: &Transaction<'_>, leases: &[(String, Arc<str>, bool)]) -> Result<(), StoreError> {
    if leases.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = leases.iter().map(|l| l.0.as_str()).collect();
    let owners: Vec<&str> = leases.iter().map(|l| &*l.1).collect();
    let handed: Vec<bool> = leases.iter().map(|l| l.2).collect();
    tx.execute(
        "UPDATE tasks SET lease_owner = u.owner, handed_over = u.handed \
         FROM unnest($1::text[], $2::text[], $3::bool[]) AS u(task_id, owner, handed) \
         WHERE tasks.task_id = u.task_id",
        &[&ids, &owners, &handed],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Lowers each account's count of unfinished tasks by the tasks of it that ended.
async fn uncount(tx: &Transaction<'_>, ended: &BTreeMap<String, i32>) -> Result<(), StoreError> {
    if ended.is_empty() {
        return Ok(());
    }
    let (accounts, counts): (Vec<&str>, Vec<i32>) = ended.iter().map(|(a, n)| (a.as_str(), *n)).unzip();
    tx.execute(
        "UPDATE accounts SET in_flight = GREATEST(in_flight - u.ended, 0) \
         FROM unnest($1::text[], $2::int[]) AS u(name, ended) WHERE accounts.name = u.name",
        &[&accounts, &counts],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}
