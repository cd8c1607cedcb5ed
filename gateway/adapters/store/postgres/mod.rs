//! The PostgreSQL backend: every replica with the same database URL serves the same accounts, keys, tasks
//! and ledger.
//!
//! Every write is one SQL transaction, committed before its future resolves. A task's change is a
//! compare-and-swap on its row (`SELECT … FOR UPDATE`, then the status checked), and the settlement rides
//! in the transaction that ends it. Every decision to spend is made in the database: the account's `funds`
//! row is locked, billing's funding order splits the amount over what it holds, and the `CHECK`s on the
//! pots refuse anything that would leave one negative. Nothing is earmarked in memory, so a synchronous
//! task is stored with a hold like any other.
//!
//! The connections run on a small runtime of their own (the HTTP workers are single-threaded runtimes
//! that come and go); a call hops onto it and back. The schema is refinery's versioned migrations under
//! `migrations/`, applied at start under an advisory lock. Changes other replicas must see (keys, model
//! switches) are announced with `NOTIFY` (`changes`).

mod accounts;
mod adds;
mod audit;
mod batch;
mod changes;
mod group;
mod import;
mod ledger;
mod line;
mod mirrors;
mod rates;
mod replicas;
mod retention;
mod slots;
mod tasks;
mod webhooks;

use super::keys::KeyCache;
use crate::domain::audit::{Action, Actor, AuditEntry, AuditFilter, Change, OperatorRecord};
use crate::domain::billing::audit::LedgerReport;
use crate::domain::billing::books::{Entry, Funds, Posting, Shortfall};
use crate::domain::deliveries::{Delivery, DeliveryFilter, WebhookSettings};
use crate::domain::listing::TaskQuery;
use crate::domain::results::Mirror;
use crate::domain::results::TaskResult;
use crate::domain::retention::Retention;
use crate::domain::tasks::{
    Account, AccountQuery, AccountSummary, Hold, IdempotencyRecord, KeyRecord, TaskRecord, TaskStatus,
};
use crate::domain::usage_log::UsageFilter;
use crate::ports::storage::{
    Accounts, AuditTrail, Commit, Copies, Deliveries, Earmark, Forwarded, IdempotencyClaim, InLine, Inserted, Ledger,
    Lifecycle, PolledBy, Purged, Purging, SettingsChange, Slots, StoreError, Switches, TaskChange, TaskRef, Tasks,
    Topology, Turn,
};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

refinery::embed_migrations!("gateway/adapters/store/postgres/migrations");

/// Held while migrations run, so replicas that start together apply them once.
const MIGRATION_LOCK: i64 = 0x6d65_6469_6167_6174; // "mediagat"
/// How long a call waits for a connection, or for one to be made, before it is answered as unavailable.
const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// The longest wait between two attempts to reach the database at start.
const RETRY_AT_MOST: Duration = Duration::from_secs(10);

/// Where the database is and how to reach it.
#[derive(Debug, Clone)]
pub struct Options {
    /// `postgres://user:password@host:port/dbname?sslmode=…` (or the key=value form).
    pub url: String,
    /// Connections per replica.
    pub pool_size: usize,
    /// Unfinished tasks one account may have, across every replica.
    pub max_in_flight_per_account: usize,
    /// A PEM file of CA certificates trusted for the database's TLS, besides the system's.
    pub ca_file: Option<PathBuf>,
}

impl Options {
    /// For a command that is not a gateway (a migration, a copy): a few connections, no limits to keep.
    pub fn new(url: String, ca_file: Option<PathBuf>) -> Options {
        Options { url, pool_size: 2, ca_file, max_in_flight_per_account: usize::MAX }
    }
}

/// The runtime every connection runs on: one per process, never dropped (a runtime may not be dropped
/// inside another, which is where the last handle to the store usually goes).
static RUNTIME: LazyLock<std::io::Result<tokio::runtime::Runtime>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("mediagate-postgres").enable_all().build()
});

