//! The embedded backend: the store in one redb file under the data dir, no server needed.
//!
//! Writes go through one group-commit writer (`writer`) and a write-ahead log (`wal`, `mediagate.wal.0`
//! and `.1` beside the database): durable writes are on disk before their caller hears back, so what a
//! response says happened survives a crash; deferred writes (state no response has claimed yet) ride on
//! the next durable one. A write lands in the log and in memory (`overlay`); redb's file is written only
//! by checkpoints, on their own thread (`checkpointer`). Values are MessagePack arrays of their fields
//! (see [`super::encode`]), so records can grow fields at their end without a migration. Reads run on the calling
//! thread, through the overlay and a redb read transaction: they never wait for the writer.

mod accounts;
mod audit;
mod backend;
mod broken;
mod checkpointer;
mod earmarks;
mod faults;
mod job;
pub mod ledger;
mod mirrors;
mod overlay;
/// Builds an index added after stores were written, over what they hold, once (marked `built` in `META`),
/// straight into redb: the log is replayed and empty by then.
fn build_once(
    db: &Database,
    built: &str,
    build: impl FnOnce(&redb::WriteTransaction) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    if tx.open_table(tables::META)?.get(built)?.is_some() {
        return Ok(());
    }
    build(&tx)?;
    tx.open_table(tables::META)?.insert(built, 1)?;
    tx.commit()?;
    Ok(())
}

/// Every stored task in `TASKS_BY_ACCOUNT`.
fn index_tasks_by_account(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let (tasks, mut index) = (tx.open_table(TASKS)?, tx.open_table(TASKS_BY_ACCOUNT)?);
    if !tasks.is_empty()? {
        tracing::info!(tasks = tasks.len()?, "indexing the stored tasks by account, once");
    }
    for row in tasks.iter()? {
        let task: TaskRecord = decode(row?.1.value())?;
        index.insert(tasks::account_position(&task), ())?;
    }
    Ok(())
}

/// Every pending delivery in `DELIVERIES_DUE`, taken out of `PENDING_DELIVERIES`.
fn index_deliveries_due(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let mut pending = tx.open_table(tables::PENDING_DELIVERIES)?;
    let (deliveries, mut due) = (tx.open_table(tables::DELIVERIES)?, tx.open_table(tables::DELIVERIES_DUE)?);
    for row in pending.iter()? {
        let (id, _) = row?;
        if let Some(stored) = deliveries.get(id.value())? {
            let delivery: crate::domain::deliveries::Delivery = decode(stored.value())?;
            due.insert((delivery.next_attempt_ms, delivery.id.as_str()), ())?;
        }
    }
    pending.retain(|_, ()| false)?;
    Ok(())
}

#[cfg(test)]
mod properties;
mod retention;
mod syncer;
mod tables;
mod tasks;
mod threads;
mod tx;
mod wal;
mod webhooks;
mod writer;

pub use tx::Tx;
pub use writer::Pending;

// What the backend's modules share with the interface.
pub(crate) use crate::adapters::store::{decode, encode};
pub(crate) use crate::domain::tasks::{Account, Hold, IdempotencyRecord, KeyRecord, TaskRecord, TaskStatus};
pub(crate) use crate::ports::storage::{
    Commit, Earmark, IdempotencyClaim, Inserted, Refusal, StoreError, StoredTask, TaskRef,
};

pub(crate) use tables::{
    ACCOUNTS, FUNDS, IDEMPOTENCY, IN_FLIGHT, KEYS, LEDGER, MODEL_SWITCHES, TASKS, TASKS_BY_ACCOUNT,
};

use crate::domain::audit::{Actor, Change};
use crate::ports::storage::{Lifecycle, Slots, Switches, Topology};
use redb::{Database, ReadableTable, ReadableTableMetadata};
use std::path::Path;
use std::sync::Arc;

/// redb's page cache. Its default (1 GiB) keeps every page written, so the process would grow with the
/// store file; recent tasks and the tables' upper levels fit well within this, and the OS page cache holds
/// the rest.
const CACHE_BYTES: usize = 64 << 20;

/// Handle to the database; cheap to clone. Dropping the last clone closes the file cleanly (the writer
/// thread holds the last database handle; `db` is declared first so it is released before the writer waits).
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    overlay: Arc<overlay::Overlay>,
    writer: writer::Writer,
    key_cache: Arc<super::keys::KeyCache>,
    /// Money tasks in flight have earmarked in memory: see `earmarks`.
    earmarks: Arc<earmarks::Book>,
    /// Whether the poller has taken the live tasks (`Storage::claim`).
    claimed: Arc<std::sync::atomic::AtomicBool>,
}

