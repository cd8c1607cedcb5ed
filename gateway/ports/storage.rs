//! The storage port: durable state behind one interface, [`Storage`]: accounts and keys, the ledger, tasks
//! (with their idempotency records) and model switches. The store adapters implement it (`adapters::store`).
//!
//! The money rules are billing's plain functions; a backend calls them inside the transaction it writes
//! their outcome in, and never the reverse.

use crate::domain::audit::{Action, Actor, AuditEntry, AuditFilter, OperatorRecord};
use crate::domain::billing::audit::LedgerReport;
use crate::domain::billing::books::{Entry, Funds, Posting, Pot, Shortfall};
use crate::domain::deliveries::{Delivery, DeliveryFilter, WebhookSettings};
use crate::domain::errors::{Code, ErrorCode};
use crate::domain::listing::TaskQuery;
use crate::domain::results::Mirror;
use crate::domain::results::TaskResult;
use crate::domain::retention::Retention;
use crate::domain::tasks::{
    Account, AccountQuery, AccountSummary, Hold, IdempotencyRecord, KeyRecord, TaskRecord, TaskStatus,
};
use crate::domain::usage_log::{UsageFilter, UsageLine};
use std::borrow::Cow;
use std::sync::Arc;

/// What `add_task` did.
#[derive(Debug)]
pub enum Inserted {
    Stored(Box<StoredTask>),
    /// The idempotency key was already used; nothing was written.
    Duplicate(IdempotencyRecord),
    /// The account cannot fund the hold; nothing was written.
    Shortfall(Shortfall),
    /// The account has as many unfinished tasks as it may (counted across every process sharing the
    /// store); nothing was written.
    TooManyTasks(usize),
}

/// Which process polls a task the upstream has just accepted, where processes share the store (alone, a
/// process polls all its tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolledBy {
    /// The one whose slice of creation time the task falls in, so that one list call over a window of
    /// creation time reports that process's own tasks, not everyone's.
    Turn,
    /// The one that sent it from the shared line for upstream slots: the slot it holds is what the line
    /// waits for, and a hand-over would leave its end unseen until the other process's next claim.
    Sender,
}

/// A task the upstream has just accepted, as written, and whether this process polls it.
#[derive(Debug)]
pub struct Forwarded {
    pub task: TaskRecord,
    /// False when the store handed the task to another process sharing it, which polls it from its next
    /// [`Tasks::claim`] on.
    pub polled_here: bool,
}

/// An `Idempotency-Key` a new task claims.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    /// The store key (account and client key).
    pub key: String,
    pub record: IdempotencyRecord,
    /// A task the key may be taken over from: one that ended without doing its work (its submission was
    /// interrupted, or its client went away), so a retry does the work instead of replaying nothing.
    pub replacing: Option<String>,
}

/// A task as a write stored it, with the bytes it is stored as.
#[derive(Debug, Clone)]
pub struct StoredTask {
    pub record: TaskRecord,
    /// As the backend stored them (a backend that compares by status alone leaves them empty).
    pub(crate) bytes: Vec<u8>,
}

/// The task a change is for.
#[derive(Debug)]
pub enum TaskRef {
    Id(String),
    /// A task this process polls: changed only while this process holds its lease (where processes share
    /// the store, one whose lease ran out has had the task taken over, and may not write it).
    Polled(String),
    /// The task as the caller last had it from the store: while the stored bytes are still the same (a
    /// compare), they are neither decoded nor the record encoded again.
    AsStored(Box<StoredTask>),
}

impl TaskRef {
    pub fn task_id(&self) -> &str {
        match self {
            TaskRef::Id(id) | TaskRef::Polled(id) => id,
            TaskRef::AsStored(stored) => &stored.record.task_id,
        }
    }
}

impl From<&str> for TaskRef {
    fn from(task_id: &str) -> TaskRef {
        TaskRef::Id(task_id.to_string())
    }
}

