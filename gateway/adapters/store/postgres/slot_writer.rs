//! The group writer of the shared slots and line: takes and give-backs of slots, and jobs joining the line,
//! that arrive while a group commits go together in the next, one transaction for all of them, the pools'
//! locks taken in name order. The lock is held until the commit, so one transaction per take would make its
//! round trips the rate of all forwards of a model, and one per join the rate a burst is queued at.
//!
//! Their commits do not wait for the disk (`synchronous_commit` off, for these transactions only): a slot is a
//! count, not money or a task's state. What a database crash can lose is a slot's row from its last moments:
//! a give-back (its task has ended, so the next full take clears the row) or a take (the upstream may then see
//! one task over its cap once, and refuses it with 429, which failover absorbs); or a join (the task is
//! durably `queued`, and its lease holder's next check puts it back in line: `dispatch::rejoin_lost`).

use super::slots::{clear_stale, counted, hold, line_waits, lock_pool, row_id};
use super::{db_error, group, line};
use crate::ports::storage::{InLine, StoreError};
use deadpool_postgres::{Object, Pool as Connections};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most takes, give-backs and joins one transaction writes.
const GROUP_AT_MOST: usize = 512;

/// A take's answer: the key it got, if any, and the slots then used on each key.
type Taken = Result<(Option<usize>, Vec<u32>), StoreError>;

/// A take asked of the group writer.
pub(super) struct Take {
    pub pool: String,
    pub caps: Vec<u32>,
    pub tried: Vec<usize>,
    pub holder: String,
    /// Not ahead of jobs waiting in the pool's line.
    pub behind_line: bool,
}

/// A give-back asked of the group writer: the slot's pool and row.
struct GiveBack {
    pool: String,
    row: String,
}

enum Op {
    Take(Take, oneshot::Sender<Taken>),
    GiveBack(GiveBack, oneshot::Sender<Result<(), StoreError>>),
    Join(InLine, oneshot::Sender<Result<(), StoreError>>),
}

/// Queues takes, give-backs and joins for the group writer; cheap to clone.
#[derive(Clone)]
pub(super) struct Slotter {
    queue: mpsc::UnboundedSender<Op>,
}

impl Slotter {
    /// Starts the group writer on the current runtime (the database's); slots are `replica`'s.
    pub(super) fn start(connections: Connections, replica: Arc<str>) -> Slotter {
        let (queue, mut queued) = mpsc::unbounded_channel::<Op>();
        tokio::spawn(async move {
            while let Some(group) = group::next(&mut queued, GROUP_AT_MOST).await {
                let (mut takes, mut gives, mut joins) = (Vec::new(), Vec::new(), Vec::new());
                for op in group {
                    match op {
                        Op::Take(take, reply) => takes.push((take, reply)),
                        Op::GiveBack(give, reply) => gives.push((give, reply)),
                        Op::Join(job, reply) => joins.push((job, reply)),
                    }
                }
                let (asked, take_replies): (Vec<Take>, Vec<_>) = takes.into_iter().unzip();
                let (rows, give_replies): (Vec<GiveBack>, Vec<_>) = gives.into_iter().unzip();
                let (jobs, join_replies): (Vec<InLine>, Vec<_>) = joins.into_iter().unzip();
                let (connections, replica) = (connections.clone(), replica.clone());
                let written = group::isolated(async move {
                    let mut client =
                        connections.get().await.map_err(|e| StoreError::unavailable(format!("database: {e}")))?;
                    write(&mut client, &replica, &asked, &rows, &jobs).await
                })
                .await;
                let done = |replies: &Vec<_>| match &written {
                    Ok(_) => Ok(replies.iter().map(|_| Ok(())).collect()),
                    Err(e) => Err(e.clone()),
                };
                let (given, joined) = (done(&give_replies), done(&join_replies));
                group::answer(take_replies, written.map(|taken| taken.into_iter().map(Ok).collect()));
                group::answer(give_replies, given);
                group::answer(join_replies, joined);
            }
        });
        Slotter { queue }
    }

