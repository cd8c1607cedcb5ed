//! The replicas sharing the database. Each has an id of its own for as long as it runs and is seen every
//! [`BEAT`]: the beat renews at once the leases on every task it polls (a task names its replica, and its
//! lease lasts while that replica beats: no write per task), and counts the replicas seen lately, which
//! share the upstream keys' query limits. A replica that stops beating loses its leases after [`LEASE_MS`],
//! and the others take its tasks over ([`claim`]); one that stops cleanly gives them up at once. A replica
//! stays listed until none of its tasks is left to take over.
//!
//! A new replica does not query the upstream until [`JOIN_WAIT`] after its first beat: by then every other
//! replica has counted it and lowered its share, so the keys' limits hold while it joins. One that leaves is
//! counted until it has missed [`GONE_AFTER_MS`] of beats, and each replica divides by the most replicas it
//! counted in its last [`COUNTS_KEPT`] beats: the others raise their shares only after it is gone, and not
//! on the first beats after a database outage, when the others have not beaten again yet. One that cannot
//! beat for [`GONE_AFTER_MS`] (cut off from the database) stops querying, and joins again when it can.
//!
//! The replicas counted take turns by [`SLICE_MS`] of creation time: a task the upstream accepts is handed
//! to the replica whose turn its creation time falls in ([`Replica::poller_for`]), which takes it with its
//! next claim, and so are the tasks of a replica that stopped. The upstream lists tasks by creation time, so
//! a replica's list windows then report its own tasks rather than everyone's; and as each replica paces the
//! keys at an equal share, each has an equal share of the tasks too, whatever their number. A task sent from
//! the shared line for upstream slots stays with the replica that sent it ([`crate::ports::storage::PolledBy`]).

use super::db_error;
use crate::adapters::store::decode;
use crate::domain::tasks::TaskRecord;
use crate::ports::storage::StoreError;
use deadpool_postgres::{GenericClient, Object, Pool};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How often a replica is seen (which renews its leases).
pub(super) const BEAT: Duration = Duration::from_secs(1);
/// How long a replica's leases last unrenewed: a dead replica's tasks are taken over within it.
pub(super) const LEASE_MS: i64 = 10_000;
/// Replicas seen since this moment are alive: their leases and slots hold.
pub(super) fn alive_since() -> i64 {
    crate::domain::clock::now_ms() - LEASE_MS
}

/// A replica not seen for this long no longer counts.
const GONE_AFTER_MS: i64 = 3_000;
/// How long after its first beat a replica starts querying the upstream.
const JOIN_WAIT: Duration = Duration::from_millis(2_500);
/// How many of its last counts of the replicas a replica divides by the largest of.
const COUNTS_KEPT: usize = 4;
/// Most tasks one claim takes over.
const CLAIM_AT_MOST: i64 = 10_000;
/// The replicas' turns at polling, in creation time. Short, so that a burst of a few seconds is shared out
/// evenly (a replica with more than its share of the tasks polls them at its share of the keys' limits,
/// while the others' go unused); long enough that a list window, cut to its replica's turns, covers several
/// seconds of tasks (shorter turns cost more upstream queries per job: bench/HISTORY.md).
const SLICE_MS: i64 = 3_000;

/// This replica: its id, its share of the upstream keys (0 until it may query), and the replicas taking
/// handed tasks it saw at its last beat, with when.
#[derive(Clone)]
pub(super) struct Replica {
    pub id: Arc<str>,
    share: Arc<AtomicU32>,
    pollers: Arc<RwLock<Pollers>>,
}

/// The replicas that take handed tasks, in id order, and when they were read.
type Pollers = (Arc<[Arc<str>]>, Instant);

impl Replica {
    pub(super) fn new() -> Replica {
        let id: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        Replica { pollers: Arc::new(RwLock::new((Arc::from([id.clone()]), Instant::now()))), id, share: Arc::default() }
    }

    /// None once its last beat is so old that the others no longer count it (they take its share).
    pub(super) fn share(&self) -> Option<u32> {
        let counted_at = self.pollers.read().unwrap_or_else(|e| e.into_inner()).1;
        if counted_at.elapsed() > Duration::from_millis(GONE_AFTER_MS as u64) {
            return None;
        }
        Some(self.share.load(Ordering::Acquire)).filter(|share| *share > 0)
    }