impl From<Box<StoredTask>> for TaskRef {
    fn from(task: Box<StoredTask>) -> TaskRef {
        TaskRef::AsStored(task)
    }
}

/// Money set aside in memory for one task, where the store decides spending in memory: released when
/// dropped (the task was never stored, so nothing was charged), or spent by the write that charges it.
pub struct Earmark {
    account: String,
    split: Vec<(Pot, i64)>,
    book: Arc<dyn Releases>,
}

/// What an earmark's money is given back to.
pub trait Releases: Send + Sync {
    fn release(&self, account: &str, split: &[(Pot, i64)]);
}

impl Earmark {
    pub fn new(account: String, split: Vec<(Pot, i64)>, book: Arc<dyn Releases>) -> Earmark {
        Earmark { account, split, book }
    }

    /// How much each pot earmarked, in funding order.
    pub fn split(&self) -> &[(Pot, i64)] {
        &self.split
    }

    /// Its account and its money, taken as spent: nothing is released when it drops.
    pub fn spend(mut self) -> (String, Vec<(Pot, i64)>) {
        (std::mem::take(&mut self.account), std::mem::take(&mut self.split))
    }
}

impl Drop for Earmark {
    fn drop(&mut self) {
        if !self.split.is_empty() {
            self.book.release(&self.account, &self.split);
        }
    }
}

impl std::fmt::Debug for Earmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Earmark").field("account", &self.account).field("split", &self.split).finish()
    }
}

/// How soon a write must be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// On disk before the caller hears back.
    Durable,
    /// Visible at once; on disk with the next durable write. For state no response has claimed yet (a task
    /// record before its submission is acknowledged).
    Deferred,
}

/// Everything a store holds, as of one moment: what `mediagate store copy` moves from one backend to
/// another. Keys stay hashed; the ledger's entries keep their numbers.
#[derive(Debug, Default)]
pub struct Export {
    pub accounts: Vec<Account>,
    pub keys: Vec<([u8; 32], KeyRecord)>,
    /// Every entry, by number, with the charges earmarked tasks' settlements hold.
    pub entries: Vec<Entry>,
    pub funds: Vec<(String, Funds)>,
    pub tasks: Vec<TaskRecord>,
    pub idempotency: Vec<(String, IdempotencyRecord)>,
    pub switches: Vec<(String, bool)>,
    pub webhook_settings: Vec<(String, WebhookSettings)>,
    pub deliveries: Vec<Delivery>,
    /// The usage lines of tasks retention purged.
    pub usage_lines: Vec<UsageLine>,
    pub operators: Vec<OperatorRecord>,
    /// The audit trail, oldest first.
    pub audit: Vec<AuditEntry>,
}

/// A change to a live task, applied by [`Tasks::change_task`] if the task is still as expected.
pub type TaskChange = Box<dyn FnOnce(&mut TaskRecord) + Send>;
/// A change to an account's webhook settings, applied inside the write.
pub type SettingsChange = Box<dyn FnOnce(&mut WebhookSettings) + Send>;

/// What the gateway asks of its durable state, by role. Every write is applied whole or not at all, and is
/// durable (or, for [`Commit::Deferred`], durable before any answer that shows it) when its future resolves.
/// A store is all the roles at once.
pub trait Storage:
    Accounts + Ledger + Tasks + Deliveries + Copies + Switches + Slots + Purging + AuditTrail + Lifecycle
{
}

impl<S: Accounts + Ledger + Tasks + Deliveries + Copies + Switches + Slots + Purging + AuditTrail + Lifecycle> Storage
    for S
{
}

/// Who shares the store, which decides where the limits, the spending decisions and the polling live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One process owns it: that process keeps the accounts' limits in memory, decides spending there (a
    /// synchronous task without an `Idempotency-Key` is written once, when it ends, its money earmarked in
    /// memory meanwhile), and polls every task.
    Owned,
    /// Replicas share it: the store keeps the limits and decides every spending, and the replicas take
    /// turns at polling.
    Shared,
}