fn runtime() -> Result<&'static tokio::runtime::Runtime, StoreError> {
    RUNTIME.as_ref().map_err(|e| StoreError::new(format!("the database's runtime did not start: {e}")))
}

/// Runs `work` on the database's runtime and waits for it from any other.
async fn on_runtime<T: Send + 'static>(
    work: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    runtime()?.spawn(work).await.map_err(|e| StoreError::new(format!("a database call stopped: {e}")))?
}

/// Handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    max_in_flight: i32,
    replica: replicas::Replica,
    keys: Arc<KeyCache>,
    rates: Arc<rates::Rates>,
    changes: changes::Changes,
    batcher: batch::Batcher,
    adder: adds::Adder,
    slotter: slots::Slotter,
    /// The tasks the last claim gave this replica's poller.
    taken: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Store {
    /// Connects, retrying with backoff while the database cannot be reached (each failure is logged), and
    /// applies the migrations it lacks.
    pub async fn connect(options: Options) -> Result<Store, StoreError> {
        on_runtime(async move {
            let (config, tls) = (pg_config(&options.url)?, tls(&options)?);
            let mut delay = Duration::from_millis(250);
            loop {
                match migrate_with(&config, tls.clone()).await {
                    Ok(applied) => {
                        if applied > 0 {
                            tracing::info!(applied, "database migrations applied");
                        }
                        break;
                    }
                    Err(e) if e.is_unavailable() => {
                        tracing::warn!(error = %e.reason(), retry_in_ms = delay.as_millis() as u64, "database unreachable; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(RETRY_AT_MOST);
                    }
                    Err(e) => return Err(e),
                }
            }
            let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
            let manager = Manager::from_config(config.clone(), tls.clone(), manager_config);
            let pool = Pool::builder(manager)
                .max_size(options.pool_size.max(1))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(CONNECT_WAIT))
                .create_timeout(Some(CONNECT_WAIT))
                .recycle_timeout(Some(CONNECT_WAIT))
                .build()
                .map_err(|e| StoreError::new(format!("database pool: {e}")))?;
            let keys = Arc::new(KeyCache::with_max_age(changes::REREAD_EVERY));
            let changes = changes::Changes::listen(config, tls, keys.clone());
            let replica = replicas::Replica::new();
            let client = pool.get().await.map_err(|e| StoreError::unavailable(format!("database: {e}")))?;
            replica.join(&client).await?;
            drop(client);
            replica.start_beating(pool.clone());
            let max_in_flight = i32::try_from(options.max_in_flight_per_account).unwrap_or(i32::MAX);
            let batcher = batch::Batcher::start(pool.clone());
            let adder = adds::Adder::start(pool.clone(), replica.id.clone());
            let slotter = slots::Slotter::start(pool.clone(), replica.id.clone());
            let (rates, taken) = (Arc::default(), Arc::default());
            Ok(Store { pool, max_in_flight, replica, keys, rates, changes, batcher, adder, slotter, taken })
        })
        .await
    }

    /// Fills the database, which must be empty, with `export` (`mediagate store copy`).
    pub async fn import(&self, export: crate::ports::storage::Export) -> Result<(), StoreError> {
        self.with(move |mut client| async move { import::import(&mut client, &export).await }).await
    }

    /// Runs `op` with a pooled connection, on the database's runtime.
    async fn with<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send,
    {
        let pool = self.pool.clone();
        on_runtime(async move {
            let client = pool.get().await.map_err(|e| StoreError::unavailable(format!("database: {e}")))?;
            op(client).await
        })
        .await
    }
}

/// Applies the migrations the database lacks, on a connection of its own, under an advisory lock; returns
/// how many it applied.
pub async fn migrate(options: Options) -> Result<usize, StoreError> {
    on_runtime(async move { migrate_with(&pg_config(&options.url)?, tls(&options)?).await }).await
}

