//! New tasks, written with group commit. One transaction per submission would make the database's commit
//! rate the gateway's submission rate, and an account's submissions would queue behind each other's
//! commits (a hold locks its funds row until the commit is durable). Submissions that arrive while a group is
//! being written go together in the next one: one commit for all of them, as the embedded store's writer
//! shares one sync.
//!
//! Submissions without an `Idempotency-Key` are written together, a few statements for all of them
//! (`tasks::add_all`); one with a key is written under a savepoint of its own, as its key may be taken. One
//! refused (a key taken, too many tasks, a hold the pots cannot fund) leaves the others as they were; none
//! is answered before the group's commit. The group locks its accounts' rows first, in name order, as the
//! task writer (`batch.rs`) does, so two groups never wait for each other in a cycle; if the database finds
//! one anyway, the group is written again.

use super::tasks::{self, New};
use super::{db_error, group};
use crate::ports::storage::{Inserted, StoreError};
use deadpool_postgres::{Object, Pool, Transaction};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most submissions one transaction writes.
const GROUP_AT_MOST: usize = 256;

/// Times a group is written again after the database broke a deadlock or a serialization conflict by
/// cancelling it.
const RETRIES: usize = 3;

type Outcome = Result<Inserted, StoreError>;
type Queued = (New, oneshot::Sender<Outcome>);

/// Queues new tasks for the group writer; cheap to clone.
#[derive(Clone)]
pub(super) struct Adder {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Adder {
    /// Starts the group writer on the current runtime (the database's); tasks are leased to `replica`.
    pub(super) fn start(pool: Pool, replica: Arc<str>) -> Adder {
        let (queue, mut queued) = mpsc::unbounded_channel::<Queued>();
        tokio::spawn(async move {
            while let Some(group) = group::next(&mut queued, GROUP_AT_MOST).await {
                let (news, replies): (Vec<New>, Vec<_>) = group.into_iter().unzip();
                let (pool, replica) = (pool.clone(), replica.clone());
                let written = group::isolated(async move {
                    let mut client = pool.get().await.map_err(|e| StoreError::unavailable(format!("database: {e}")))?;
                    write_retrying(&mut client, news, &replica).await
                });
                group::answer(replies, written.await);
            }
        });
        Adder { queue }
    }

    /// Adds `new` with the next group; resolves once that group is committed.
    pub(super) async fn add(&self, new: New) -> Outcome {
        let stopped = || StoreError::new("the database's submission writer stopped");
        let (reply, outcome) = oneshot::channel();
        self.queue.send((new, reply)).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// [`write`], again while the database cancels it to break a deadlock (or a serialization conflict).
async fn write_retrying(client: &mut Object, news: Vec<New>, replica: &str) -> Result<Vec<Outcome>, StoreError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match write(client, &news, replica).await {
            Err(Cancelled(e)) if attempt <= RETRIES => {
                tracing::warn!(error = %e, attempt, "submission group written again")
            }
            Err(Cancelled(e)) => return Err(db_error(e)),
            Ok(outcomes) => return outcomes,
        }
    }
}

/// The database cancelled the group's transaction; it may be written again as it was.
struct Cancelled(tokio_postgres::Error);

/// Writes `news` in one transaction: those without a key together, each of the others under a savepoint. An
/// error of the database outside one keyed submission's own statements fails the whole group.
async fn write(
    client: &mut Object,
    news: &[New],
    replica: &str,
) -> Result<Result<Vec<Outcome>, StoreError>, Cancelled> {
    let cancelled = |e: tokio_postgres::Error| {
        use tokio_postgres::error::SqlState;
        let code = e.code();
        if code == Some(&SqlState::T_R_DEADLOCK_DETECTED) || code == Some(&SqlState::T_R_SERIALIZATION_FAILURE) {
            Err(Cancelled(e))
        } else {
            Ok(Err(db_error(e)))
        }
    };
    let mut tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => return cancelled(e),
    };
    let mut accounts: Vec<&str> = news.iter().map(|n| n.task.account.as_str()).collect();
    accounts.sort_unstable();
    accounts.dedup();
    if let Err(e) =
        tx.execute("SELECT 1 FROM accounts WHERE name = ANY($1) ORDER BY name FOR UPDATE", &[&accounts]).await
    {
        return cancelled(e);
    }
    // Those without an `Idempotency-Key`, together; then each of the others under a savepoint of its own.
    let (keyed, plain): (Vec<_>, Vec<_>) = news.iter().enumerate().partition(|(_, new)| new.idempotency.is_some());
    let mut outcomes: Vec<Option<Outcome>> = (0..news.len()).map(|_| None).collect();
    if !plain.is_empty() {
        let group = plain.iter().map(|(_, new)| (*new).clone()).collect();
        let added = match tasks::add_all(&tx, group, replica).await {
            Ok(added) => added,
            Err(e) => return Ok(Err(e)),
        };
        for ((index, _), outcome) in plain.iter().zip(added) {
            outcomes[*index] = Some(outcome);
        }
    }
    for (index, new) in keyed {
        match add_one(&mut tx, new.clone(), replica).await {
            Ok(outcome) => outcomes[index] = Some(outcome),
            Err(e) => return cancelled(e),
        }
    }
    let outcomes = outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(StoreError::new("a submission was not written"))))
        .collect();
    match tx.commit().await {
        Ok(()) => Ok(Ok(outcomes)),
        Err(e) => cancelled(e),
    }
}

/// Adds one submission under a savepoint, rolled back unless it is stored. A failure of its own statements
/// is its outcome; the savepoint's own failure is the group's.
async fn add_one(tx: &mut Transaction<'_>, new: New, replica: &str) -> Result<Outcome, tokio_postgres::Error> {
    let savepoint = tx.transaction().await?;
    let outcome = tasks::add(&savepoint, new, replica).await;
    if matches!(outcome, Ok(Inserted::Stored(_))) {
        savepoint.commit().await?;
    } else {
        savepoint.rollback().await?;
    }
    Ok(outcome)
}