    /// The replica whose turn `created_ms` falls in, among those that take handed tasks seen at the last
    /// beat; this one if that beat is not recent (the database was out of reach: who is still there is not
    /// known).
    pub(super) fn poller_for(&self, created_ms: i64) -> Arc<str> {
        let (pollers, counted_at) = self.pollers.read().unwrap_or_else(|e| e.into_inner()).clone();
        if counted_at.elapsed() > Duration::from_millis(GONE_AFTER_MS as u64) {
            return self.id.clone();
        }
        let turn = created_ms.div_euclid(SLICE_MS).unsigned_abs() % pollers.len().max(1) as u64;
        pollers.get(turn as usize).cloned().unwrap_or_else(|| self.id.clone())
    }

    /// Beats every [`BEAT`] on the current runtime (the database's) until the process ends.
    pub(super) fn start_beating(&self, pool: Pool) {
        let replica = self.clone();
        tokio::spawn(async move {
            let (mut joined, mut last_seen) = (Instant::now(), Instant::now());
            let gone_after = Duration::from_millis(GONE_AFTER_MS as u64);
            let mut ticks = tokio::time::interval(BEAT);
            let mut counts = std::collections::VecDeque::with_capacity(COUNTS_KEPT);
            loop {
                ticks.tick().await;
                // Cut off for so long that the others stopped counting it: it joins again once it beats.
                if last_seen.elapsed() > gone_after {
                    replica.share.store(0, Ordering::Release);
                    joined = Instant::now();
                }
                match replica.beat(&pool).await {
                    Ok(count) => {
                        last_seen = Instant::now();
                        if counts.len() == COUNTS_KEPT {
                            counts.pop_front();
                        }
                        counts.push_back(count);
                        if joined.elapsed() >= JOIN_WAIT {
                            let most = counts.iter().copied().max().unwrap_or(1);
                            replica.share.store(most.max(1), Ordering::Release);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e.reason(), "could not renew this replica's leases"),
                }
            }
        });
    }

    /// Lists this replica before it takes any task, so that its leases are known to the others.
    pub(super) async fn join(&self, client: &Object) -> Result<(), StoreError> {
        self.seen(client, crate::domain::clock::now_ms()).await
    }

    async fn seen(&self, client: &Object, now: i64) -> Result<(), StoreError> {
        client
            .execute(
                "INSERT INTO replicas (id, seen_ms, takes_handovers) VALUES ($1, $2, true) \
                 ON CONFLICT (id) DO UPDATE SET seen_ms = $2",
                &[&&*self.id, &now],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Marks this replica seen (its leases renewed), and counts the replicas seen lately.
    async fn beat(&self, pool: &Pool) -> Result<u32, StoreError> {
        let client = pool.get().await.map_err(|e| StoreError::unavailable(format!("database: {e}")))?;
        let now = crate::domain::clock::now_ms();
        self.seen(&client, now).await?;
        let rows = client
            .query(
                "SELECT id, takes_handovers FROM replicas WHERE seen_ms >= $1 ORDER BY id",
                &[&(now - GONE_AFTER_MS)],
            )
            .await
            .map_err(db_error)?;
        let count = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let pollers = rows.iter().filter(|row| row.get::<_, bool>(1)).map(|row| Arc::from(row.get::<_, &str>(0)));
        *self.pollers.write().unwrap_or_else(|e| e.into_inner()) = (pollers.collect(), Instant::now());
        // Replicas long gone, once none of their tasks is left to take over.
        client
            .execute(
                "DELETE FROM replicas WHERE seen_ms < $1 AND NOT EXISTS (SELECT 1 FROM tasks \
                 WHERE lease_owner = replicas.id AND status IN ('queued', 'running'))",
                &[&(now - 10 * GONE_AFTER_MS)],
            )
            .await
            .map_err(db_error)?;
        // Request counts of seconds long past (any replica may delete them).
        client.execute("DELETE FROM key_rates WHERE second < $1", &[&(now / 1000 - 10)]).await.map_err(db_error)?;
        Ok(count)
    }

    /// Leaves: gives up every lease (the others take the tasks over at once) and is no longer counted.
    /// Its row stays, as last seen one lease ago, so that a task another replica hands it in the next
    /// moments (before their next beat) is taken over at once; a beat deletes the row well after that.
    pub(super) async fn leave(&self, client: &Object) -> Result<(), StoreError> {
        let lapsed = crate::domain::clock::now_ms() - LEASE_MS - 1;
        client
            .execute("UPDATE replicas SET seen_ms = $2 WHERE id = $1", &[&&*self.id, &lapsed])
            .await
            .map_err(db_error)?;
        client
            .execute(
                "UPDATE tasks SET lease_owner = NULL WHERE task_id IN (SELECT task_id FROM tasks \
                 WHERE lease_owner = $1 ORDER BY task_id FOR UPDATE)",
                &[&&*self.id],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }
}

/// The tasks `replica` is to poll from now on: those handed to it. The live tasks whose lease ran out (their
/// replica stopped beating) or that never had one are handed out first, each to the replica whose turn its
/// creation time falls in among the replicas seen now (as [`Replica::poller_for`] at a beat), so that the
/// replicas left share them evenly; to `replica` itself if none is seen (all just came back). Only
/// those are looked at (`tasks_handed_over`, `tasks_by_lease`): the tasks of live replicas cost the claim
/// nothing.
///
/// A task stays flagged as handed over until a later claim is told (`taken`) that its poller has it: an
/// answer lost on the way (the database stopped as it committed) is given again by the next claim.
pub(super) async fn claim(client: &Object, replica: &str, taken: &[String]) -> Result<Vec<TaskRecord>, StoreError> {
    let now = crate::domain::clock::now_ms();
    if !taken.is_empty() {
        client
            .execute(
                "UPDATE tasks SET handed_over = false WHERE task_id IN (SELECT task_id FROM tasks \
                 WHERE task_id = ANY($1) AND lease_owner = $2 AND handed_over FOR UPDATE SKIP LOCKED)",
                &[&taken, &replica],
            )
            .await
            .map_err(db_error)?;
    }
    let taken_over = client
        .execute(
            "WITH turns AS (SELECT array_agg(id ORDER BY id) AS ids FROM replicas \
             WHERE takes_handovers AND seen_ms >= $5) \
             UPDATE tasks SET handed_over = true, lease_owner = \
             COALESCE((SELECT ids[((created_ms / $4) % cardinality(ids))::int + 1] FROM turns), $1) \
             WHERE task_id IN (SELECT task_id FROM tasks WHERE status IN ('queued', 'running') \
             AND (lease_owner IS NULL OR lease_owner IN (SELECT id FROM replicas WHERE seen_ms < $2)) \
             ORDER BY next_poll_ms LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&replica, &(now - LEASE_MS), &CLAIM_AT_MOST, &SLICE_MS, &(now - GONE_AFTER_MS)],
        )
        .await
        .map_err(db_error)?;
    if taken_over > 0 {
        tracing::info!(tasks = taken_over, "handing out the tasks of replicas that stopped");
    }
    let handed = client
        .query("SELECT record FROM tasks WHERE lease_owner = $1 AND handed_over LIMIT $2", &[&replica, &CLAIM_AT_MOST])
        .await
        .map_err(db_error)?;
    handed.iter().map(|row| decode(row.get(0))).collect()
}

/// The live tasks leased to `replica`, by id after `after` (`tasks_leased`).
pub(super) async fn leased(
    client: &Object,
    replica: &str,
    after: Option<String>,
    limit: usize,
) -> Result<Vec<TaskRecord>, StoreError> {
    let rows = client
        .query(
            "SELECT record FROM tasks WHERE lease_owner = $1 AND status IN ('queued', 'running') \
             AND task_id > $2 ORDER BY task_id LIMIT $3",
            &[&replica, &after.unwrap_or_default(), &i64::try_from(limit).unwrap_or(i64::MAX)],
        )
        .await
        .map_err(db_error)?;
    rows.iter().map(|row| decode(row.get(0))).collect()
}

/// Whether the task is live and leased to `replica`.
pub(super) async fn polls_here(client: &Object, task_id: &str, replica: &str) -> Result<bool, StoreError> {
    let row = client
        .query_opt(
            "SELECT 1 FROM tasks WHERE task_id = $1 AND lease_owner = $2 AND status IN ('queued', 'running')",
            &[&task_id, &replica],
        )
        .await
        .map_err(db_error)?;
    Ok(row.is_some())
}

/// Whether the replica that submitted the task has stopped, as far as `replica` can tell: it is another one,
/// and no longer holds the task's lease (the lease ran out, or was taken over).
pub(super) async fn abandoned(client: &Object, task_id: &str, replica: &str) -> Result<bool, StoreError> {
    let row = client
        .query_opt(
            "SELECT submitted_by IS DISTINCT FROM $2 AND (lease_owner IS DISTINCT FROM submitted_by \
             OR NOT EXISTS (SELECT 1 FROM replicas WHERE id = lease_owner AND seen_ms >= $3)) \
             FROM tasks WHERE task_id = $1",
            &[&task_id, &replica, &alive_since()],
        )
        .await
        .map_err(db_error)?;
    Ok(row.is_some_and(|row| row.get(0)))
}