async fn migrate_with(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<usize, StoreError> {
    let (mut client, connection) = config.connect(tls).await.map_err(db_error)?;
    let driver = tokio::spawn(connection);
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(db_error)?;
    let report = migrations::runner().run_async(&mut client).await;
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await.map_err(db_error);
    drop(client);
    let _ = driver.await;
    let report = report.map_err(|e| StoreError::new(format!("database migration: {e}")))?;
    unlocked?;
    Ok(report.applied_migrations().len())
}

/// TLS to the database (used as the URL's `sslmode` asks), trusting what the upstreams trust plus `ca_file`.
/// No ALPN: PostgreSQL 17 refuses a protocol other than its own, which earlier versions do not offer.
fn tls(options: &Options) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    let mut config = (*crate::support::tls::client_config(options.ca_file.as_deref())
        .map_err(|e| StoreError::new(format!("database TLS: {e}")))?)
    .clone();
    config.alpn_protocols.clear();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

fn pg_config(url: &str) -> Result<tokio_postgres::Config, StoreError> {
    let mut config: tokio_postgres::Config =
        url.parse().map_err(|e| StoreError::new(format!("the database URL does not parse: {e}")))?;
    config.application_name("mediagate").connect_timeout(CONNECT_WAIT).keepalives_idle(Duration::from_secs(30));
    Ok(config)
}

/// A database error as the store reports it: a lost, refused or timed-out connection, or a server shutting
/// down, is the database being unavailable (503, and `/readyz` not ready); anything else is a failure.
fn db_error(e: tokio_postgres::Error) -> StoreError {
    let unreachable = match e.code() {
        None => e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()),
        Some(code) => {
            let class = code.code().get(..2).unwrap_or_default();
            // 08: connection exception; 57: operator intervention (shutdown, cannot connect now).
            class == "08" || class == "57" || *code == tokio_postgres::error::SqlState::TOO_MANY_CONNECTIONS
        }
    };
    if unreachable {
        StoreError::unavailable(format!("database: {e}"))
    } else {
        StoreError::new(format!("database: {e}"))
    }
}

#[async_trait::async_trait]
impl Accounts for Store {
    async fn ensure_account(&self, name: &str, by: &Actor) -> Result<Account, StoreError> {
        let (name, by) = (name.to_string(), by.clone());
        self.with(move |mut client| async move { accounts::open(&mut client, &name, &by).await }).await
    }

    async fn account(&self, name: &str) -> Result<Option<Account>, StoreError> {
        let name = name.to_string();
        self.with(move |client| async move { accounts::get(&client, &name).await }).await
    }

    async fn list_accounts(&self, query: &AccountQuery) -> Result<Vec<AccountSummary>, StoreError> {
        let query = query.clone();
        self.with(move |client| async move { accounts::list(&client, &query).await }).await
    }

    async fn set_queue_weight(&self, account: &str, weight: u32, by: &Actor) -> Result<Account, StoreError> {
        let (account, by) = (account.to_string(), by.clone());
        self.with(move |mut client| async move { accounts::set_queue_weight(&mut client, &account, weight, &by).await })
            .await
    }

    async fn set_plan(&self, account: &str, plan: &str, allowance: i64, by: &Actor) -> Result<Account, StoreError> {
        let (account, plan, by) = (account.to_string(), plan.to_string(), by.clone());
        self.with(
            move |mut client| async move { accounts::set_plan(&mut client, &account, &plan, allowance, &by).await },
        )
        .await
    }

    async fn insert_key(&self, account: &str, key: &str, by: &Actor) -> Result<(), StoreError> {
        let (account, key, by) = (account.to_string(), key.to_string(), by.clone());
        self.with(move |mut client| async move { accounts::insert_key(&mut client, &account, &key, &by).await })
            .await?;
        self.keys.invalidate();
        Ok(())
    }

    async fn key(&self, hash: &[u8; 32]) -> Result<Option<Arc<KeyRecord>>, StoreError> {
        let (generation, cached) = self.keys.get(hash);
        if cached.is_some() {
            return Ok(cached);
        }
        let owned = *hash;
        let record = self.with(move |client| async move { accounts::key(&client, &owned).await }).await?;
        let record = record.map(Arc::new);
        if let Some(record) = &record {
            self.keys.put(generation, *hash, record.clone());
        }
        Ok(record)
    }