/// Accounts and their keys.
#[async_trait::async_trait]
pub trait Accounts: Send + Sync {
    /// Creates the account if it does not exist yet (its `account.open` entry in the same write); returns it
    /// either way.
    async fn ensure_account(&self, name: &str, by: &Actor) -> Result<Account, StoreError>;

    async fn account(&self, name: &str) -> Result<Option<Account>, StoreError>;

    /// The accounts `query` keeps, in name order, with their funds and last activity.
    async fn list_accounts(&self, query: &AccountQuery) -> Result<Vec<AccountSummary>, StoreError>;

    /// Puts `account` on the plan `plan` with `allowance` micro-units to spend from its plan pot (net of
    /// what tasks in flight hold from it), in one write: the name and the pot's entry together.
    async fn set_plan(&self, account: &str, plan: &str, allowance: i64, by: &Actor) -> Result<Account, StoreError>;

    /// Sets the account's share of the upstream's slots while its tasks wait for one.
    async fn set_queue_weight(&self, account: &str, weight: u32, by: &Actor) -> Result<Account, StoreError>;

    /// Stores a key for `account` (creating the account too); an existing key is left as it is.
    async fn insert_key(&self, account: &str, key: &str, by: &Actor) -> Result<(), StoreError>;

    /// The record of the key with this [`hash_key`], if the key exists (revoked or not).
    async fn key(&self, hash: &[u8; 32]) -> Result<Option<Arc<KeyRecord>>, StoreError>;

    /// [`Accounts::key`], if its record is cached: without a store call.
    fn cached_key(&self, hash: &[u8; 32]) -> Option<Arc<KeyRecord>>;

    /// Counts one request of the key with this hash against `per_second`: false when the key has had its
    /// requests for this second.
    async fn admit_request(&self, hash: &[u8; 32], per_second: u32) -> Result<bool, StoreError>;

    /// Every key of an account, by prefix only.
    async fn keys_of(&self, account: &str) -> Result<Vec<KeyRecord>, StoreError>;

    /// Revokes the account's keys starting with `prefix`; returns how many.
    async fn revoke_keys(&self, account: &str, prefix: &str, by: &Actor) -> Result<usize, StoreError>;
}

/// Money: the ledger's entries, the pots they add up to, and the spending decided in memory.
#[async_trait::async_trait]
pub trait Ledger: Send + Sync {
    /// Appends entries on their own (top-ups, grants), each with its audit entry ([`Action::for_entry`]).
    async fn post(&self, postings: Vec<Posting>, by: &Actor) -> Result<(), StoreError>;

    /// Whether money ever moved for `account`.
    async fn has_entries(&self, account: &str) -> Result<bool, StoreError>;

    /// What `account` may spend: each pot less what tasks in flight have earmarked from it.
    async fn funds(&self, account: &str) -> Result<Funds, StoreError>;

    /// What tasks in flight of `account` have earmarked in memory, per pot (left out of [`Ledger::funds`]).
    fn earmarked(&self, account: &str) -> Funds;

    /// Entries of one account (or all), oldest first.
    async fn entries(&self, account: Option<&str>) -> Result<Vec<Entry>, StoreError>;

    /// Every pot against its entries, and every task's money against its settlement.
    async fn verify_ledger(&self) -> Result<LedgerReport, StoreError>;

    /// The usage log's lines `filter` keeps, oldest first: one per settled task, dated when it ended.
    async fn usage(&self, filter: UsageFilter) -> Result<Vec<serde_json::Value>, StoreError>;

    /// Earmarks `hold` from the account's funds in memory; resolves to the earmark, or to why the account
    /// cannot fund it.
    async fn earmark(&self, account: &str, hold: Hold) -> Result<Result<Earmark, Shortfall>, StoreError>;

    /// [`Ledger::earmark`] when it can be decided at once (the account's funds are known in memory).
    fn earmark_now(&self, account: &str, hold: Hold) -> Option<Result<Earmark, Shortfall>>;
}