impl Store {
    /// Opens (or creates) `mediagate.redb` under `dir`, creating every table, and replays what the
    /// write-ahead log holds beyond the last checkpoint (the writes of a process that did not close it).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_checkpointing(dir, writer::CHECKPOINT_INTERVAL)
    }

    /// [`Store::open`], with a checkpoint at least every `checkpoint_every`.
    fn open_checkpointing(dir: &Path, checkpoint_every: std::time::Duration) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::new(format!("create {}: {e}", dir.display())))?;
        let path = dir.join("mediagate.redb");
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::new(format!("open {}: {e}", path.display())))?;
        let backend = backend::GatheringBackend::new(redb::backends::FileBackend::new(file)?);
        let db = Database::builder().set_cache_size(CACHE_BYTES).create_with_backend(backend).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::new(format!(
                "{} is in use by a running mediagate: stop it first, or ask it through the admin API \
                 (e.g. `mediagate admin verify-ledger`)",
                path.display()
            )),
            other => StoreError::from(other),
        })?;
        let tx = db.begin_write()?;
        for table in tables::ALL {
            table.create(&tx)?;
        }
        let checkpoint = tx.open_table(tables::META)?.get(tables::CHECKPOINT)?.map_or(0, |v| v.value());
        tx.commit()?;
        let (mut wal, records) = wal::Wal::open(dir, checkpoint)?;
        if !records.is_empty() {
            let mut changes = overlay::Changes::default();
            for record in &records {
                for change in wal::decode_changes(record)? {
                    changes.put(tables::id(change.table)?, change.key, change.value);
                }
            }
            checkpointer::commit(&db, &changes, wal.last_seq(), false)?;
            tracing::info!(records = records.len(), "replayed the write-ahead log");
        }
        // What the log held is in a durable checkpoint now; its files start empty.
        wal.start_over()?;
        build_once(&db, tables::TASKS_BY_ACCOUNT_BUILT, index_tasks_by_account)?;
        build_once(&db, tables::DELIVERIES_DUE_BUILT, index_deliveries_due)?;
        let (db, overlay) = (Arc::new(db), Arc::new(overlay::Overlay::new()));
        Ok(Store {
            writer: writer::Writer::start(db.clone(), overlay.clone(), wal, checkpoint_every)?,
            db,
            overlay,
            key_cache: Arc::default(),
            earmarks: Arc::default(),
            claimed: Arc::default(),
        })
    }

    /// The store as it is now: what the writer has published, over redb.
    pub(crate) fn view(&self) -> Result<overlay::View, StoreError> {
        self.overlay.view(&self.db)
    }

    /// Runs a write through the group-commit writer, blocking until it is durable (CLI, tools, `web::block`).
    pub(crate) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.write(op)
    }

    /// Queues a write for the group-commit writer; the future resolves once it is committed as `commit` asks.
    pub(crate) fn queue<T, F>(&self, commit: Commit, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.queue(commit, op)
    }
}

/// How many changes replay would take from a log file holding `bytes`: for the log reader's fuzzer
/// (`fuzz/`), which feeds it damaged files.
#[doc(hidden)]
pub fn replay_log_bytes(bytes: &[u8]) -> Result<usize, StoreError> {
    wal::replay_bytes(bytes)
}

/// Runs one of the store's blocking calls off the async worker.
async fn blocking<T: Send + 'static>(
    store: &Store,
    call: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || call(&store))
        .await
        .map_err(|e| StoreError::new(format!("a store call stopped: {e}")))?
}

#[async_trait::async_trait]
impl Switches for Store {
    async fn model_switches(&self) -> Result<Vec<(String, bool)>, StoreError> {
        let view = self.view()?;
        let table = view.open_table(MODEL_SWITCHES)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_string(), v.value()));
        }
        Ok(out)
    }

    async fn set_model_switch(&self, model: &str, enabled: bool, by: &Actor) -> Result<(), StoreError> {
        let (model, by) = (model.to_string(), by.clone());
        blocking(self, move |store| {
            store.write(move |tx| {
                let mut switches = tx.open_table(MODEL_SWITCHES)?;
                let before = switches.get(model.as_str())?.map(|was| was.value());
                switches.insert(model.as_str(), enabled)?;
                let change = Change::switched(&by, &model, before, enabled);
                audit::append(tx, change)
            })
        })
        .await
    }
}

/// This process counts its own slots: the store is its alone.
impl Slots for Store {}

#[async_trait::async_trait]
impl Lifecycle for Store {
    fn topology(&self) -> Topology {
        Topology::Owned
    }

    fn poll_share(&self) -> Option<u32> {
        Some(1)
    }