    fn cached_key(&self, hash: &[u8; 32]) -> Option<Arc<KeyRecord>> {
        self.keys.get(hash).1
    }

    async fn admit_request(&self, hash: &[u8; 32], per_second: u32) -> Result<bool, StoreError> {
        let second = crate::domain::clock::now_ms().div_euclid(1000);
        if self.rates.spend(hash, second).is_some() {
            return Ok(true);
        }
        // A batch small enough that what the replicas hold unspent stays within a tenth of the limit.
        let replicas = self.replica.share().unwrap_or(1);
        let batch = (per_second / replicas.saturating_mul(10).max(1)).max(1);
        let key = *hash;
        let granted = self
            .with(move |mut client| async move { rates::take(&mut client, &key, second, batch, per_second).await })
            .await?;
        Ok(self.rates.keep(*hash, second, granted))
    }

    async fn keys_of(&self, account: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let account = account.to_string();
        self.with(move |client| async move { accounts::keys_of(&client, &account).await }).await
    }

    async fn revoke_keys(&self, account: &str, prefix: &str, by: &Actor) -> Result<usize, StoreError> {
        let (account, prefix, by) = (account.to_string(), prefix.to_string(), by.clone());
        let revoked = self
            .with(move |mut client| async move { accounts::revoke_keys(&mut client, &account, &prefix, &by).await })
            .await?;
        self.keys.invalidate();
        Ok(revoked)
    }
}

#[async_trait::async_trait]
impl Ledger for Store {
    async fn post(&self, postings: Vec<Posting>, by: &Actor) -> Result<(), StoreError> {
        let by = by.clone();
        self.with(move |mut client| async move {
            let tx = client.transaction().await.map_err(db_error)?;
            for posting in postings {
                // Locked, so the pot's figure before is the one the entry moves.
                let before = ledger::funds(&tx, &posting.account, true).await?.unwrap_or_default().get(posting.pot);
                let change = Change::posting(&by, &posting, before);
                ledger::append(&tx, std::slice::from_ref(&posting)).await?;
                if let Some(change) = change {
                    audit::append(&tx, change).await?;
                }
            }
            tx.commit().await.map_err(db_error)
        })
        .await
    }

    async fn has_entries(&self, account: &str) -> Result<bool, StoreError> {
        let account = account.to_string();
        self.with(move |client| async move { Ok(ledger::funds(&client, &account, false).await?.is_some()) }).await
    }

    async fn funds(&self, account: &str) -> Result<Funds, StoreError> {
        let account = account.to_string();
        self.with(move |client| async move { Ok(ledger::funds(&client, &account, false).await?.unwrap_or_default()) })
            .await
    }

    fn earmarked(&self, _: &str) -> Funds {
        Funds::default()
    }

    async fn entries(&self, account: Option<&str>) -> Result<Vec<Entry>, StoreError> {
        let account = account.map(str::to_string);
        self.with(move |client| async move { ledger::entries(&client, account.as_deref()).await }).await
    }

    async fn verify_ledger(&self) -> Result<LedgerReport, StoreError> {
        self.with(|mut client| async move { ledger::verify(&mut client).await }).await
    }

    async fn usage(&self, filter: UsageFilter) -> Result<Vec<serde_json::Value>, StoreError> {
        self.with(move |client| async move { tasks::usage(&client, &filter).await }).await
    }

    async fn earmark(&self, _: &str, _: Hold) -> Result<Result<Earmark, Shortfall>, StoreError> {
        Err(StoreError::new("money is decided in the database: nothing is earmarked in memory"))
    }

    fn earmark_now(&self, _: &str, _: Hold) -> Option<Result<Earmark, Shortfall>> {
        None
    }
}

