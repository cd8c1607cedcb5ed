//! The poller: owns every in-flight task until it reaches a terminal state.
//!
//! Tasks are kept in memory as small structs (`tracker`), indexed by their next due time; the interval grows
//! with a task's age (a job that has run for minutes will not finish in the next second). Every sweep takes
//! the tasks due before the next one and plans them (`sweep`): tasks close together in creation time are
//! asked about with one list call over their window (a page reports up to `list_page_size` tasks for one
//! query), stragglers with a direct query. Only tasks a list reports terminal get a task query (for their
//! results, usage or error); PENDING -> RUNNING is recorded from the list; a due task missing from its list
//! gets a direct query. Every query, list pages included, waits for its key's limiter (`keys`): each key
//! stays under the upstream's per-key limit and a region's keys add up. Transient errors back off without
//! failing the task, and a task past its model's deadline ends in `timeout`. On start the tracker is
//! refilled from the store's in-flight index, so a restart resumes every task.

use super::keys::KeyRing;
use super::lifecycle::{OpenTask, fail, finish};
use super::sweep::{self, Due, Plan};
use super::tracker::{IDLE, Id, Slot, TAKEN, Tracked, Tracker, UpstreamCreated};
use crate::domain::catalog::{Media, ModelSpec};
use crate::domain::clock::now_ms;
use crate::domain::polling::RETRY_MS;
use crate::domain::tasks::{TaskError, TaskRecord, TaskStatus};
use crate::ports::storage::{Commit, StoreError, TaskRef};
use crate::ports::upstream::{ListRequest, ListedStatus, ListedTask, Observed, UpstreamError};
use crate::services::runtime::Gateway;
use crate::services::runtime::settings::PollerConfig;
use crate::support::telemetry;
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::{Notify, mpsc};
use tracing::Instrument;

/// A task without an upstream id this long after creation was interrupted mid-submission.
const ORPHAN_AFTER_MS: i64 = 60_000;
/// Queries (list calls included) under way per region at most. Fewer while the keys' pace is slower
/// ([`KeyRing::queries_ahead`]): a query waits for its key's turn only briefly, and work not yet started
/// stays queued in order (fetches first).
const QUERIES_IN_FLIGHT: usize = 64;
/// Store writes the poller starts at once (timeouts, failures, RUNNING marks); the writer batches them.
const STORE_WRITES_IN_FLIGHT: usize = 32;
/// How long past its deadline a task the upstream cannot be asked about (an outage) is still asked about
/// before it times out: the upstream may have finished it, and a timeout gives its money back for good.
const LAST_LOOK_GRACE_MS: i64 = 60 * 60 * 1000;
/// How often live tasks nobody polls (another process stopped) are claimed from the store.
const CLAIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// Tasks leased to this process read back each second, to check the poller has them.
const LEASES_CHECKED_AT_ONCE: usize = 1000;
/// A job under way this long (or twice the longest upstream timeout, if more) is taken to be lost.
const JOB_OVERDUE_MS: i64 = 60_000;

/// [`JOB_OVERDUE_MS`] for this process's upstream timeouts.
fn job_overdue_ms(state: &Gateway) -> i64 {
    let longest_timeout = state.upstream.longest_timeout();
    JOB_OVERDUE_MS.max(i64::try_from(longest_timeout.as_millis()).unwrap_or(i64::MAX).saturating_mul(2))
}

/// Runs until the process ends. Call once, on the actix system.
pub async fn run(state: Arc<Gateway>) {
    if !state.poller.start() {
        return;
    }
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    tokio::task::spawn_local(claim_tasks(state.clone()));
    tokio::task::spawn_local(check_leases(state.clone()));
    let mut poller = Sweeper::new(state, reports_tx);
    loop {
        for task in poller.state.poller.take_scheduled() {
            poller.schedule(&task);
        }
        for task in poller.state.poller.take_leased() {
            poller.track_missing(&task);
        }
        for task_id in poller.state.poller.take_lost() {
            tokio::task::spawn_local(read_again(poller.state.clone(), task_id));
        }
        poller.tick();
        poller.state.poller.set_tracked(poller.tracker.count());
        let wait = poller.wait_ms();
        tokio::select! {
            report = reports.recv() => if let Some(report) = report {
                poller.apply(report);
                while let Ok(report) = reports.try_recv() {
                    poller.apply(report);
                }
            },
            _ = poller.wake.notified() => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
        }
    }
}

/// Reads a task whose last write failed, once the store answers again, and schedules it if it is live.
async fn read_again(state: Arc<Gateway>, task_id: String) {
    loop {
        match state.store.task(&task_id).await {
            Ok(Some(task)) if !task.status.is_terminal() => {
                for task in super::dispatch::sort_claimed(&*state.store, &state.capacity, vec![task]).await {
                    state.poller.schedule(task);
                }
                return;
            }
            Ok(_) => return,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(RETRY_MS as u64)).await,
        }
    }
}