/// Tasks, their idempotency records and leases.
#[async_trait::async_trait]
pub trait Tasks: Send + Sync {
    /// Stores a new task with its idempotency record and its hold, in one write; nothing is written if the
    /// idempotency key is taken or the account cannot fund `hold`.
    async fn add_task(
        &self,
        new: TaskRecord,
        idempotency: Option<IdempotencyClaim>,
        hold: Option<Hold>,
        commit: Commit,
    ) -> Result<Inserted, StoreError>;

    /// Stores a task that has ended with its settlement, charged from `earmark`, in one durable write.
    async fn add_ended(&self, task: TaskRecord, earmark: Earmark) -> Result<TaskRecord, StoreError>;

    async fn task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError>;

    /// The account's tasks `query` selects, newest first (by creation time, then task id), at most
    /// `query.limit` of them.
    async fn list_tasks(&self, query: TaskQuery) -> Result<Vec<TaskRecord>, StoreError>;

    /// Applies `change` if the task is still in one of `expected` (a compare-and-swap); a change to a
    /// terminal state settles the task's money in the same write. `None` when the task moved on meanwhile
    /// or does not exist.
    async fn change_task(
        &self,
        task: TaskRef,
        expected: &[TaskStatus],
        commit: Commit,
        change: TaskChange,
    ) -> Result<Option<TaskRecord>, StoreError>;

    /// Records that the upstream accepted a queued task this process sent (`change` sets its upstream task
    /// id), durably, and leases it to the process that polls it, as `by` says.
    async fn forwarded(&self, task: TaskRef, by: PolledBy, change: TaskChange)
    -> Result<Option<Forwarded>, StoreError>;

    /// Live tasks this process is to poll from now on: those no process polls (the first call: those of the
    /// processes before; later, those whose poller's lease ran out), and those handed to it.
    async fn claim(&self) -> Result<Vec<TaskRecord>, StoreError>;

    /// Whether the task is live and this process polls it (holds its lease, where processes share the store).
    async fn polls_here(&self, task_id: &str) -> Result<bool, StoreError>;

    /// Where processes share the store: the live tasks this process holds the lease of, by id after `after`,
    /// at most `limit`, for its poller to check it has every one. `None` where one process polls every task.
    async fn leased(&self, after: Option<String>, limit: usize) -> Result<Option<Vec<TaskRecord>>, StoreError>;

    /// Whether a live task without an upstream task id was left by the process submitting it (it stopped
    /// before forwarding it). `started_ms`: when this process opened the store.
    async fn abandoned(&self, task: &TaskRecord, started_ms: i64) -> Result<bool, StoreError>;

    /// The idempotency record stored under `key`.
    async fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError>;
}

/// Webhook settings and deliveries.
#[async_trait::async_trait]
pub trait Deliveries: Send + Sync {
    async fn webhook_settings(&self, account: &str) -> Result<Option<WebhookSettings>, StoreError>;

    /// resolves to the settings as written.
    async fn change_webhook_settings(
        &self,
        account: &str,
        change: SettingsChange,
        audited: Option<(&Actor, Action)>,
    ) -> Result<WebhookSettings, StoreError>;

    /// Pending deliveries due by `now_ms`, oldest due first, at most `limit`; where processes share the
    /// store, each is leased to this one for a while, so that one process attempts it at a time.
    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> Result<Vec<Delivery>, StoreError>;

    /// Writes what an attempt made of a delivery, a replay asked for meanwhile standing
    /// ([`Delivery::after_attempt`]); where processes share the store, this process's lease on it ends.
    async fn save_delivery(&self, attempted: Delivery) -> Result<(), StoreError>;

    /// Makes a delivery due now whatever became of it ([`Delivery::replay`]); `None` if there is none. An
    /// attempt under way goes on (and keeps its lease); the replay is sent after it.
    async fn replay_delivery(&self, id: &str, now_ms: i64, by: &Actor) -> Result<Option<Delivery>, StoreError>;

    async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError>;