#[async_trait::async_trait]
impl Tasks for Store {
    async fn add_task(
        &self,
        new: TaskRecord,
        idempotency: Option<IdempotencyClaim>,
        hold: Option<Hold>,
        _: Commit,
    ) -> Result<Inserted, StoreError> {
        let (adder, cap) = (self.adder.clone(), self.max_in_flight);
        on_runtime(async move { adder.add(tasks::New { task: new, idempotency, hold, cap }).await }).await
    }

    async fn add_ended(&self, _: TaskRecord, _: Earmark) -> Result<TaskRecord, StoreError> {
        Err(StoreError::new("money is decided in the database: nothing is earmarked in memory"))
    }

    async fn task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let task_id = task_id.to_string();
        self.with(move |client| async move { tasks::get(&client, &task_id).await }).await
    }

    async fn list_tasks(&self, query: TaskQuery) -> Result<Vec<TaskRecord>, StoreError> {
        self.with(move |client| async move { tasks::list(&client, &query).await }).await
    }

    async fn change_task(
        &self,
        task: TaskRef,
        expected: &[TaskStatus],
        _: Commit,
        change: TaskChange,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let fence = matches!(task, TaskRef::Polled(_)).then(|| self.replica.id.clone());
        let target =
            batch::Target { task_id: task.task_id().to_string(), expected: expected.to_vec(), fence, forward: None };
        let batcher = self.batcher.clone();
        let written = on_runtime(async move { batcher.write(target, change).await }).await?;
        Ok(written.map(|written| written.task))
    }

    async fn forwarded(
        &self,
        task: TaskRef,
        by: PolledBy,
        change: TaskChange,
    ) -> Result<Option<Forwarded>, StoreError> {
        // With the other task changes' batch: one commit for many.
        let forward = Some((self.replica.clone(), by));
        let target = batch::Target {
            task_id: task.task_id().to_string(),
            expected: vec![TaskStatus::Queued],
            fence: None,
            forward,
        };
        let batcher = self.batcher.clone();
        let written = on_runtime(async move { batcher.write(target, change).await }).await?;
        Ok(written.map(|w| Forwarded { task: w.task, polled_here: w.polled_here }))
    }

    async fn claim(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let (replica, taken) = (self.replica.id.clone(), self.taken.clone());
        let acknowledged = std::mem::take(&mut *taken.lock().unwrap_or_else(|e| e.into_inner()));
        let claimed =
            self.with(move |client| async move { replicas::claim(&client, &replica, &acknowledged).await }).await;
        // What this claim gives is acknowledged by the next one, once the poller has it.
        if let Ok(tasks) = &claimed {
            *self.taken.lock().unwrap_or_else(|e| e.into_inner()) = tasks.iter().map(|t| t.task_id.clone()).collect();
        }
        claimed
    }

    async fn polls_here(&self, task_id: &str) -> Result<bool, StoreError> {
        let (task_id, replica) = (task_id.to_string(), self.replica.id.clone());
        self.with(move |client| async move { replicas::polls_here(&client, &task_id, &replica).await }).await
    }

    async fn leased(&self, after: Option<String>, limit: usize) -> Result<Option<Vec<TaskRecord>>, StoreError> {
        let replica = self.replica.id.clone();
        self.with(move |client| async move { replicas::leased(&client, &replica, after, limit).await.map(Some) }).await
    }

    async fn abandoned(&self, task: &TaskRecord, _: i64) -> Result<bool, StoreError> {
        let (task_id, replica) = (task.task_id.clone(), self.replica.id.clone());
        self.with(move |client| async move { replicas::abandoned(&client, &task_id, &replica).await }).await
    }

    async fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let key = key.to_string();
        self.with(move |client| async move { tasks::idempotency(&client, &key).await }).await
    }
}

#[async_trait::async_trait]
impl Deliveries for Store {
    async fn webhook_settings(&self, account: &str) -> Result<Option<WebhookSettings>, StoreError> {
        let account = account.to_string();
        self.with(move |client| async move { webhooks::settings(&client, &account).await }).await
    }

