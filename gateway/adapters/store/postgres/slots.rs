//! The upstream's running slots, shared by the replicas (`upstream_slots`): a row per task the upstream has
//! or is being sent (every such task is stored first, live), counted while the task is live and the replica
//! holding it beats. Takes hold an advisory lock per pool until their commit, so two replicas never both take
//! a key's last slot.
//!
//! Takes and give-backs are written in groups: those that arrive while a group commits go together in the
//! next, one transaction for all of them, the pools' locks taken in name order. The lock is held until the
//! commit, so one transaction per take would make its round trips the rate of all forwards of a model.
//!
//! Their commits do not wait for the disk (`synchronous_commit` off, for these transactions only): a slot is a
//! count, not money or a task's state. What a database crash can lose is a slot's row from its last moments:
//! a give-back (its task has ended, so the next full take clears the row) or a take (the upstream may then see
//! one task over its cap once, and refuses it with 429, which failover absorbs).

use super::replicas::alive_since;
use super::{db_error, group};
use crate::domain::capacity::Pool;
use crate::ports::storage::StoreError;
use deadpool_postgres::{Object, Pool as Connections, Transaction};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most takes and give-backs one transaction writes.
const GROUP_AT_MOST: usize = 512;

pub(super) fn row_id(holder: &str, key: usize) -> String {
    format!("{holder}/{key}")
}

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
}

/// Queues takes and give-backs for the group writer; cheap to clone.
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
                let (mut takes, mut gives) = (Vec::new(), Vec::new());
                for op in group {
                    match op {
                        Op::Take(take, reply) => takes.push((take, reply)),
                        Op::GiveBack(give, reply) => gives.push((give, reply)),
                    }
                }
                let (asked, take_replies): (Vec<Take>, Vec<_>) = takes.into_iter().unzip();
                let (rows, give_replies): (Vec<GiveBack>, Vec<_>) = gives.into_iter().unzip();
                let (connections, replica) = (connections.clone(), replica.clone());
                let written = group::isolated(async move {
                    let mut client =
                        connections.get().await.map_err(|e| StoreError::unavailable(format!("database: {e}")))?;
                    write(&mut client, &replica, &asked, &rows).await
                })
                .await;
                let given = match &written {
                    Ok(_) => Ok(give_replies.iter().map(|_| Ok(())).collect()),
                    Err(e) => Err(e.clone()),
                };
                group::answer(take_replies, written.map(|taken| taken.into_iter().map(Ok).collect()));
                group::answer(give_replies, given);
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
}

fn stopped() -> StoreError {
    StoreError::new("the database's slot writer stopped")
}

/// Gives back `gives` and makes `takes` in one transaction, each pool's takes in the order asked: (the key
/// each got, the slots then used on each key of its pool). Every pool the group touches is locked first, in
/// name order, so the slots' rows and counts only ever change under their pool's lock.
async fn write(
    client: &mut Object,
    replica: &str,
    takes: &[Take],
    gives: &[GiveBack],
) -> Result<Vec<(Option<usize>, Vec<u32>)>, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await.map_err(db_error)?;
    let mut by_pool: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, take) in takes.iter().enumerate() {
        by_pool.entry(take.pool.as_str()).or_default().push(index);
    }
    for give in gives {
        by_pool.entry(give.pool.as_str()).or_default();
    }
    for pool in by_pool.keys() {
        lock_pool(&tx, pool).await?;
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

/// Writes the slots `holders` hold (on `pools` and `keys`, one each) as `replica`'s, counting those new to
/// their pool's key; the caller holds their pools' locks.
pub(super) async fn hold(
    tx: &Transaction<'_>,
    replica: &str,
    holders: &[String],
    pools: &[&str],
    keys: &[i32],
) -> Result<(), StoreError> {
    if holders.is_empty() {
        return Ok(());
    }
    tx.execute(
        "WITH held AS (INSERT INTO upstream_slots (holder, pool, key, replica) \
             SELECT h, p, k, $4 FROM unnest($1::text[], $2::text[], $3::int[]) AS u(h, p, k) \
             ON CONFLICT (holder) DO UPDATE SET replica = EXCLUDED.replica \
             RETURNING pool, key, xmax = 0 AS fresh) \
         INSERT INTO upstream_slot_counts (pool, key, used) \
         SELECT pool, key, count(*) FROM held WHERE fresh GROUP BY pool, key \
         ON CONFLICT (pool, key) DO UPDATE SET used = upstream_slot_counts.used + EXCLUDED.used",
        &[&holders, &pools, &keys, &replica],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Whether jobs wait in `pool`'s line (`line.rs`).
async fn line_waits(tx: &Transaction<'_>, pool: &str) -> Result<bool, StoreError> {
    let row =
        tx.query_one("SELECT EXISTS (SELECT 1 FROM slot_line WHERE pool = $1)", &[&pool]).await.map_err(db_error)?;
    Ok(row.get(0))
}

/// Holds the pool's lock until the transaction ends: takes of its slots and its line go one at a time.
pub(super) async fn lock_pool(tx: &Transaction<'_>, pool: &str) -> Result<(), StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 39))", &[&pool]).await.map_err(db_error)?;
    Ok(())
}

/// Clears the pool's slots of replicas that stopped beating (their tasks are taken over by others, which
/// adopt the slots of those the upstream still has) and of tasks that have ended (a give-back lost with the
/// database's last moments, or one that raced an adoption): done when they would keep a task waiting.
pub(super) async fn clear_stale(tx: &Transaction<'_>, pool: &str) -> Result<(), StoreError> {
    let cleared = tx.execute(
        "DELETE FROM upstream_slots s WHERE pool = $1 AND (replica NOT IN (SELECT id FROM replicas WHERE seen_ms >= $2) \
         OR NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = split_part(s.holder, '/', 1) \
         AND t.status IN ('queued', 'running')))",
        &[&pool, &alive_since()],
    )
    .await
    .map_err(db_error)?;
    if cleared == 0 {
        return Ok(());
    }
    // Counted again from the rows left.
    tx.execute(
        "WITH counted AS (SELECT key, count(*)::int AS n FROM upstream_slots WHERE pool = $1 GROUP BY key) \
         UPDATE upstream_slot_counts c SET used = COALESCE((SELECT n FROM counted WHERE counted.key = c.key), 0) \
         WHERE c.pool = $1",
        &[&pool],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// The pool's slots in use on each key, as its counts keep them (a row per key, kept with the slots' rows:
/// counting the rows on each take read every running task's).
pub(super) async fn counted(tx: &Transaction<'_>, pool: &str, caps: &[u32]) -> Result<Pool, StoreError> {
    let rows =
        tx.query("SELECT key, used FROM upstream_slot_counts WHERE pool = $1", &[&pool]).await.map_err(db_error)?;
    let mut slots = Pool::new(caps.to_vec());
    for row in rows {
        let (key, used): (i32, i32) = (row.get(0), row.get(1));
        (0..used).for_each(|_| slots.hold(usize::try_from(key).unwrap_or(usize::MAX)));
    }
    Ok(slots)
}

pub(super) async fn adopt(
    client: &mut Object,
    replica: &str,
    pool: &str,
    holder: &str,
    key: usize,
) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    lock_pool(&tx, pool).await?;
    hold(&tx, replica, &[row_id(holder, key)], &[pool], &[i32::try_from(key).unwrap_or(i32::MAX)]).await?;
    tx.commit().await.map_err(db_error)
}