    /// The deliveries `filter` keeps, newest first.
    async fn deliveries(&self, filter: DeliveryFilter) -> Result<Vec<Delivery>, StoreError>;
}

/// Result copies waiting to be made.
#[async_trait::async_trait]
pub trait Copies: Send + Sync {
    /// Tasks whose results wait to be copied, due by `now_ms`, at most `limit`; each is set aside for
    /// `lease_ms` (not given again meanwhile, by this process or another), so a copy cut short by a crash
    /// is made again after it.
    async fn due_mirrors(&self, now_ms: i64, lease_ms: i64, limit: usize) -> Result<Vec<TaskRecord>, StoreError>;

    /// Sets the copies of `task_ids`, under way here, aside until `until_ms` (their lease renewed).
    async fn renew_mirrors(&self, task_ids: Vec<String>, until_ms: i64) -> Result<(), StoreError>;

    /// Writes a task's mirroring (and its results) as it stands after an attempt; `retry_ms` keeps it
    /// queued until then, `None` takes it off the queue (mirrored, or given up).
    async fn save_mirror(
        &self,
        task_id: &str,
        mirror: Mirror,
        results: Vec<TaskResult>,
        retry_ms: Option<i64>,
    ) -> Result<(), StoreError>;
}

/// Models switched on or off by an operator.
#[async_trait::async_trait]
pub trait Switches: Send + Sync {
    /// Models switched on or off by an operator, overriding the spec's `enabled`.
    async fn model_switches(&self) -> Result<Vec<(String, bool)>, StoreError>;

    async fn set_model_switch(&self, model: &str, enabled: bool, by: &Actor) -> Result<(), StoreError>;
}

/// A job joining a pool's shared line for a slot.
#[derive(Debug, Clone)]
pub struct InLine {
    pub pool: String,
    /// The task's id, or a synchronous call's.
    pub holder: String,
    pub account: String,
    /// The account's share of the slots.
    pub weight: u32,
    /// Keys that refused or failed it, tried last.
    pub tried: Vec<usize>,
    /// It had its turn and waits again: at the head of its account's jobs.
    pub again: bool,
    /// When it stops waiting: it times out then.
    pub deadline_ms: i64,
    /// A call whose client waits on this process: only this process sends it.
    pub call: bool,
    /// How many keys the pool has: a job holding a slot on one is not waiting.
    pub keys: usize,
}

/// A slot handed to the next job in a shared line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub holder: String,
    pub key: usize,
    pub tried: Vec<usize>,
    /// A call of this process's (else a task, which any process sends).
    pub call: bool,
    pub waited_ms: i64,
    /// The slots then used on each key.
    pub used: Vec<u32>,
}

/// The upstream's running slots, where processes share the store and so the upstream's accounts: a slot
/// per task the upstream has (or is being sent), held while its process is alive; and the line of jobs
/// waiting for one, in the order of `domain::capacity`'s fair queue, so that any process sends the job next
/// across all of them. A store only this process uses keeps none (the process counts its own).
#[async_trait::async_trait]
pub trait Slots: Send + Sync {
    /// Takes a slot of `pool` for `holder` on the key with the most free (`caps[k]` on key `k`), skipping
    /// `tried`; with the slots then used on each key. `None` when every key is full, or when jobs wait in
    /// the pool's line and this one must not pass them (`behind_line`).
    async fn take_slot(
        &self,
        pool: &str,
        caps: &[u32],
        tried: &[usize],
        holder: &str,
        behind_line: bool,
    ) -> Result<(Option<usize>, Vec<u32>), StoreError> {
        let _ = (pool, caps, tried, holder, behind_line);
        Err(StoreError::new("this store keeps no upstream slots"))
    }

    /// Puts a job in its pool's line; one already there, or one another live process sends, stays as it is.
    async fn join_line(&self, job: InLine) -> Result<(), StoreError> {
        let _ = job;
        Err(StoreError::new("this store keeps no line for upstream slots"))
    }