/// Where processes share the store, reads back the live tasks leased to this one, a page at a time around
/// and around, so that one the poller lost track of (a race between a write it made and a claim that gave
/// the task back) is polled again within one round, whatever the race.
async fn check_leases(state: Arc<Gateway>) {
    let (mut after, overdue_ms) = (None, job_overdue_ms(&state));
    loop {
        tokio::time::sleep(CLAIM_EVERY).await;
        match state.store.leased(after.clone(), LEASES_CHECKED_AT_ONCE).await {
            Ok(None) => return,
            Ok(Some(tasks)) => {
                after = tasks.last().map(|t| t.task_id.clone());
                // A task being sent is its sender's until the upstream answers (the forward leases it to its
                // poller, which may be another process); only one whose send is overdue was cut short, and
                // the poller ends it. A task waiting for an upstream slot is the line's.
                let now = now_ms();
                let (waiting, polled) = tasks
                    .into_iter()
                    .filter(|t| t.sending_since().is_none_or(|since| now - since >= overdue_ms))
                    .partition(TaskRecord::waits_for_slot);
                super::dispatch::rejoin_lost(&state, waiting).await;
                state.poller.add_leased(polled);
            }
            Err(e) => tracing::warn!(error = %e, "could not read the tasks leased to this process"),
        }
    }
}