    async fn change_webhook_settings(
        &self,
        account: &str,
        change: SettingsChange,
        audited: Option<(&Actor, Action)>,
    ) -> Result<WebhookSettings, StoreError> {
        let account = account.to_string();
        let audited = audited.map(|(actor, action)| (actor.clone(), action));
        self.with(move |mut client| async move {
            let audited = audited.as_ref().map(|(actor, action)| (actor, *action));
            webhooks::change_settings(&mut client, &account, change, audited).await
        })
        .await
    }

    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        self.with(move |client| async move { webhooks::due(&client, now_ms, limit).await }).await
    }

    async fn save_delivery(&self, attempted: Delivery) -> Result<(), StoreError> {
        self.with(move |mut client| async move { webhooks::save(&mut client, attempted).await }).await
    }

    async fn replay_delivery(&self, id: &str, now_ms: i64, by: &Actor) -> Result<Option<Delivery>, StoreError> {
        let (id, by) = (id.to_string(), by.clone());
        self.with(move |mut client| async move { webhooks::replay(&mut client, &id, now_ms, &by).await }).await
    }

    async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        let id = id.to_string();
        self.with(move |client| async move { webhooks::get(&client, &id).await }).await
    }

    async fn deliveries(&self, filter: DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        self.with(move |client| async move { webhooks::list(&client, &filter).await }).await
    }
}

#[async_trait::async_trait]
impl Copies for Store {
    async fn due_mirrors(&self, now_ms: i64, lease_ms: i64, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        self.with(move |client| async move { mirrors::due(&client, now_ms, lease_ms, limit).await }).await
    }

    async fn renew_mirrors(&self, task_ids: Vec<String>, until_ms: i64) -> Result<(), StoreError> {
        self.with(move |client| async move { mirrors::renew(&client, &task_ids, until_ms).await }).await
    }

    async fn save_mirror(
        &self,
        task_id: &str,
        mirror: Mirror,
        results: Vec<TaskResult>,
        retry_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        let task_id = task_id.to_string();
        self.with(
            move |mut client| async move { mirrors::save(&mut client, &task_id, mirror, results, retry_ms).await },
        )
        .await
    }
}

#[async_trait::async_trait]
impl Switches for Store {
    async fn model_switches(&self) -> Result<Vec<(String, bool)>, StoreError> {
        self.with(|client| async move { accounts::model_switches(&client).await }).await
    }

    async fn set_model_switch(&self, model: &str, enabled: bool, by: &Actor) -> Result<(), StoreError> {
        let (model, by) = (model.to_string(), by.clone());
        self.with(move |mut client| async move { accounts::set_model_switch(&mut client, &model, enabled, &by).await })
            .await
    }
}

#[async_trait::async_trait]
impl AuditTrail for Store {
    async fn add_operator(&self, record: OperatorRecord, by: &Actor) -> Result<(), StoreError> {
        let by = by.clone();
        self.with(move |mut client| async move { audit::add_operator(&mut client, record, &by).await }).await
    }

    async fn revoke_operator(&self, name: &str, now_ms: i64, by: &Actor) -> Result<Option<OperatorRecord>, StoreError> {
        let (name, by) = (name.to_string(), by.clone());
        self.with(move |mut client| async move { audit::revoke_operator(&mut client, &name, now_ms, &by).await }).await
    }

    async fn operators(&self) -> Result<Vec<OperatorRecord>, StoreError> {
        self.with(|client| async move { audit::operators(&client).await }).await
    }

    async fn operator_by_token(&self, token_hash: &str) -> Result<Option<OperatorRecord>, StoreError> {
        let token_hash = token_hash.to_string();
        self.with(move |client| async move { audit::operator_by_token(&client, &token_hash).await }).await
    }

    async fn audit_entries(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        let filter = filter.clone();
        self.with(move |client| async move { audit::entries(&client, &filter).await }).await
    }
}