    /// Takes a slot of `take.pool` with the next group.
    pub(super) async fn take(&self, take: Take) -> Taken {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Op::Take(take, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Gives `holder`'s slot of `pool` on `key` back with the next group.
    pub(super) async fn give_back(&self, pool: &str, holder: &str, key: usize) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        let give = GiveBack { pool: pool.to_string(), row: row_id(holder, key) };
        self.queue.send(Op::GiveBack(give, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Puts `job` in its pool's line with the next group.
    pub(super) async fn join(&self, job: InLine) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Op::Join(job, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::new("the database's slot writer stopped")
}

/// Gives back `gives`, puts `joins` in line and makes `takes` in one transaction, each pool's takes in the
/// order asked: (the key each got, the slots then used on each key of its pool). Every pool the group touches
/// is locked first, in name order, so the slots' rows and counts, and the line, only ever change under their
/// pool's lock.
async fn write(
    client: &mut Object,
    replica: &str,
    takes: &[Take],
    gives: &[GiveBack],
    joins: &[InLine],
) -> Result<Vec<(Option<usize>, Vec<u32>)>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await.map_err(db_error)?;
    let mut by_pool: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, take) in takes.iter().enumerate() {
        by_pool.entry(take.pool.as_str()).or_default().push(index);
    }
    let mut joining: BTreeMap<&str, Vec<&InLine>> = BTreeMap::new();
    for job in joins {
        joining.entry(job.pool.as_str()).or_default().push(job);
        by_pool.entry(job.pool.as_str()).or_default();
    }
    for give in gives {
        by_pool.entry(give.pool.as_str()).or_default();
    }
    for pool in by_pool.keys() {
        lock_pool(&tx, pool).await?;
    }
    for (pool, jobs) in joining {
        line::join(&tx, replica, pool, &jobs).await?;
    }
    if !gives.is_empty() {
        let rows: Vec<&str> = gives.iter().map(|give| give.row.as_str()).collect();
        tx.execute(
            "WITH gone AS (DELETE FROM upstream_slots WHERE holder = ANY($1) RETURNING pool, key) \
             UPDATE upstream_slot_counts c SET used = GREATEST(c.used - g.n, 0) \
             FROM (SELECT pool, key, count(*)::int AS n FROM gone GROUP BY pool, key) g \
             WHERE c.pool = g.pool AND c.key = g.key",
            &[&rows],
        )
        .await
        .map_err(db_error)?;
    }
    let mut answers = vec![(None, Vec::new()); takes.len()];
    let (mut holders, mut pools, mut keys) = (Vec::new(), Vec::new(), Vec::new());
    for (pool, asked) in by_pool.into_iter().filter(|(_, asked)| !asked.is_empty()) {
        // Caps are the same for every take of a pool (one model's, from one config).
        let caps = &takes[asked[0]].caps;
        // Both asked at once: one round trip.
        let behind_line = asked.iter().any(|i| takes[*i].behind_line);
        let (mut slots, line_waits) =
            tokio::try_join!(counted(&tx, pool, caps), async { Ok(behind_line && line_waits(&tx, pool).await?) })?;
        let mut cleared = false;
        for index in asked {
            let take = &takes[index];
            if take.behind_line && line_waits {
                answers[index] = (None, slots.slots().map(|(used, _)| used).collect());
                continue;
            }
            let mut taken = slots.take(&take.tried);
            if taken.is_none() && !cleared {
                clear_stale(&tx, pool).await?;
                cleared = true;
                // Counted again, with what this group took of the pool so far.
                slots = counted(&tx, pool, caps).await?;
                for (_, key) in pools.iter().zip(&keys).filter(|(taken_of, _)| **taken_of == pool) {
                    slots.hold(usize::try_from(*key).unwrap_or(usize::MAX));
                }
                taken = slots.take(&take.tried);
            }
            if let Some(key) = taken {
                holders.push(row_id(&take.holder, key));
                pools.push(pool);
                keys.push(i32::try_from(key).unwrap_or(i32::MAX));
            }
            answers[index] = (taken, slots.slots().map(|(used, _)| used).collect());
        }
    }
    hold(&tx, replica, &holders, &pools, &keys).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(answers)
}