/// Takes the tasks the store gives this process to poll: where processes share it, those handed to this one
/// and those another process stopped polling.
async fn claim_tasks(state: Arc<Gateway>) {
    loop {
        tokio::time::sleep(CLAIM_EVERY).await;
        match state.store.claim().await {
            Ok(tasks) => {
                if !tasks.is_empty() {
                    tracing::debug!(tasks = tasks.len(), "polling tasks claimed from the store");
                }
                // Those waiting for an upstream slot (another process queued them) join this one's line.
                for task in super::dispatch::sort_claimed(&*state.store, &state.capacity, tasks).await {
                    state.poller.schedule(task);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not claim tasks to poll"),
        }
    }
}

/// What a job found out, sent back to the poller's loop.
enum Report {
    /// A page of window `ticket`'s list.
    Listed { ticket: u64, tasks: Vec<ListedTask> },
    /// Window `ticket`'s list is over; `failed` when it stopped on an error.
    Listing { ticket: u64, failed: bool },
    /// Job `ticket` looked at the task in `slot`.
    Checked { ticket: u64, slot: Slot, outcome: Outcome },
    /// A RUNNING mark was written (or not) for `task`.
    MarkedRunning { slot: Slot, task: Id, written: bool },
    /// Job `ticket` read the task in `slot`, which had no upstream id.
    ReadOrphan { ticket: u64, slot: Slot, read: Result<Option<(Box<TaskRecord>, bool)>, StoreError> },
}

/// Where a task stands after a job looked at it.
enum Outcome {
    /// Terminal in the store (by this job or another path).
    Ended,
    /// Still live upstream.
    Live { running: bool },
    /// The job could not tell (upstream or store error): ask again later.
    Unknown,
}

/// One region's key ring and the work waiting for its query slots.
struct Lane {
    region: String,
    keys: Rc<KeyRing>,
    /// Tasks a list reported ended: their payload decides the outcome, so they go first.
    fetches: VecDeque<(Slot, u64)>,
    /// Lists to make, each with the key (upstream account) whose tasks it lists.
    windows: VecDeque<(u64, ListRequest, Option<usize>)>,
    directs: VecDeque<(Slot, u64)>,
    /// Lists and direct queries take turns while both wait: new windows come every sweep, and a lane short
    /// of queries would otherwise never reach a direct query.
    direct_next: bool,
    busy: Rc<Cell<usize>>,
}

/// A store write the poller decided on without asking the upstream.
enum StoreJob {
    Timeout { slot: Slot, task: Id, ticket: u64 },
    Fail { slot: Slot, task: Id, ticket: u64, code: &'static str, message: &'static str },
    MarkRunning { slot: Slot, task: Id, next_poll_ms: i64 },
    ReadOrphan { slot: Slot, task: Id, ticket: u64 },
}

impl StoreJob {
    fn ticket(&self) -> Option<u64> {
        match self {
            StoreJob::Timeout { ticket, .. } | StoreJob::Fail { ticket, .. } | StoreJob::ReadOrphan { ticket, .. } => {
                Some(*ticket)
            }
            StoreJob::MarkRunning { .. } => None,
        }
    }
}

/// A slot taken from a counter; freeing it wakes the loop to hand out more work.
struct Permit {
    busy: Rc<Cell<usize>>,
    wake: Rc<Notify>,
}

impl Permit {
    fn take(busy: &Rc<Cell<usize>>, wake: &Rc<Notify>) -> Permit {
        busy.set(busy.get() + 1);
        Permit { busy: busy.clone(), wake: wake.clone() }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.busy.set(self.busy.get().saturating_sub(1));
        self.wake.notify_one();
    }
}

/// The poller's state, owned by its loop; jobs run as local tasks and report back.
struct Sweeper {
    state: Arc<Gateway>,
    /// The share of the upstream keys' limits this process takes, as the store last said.
    share: Option<u32>,
    tracker: Tracker,
    lanes: Vec<Lane>,
    /// Due tasks of each list under way, by ticket.
    windows: HashMap<u64, Vec<Slot>>,
    /// Upstream ids of each queued window's due tasks, handed to its list job.
    window_due: HashMap<u64, HashSet<Id>>,
    store_jobs: VecDeque<StoreJob>,
    store_busy: Rc<Cell<usize>>,
    /// How long a job may be under way before it is taken to be lost.
    overdue_ms: i64,
    last_ticket: u64,
    next_sweep_ms: i64,
    reports: mpsc::UnboundedSender<Report>,
    wake: Rc<Notify>,
}

impl Sweeper {
    fn new(state: Arc<Gateway>, reports: mpsc::UnboundedSender<Report>) -> Sweeper {
        let lanes = state
            .upstream
            .regions()
            .into_iter()
            .map(|(region, keys)| Lane {
                region: region.to_string(),
                keys: Rc::new(KeyRing::new(region, keys, &state.settings.poller, state.store.poll_share())),
                fetches: VecDeque::new(),
                windows: VecDeque::new(),
                directs: VecDeque::new(),
                direct_next: false,
                busy: Rc::new(Cell::new(0)),
            })
            .collect();
        Sweeper {
            overdue_ms: job_overdue_ms(&state),
            share: state.store.poll_share(),
            state,
            tracker: Tracker::default(),
            lanes,
            windows: HashMap::new(),
            window_due: HashMap::new(),
            store_jobs: VecDeque::new(),
            store_busy: Rc::new(Cell::new(0)),
            last_ticket: 0,
            next_sweep_ms: 0,
            reports,
            wake: Rc::new(Notify::new()),
        }
    }

    fn config(&self) -> &PollerConfig {
        &self.state.settings.poller
    }

    fn sweep_ms(&self) -> i64 {
        self.config().sweep_interval_ms.min(self.config().min_interval_ms).max(1) as i64
    }

    fn ticket(&mut self) -> u64 {
        self.last_ticket += 1;
        self.last_ticket
    }

    fn lane(&mut self, region: &str) -> Option<&mut Lane> {
        self.lanes.iter_mut().find(|l| l.region == region)
    }

    /// A task resumed at start-up or forwarded by the submit path, due at its `next_poll_ms`.
    fn schedule(&mut self, record: &TaskRecord) {
        let Some(slot) = self.tracker.slot_of(&record.task_id) else {
            // A task waiting for an upstream slot is the line's, not the poller's.
            if !record.status.is_terminal() && !record.waits_for_slot() {
                self.track(record, record.next_poll_ms);
            }
            return;
        };
        let Some(tracked) = self.tracker.get(slot) else { return };
        let (missing_upstream, idle) = (tracked.upstream_id.is_none(), tracked.holder == IDLE);
        if missing_upstream {
            self.learn_upstream(slot, record);
        }
        if idle {
            self.tracker.release(slot, IDLE, Some(record.next_poll_ms));
        } else {
            self.tracker.give_again(slot);
        }
    }

    /// A task leased to this process, if the poller lost track of it: looked at now. One a job has held for
    /// far longer than any query or write takes (its job lost, by a bug) is reported and looked at again;
    /// one queued behind others for a slot keeps its place.
    fn track_missing(&mut self, record: &TaskRecord) {
        let Some(slot) = self.tracker.slot_of(&record.task_id) else {
            if !record.status.is_terminal() {
                tracing::debug!(task_id = record.task_id, "a task leased to this process was not polled; polling it");
                self.track(record, now_ms());
            }
            return;
        };
        let now = now_ms();
        let Some(task) = self.tracker.get(slot).filter(|t| t.holder != IDLE) else { return };
        let (holder, held_ms) = (task.holder, now - task.held_since_ms);
        if held_ms <= self.overdue_ms {
            return;
        }
        // Rare: only then are the queues searched for the job.
        let (stage, lost) = self.holder_of(slot, holder);
        if lost {
            tracing::warn!(
                task_id = record.task_id,
                held_ms,
                stage,
                "a job held a task for minutes; looking at it again"
            );
            self.tracker.release(slot, holder, Some(now));
        }
    }

    /// Where the job holding `slot` stands, and whether it is under way (so past a deadline it is lost) rather
    /// than waiting its turn.
    fn holder_of(&self, slot: Slot, ticket: u64) -> (&'static str, bool) {
        let queued = |queue: &VecDeque<(Slot, u64)>| queue.contains(&(slot, ticket));
        if ticket == TAKEN {
            ("taken by a sweep, never planned", true)
        } else if self.lanes.iter().any(|l| queued(&l.fetches) || queued(&l.directs)) {
            ("a query waiting for a slot", false)
        } else if self.lanes.iter().any(|l| l.windows.iter().any(|(t, ..)| *t == ticket)) {
            ("a list waiting for a slot", false)
        } else if self.store_jobs.iter().any(|job| job.ticket() == Some(ticket)) {
            ("a store write waiting for a slot", false)
        } else if self.windows.contains_key(&ticket) {
            ("a list under way", true)
        } else {
            ("a query or store write under way", true)
        }
    }

    fn track(&mut self, record: &TaskRecord, due_ms: i64) {
        let task_id: Id = Rc::from(record.task_id.as_str());
        let Some(model) = ModelSpec::find(&record.model) else {
            let (code, message) = ("model_removed", "The task's model is no longer in the spec.");
            // Not tracked: the report of this write finds no task to release.
            let job = StoreJob::Fail { slot: Slot::MAX, task: task_id, ticket: IDLE, code, message };
            self.store_jobs.push_back(job);
            return;
        };
        let mut tracked = Tracked::new(task_id, model, record.created_ms, record.deadline_ms);
        tracked.trace = record.trace.as_deref().map(Rc::from);
        let slot = self.tracker.insert(tracked, due_ms);
        self.learn_upstream(slot, record);
    }

    /// The upstream created the task between the gateway's record and the forward's answer (`updated_ms`).
    fn learn_upstream(&mut self, slot: Slot, record: &TaskRecord) {
        if let Some(upstream_id) = &record.upstream_task_id {
            let created = UpstreamCreated::Between(record.created_ms, record.updated_ms.max(record.created_ms));
            self.tracker.set_upstream(slot, Rc::from(upstream_id.as_str()), record.upstream_key(), created);
        }
    }

    /// Sweeps when it is time, then hands out whatever work has a free slot.
    fn tick(&mut self) {
        let share = self.state.store.poll_share();
        if share != self.share {
            tracing::info!(
                share = share.unwrap_or(0),
                "this process's share of the upstream keys' query limits changed"
            );
            self.share = share;
            for lane in &self.lanes {
                lane.keys.set_share(share);
            }
        }
        let now = now_ms();
        if now >= self.next_sweep_ms {
            self.next_sweep_ms = now + self.sweep_ms();
            self.sweep(now);
        }
        self.dispatch();
    }

    fn wait_ms(&self) -> u64 {
        (self.next_sweep_ms - now_ms()).clamp(1, self.sweep_ms()) as u64
    }

    /// Takes every task due before the next sweep and plans how to look at it.
    fn sweep(&mut self, now: i64) {
        // Grouped by the account that created them too: an account lists only its own tasks.
        let mut due_by_lane: HashMap<(&'static str, Option<u16>), Vec<Due>> = HashMap::new();
        let skew = self.config().list_clock_skew_ms as i64;
        for (slot, due) in self.tracker.take_due(now + self.sweep_ms()) {
            crate::support::metrics::poll_lag(now - due);
            let Some(task) = self.tracker.get(slot) else { continue };
            let (region, key, created, created_second) =
                (task.model.region, task.key, task.upstream_created, task.created_ms.div_euclid(1000));
            let asked = task.upstream_id.is_some() && self.lanes.iter().any(|l| l.region == region);
            if now >= task.deadline_ms && !asked {
                let (task, ticket) = (task.task_id.clone(), self.ticket());
                self.tracker.hold(slot, ticket);
                self.store_jobs.push_back(StoreJob::Timeout { slot, task, ticket });
            } else if now >= task.deadline_ms {
                // A last look before giving up: the upstream may have finished it meanwhile.
                let ticket = self.ticket();
                self.tracker.hold(slot, ticket);
                if let Some(lane) = self.lane(region) {
                    lane.fetches.push_back((slot, ticket));
                }
            } else if task.upstream_id.is_none() {
                let (task, ticket) = (task.task_id.clone(), self.ticket());
                self.tracker.hold(slot, ticket);
                self.store_jobs.push_back(StoreJob::ReadOrphan { slot, task, ticket });
            } else if !self.lanes.iter().any(|l| l.region == region) {
                let later = now + self.config().max_interval_ms as i64;
                self.tracker.release(slot, TAKEN, Some(later));
            } else {
                // An estimate by the gateway's clock is widened for the upstream's; a reported time is exact.
                let (earliest_ms, latest_ms) = match created {
                    UpstreamCreated::Between(earliest, latest) => (earliest - skew, latest + skew),
                    UpstreamCreated::At(at) => (at, at),
                };
                let due = Due { task: slot, earliest_ms, latest_ms, created_second };
                due_by_lane.entry((region, key)).or_default().push(due);
            }
        }
        let page_size = self.config().list_page_size.max(1);
        let shared = self.share.is_some_and(|share| share > 1);
        for ((region, key), due) in due_by_lane {
            for plan in sweep::plan(due, self.tracker.created(region), page_size, shared) {
                self.queue(region, key.map(usize::from), plan, page_size);
            }
        }
        self.tracker.prune_created(now);
    }

    fn queue(&mut self, region: &str, key: Option<usize>, plan: Plan, page_size: u64) {
        let ticket = self.ticket();
        match plan {
            Plan::Direct(slot) => {
                self.tracker.hold(slot, ticket);
                if let Some(lane) = self.lane(region) {
                    lane.directs.push_back((slot, ticket));
                }
            }
            Plan::Window { start_ms, end_ms, tasks } => {
                let mut upstream_ids = HashSet::with_capacity(tasks.len());
                for &slot in &tasks {
                    self.tracker.hold(slot, ticket);
                    upstream_ids.extend(self.tracker.get(slot).and_then(|t| t.upstream_id.clone()));
                }
                let request = ListRequest { start_ms, end_ms, page_no: 1, page_size };
                if let Some(lane) = self.lane(region) {
                    lane.windows.push_back((ticket, request, key));
                }
                self.windows.insert(ticket, tasks);
                self.window_due.insert(ticket, upstream_ids);
            }
        }
    }

    /// A due task with no upstream id, as read again: its forward may have finished since, or been cut
    /// short by a crash.
    fn orphan(&mut self, slot: Slot, ticket: u64, read: Result<Option<(Box<TaskRecord>, bool)>, StoreError>, now: i64) {
        let (record, interrupted) = match read {
            Ok(Some((record, interrupted))) if !record.status.is_terminal() => (record, interrupted),
            Ok(_) => {
                self.tracker.release(slot, ticket, None);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "poller could not read task");
                self.tracker.release(slot, ticket, Some(now + self.config().max_interval_ms as i64));
                return;
            }
        };
        if record.upstream_task_id.is_some() {
            self.learn_upstream(slot, &record);
            self.tracker.release(slot, ticket, Some(now));
        } else if record.waits_for_slot() {
            // Back in line for an upstream slot (sent again after a transient failure): the line has it.
            self.tracker.release(slot, ticket, None);
        } else if let Some(since) = record.sending_since().filter(|since| !interrupted && now - since < self.overdue_ms)
        {
            // Being sent by the process that queued it: its answer is not due yet.
            self.tracker.release(slot, ticket, Some(since + self.overdue_ms + 1));
        } else if interrupted || now - record.created_ms > ORPHAN_AFTER_MS {
            let Some(task) = self.tracker.get(slot).map(|t| t.task_id.clone()) else { return };
            let (code, message) =
                (super::lifecycle::SUBMISSION_INTERRUPTED, super::lifecycle::SUBMISSION_INTERRUPTED_MESSAGE);
            self.store_jobs.push_back(StoreJob::Fail { slot, task, ticket, code, message });
        } else {
            self.tracker.release(slot, ticket, Some(record.created_ms + ORPHAN_AFTER_MS + 1));
        }
    }

    /// When to look at a live task again.
    fn next_due(&self, slot: Slot, now: i64) -> i64 {
        let schedule = self.config().schedule();
        if self.others_wait(slot) {
            return now + schedule.while_others_wait();
        }
        now + schedule.next(self.age(slot, now))
    }

    /// When to look again at a live task a list reported.
    fn next_list_look(&self, slot: Slot, now: i64) -> i64 {
        let schedule = self.config().schedule();
        if self.others_wait(slot) {
            return now + schedule.while_others_wait();
        }
        now + schedule.after_list(self.age(slot, now))
    }

    /// Whether the task holds an upstream slot that jobs wait in line for.
    fn others_wait(&self, slot: Slot) -> bool {
        self.tracker.get(slot).is_some_and(|t| t.key.is_some() && self.state.capacity.contended(t.model))
    }

    fn retry_due(&self, slot: Slot, now: i64) -> i64 {
        now + self.config().schedule().after_failure(self.age(slot, now))
    }

    fn age(&self, slot: Slot, now: i64) -> i64 {
        self.tracker.get(slot).map_or(0, |t| now - t.created_ms)
    }

    fn apply(&mut self, report: Report) {
        let now = now_ms();
        match report {
            Report::Listed { ticket, tasks } => {
                for listed in &tasks {
                    self.observe_listed(ticket, listed, now);
                }
            }
            Report::Listing { ticket, failed } => self.window_done(ticket, failed, now),
            Report::Checked { ticket, slot, outcome } => match outcome {
                Outcome::Ended => {
                    // Given again meanwhile: what the job found may be older than the claim; look once more.
                    let again = self.tracker.get(slot).is_some_and(|t| t.holder == ticket && t.given_again);
                    if !again && let Some(task) = self.tracker.get(slot) {
                        // Ended, or polled by another process now (which counts its slot): not held here.
                        self.state.capacity.let_go(&task.task_id);
                    }
                    self.tracker.release(slot, ticket, again.then_some(now));
                }
                Outcome::Live { running } => {
                    if self.tracker.release(slot, ticket, Some(self.next_due(slot, now))) && running {
                        self.mark_running(slot, now);
                    }
                }
                Outcome::Unknown => {
                    self.tracker.release(slot, ticket, Some(self.retry_due(slot, now)));
                }
            },
            Report::ReadOrphan { ticket, slot, read } => self.orphan(slot, ticket, read, now),
            Report::MarkedRunning { slot, task, written } => {
                let same = self.tracker.get(slot).is_some_and(|t| Rc::ptr_eq(&t.task_id, &task));
                if !written && same {
                    self.tracker.set_running(slot, false);
                }
            }
        }
    }

    /// What a list says about one task, if it is ours and no other job is on it.
    fn observe_listed(&mut self, ticket: u64, listed: &ListedTask, now: i64) {
        let Some(slot) = self.tracker.slot_of_upstream(&listed.task_id) else { return };
        let Some(task) = self.tracker.get(slot) else { return };
        if task.holder != ticket && task.holder != IDLE {
            return;
        }
        let (holder, region, task_id, model, key) =
            (task.holder, task.model.region, task.task_id.clone(), task.model, task.key);
        if let Some(created) = listed.gmt_create {
            self.tracker.set_upstream_created(slot, created);
        }
        match listed.status {
            ListedStatus::Pending => {
                self.tracker.release(slot, holder, Some(self.next_list_look(slot, now)));
            }
            ListedStatus::Running => {
                self.tracker.release(slot, holder, Some(self.next_list_look(slot, now)));
                self.mark_running(slot, now);
            }
            // Ended (or a word this gateway does not know): the task query tells the rest.
            ListedStatus::Ended | ListedStatus::Unrecognized => {
                if matches!(listed.status, ListedStatus::Ended) {
                    self.state.capacity.ended_upstream(&task_id, model, key.map(usize::from));
                }
                let fetch = self.ticket();
                self.tracker.hold(slot, fetch);
                if let Some(lane) = self.lane(region) {
                    lane.fetches.push_back((slot, fetch));
                }
            }
        }
    }

    /// The due tasks a finished list did not report get a direct query (or, after an error, a later look).
    fn window_done(&mut self, ticket: u64, failed: bool, now: i64) {
        self.window_due.remove(&ticket);
        for slot in self.windows.remove(&ticket).unwrap_or_default() {
            let Some(task) = self.tracker.get(slot).filter(|t| t.holder == ticket) else { continue };
            let region = task.model.region;
            if failed {
                self.tracker.release(slot, ticket, Some(self.retry_due(slot, now)));
                continue;
            }
            let direct = self.ticket();
            self.tracker.hold(slot, direct);
            if let Some(lane) = self.lane(region) {
                lane.directs.push_back((slot, direct));
            }
        }
    }

    /// Records PENDING -> RUNNING once per task.
    fn mark_running(&mut self, slot: Slot, now: i64) {
        let Some(task) = self.tracker.get(slot).filter(|t| !t.running) else { return };
        let job = StoreJob::MarkRunning { slot, task: task.task_id.clone(), next_poll_ms: self.next_due(slot, now) };
        self.tracker.set_running(slot, true);
        self.store_jobs.push_back(job);
    }

    /// Starts queued work while slots are free: per region task fetches first, then lists and direct
    /// queries in turn; store writes on their own budget.
    fn dispatch(&mut self) {
        for index in 0..self.lanes.len() {
            while let Some(job) = self.next_job(index) {
                self.start(index, job);
            }
        }
        while self.store_busy.get() < STORE_WRITES_IN_FLIGHT
            && let Some(job) = self.store_jobs.pop_front()
        {
            let permit = Permit::take(&self.store_busy, &self.wake);
            tokio::task::spawn_local(store_job(self.state.clone(), job, self.reports.clone(), permit));
        }
    }

    fn next_job(&mut self, lane: usize) -> Option<Job> {
        let lane = self.lanes.get_mut(lane).filter(|l| l.busy.get() < l.keys.queries_ahead().min(QUERIES_IN_FLIGHT))?;
        if let Some((slot, ticket)) = lane.fetches.pop_front() {
            return Some(Job::Query(slot, ticket));
        }
        let direct = lane.directs.front().is_some() && (lane.direct_next || lane.windows.is_empty());
        lane.direct_next = !direct;
        if direct {
            return lane.directs.pop_front().map(|(slot, ticket)| Job::Query(slot, ticket));
        }
        lane.windows.pop_front().map(|(ticket, request, key)| Job::List(ticket, request, key))
    }

    fn start(&mut self, lane: usize, job: Job) {
        let Some(lane) = self.lanes.get(lane) else { return };
        let (state, reports, keys) = (self.state.clone(), self.reports.clone(), lane.keys.clone());
        match job {
            Job::Query(slot, ticket) => {
                let Some(task) = self.tracker.get(slot).filter(|t| t.holder == ticket) else { return };
                let Some(upstream_id) = task.upstream_id.clone() else { return };
                let permit = Permit::take(&lane.busy, &self.wake);
                let check = Check {
                    slot,
                    task: task.task_id.clone(),
                    ticket,
                    upstream_id,
                    key: task.key.map(usize::from),
                    trace: task.trace.clone(),
                    region: task.model.region,
                    media: task.model.media,
                    deadline_ms: task.deadline_ms,
                };
                tokio::task::spawn_local(query_task(state, keys, check, reports, permit));
            }
            Job::List(ticket, request, key) => {
                let permit = Permit::take(&lane.busy, &self.wake);
                let window = Window {
                    region: lane.region.clone(),
                    key,
                    ticket,
                    request,
                    unseen: self.window_due.remove(&ticket).unwrap_or_default(),
                };
                tokio::task::spawn_local(list_window(state, keys, window, reports, permit));
            }
        }
    }
}

enum Job {
    Query(Slot, u64),
    List(u64, ListRequest, Option<usize>),
}

/// One task query to make.
struct Check {
    slot: Slot,
    task: Id,
    ticket: u64,
    upstream_id: Id,
    /// The key that created it, if known.
    key: Option<usize>,
    /// The job's trace, which the query is traced under.
    trace: Option<Id>,
    region: &'static str,
    media: Media,
    deadline_ms: i64,
}

/// One list to page through.
struct Window {
    region: String,
    /// The account whose tasks it lists (any key for tasks of no known account).
    key: Option<usize>,
    ticket: u64,
    request: ListRequest,
    /// Upstream ids of the window's due tasks not reported yet.
    unseen: HashSet<Id>,
}

/// Asks the upstream about one task and records what it says.
async fn query_task(
    state: Arc<Gateway>,
    keys: Rc<KeyRing>,
    check: Check,
    reports: mpsc::UnboundedSender<Report>,
    permit: Permit,
) {
    let key = keys.acquire(check.key).await;
    crate::support::metrics::upstream_call("query");
    let span = telemetry::step("job.poll", check.trace.as_deref());
    let observed =
        state.upstream.query(check.region, key, &check.upstream_id, check.media).instrument(span.clone()).await;
    // The query slot is free again while the outcome is written.
    drop(permit);
    let outcome = match observed {
        Ok(observed) => {
            failpoint_before_settle(&observed);
            let settling = match observed {
                Observed::Pending | Observed::Running => tracing::Span::none(),
                _ => span.in_scope(|| telemetry::step("job.settle", None)),
            };
            settle(&state, &check.task, observed).instrument(settling).await
        }
        Err(e) => query_failed(&check, &e),
    };
    // Past its deadline, a task the upstream still runs times out. One the upstream could not be asked
    // about is asked again, for a while: an answer not had says nothing about the task.
    let now = now_ms();
    let outcome = match outcome {
        Outcome::Live { .. } if now >= check.deadline_ms => time_out(&state, &check.task).await,
        Outcome::Unknown if now >= check.deadline_ms + LAST_LOOK_GRACE_MS => time_out(&state, &check.task).await,
        outcome => outcome,
    };
    let _ = reports.send(Report::Checked { ticket: check.ticket, slot: check.slot, outcome });
}

/// Ends a task past its deadline in `timeout` (its hold is given back).
async fn time_out(state: &Gateway, task_id: &str) -> Outcome {
    let error =
        TaskError { code: "timeout".into(), message: "The task did not finish before its model's deadline.".into() };
    let written = finish(state, OpenTask::polled(task_id), TaskStatus::Timeout, move |t| t.error = Some(error)).await;
    ended(state, task_id, written).await
}

/// Never fails a task over a query error: it is asked about again later; the deadline bounds the wait.
fn query_failed(check: &Check, e: &UpstreamError) -> Outcome {
    crate::support::metrics::upstream_error("query");
    tracing::warn!(task_id = &*check.task, error = %e, "task query failed; will retry");
    Outcome::Unknown
}

/// Records a terminal observation (compare-and-swap and settlement in `finish`).
async fn settle(state: &Gateway, task_id: &str, observed: Observed) -> Outcome {
    let status = observed.status();
    let finished = match observed {
        Observed::Pending => return Outcome::Live { running: false },
        Observed::Running => return Outcome::Live { running: true },
        Observed::Succeeded { results, failed, usage, measured } => {
            finish(state, OpenTask::polled(task_id), status, move |t| {
                t.record_results(results, failed);
                t.usage = usage;
                t.measured = measured;
            })
            .await
        }
        Observed::Failed(error) => match super::dispatch::retry_transient(state, task_id, &error).await {
            // Waiting for another key now: no longer the poller's.
            Ok(true) => return Outcome::Ended,
            Ok(false) => finish(state, OpenTask::polled(task_id), status, move |t| t.error = Some(error)).await,
            Err(e) => {
                tracing::warn!(task_id, error = %e, "could not decide whether to send a failed task again");
                return Outcome::Unknown;
            }
        },
        Observed::Cancelled => {
            let error = TaskError { code: "cancelled".into(), message: "The upstream cancelled the task.".into() };
            finish(state, OpenTask::polled(task_id), status, move |t| t.error = Some(error)).await
        }
    };
    ended(state, task_id, finished).await
}

/// Where a task stands after the poller wrote (or tried to write) its end. A write that found the task
/// moved on means it ended by another path, or another process holds its lease; unless the lease has come
/// back to this process since (a claim gave it back while the write was under way), which the store is
/// asked: then it is looked at again rather than dropped with nobody polling it.
async fn ended<E: std::fmt::Display>(
    state: &Gateway,
    task_id: &str,
    written: Result<Option<TaskRecord>, E>,
) -> Outcome {
    match written {
        Ok(Some(_)) => Outcome::Ended,
        Ok(None) => match state.store.polls_here(task_id).await {
            Ok(false) => Outcome::Ended,
            Ok(true) => Outcome::Unknown,
            Err(e) => {
                tracing::warn!(task_id, error = %e, "poller could not tell who polls a task; will look again");
                Outcome::Unknown
            }
        },
        Err(e) => {
            tracing::error!(task_id, error = %e, "poller could not record a terminal state; will retry");
            Outcome::Unknown
        }
    }
}

/// Pages through one window's list, reporting each page; stops once every due task was seen, or when the
/// pages left would cost more than querying the unseen due tasks directly.
async fn list_window(
    state: Arc<Gateway>,
    keys: Rc<KeyRing>,
    mut window: Window,
    reports: mpsc::UnboundedSender<Report>,
    _permit: Permit,
) {
    let ticket = window.ticket;
    loop {
        let key = keys.acquire(window.key).await;
        crate::support::metrics::upstream_call("list");
        let page = match state.upstream.list(&window.region, key, &window.request).await {
            Ok(page) => page,
            Err(e) => {
                crate::support::metrics::upstream_error("list");
                tracing::warn!(region = window.region, error = %e, "task list failed; will retry");
                let _ = reports.send(Report::Listing { ticket, failed: true });
                return;
            }
        };
        for listed in &page.tasks {
            window.unseen.remove(listed.task_id.as_str());
        }
        let pages_left = page.total_page.saturating_sub(window.request.page_no);
        let last = page.tasks.is_empty() || pages_left == 0;
        let _ = reports.send(Report::Listed { ticket, tasks: page.tasks });
        if last || window.unseen.is_empty() || pages_left >= window.unseen.len() as u64 {
            break;
        }
        window.request.page_no += 1;
    }
    let _ = reports.send(Report::Listing { ticket, failed: false });
}

/// Runs a store write the poller decided on without asking the upstream.
async fn store_job(state: Arc<Gateway>, job: StoreJob, reports: mpsc::UnboundedSender<Report>, _permit: Permit) {
    let report = match job {
        StoreJob::Timeout { slot, task, ticket } => {
            Report::Checked { outcome: time_out(&state, &task).await, ticket, slot }
        }
        StoreJob::Fail { slot, task, ticket, code, message } => {
            let written = fail(&state, OpenTask::polled(&task), code, message).await;
            Report::Checked { outcome: ended(&state, &task, written).await, ticket, slot }
        }
        StoreJob::MarkRunning { slot, task, next_poll_ms } => {
            // Durable: a task query may say `running` as soon as it is written.
            let written = state
                .store
                .change_task(
                    TaskRef::Polled(task.to_string()),
                    &[TaskStatus::Queued],
                    Commit::Durable,
                    Box::new(move |t| {
                        let now = now_ms();
                        t.status = TaskStatus::Running;
                        t.next_poll_ms = next_poll_ms;
                        t.updated_ms = now;
                        t.running_ms = Some(now);
                    }),
                )
                .await;
            Report::MarkedRunning { slot, task, written: written.is_ok() }
        }
        StoreJob::ReadOrphan { slot, task, ticket } => {
            let read = match state.store.task(&task).await {
                Ok(Some(record)) => super::lifecycle::interrupted(&state, &record)
                    .await
                    .map(|interrupted| Some((Box::new(record), interrupted)))
                    .map_err(|e| StoreError::new(e.to_string())),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            Report::ReadOrphan { ticket, slot, read }
        }
    };
    let _ = reports.send(report);
}

/// Failpoint `before-settle`: after the upstream reported a terminal state and before the store records it,
/// the crash window that exactly-once settlement must survive (tested).
fn failpoint_before_settle(observed: &Observed) {
    if !matches!(observed, Observed::Pending | Observed::Running) {
        crate::support::failpoint::reached("before-settle");
    }
}