    /// Hands a free slot of `pool` to the job next in its line (a task, or a call of this process's), taking
    /// it out of the line in the same write; `None` when no slot is free or no job waits.
    async fn take_next(&self, pool: &str, caps: &[u32]) -> Result<Option<Turn>, StoreError> {
        let _ = (pool, caps);
        Ok(None)
    }

    /// Takes `holder` out of its pool's line (cancelled, or a call that stopped waiting).
    async fn leave_line(&self, holder: &str) -> Result<(), StoreError> {
        let _ = holder;
        Ok(())
    }

    /// How many jobs go before `holder` in `pool`'s line, if it waits there.
    async fn ahead_in_line(&self, pool: &str, holder: &str) -> Result<Option<usize>, StoreError> {
        let _ = (pool, holder);
        Ok(None)
    }

    /// Takes out of every line the tasks whose deadline is past at `now_ms`: (pool, task id) each.
    async fn overdue_in_line(&self, now_ms: i64) -> Result<Vec<(String, String)>, StoreError> {
        let _ = now_ms;
        Ok(Vec::new())
    }

    /// Of `waiting` (task ids, each with its pool's count of keys), those neither in a line nor holding a
    /// slot of a live process (one handed a slot by a process that stopped before sending it).
    async fn missing_from_line(&self, waiting: &[(String, usize)]) -> Result<Vec<String>, StoreError> {
        let _ = waiting;
        Ok(Vec::new())
    }

    /// Jobs waiting per pool and account.
    async fn line_depths(&self) -> Result<Vec<(String, String, usize)>, StoreError> {
        Ok(Vec::new())
    }

    /// Gives `holder`'s slot of `pool` on `key` back.
    async fn give_back_slot(&self, pool: &str, holder: &str, key: usize) -> Result<(), StoreError> {
        let _ = (pool, holder, key);
        Ok(())
    }

    /// Makes `holder`'s slot on `key` this process's (it took the task over from one that stopped).
    async fn adopt_slot(&self, pool: &str, holder: &str, key: usize) -> Result<(), StoreError> {
        let _ = (pool, holder, key);
        Ok(())
    }
}

/// How much finished work one [`Purging::purge`] removed, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    pub tasks: usize,
    pub deliveries: usize,
    pub idempotency: usize,
}

/// Finished work past its retention.
#[async_trait::async_trait]
pub trait Purging: Send + Sync {
    /// Removes, in one write, at most `limit` of each kind of finished work that `retention` no longer keeps
    /// at `now_ms`: deliveries, idempotency records, then tasks, each purged task leaving its usage line
    /// (read by the usage log and the ledger's check as the task was). A task with a delivery still
    /// pending is kept. Where replicas share the store, one purges at a time; the others purge nothing.
    async fn purge(&self, retention: &Retention, now_ms: i64, limit: usize) -> Result<Purged, StoreError>;
}

/// The audit trail and the named operators. Every change an operator makes elsewhere in the port is written
/// with its entry (the methods that take an [`Actor`]); entries are only ever appended.
#[async_trait::async_trait]
pub trait AuditTrail: Send + Sync {
    /// Adds an operator, with its `operator.create` entry; refused as a conflict if the name was ever used (a
    /// name in the trail names one operator for good).
    async fn add_operator(&self, record: OperatorRecord, by: &Actor) -> Result<(), StoreError>;

    /// Revokes the live operator `name` at `now_ms`, with its `operator.revoke` entry; `None` if there is no
    /// live operator of that name.
    async fn revoke_operator(&self, name: &str, now_ms: i64, by: &Actor) -> Result<Option<OperatorRecord>, StoreError>;

    /// Every operator, revoked ones included, by name.
    async fn operators(&self) -> Result<Vec<OperatorRecord>, StoreError>;

    /// The operator whose token has this hash, revoked or not.
    async fn operator_by_token(&self, token_hash: &str) -> Result<Option<OperatorRecord>, StoreError>;