#[async_trait::async_trait]
impl Slots for Store {
    async fn take_slot(
        &self,
        pool: &str,
        caps: &[u32],
        tried: &[usize],
        holder: &str,
        behind_line: bool,
    ) -> Result<(Option<usize>, Vec<u32>), StoreError> {
        let take = slots::Take {
            pool: pool.to_string(),
            caps: caps.to_vec(),
            tried: tried.to_vec(),
            holder: holder.to_string(),
            behind_line,
        };
        let slotter = self.slotter.clone();
        on_runtime(async move { slotter.take(take).await }).await
    }

    async fn give_back_slot(&self, pool: &str, holder: &str, key: usize) -> Result<(), StoreError> {
        let (slotter, pool, holder) = (self.slotter.clone(), pool.to_string(), holder.to_string());
        on_runtime(async move { slotter.give_back(&pool, &holder, key).await }).await
    }

    async fn adopt_slot(&self, pool: &str, holder: &str, key: usize) -> Result<(), StoreError> {
        let (replica, pool, holder) = (self.replica.id.clone(), pool.to_string(), holder.to_string());
        self.with(move |mut client| async move { slots::adopt(&mut client, &replica, &pool, &holder, key).await }).await
    }

    async fn join_line(&self, job: InLine) -> Result<(), StoreError> {
        let replica = self.replica.id.clone();
        self.with(move |mut client| async move { line::join(&mut client, &replica, &job).await }).await
    }

    async fn take_next(&self, pool: &str, caps: &[u32]) -> Result<Option<Turn>, StoreError> {
        let (replica, pool, caps) = (self.replica.id.clone(), pool.to_string(), caps.to_vec());
        self.with(move |mut client| async move { line::take_next(&mut client, &replica, &pool, &caps).await }).await
    }

    async fn leave_line(&self, holder: &str) -> Result<(), StoreError> {
        let holder = holder.to_string();
        self.with(move |client| async move { line::leave(&client, &holder).await }).await
    }

    async fn ahead_in_line(&self, pool: &str, holder: &str) -> Result<Option<usize>, StoreError> {
        let (pool, holder) = (pool.to_string(), holder.to_string());
        self.with(move |client| async move { line::ahead(&client, &pool, &holder).await }).await
    }

    async fn overdue_in_line(&self, now_ms: i64) -> Result<Vec<(String, String)>, StoreError> {
        self.with(move |client| async move { line::overdue(&client, now_ms).await }).await
    }

    async fn missing_from_line(&self, waiting: &[(String, usize)]) -> Result<Vec<String>, StoreError> {
        let waiting = waiting.to_vec();
        self.with(move |client| async move { line::missing(&client, &waiting).await }).await
    }

    async fn line_depths(&self) -> Result<Vec<(String, String, usize)>, StoreError> {
        self.with(|client| async move { line::depths(&client).await }).await
    }
}

#[async_trait::async_trait]
impl Purging for Store {
    async fn purge(&self, retention: &Retention, now_ms: i64, limit: usize) -> Result<Purged, StoreError> {
        let retention = *retention;
        self.with(move |mut client| async move { retention::purge(&mut client, &retention, now_ms, limit).await }).await
    }
}

#[async_trait::async_trait]
impl Lifecycle for Store {
    fn topology(&self) -> Topology {
        Topology::Shared
    }

    fn poll_share(&self) -> Option<u32> {
        self.replica.share()
    }

    async fn shared_secret(&self, name: &str, made: Vec<u8>) -> Result<Option<Vec<u8>>, StoreError> {
        let name = name.to_string();
        self.with(move |client| async move { accounts::shared_secret(&client, &name, &made).await.map(Some) }).await
    }

    fn writable(&self) -> bool {
        true
    }

    async fn broken(&self) {
        // An outage is waited out: calls answer 503 meanwhile and the pool reconnects by itself.
        std::future::pending().await
    }

    async fn caught_up(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn changed(&self) {
        self.changes.next().await
    }

    async fn close(&self) -> Result<(), StoreError> {
        let replica = self.replica.clone();
        let left = self.with(move |client| async move { replica.leave(&client).await }).await;
        self.pool.close();
        left
    }
}