    async fn shared_secret(&self, _: &str, _: Vec<u8>) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }

    fn writable(&self) -> bool {
        // Once its log cannot be written the store takes no write (each is refused at once as unavailable),
        // and the process should be restarted, which replays the log.
        self.writer.running()
    }

    async fn broken(&self) {
        self.writer.broken().await
    }

    async fn caught_up(&self) -> Result<(), StoreError> {
        self.writer.caught_up().await
    }

    async fn changed(&self) {
        std::future::pending().await
    }

    async fn close(&self) -> Result<(), StoreError> {
        // Every queued write is committed first, which leaves a file the next start opens without a full repair.
        blocking(self, |store| store.writer.close()).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::domain::billing::books::{EntryKind, Posting, Pot, Shortfall};
    use crate::domain::listing::{ListPosition, TaskQuery};
    use crate::domain::usage_log::UsageFilter;
    use crate::ports::storage::{Accounts, Deliveries, Ledger, Tasks};
    use serde::{Serialize, de::DeserializeOwned};

    /// The files as a killed process leaves them: redb's as of its last checkpoint, and the log.
    fn crash_image(live: &Path, files: &[&str]) -> tempfile::TempDir {
        let image = tempfile::tempdir().unwrap();
        for file in files {
            std::fs::copy(live.join(file), image.path().join(file)).unwrap();
        }
        image
    }

    /// A top-up of `acme`'s balance (negative: a debit of it).
    fn top_up(delta: i64) -> Posting {
        Posting {
            account: "acme".into(),
            kind: EntryKind::TopUp,
            pot: Pot::Balance,
            delta,
            task_id: None,
            note: "test".into(),
        }
    }

    #[test]
    fn a_snapshot_sees_nothing_written_after_it_while_a_view_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(store.post(vec![top_up(100)], &crate::domain::audit::Actor::local())).unwrap();
        let balance =
            |view: &overlay::View| ledger::funds_row(&view.open_table(FUNDS).unwrap(), "acme").unwrap().balance;
        let (snapshot, view) = (store.overlay.snapshot(&store.db).unwrap(), store.view().unwrap());
        runtime.block_on(store.post(vec![top_up(50)], &crate::domain::audit::Actor::local())).unwrap();
        assert_eq!((balance(&snapshot), balance(&view)), (100, 150));
        assert!(runtime.block_on(store.verify_ledger()).unwrap().problems.is_empty());
    }

    /// A settled task as the sync lane stores it: nested records, a `Value`, options set and unset.
    fn settled_task() -> TaskRecord {
        serde_json::from_value(serde_json::json!({
            "task_id": "task-019ab2c4", "request_id": "img-1", "account": "acme", "key_prefix": "mg-1",
            "model": "beta-image-2.0-pro_t2i", "operation": "t2i", "media": "image", "status": "success",
            "created_at": "2026-11-24 05:20:02", "created_ms": 1_790_000_000_000i64, "updated_ms": 1_790_000_000_120i64,
            "finished_ms": 1_790_000_000_120i64, "deadline_ms": 1_790_000_600_000i64,
            "results": [{"url": "https://files.example/a.png?Expires=1790086400&Signature=9f2c", "type": "image",
                         "expires_at": "2026-11-25 05:20:02"}],
            "usage": {"image_count": 1, "size": "1024*1024", "ratio": 1.5},
            "billing": {"quoted": 40000, "units": {"images": 1}, "hold": [["plan", 10000], ["balance", 30000]],
                        "baseline": 10000000, "settlement": {"outcome": "posted", "charged": 40000, "list_price": 40000,
                        "by_pot": [["plan", 10000], ["balance", 30000]], "units": {"images": 1}}},
        }))
        .unwrap()
    }

    /// A stored record: its name, its bytes as written now, what it shows, and how to read it back (as shown).
    type Stored = (&'static str, Vec<u8>, serde_json::Value, fn(&[u8]) -> serde_json::Value);

    /// One record of every stored type, with options set and unset.
    fn stored_records() -> Vec<Stored> {
        fn read<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> serde_json::Value {
            serde_json::to_value(decode::<T>(bytes).unwrap()).unwrap()
        }
        fn record<T: Serialize + DeserializeOwned>(name: &'static str, value: serde_json::Value) -> Stored {
            let typed: T = serde_json::from_value(value).unwrap();
            (name, encode(&typed).unwrap(), serde_json::to_value(&typed).unwrap(), read::<T>)
        }
        let mut live = serde_json::to_value(settled_task()).unwrap();
        let fields = live.as_object_mut().unwrap();
        for field in ["finished_ms", "results", "usage"] {
            fields.remove(field);
        }
        fields["status"] = "running".into();
        fields["upstream_task_id"] = "up-7".into();
        fields["next_poll_ms"] = 1_790_000_005_000i64.into();
        fields["error"] = serde_json::json!({"code": "c", "message": "m"});
        fields["billing"] = serde_json::json!({"quoted": 50, "units": {"seconds": 5.0, "resolution": "720P", "audio": true},
            "hold": [["free_trial", 50]], "earmarked": true, "baseline": 7});
        let mut timed = serde_json::to_value(settled_task()).unwrap();
        timed["running_ms"] = 1_790_000_000_060i64.into();
        let mut mirrored = serde_json::to_value(settled_task()).unwrap();
        mirrored["mirror"] = serde_json::json!({"state": "mirrored", "expires_ms": 1_792_592_000_000i64,
            "sources": [{"url": "https://up/1.mp4", "type": "video", "expires_at": "2026-01-02 00:00:00"}],
            "files": [{"key": "2026-02-01/task-1/0", "size": 65, "content_type": "video/mp4", "sha256": "ab"}],
            "attempts": 1, "error": null});
        let delivery = serde_json::json!({"id": "msg_1", "account": "acme", "task_id": "task-1",
            "event": "task.success", "url": "https://hooks.example/", "created_ms": 1, "state": "pending",
            "next_attempt_ms": 2, "attempts": [{"at_ms": 1, "status": 500, "error": "e"},
            {"at_ms": 2, "status": null, "error": null}], "replays": 0});
        let mut replayed = delivery.clone();
        replayed["replays"] = 2.into();
        vec![
            record::<TaskRecord>("settled task", serde_json::to_value(settled_task()).unwrap()),
            record::<TaskRecord>("live task", live),
            record::<TaskRecord>("mirrored task", mirrored),
            record::<TaskRecord>("timed task", timed),
            record::<crate::domain::billing::books::Entry>(
                "ledger entry",
                serde_json::json!({"seq": 9, "account": "acme", "kind": "charge",
                "pot": "plan", "delta": -40000, "task_id": "task-1", "at_ms": 1_790_000_000_120i64, "note": "n"}),
            ),
            record::<crate::domain::billing::books::Funds>(
                "funds",
                serde_json::json!({"free_trial": 1, "plan": 2, "balance": 3}),
            ),
            record::<Account>("account", serde_json::json!({"name": "acme", "created_at": "2026-11-24 05:20:02"})),
            record::<KeyRecord>(
                "key",
                serde_json::json!({"account": "acme", "prefix": "mg-1", "created_at": "2026-11-24 05:20:02", "revoked": true}),
            ),
            record::<IdempotencyRecord>("idempotency", serde_json::json!({"body_hash": "ab", "task_id": "task-1"})),
            record::<crate::domain::deliveries::WebhookSettings>(
                "webhook settings",
                serde_json::json!({"secrets": [{"secret": "whsec_a", "created_ms": 1, "retires_ms": 2},
                    {"secret": "whsec_b", "created_ms": 3, "retires_ms": null}],
                    "endpoint": "https://hooks.example/", "disabled": ["https://gone.example/"]}),
            ),
            record::<crate::domain::deliveries::Delivery>("delivery", delivery.clone()),
            record::<crate::domain::deliveries::Delivery>("replayed delivery", replayed),
        ]
    }

    /// Records as the positional format wrote them (`fixtures/positional-records.tsv`, a line per record and
    /// per later way of writing a field: `NAME (what changed)`) read back whole: a field inserted before
    /// others, retyped, or skipped when written would misread them.
    #[test]
    fn records_written_by_earlier_formats_still_read() {
        let written: Vec<(&str, &str)> = include_str!("../fixtures/positional-records.tsv")
            .lines()
            .map(|line| line.split_once('\t').unwrap())
            .collect();
        for (name, bytes, shown, read) in stored_records() {
            let earlier: Vec<&str> = written
                .iter()
                .filter(|(line, _)| *line == name || line.starts_with(&format!("{name} (")))
                .map(|(_, hex)| *hex)
                .collect();
            assert!(!earlier.is_empty(), "{name} has no fixture");
            for hex in earlier {
                assert_eq!(read(&hex::decode(hex).unwrap()), shown, "{name} as written before");
            }
            assert_eq!(read(&bytes), shown, "{name} as written now");
        }
    }

    #[test]
    fn records_read_back_whole_even_without_a_field_added_later() {
        let task = settled_task();
        let as_written = serde_json::to_value(&task).unwrap();
        let bytes = encode(&task).unwrap();
        assert_eq!(serde_json::to_value(decode::<TaskRecord>(&bytes).unwrap()).unwrap(), as_written);
        // A field added later at the end (`#[serde(default)]`) is missing from older records: they still read.
        let mut task = settled_task();
        task.callback_url = Some("https://hooks.example/mediagate".into());
        task.mirror = Some(crate::domain::results::Mirror {
            state: crate::domain::results::MirrorState::Pending,
            sources: Vec::new(),
            expires_ms: 1,
            files: Vec::new(),
            attempts: 0,
            error: None,
        });
        task.running_ms = Some(1_790_000_000_060);
        task.measured = Some(crate::domain::usage::Measured::default());
        task.failed_items = crate::domain::results::FailedItem::left_out(2, 1);
        task.envelope = Some("{}".into());
        task.attempts = vec![crate::domain::tasks::Attempt {
            key: 1,
            started_ms: 1,
            upstream_task_id: Some("u".into()),
            failed: None,
        }];
        task.trace = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        let as_written = serde_json::to_value(&task).unwrap();
        let mut older: Vec<serde_json::Value> = as_written.as_object().unwrap().values().cloned().collect();
        assert_eq!(older.pop(), Some(as_written["trace"].clone()));
        assert_eq!(older.pop(), Some(as_written["attempts"].clone()));
        assert_eq!(older.pop(), Some(as_written["envelope"].clone()));
        assert_eq!(older.pop(), Some(as_written["failed_items"].clone()));
        assert_eq!(older.pop(), Some(as_written["measured"].clone()));
        assert_eq!(older.pop(), Some(as_written["running_ms"].clone()));
        let read = decode::<TaskRecord>(&encode(&older).unwrap()).unwrap();
        assert!(read.running_ms.is_none() && read.measured.is_none() && read.failed_items.is_empty());
        assert!(read.envelope.is_none() && read.attempts.is_empty() && read.trace.is_none());
        assert_eq!(serde_json::to_value(&read.mirror).unwrap(), as_written["mirror"]);
        assert_eq!(read.callback_url, task.callback_url);
        assert_eq!(serde_json::to_value(read.billing).unwrap(), as_written["billing"]);
    }

    /// Each settled task is one line of the usage log, dated when it ended, oldest first; a task with no
    /// settlement has none.
    #[test]
    fn the_usage_log_is_each_settled_task_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let add = |task: TaskRecord| {
            runtime.block_on(store.add_task(task, None, None, Commit::Durable)).unwrap();
        };
        let task = |id: &str, account: &str, finished_ms: i64| {
            let mut task = settled_task();
            (task.task_id, task.account, task.finished_ms) = (id.into(), account.into(), Some(finished_ms));
            task
        };
        add(task("task-3", "acme", 3_000));
        add(task("task-1", "acme", 1_000));
        add(task("task-other", "other", 2_500));
        let mut unsettled = task("task-4", "acme", 4_000);
        (unsettled.status, unsettled.billing) = (TaskStatus::Running, None);
        add(unsettled);
        let acme = runtime
            .block_on(store.usage(UsageFilter { account: Some("acme".into()), ..UsageFilter::default() }))
            .unwrap();
        let seen: Vec<(&str, i64)> =
            acme.iter().map(|l| (l["task_id"].as_str().unwrap(), l["at_ms"].as_i64().unwrap())).collect();
        assert_eq!(seen, [("task-1", 1_000), ("task-3", 3_000)]);
        assert_eq!(acme[1]["charged"], 40_000);
        let all: Vec<_> = runtime
            .block_on(store.usage(UsageFilter::default()))
            .unwrap()
            .iter()
            .map(|l| l["task_id"].clone())
            .collect();
        assert_eq!(all, ["task-1", "task-other", "task-3"]);
    }

    /// A change for the task as the caller last had it: applied while the store still holds that record,
    /// refused once another write moved the task on (the stored record is read then, not the caller's).
    #[test]
    fn a_change_for_a_task_as_stored_loses_to_a_change_made_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut task = settled_task();
        (task.status, task.billing) = (TaskStatus::Running, None);
        let Inserted::Stored(stored) = runtime.block_on(store.add_task(task, None, None, Commit::Durable)).unwrap()
        else {
            panic!("not stored")
        };
        let running = [TaskStatus::Running];
        let change = |task: TaskRef, status| {
            let pending = store.change_task(task, &running, Commit::Durable, Box::new(move |t| t.status = status));
            runtime.block_on(pending).unwrap()
        };
        let changed = change(stored.clone().into(), TaskStatus::Success).unwrap();
        assert_eq!(changed.status, TaskStatus::Success);
        assert!(change(stored.into(), TaskStatus::Cancelled).is_none(), "the record it knew is gone");
        assert!(change(changed.task_id.as_str().into(), TaskStatus::Cancelled).is_none());
        assert_eq!(runtime.block_on(store.task(&changed.task_id)).unwrap().unwrap().status, TaskStatus::Success);
    }

    #[test]
    fn durable_writes_survive_a_crash_through_the_log() {
        let live = tempfile::tempdir().unwrap();
        let store = Store::open(live.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(store.ensure_account("acme", &crate::domain::audit::Actor::local())).unwrap();
        runtime
            .block_on(store.post(vec![top_up(5_000_000), top_up(2_000_000)], &crate::domain::audit::Actor::local()))
            .unwrap();
        runtime.block_on(store.set_model_switch("some-model", false, &crate::domain::audit::Actor::local())).unwrap();

        // redb alone has none of it yet...
        let without_log = Store::open(crash_image(live.path(), &["mediagate.redb"]).path()).unwrap();
        assert!(runtime.block_on(without_log.account("acme")).unwrap().is_none());
        // ...and with the log, every write is back.
        let image = crash_image(live.path(), &["mediagate.redb", wal::FILES[0], wal::FILES[1]]);
        let recovered = Store::open(image.path()).unwrap();
        assert!(runtime.block_on(recovered.account("acme")).unwrap().is_some());
        assert_eq!(runtime.block_on(recovered.funds("acme")).unwrap().balance, 7_000_000);
        assert_eq!(runtime.block_on(recovered.model_switches()).unwrap(), [("some-model".to_string(), false)]);
        assert!(runtime.block_on(recovered.verify_ledger()).unwrap().problems.is_empty());
        // The replay was checkpointed: the recovered store opens again to the same state.
        drop(recovered);
        let reopened = Store::open(image.path()).unwrap();
        assert_eq!(runtime.block_on(reopened.funds("acme")).unwrap().balance, 7_000_000);
        assert!(runtime.block_on(reopened.verify_ledger()).unwrap().problems.is_empty());
    }

    #[test]
    fn a_failing_write_fails_alone_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // Concurrent, so they usually share a batch; the outcome must not depend on it.
        let writes: Vec<_> = ["before", "failing", "after"]
            .into_iter()
            .map(|model| {
                let store = store.clone();
                std::thread::spawn(move || {
                    store.write(move |tx| {
                        let mut switches = tx.open_table(MODEL_SWITCHES)?;
                        switches.insert(model, false)?;
                        if model == "failing" {
                            // Over a key an earlier write of the batch may have staged: undone to its value.
                            switches.insert("before", true)?;
                            return Err(StoreError::new("refused after writing"));
                        }
                        Ok(())
                    })
                })
            })
            .collect();
        let outcomes: Vec<bool> = writes.into_iter().map(|w| w.join().unwrap().is_ok()).collect();
        assert_eq!(outcomes, [true, false, true]);
        let switches = |store: &Store| runtime.block_on(store.model_switches()).unwrap();
        let expected = [("after".to_string(), false), ("before".to_string(), false)];
        assert_eq!(switches(&store), expected);
        // Nor did the failed write reach the log.
        let image = crash_image(dir.path(), &["mediagate.redb", wal::FILES[0], wal::FILES[1]]);
        assert_eq!(switches(&Store::open(image.path()).unwrap()), expected);
    }

    /// Money earmarked in memory is kept from other earmarks, holds and debits until the task's ending write
    /// charges what it used (a `charge` entry, nothing held or given back) or the earmark is dropped; the
    /// funds earmarks are decided from follow every debit at once, and credits and undone writes through
    /// the writer.
    #[test]
    fn earmarked_money_is_kept_from_other_spending_until_charged_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let earmark = |amount| {
            let hold = Hold { amount, trial_only: false };
            runtime.block_on(store.earmark("acme", hold)).unwrap()
        };
        let balance = |store: &Store| runtime.block_on(store.funds("acme")).unwrap().balance;
        runtime.block_on(store.ensure_account("acme", &crate::domain::audit::Actor::local())).unwrap();
        runtime.block_on(store.post(vec![top_up(100_000)], &crate::domain::audit::Actor::local())).unwrap();

        let first = earmark(60_000).unwrap();
        assert_eq!(first.split(), [(Pot::Balance, 60_000)]);
        assert_eq!((balance(&store), store.earmarked("acme").balance), (40_000, 60_000));
        let shortfall = |needed, available| Shortfall::Insufficient { needed, available };
        assert_eq!(earmark(50_000).unwrap_err(), shortfall(50_000, 40_000));
        let mut task = settled_task();
        (task.account, task.status, task.billing) = ("acme".into(), TaskStatus::Running, None);
        let hold = Some(Hold { amount: 50_000, trial_only: false });
        let held = runtime.block_on(store.add_task(task, None, hold, Commit::Durable)).unwrap();
        assert!(matches!(held, Inserted::Shortfall(ref s) if *s == shortfall(50_000, 40_000)), "{held:?}");
        assert!(
            runtime.block_on(store.post(vec![top_up(-40_001)], &crate::domain::audit::Actor::local())).is_err(),
            "a debit may not take earmarked money"
        );
        runtime.block_on(store.post(vec![top_up(-30_000)], &crate::domain::audit::Actor::local())).unwrap();
        assert_eq!(earmark(10_001).unwrap_err(), shortfall(10_001, 10_000), "decided after the debit");
        // A write that debits and is undone leaves the funds as they were.
        let earmarks = store.earmarks.clone();
        let undone = store.write(move |tx| {
            ledger::append(tx, &earmarks, vec![top_up(-10_000)], None, ledger::Keep::Rows)?;
            Err::<(), _>(StoreError::new("refused after the debit"))
        });
        assert!(undone.is_err());
        let second = earmark(10_000).unwrap();
        assert_eq!(balance(&store), 0);
        drop(second);

        // The ending write charges what was used (one image, 40,000) and releases the rest.
        let mut ended = settled_task();
        ended.account = "acme".into();
        let billing = ended.billing.as_mut().unwrap();
        (billing.hold, billing.earmarked, billing.settlement) = (first.split().to_vec(), true, None);
        let ended = runtime.block_on(store.add_ended(ended, first)).unwrap();
        assert_eq!(ended.billing.as_ref().unwrap().settlement.as_ref().unwrap().charged, 40_000);
        assert_eq!((balance(&store), store.earmarked("acme").balance), (30_000, 0));
        let kinds: Vec<_> =
            runtime.block_on(store.entries(Some("acme"))).unwrap().iter().map(|e| (e.seq, e.kind, e.delta)).collect();
        assert_eq!(
            kinds,
            [(1, EntryKind::TopUp, 100_000), (2, EntryKind::TopUp, -30_000), (3, EntryKind::Charge, -40_000)]
        );
        // The charge is journaled on the task's settlement, not as a row of its own.
        let charge = &runtime.block_on(store.entries(Some("acme"))).unwrap()[2];
        assert_eq!((charge.task_id.as_deref(), charge.at_ms), (Some("task-019ab2c4"), ended.finished_ms.unwrap()));
        assert_eq!(charge.note, "success beta-image-2.0-pro_t2i");
        assert!(store.view().unwrap().open_table(LEDGER).unwrap().get(3).unwrap().is_none());
        // A credit counts too, and takes the next number.
        runtime.block_on(store.post(vec![top_up(5_000)], &crate::domain::audit::Actor::local())).unwrap();
        assert_eq!(runtime.block_on(store.entries(Some("acme"))).unwrap().last().map(|e| e.seq), Some(4));
        assert_eq!(earmark(35_001).unwrap_err(), shortfall(35_001, 35_000));

        // Dropped unspent (the task was never stored): nothing is charged.
        drop(earmark(35_000).unwrap());
        assert_eq!(
            (balance(&store), store.earmarked("acme")),
            (35_000, crate::domain::billing::books::Funds::default())
        );
        assert!(runtime.block_on(store.verify_ledger()).unwrap().problems.is_empty());
        let image = crash_image(dir.path(), &["mediagate.redb", wal::FILES[0], wal::FILES[1]]);
        let recovered = Store::open(image.path()).unwrap();
        assert_eq!(runtime.block_on(recovered.entries(None)).unwrap().len(), 4);
        assert_eq!(runtime.block_on(recovered.verify_ledger()).unwrap().entries, 4);
    }

    /// An entry a settlement holds under a number a row already has is reported.
    #[test]
    fn ledger_entries_are_numbered_once_across_rows_and_settlements() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime
            .block_on(store.post(vec![top_up(1_000), top_up(2_000)], &crate::domain::audit::Actor::local()))
            .unwrap();
        runtime.block_on(store.post(vec![top_up(3_000)], &crate::domain::audit::Actor::local())).unwrap();
        let seqs: Vec<u64> = runtime.block_on(store.entries(None)).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert!(runtime.block_on(store.verify_ledger()).unwrap().problems.is_empty());

        let mut task = settled_task();
        task.account = "acme".into();
        task.billing.as_mut().unwrap().settlement.as_mut().unwrap().ledger_seq = Some(3);
        runtime.block_on(store.add_task(task, None, None, Commit::Durable)).unwrap();
        let problems = runtime.block_on(store.verify_ledger()).unwrap().problems;
        assert!(problems.iter().any(|p| p == "entry 3 numbered twice"), "{problems:?}");
    }

    #[test]
    fn a_closed_store_needs_no_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(store.ensure_account("acme", &crate::domain::audit::Actor::local())).unwrap();
        runtime.block_on(store.close()).unwrap();
        let image = crash_image(dir.path(), &["mediagate.redb"]);
        assert!(runtime.block_on(Store::open(image.path()).unwrap().account("acme")).unwrap().is_some());
    }

    #[test]
    fn deferred_writes_a_checkpoint_leaves_unlogged_are_logged_after_it() {
        let live = tempfile::tempdir().unwrap();
        let store = Store::open_checkpointing(live.path(), std::time::Duration::from_millis(1)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for i in 0..30 {
            let deferred = format!("deferred-{i}");
            runtime
                .block_on(
                    store.queue(Commit::Deferred, move |tx| {
                        tx.open_table(MODEL_SWITCHES)?.insert(deferred.as_str(), false)
                    }),
                )
                .unwrap();
            // The checkpoint due after the deferred write's batch froze it unlogged; the durable write logs
            // it, in the other file (and a checkpoint is due again by then).
            std::thread::sleep(std::time::Duration::from_millis(2));
            runtime
                .block_on(store.set_model_switch(&format!("durable-{i}"), true, &crate::domain::audit::Actor::local()))
                .unwrap();
        }
        let image = crash_image(live.path(), &["mediagate.redb", wal::FILES[0], wal::FILES[1]]);
        for _ in 0..2 {
            let switches = runtime.block_on(Store::open(image.path()).unwrap().model_switches()).unwrap();
            assert_eq!(switches.len(), 60, "every write the durable ones followed is back");
        }
    }

    #[test]
    fn a_store_that_checkpoints_as_it_goes_recovers_from_its_files() {
        let live = tempfile::tempdir().unwrap();
        // Checkpoints between most writes: the log moves between its files, over older records.
        let store = Store::open_checkpointing(live.path(), std::time::Duration::from_millis(1)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(store.ensure_account("acme", &crate::domain::audit::Actor::local())).unwrap();
        for _ in 0..50 {
            runtime.block_on(store.post(vec![top_up(1_000)], &crate::domain::audit::Actor::local())).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Live, the entries are read from redb and the overlay together: each once, in order.
        let seqs: Vec<u64> = runtime.block_on(store.entries(Some("acme"))).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=50).collect::<Vec<_>>());
        assert!(runtime.block_on(store.verify_ledger()).unwrap().problems.is_empty());
        let image = crash_image(live.path(), &["mediagate.redb", wal::FILES[0], wal::FILES[1]]);
        for _ in 0..2 {
            let recovered = Store::open(image.path()).unwrap();
            assert_eq!(runtime.block_on(recovered.funds("acme")).unwrap().balance, 50_000);
            assert!(runtime.block_on(recovered.verify_ledger()).unwrap().problems.is_empty());
        }
    }

    /// Listing reads the index from redb and the overlay together, newest first, each task once, and a
    /// store written before the index is indexed when it next opens.
    #[test]
    fn an_accounts_tasks_list_newest_first_across_checkpoints_and_from_before_the_index() {
        let live = tempfile::tempdir().unwrap();
        let store = Store::open_checkpointing(live.path(), std::time::Duration::from_millis(1)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for n in 0..40i64 {
            let mut task = settled_task();
            (task.task_id, task.created_ms) = (format!("task-{n:02}"), 1_000 + n / 2);
            task.account = if n % 4 == 3 { "other".into() } else { "acme".into() };
            runtime.block_on(store.add_task(task, None, None, Commit::Durable)).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let query = |after: Option<ListPosition>, limit| TaskQuery {
            account: "acme".into(),
            after,
            status: None,
            model: None,
            created_since: None,
            created_until: None,
            limit,
        };
        let ids = |tasks: Vec<TaskRecord>| tasks.into_iter().map(|t| t.task_id).collect::<Vec<_>>();
        let expected: Vec<String> = (0..40).rev().filter(|n| n % 4 != 3).map(|n| format!("task-{n:02}")).collect();
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = runtime.block_on(store.list_tasks(query(after, 7))).unwrap();
            after = page.last().map(ListPosition::of);
            paged.extend(ids(page));
            if after.is_none() {
                break;
            }
        }
        assert_eq!(paged, expected);
        runtime.block_on(store.close()).unwrap();
        drop(store);

        // As a store from before the index: the index and its mark gone.
        let db = Database::create(live.path().join("mediagate.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.delete_table(TASKS_BY_ACCOUNT).unwrap();
        tx.open_table(tables::META).unwrap().remove(tables::TASKS_BY_ACCOUNT_BUILT).unwrap();
        tx.commit().unwrap();
        drop(db);
        let reopened = Store::open(live.path()).unwrap();
        assert_eq!(ids(runtime.block_on(reopened.list_tasks(query(None, 100))).unwrap()), expected);
    }

    /// Due deliveries come by their next attempt's time, only the due ones, each once however often it was
    /// rescheduled; a store that listed its pending deliveries the earlier way has them indexed when it next
    /// opens; a replay during an attempt is not lost when the attempt is written.
    #[test]
    fn due_deliveries_come_in_time_order_from_before_the_index_and_replays_stand() {
        use crate::domain::deliveries::{Delivery, DeliveryState};
        let live = tempfile::tempdir().unwrap();
        let store = Store::open_checkpointing(live.path(), std::time::Duration::from_millis(1)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let delivery = |n: i64, next_attempt_ms: i64, state| Delivery {
            id: format!("msg_{n:02}"),
            account: "acme".into(),
            task_id: format!("task-{n:02}"),
            event: "task.success".into(),
            url: "https://hooks.example/".into(),
            created_ms: 0,
            state,
            next_attempt_ms,
            attempts: Vec::new(),
            replays: 0,
            trace: None,
        };
        for n in 0..20 {
            // Queued as a task's end queues it, then rescheduled: only the last time counts.
            let queued = delivery(n, 5_000, DeliveryState::Pending);
            store.write(move |tx| webhooks::save(tx, &queued, None)).unwrap();
            runtime.block_on(store.save_delivery(delivery(n, 10_000 - n * 100, DeliveryState::Pending))).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        runtime.block_on(store.save_delivery(delivery(19, 0, DeliveryState::Delivered))).unwrap();
        let ids = |due: Vec<Delivery>| due.into_iter().map(|d| d.id).collect::<Vec<_>>();
        let expected: Vec<String> = (10..19).rev().map(|n| format!("msg_{n:02}")).collect();
        assert_eq!(ids(runtime.block_on(store.due_deliveries(9_000, 100)).unwrap()), expected);
        assert_eq!(ids(runtime.block_on(store.due_deliveries(9_000, 3)).unwrap()), expected[..3]);
        runtime.block_on(store.close()).unwrap();
        drop(store);

        // As a store from before the index: its pending deliveries listed by id, the index and its mark gone.
        let db = Database::create(live.path().join("mediagate.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.delete_table(tables::DELIVERIES_DUE).unwrap();
        tx.open_table(tables::META).unwrap().remove(tables::DELIVERIES_DUE_BUILT).unwrap();
        {
            let mut pending = tx.open_table(tables::PENDING_DELIVERIES).unwrap();
            for n in 0..19 {
                pending.insert(format!("msg_{n:02}").as_str(), ()).unwrap();
            }
        }
        tx.commit().unwrap();
        drop(db);
        let reopened = Store::open(live.path()).unwrap();
        assert_eq!(ids(runtime.block_on(reopened.due_deliveries(9_000, 100)).unwrap()), expected);
        assert_eq!(runtime.block_on(reopened.due_deliveries(100_000, 100)).unwrap().len(), 19);

        // A replay asked for while an attempt runs stands when the attempt is written: due when it said.
        let mut taken = runtime.block_on(reopened.due_deliveries(9_000, 1)).unwrap().remove(0);
        let replayed = runtime
            .block_on(reopened.replay_delivery(&taken.id, 1_000, &crate::domain::audit::Actor::local()))
            .unwrap()
            .unwrap();
        assert_eq!((replayed.state, replayed.next_attempt_ms, replayed.replays), (DeliveryState::Pending, 1_000, 1));
        taken.attempts.push(crate::domain::deliveries::Attempt { at_ms: 9_000, status: Some(200), error: None });
        taken.state = DeliveryState::Delivered;
        runtime.block_on(reopened.save_delivery(taken.clone())).unwrap();
        let after = runtime.block_on(reopened.delivery(&taken.id)).unwrap().unwrap();
        assert_eq!((after.state, after.next_attempt_ms, after.attempts.len()), (DeliveryState::Pending, 1_000, 1));
        assert_eq!(runtime.block_on(reopened.due_deliveries(1_000, 100)).unwrap()[0].id, taken.id);
        assert!(
            runtime
                .block_on(reopened.replay_delivery("msg_none", 0, &crate::domain::audit::Actor::local()))
                .unwrap()
                .is_none()
        );
    }
}