    /// The entries `filter` keeps, oldest first.
    async fn audit_entries(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError>;
}

/// The store itself: who shares it, whether it takes writes, and its shared secrets.
#[async_trait::async_trait]
pub trait Lifecycle: Send + Sync {
    /// Who shares the store.
    fn topology(&self) -> Topology;

    /// How many processes share the upstream keys' query limits (each takes its share); `None` while this
    /// one may not query yet (it has just joined, and the others may not know yet).
    fn poll_share(&self) -> Option<u32>;

    /// A secret every process sharing the store signs with (result links, console sessions): the one kept
    /// under `name`, else `made`, kept from now on. `None` where one process owns the store, which keeps its
    /// secrets in its data dir.
    async fn shared_secret(&self, name: &str, made: Vec<u8>) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether the store takes writes now.
    fn writable(&self) -> bool;

    /// Resolves if the store can never take writes again (the process should stop); never, where an
    /// outage is waited out.
    async fn broken(&self);

    /// Resolves once every write applied so far is durable: for answers that show state another request
    /// wrote (a task read, an idempotent replay) and must not get ahead of its commit.
    async fn caught_up(&self) -> Result<(), StoreError>;

    /// Resolves when keys or model switches may have been changed by another process sharing the store
    /// (at once when told, at the latest after a short while); never for a store only this process writes.
    async fn changed(&self);

    /// Commits what is queued and stops taking writes. Call once the server has stopped.
    async fn close(&self) -> Result<(), StoreError>;
}

/// Why a write did not happen: the store failed (the detail is logged, the client sees `internal_error`),
/// it cannot make writes durable now (the client sees `storage_unavailable`), or its rules refused the
/// write (nothing was written; the client is told why).
#[derive(Debug, Clone, thiserror::Error)]
#[error("store: {message}")]
pub struct StoreError {
    message: String,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Failure,
    Unavailable,
    Refused(Refusal),
}

/// A write the store's rules refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// An amount, or a pot after it, beyond `billing::MAX_MICROS`.
    TooLarge,
    /// It contradicts what is stored (a pot left below what tasks in flight have earmarked, a missing account).
    Conflict,
}

impl StoreError {
    /// A failure of the store itself (encoding, a broken invariant, a read of the file).
    pub fn new(message: impl Into<String>) -> StoreError {
        StoreError { message: message.into(), kind: Kind::Failure }
    }

    /// The store cannot make writes durable now (its disk failed or is full, its database is unreachable).
    pub fn unavailable(message: impl Into<String>) -> StoreError {
        StoreError { message: message.into(), kind: Kind::Unavailable }
    }

    /// A write the store's rules refuse; nothing of it is written.
    pub fn refused(refusal: Refusal, message: impl Into<String>) -> StoreError {
        StoreError { message: message.into(), kind: Kind::Refused(refusal) }
    }

    pub fn refusal(&self) -> Option<Refusal> {
        match self.kind {
            Kind::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }

    pub fn is_unavailable(&self) -> bool {
        self.kind == Kind::Unavailable
    }

    /// What went wrong, without the `store:` prefix.
    pub fn reason(&self) -> &str {
        &self.message
    }
}

impl ErrorCode for StoreError {
    fn error_code(&self) -> Code {
        match self.kind {
            Kind::Failure => Code::internal_error,
            Kind::Unavailable => Code::storage_unavailable,
            Kind::Refused(Refusal::TooLarge) => Code::invalid_parameter,
            Kind::Refused(Refusal::Conflict) => Code::conflict,
        }
    }

    fn message(&self) -> Cow<'_, str> {
        match self.kind {
            Kind::Failure => "The gateway failed to complete the request; it is safe to retry.".into(),
            Kind::Unavailable => {
                "The gateway cannot store anything right now, so it accepted nothing; retry later.".into()
            }
            Kind::Refused(_) => Cow::Borrowed(&self.message),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        (self.kind == Kind::Unavailable).then_some(5)
    }

    fn logged(&self) -> Option<String> {
        matches!(self.kind, Kind::Failure | Kind::Unavailable).then(|| self.to_string())
    }
}
