//! Upstream capacity: the running slots each model has on each upstream account (key) of its region, and the
//! jobs waiting for one (`domain::capacity` holds the rules). A slot is taken before a create is sent and
//! kept while the upstream has the task; a task the upstream cannot take yet waits here, `queued`, and is
//! handed a slot, fairly across client accounts, when one frees.
//!
//! Slots and the line are kept here, or, where processes share the store and `shared_upstream_slots` is on,
//! by the store (`ports::storage::Slots`), which counts every replica's slots and keeps one line for all of
//! them: whichever replica sees a slot free sends the job next across all.

use crate::domain::capacity::{FairQueue, Pool};
use crate::domain::catalog::{MODELS, ModelSpec};
use crate::domain::tasks::TaskRecord;
use crate::ports::storage::{InLine, Storage, Turn};
use crate::ports::upstream::Upstream;
use crate::support::metrics::PoolFigures;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};

/// A pool's name: the region and the upstream's model code (two public models of one code share it).
type PoolId = (&'static str, &'static str);

fn pool_id(model: &ModelSpec) -> PoolId {
    (model.region, model.model_code)
}

/// A pool's name in a shared store.
fn pool_name(model: &ModelSpec) -> String {
    format!("{}/{}", model.region, model.model_code)
}

/// A model of the pool a shared store names (any of those sharing it: they share its caps).
fn model_of(pool: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| pool.split_once('/') == Some((m.region, m.model_code)))
}

/// How long a job that could not join a shared line (the store failed) waits before it tries again.
const JOIN_RETRY: Duration = Duration::from_secs(1);

/// Jobs waiting per account.
type Depths = Vec<(String, usize)>;

/// A slot handed to a queued task: the dispatcher sends it.
#[derive(Debug)]
pub struct Grant {
    pub task_id: String,
    pub model: &'static ModelSpec,
    pub key: usize,
    /// Keys that refused it or failed it before, tried last.
    pub tried: Vec<usize>,
}

/// Where a queued task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Jobs of this model served before it.
    pub ahead: usize,
    /// When it may be sent, by the model's expected run time and the slots there are.
    pub estimate_seconds: u64,
}

/// The client account a job waits for, and its share of the slots.
#[derive(Debug, Clone, Copy)]
pub struct Waiting<'a> {
    pub name: &'a str,
    pub weight: u32,
}

enum Waiter {
    Task { task_id: String, model: &'static ModelSpec, tried: Vec<usize>, since: Instant, deadline_ms: i64 },
    Call { answer: oneshot::Sender<usize>, since: Instant },
}

#[derive(Default)]
struct Slots {
    pools: HashMap<PoolId, Pool, foldhash::fast::RandomState>,
    queues: HashMap<PoolId, FairQueue<Waiter>, foldhash::fast::RandomState>,
    /// Tasks the upstream has, by id: the pool and key of the slot each holds.
    held: HashMap<String, (&'static ModelSpec, usize), foldhash::fast::RandomState>,
    granted: Vec<Grant>,
    /// Tasks granted a slot and not yet sent or back in line.
    sending: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// Tasks in a line: one is never in two places (two sends of one job).
    queued: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// Where the store keeps the line: this process's calls waiting in it, by holder.
    calls: HashMap<String, oneshot::Sender<usize>, foldhash::fast::RandomState>,
    /// Where the store keeps the line: the jobs waiting per pool and account, as last read.
    depths: HashMap<PoolId, Depths, foldhash::fast::RandomState>,
}

pub struct Capacity {
    upstream: Arc<dyn Upstream>,
    /// The store that keeps the slots, where processes share it; else they are counted here.
    shared: Option<Arc<dyn Storage>>,
    slots: Mutex<Slots>,
    /// Woken when a queued task is granted a slot, or, where the store keeps the slots, one is given back.
    pub granted: Arc<Notify>,
}

impl Capacity {
    pub fn new(upstream: Arc<dyn Upstream>, shared: Option<Arc<dyn Storage>>) -> Capacity {
        Capacity { upstream, shared, slots: Mutex::default(), granted: Arc::new(Notify::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot of `model` for `holder` (a task id) on the key with the most free, skipping `tried`;
    /// never ahead of jobs already waiting unless `after_turn` (a job that has had its turn and was refused
    /// by a key).
    pub async fn take(
        &self,
        model: &'static ModelSpec,
        tried: &[usize],
        after_turn: bool,
        holder: &str,
    ) -> Option<usize> {
        let caps = {
            let mut slots = self.lock();
            let id = pool_id(model);
            if self.shared.is_none() && !after_turn && slots.queues.get(&id).is_some_and(|q| !q.is_empty()) {
                return None;
            }
            let pool = self.pool(&mut slots, model);
            if pool.total() == 0 && tried.is_empty() {
                // No key in the model's region: the create is sent to answer why (nothing is counted).
                return Some(0);
            }
            match &self.shared {
                None => return pool.take(tried),
                Some(_) => pool.slots().map(|(_, cap)| cap).collect::<Vec<u32>>(),
            }
        };
        self.take_shared(model, &caps, tried, holder, !after_turn).await
    }

    /// A slot from the shared store, whose counts of every key this process keeps to show.
    async fn take_shared(
        &self,
        model: &'static ModelSpec,
        caps: &[u32],
        tried: &[usize],
        holder: &str,
        behind_line: bool,
    ) -> Option<usize> {
        let store = self.shared.as_ref()?;
        match store.take_slot(&pool_name(model), caps, tried, holder, behind_line).await {
            Ok((key, used)) => {
                self.pool(&mut self.lock(), model).set_used(used);
                key
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not take an upstream slot from the store; the job waits");
                None
            }
        }
    }

    fn pool<'a>(&self, slots: &'a mut Slots, model: &ModelSpec) -> &'a mut Pool {
        slots.pools.entry(pool_id(model)).or_insert_with(|| Pool::new(self.upstream.caps(model)))
    }

    /// Gives back `holder`'s slot on `key`, taken for a create that did not leave a task upstream, and hands
    /// it on.
    pub fn give_back(&self, model: &'static ModelSpec, key: usize, holder: &str) {
        if let Some(store) = self.shared.clone() {
            let (pool, holder, granted) = (pool_name(model), holder.to_string(), self.granted.clone());
            tokio::task::spawn_local(async move {
                match store.give_back_slot(&pool, &holder, key).await {
                    // Free now: the line is looked at at once, not at the next moment.
                    Ok(()) => granted.notify_one(),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not give an upstream slot back; it lapses with this replica")
                    }
                }
            });
            return;
        }
        let mut slots = self.lock();
        self.pool(&mut slots, model).give_back(key);
        self.hand_on(&mut slots, model);
    }

    /// Gives a slot back after `pause`: the key refused or failed a create, so it is not offered again at once.
    pub fn give_back_later(self: &Arc<Self>, model: &'static ModelSpec, key: usize, holder: &str, pause: Duration) {
        let (capacity, holder) = (self.clone(), holder.to_string());
        tokio::task::spawn_local(async move {
            tokio::time::sleep(pause).await;
            capacity.give_back(model, key, &holder);
        });
    }

    /// Records that the upstream has `task_id` in a slot taken on `key`, until its end. Counted here, the slot
    /// is held only by the process that polls the task (`polled_here`), which sees the end: where replicas
    /// share the store another may poll it, and counts it when it takes the task.
    pub fn hold(&self, task_id: &str, model: &'static ModelSpec, key: usize, polled_here: bool) {
        if self.shared.is_some() {
            return;
        }
        if polled_here {
            self.lock().held.insert(task_id.to_string(), (model, key));
        } else {
            self.give_back(model, key, task_id);
        }
    }

    /// Counts a task the upstream had before this process took it over (whatever the cap now): where the
    /// store keeps the slots, its slot becomes this process's, so it outlives the one that took it.
    pub fn restore(&self, task_id: &str, model: &'static ModelSpec, key: usize) {
        if let Some(store) = self.shared.clone() {
            let holder = task_id.to_string();
            tokio::task::spawn_local(async move {
                if let Err(e) = store.adopt_slot(&pool_name(model), &holder, key).await {
                    tracing::warn!(error = %e, "could not take over an upstream slot");
                }
            });
            return;
        }
        let mut slots = self.lock();
        self.pool(&mut slots, model).hold(key);
        slots.held.insert(task_id.to_string(), (model, key));
    }

    /// The task has ended or left the upstream (it held a slot on `key`): the slot goes to the next in line.
    pub fn release(&self, task_id: &str, model: &'static ModelSpec, key: usize) {
        if self.shared.is_some() {
            return self.give_back(model, key, task_id);
        }
        self.let_go(task_id);
    }

    /// Whether jobs wait in line for a slot of `model`'s pool.
    pub fn contended(&self, model: &ModelSpec) -> bool {
        let slots = self.lock();
        let id = pool_id(model);
        slots.queues.get(&id).is_some_and(|q| !q.is_empty()) || slots.depths.get(&id).is_some_and(|d| !d.is_empty())
    }

    /// The upstream reports `task_id` ended, before this process has written it so: its slot (on `key`) is
    /// free on the upstream now, and goes to the next in line without waiting for the results to be read and
    /// the task settled. Where the store keeps the slots, the give-back at the task's end then finds none.
    pub fn ended_upstream(&self, task_id: &str, model: &'static ModelSpec, key: Option<usize>) {
        match (&self.shared, key) {
            (None, _) => self.let_go(task_id),
            (Some(_), Some(key)) => self.give_back(model, key, task_id),
            (Some(_), None) => {}
        }
    }

    /// The task is no longer this process's to poll (it ended, or another process took it over and counts
    /// its slot): a slot it held here goes to the next in line.
    pub fn let_go(&self, task_id: &str) {
        let mut slots = self.lock();
        let Some((model, key)) = slots.held.remove(task_id) else { return };
        self.pool(&mut slots, model).give_back(key);
        self.hand_on(&mut slots, model);
    }

    /// Queues a task for a slot: behind the others of its account (whose share is its weight), or at the
    /// head of them (`again`: one that had its turn and must wait once more). A task already in line, or
    /// being sent but for `again`, stays where it is. In a shared line it is in line when this returns,
    /// unless the store failed: then it joins once the store answers.
    pub async fn enqueue(
        &self,
        task: &TaskRecord,
        weight: u32,
        model: &'static ModelSpec,
        tried: Vec<usize>,
        again: bool,
    ) {
        let keys = {
            let mut slots = self.lock();
            if !again && slots.sending.contains(&task.task_id) {
                return;
            }
            slots.sending.remove(&task.task_id);
            if self.shared.is_none() {
                return self.enqueue_here(&mut slots, task, weight, model, tried, again);
            }
            self.pool(&mut slots, model).keys()
        };
        let Some(store) = self.shared.clone() else { return };
        let job = InLine {
            pool: pool_name(model),
            holder: task.task_id.clone(),
            account: task.account.clone(),
            weight,
            tried,
            again,
            deadline_ms: task.deadline_ms,
            call: false,
            keys,
        };
        self.join_shared(store, job).await;
    }

    /// Queues a task in this process's line.
    fn enqueue_here(
        &self,
        slots: &mut Slots,
        task: &TaskRecord,
        weight: u32,
        model: &'static ModelSpec,
        tried: Vec<usize>,
        again: bool,
    ) {
        if !slots.queued.insert(task.task_id.clone()) {
            return;
        }
        let (task_id, deadline_ms) = (task.task_id.clone(), task.deadline_ms);
        let waiter = Waiter::Task { task_id, model, tried, since: Instant::now(), deadline_ms };
        let queue = slots.queues.entry(pool_id(model)).or_default();
        if again {
            queue.push_front(&task.account, waiter)
        } else {
            queue.push(&task.account, weight, waiter)
        }
        self.hand_on(slots, model);
    }

    /// Puts `job` in the shared line, trying again while the store fails; the dispatcher then looks.
    async fn join_shared(&self, store: Arc<dyn Storage>, job: InLine) {
        if let Err(e) = store.join_line(job.clone()).await {
            tracing::warn!(holder = job.holder, error = %e, "could not put a job in the upstream slots' line; it tries again");
            tokio::task::spawn_local(async move {
                loop {
                    tokio::time::sleep(JOIN_RETRY).await;
                    if store.join_line(job.clone()).await.is_ok() {
                        break;
                    }
                }
            });
        }
        self.granted.notify_one();
    }

    /// Waits in line for a slot for a call made while its client waits (a synchronous model's).
    pub async fn wait(
        &self,
        account: Waiting<'_>,
        model: &'static ModelSpec,
        holder: &str,
    ) -> oneshot::Receiver<usize> {
        let (answer, slot) = oneshot::channel();
        let keys = {
            let mut slots = self.lock();
            if self.shared.is_none() {
                let queue = slots.queues.entry(pool_id(model)).or_default();
                queue.push(account.name, account.weight, Waiter::Call { answer, since: Instant::now() });
                self.hand_on(&mut slots, model);
                return slot;
            }
            slots.calls.insert(holder.to_string(), answer);
            self.pool(&mut slots, model).keys()
        };
        let Some(store) = self.shared.clone() else { return slot };
        let wait = i64::try_from(self.upstream.longest_timeout().as_millis()).unwrap_or(i64::MAX);
        let job = InLine {
            pool: pool_name(model),
            holder: holder.to_string(),
            account: account.name.to_string(),
            weight: account.weight,
            tried: Vec::new(),
            again: false,
            deadline_ms: crate::domain::clock::now_ms().saturating_add(wait),
            call: true,
            keys,
        };
        self.join_shared(store, job).await;
        slot
    }

    /// Takes a task out of the line (cancelled before it was sent), or a call that stopped waiting.
    pub fn forget(&self, task_id: &str, model: &'static ModelSpec) {
        let mut slots = self.lock();
        if let Some(store) = self.shared.clone() {
            slots.calls.remove(task_id);
            let holder = task_id.to_string();
            tokio::task::spawn_local(async move {
                if let Err(e) = store.leave_line(&holder).await {
                    // It is handed a slot in its turn, which goes back at once (it no longer waits).
                    tracing::warn!(holder, error = %e, "could not take a job out of the upstream slots' line");
                }
            });
            return;
        }
        if slots.queued.remove(task_id)
            && let Some(queue) = slots.queues.get_mut(&pool_id(model))
        {
            queue.remove(|w| matches!(w, Waiter::Task { task_id: id, .. } if id == task_id));
        }
    }

    /// Takes out of line the tasks whose deadline has passed while they waited: they end in `timeout`.
    pub async fn overdue(&self, now_ms: i64) -> Vec<(String, &'static ModelSpec)> {
        if let Some(store) = &self.shared {
            return match store.overdue_in_line(now_ms).await {
                Ok(overdue) => {
                    overdue.into_iter().filter_map(|(pool, task_id)| Some((task_id, model_of(&pool)?))).collect()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the upstream slots' line for overdue tasks");
                    Vec::new()
                }
            };
        }
        let mut overdue = Vec::new();
        let mut slots = self.lock();
        for queue in slots.queues.values_mut() {
            queue.remove(|w| match w {
                Waiter::Task { task_id, model, deadline_ms, .. } if *deadline_ms <= now_ms => {
                    overdue.push((task_id.clone(), *model));
                    true
                }
                _ => false,
            });
        }
        for (task_id, _) in &overdue {
            slots.queued.remove(task_id);
        }
        overdue
    }

    /// Where a queued task stands, if it waits in line.
    pub async fn place(&self, task_id: &str, model: &'static ModelSpec) -> Option<Place> {
        let total = u64::from(self.pool(&mut self.lock(), model).total().max(1));
        let ahead = match &self.shared {
            Some(store) => store.ahead_in_line(&pool_name(model), task_id).await.ok().flatten()?,
            None => {
                let slots = self.lock();
                let queue = slots.queues.get(&pool_id(model))?;
                queue.ahead_of(|w| matches!(w, Waiter::Task { task_id: id, .. } if id == task_id))?
            }
        };
        let turns = ahead as u64 / total + 1;
        Some(Place { ahead, estimate_seconds: turns * model.expected_seconds })
    }

    /// The dispatcher is done with a granted task: sent, ended, or back in line.
    pub fn sent(&self, task_id: &str) {
        self.lock().sending.remove(task_id);
    }

    /// Of `waiting` (tasks waiting for a slot), those in no line and sent by no process.
    pub async fn lost(&self, waiting: Vec<TaskRecord>) -> Vec<TaskRecord> {
        if waiting.is_empty() {
            return waiting;
        }
        let Some(store) = &self.shared else {
            let slots = self.lock();
            return waiting
                .into_iter()
                .filter(|t| !slots.sending.contains(&t.task_id) && !slots.queued.contains(&t.task_id))
                .collect();
        };
        let asked: Vec<(String, usize)> = waiting
            .iter()
            .filter_map(|t| {
                let model = ModelSpec::find(&t.model)?;
                Some((t.task_id.clone(), self.pool(&mut self.lock(), model).keys()))
            })
            .collect();
        match store.missing_from_line(&asked).await {
            Ok(missing) => waiting.into_iter().filter(|t| missing.contains(&t.task_id)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "could not check the upstream slots' line");
                Vec::new()
            }
        }
    }

    /// The queued tasks granted a slot since the last call.
    pub fn take_granted(&self) -> Vec<Grant> {
        std::mem::take(&mut self.lock().granted)
    }

    /// Where the store keeps the slots and the line: hands free slots to the jobs next in it, while there are
    /// any. The dispatcher calls it when something may have freed one, and every moment besides (another
    /// replica's task may have ended).
    pub async fn hand_on_shared(&self) {
        let Some(store) = &self.shared else { return };
        let depths = match store.line_depths().await {
            Ok(depths) => depths,
            Err(e) => return tracing::warn!(error = %e, "could not read the upstream slots' line"),
        };
        let mut waiting: HashMap<PoolId, (&'static ModelSpec, Depths)> = HashMap::new();
        for (pool, account, n) in depths {
            if let Some(model) = model_of(&pool) {
                waiting.entry(pool_id(model)).or_insert_with(|| (model, Vec::new())).1.push((account, n));
            }
        }
        self.lock().depths = waiting.iter().map(|(id, (_, depths))| (*id, depths.clone())).collect();
        for (model, _) in waiting.into_values() {
            let caps = self.pool(&mut self.lock(), model).slots().map(|(_, cap)| cap).collect::<Vec<u32>>();
            loop {
                match store.take_next(&pool_name(model), &caps).await {
                    Ok(Some(turn)) => self.hand_turn(model, turn),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not hand an upstream slot to the next in line");
                        break;
                    }
                }
            }
        }
    }

    /// Gives the slot a shared line handed this process to its job: a task's is sent, a call's answered.
    fn hand_turn(&self, model: &'static ModelSpec, turn: Turn) {
        let Turn { holder, key, tried, call, waited_ms, used } = turn;
        let mut slots = self.lock();
        self.pool(&mut slots, model).set_used(used);
        crate::support::metrics::queue_wait(Duration::from_millis(u64::try_from(waited_ms).unwrap_or(0)));
        if call {
            // A call that stopped waiting meanwhile gives its slot back.
            let answered = slots.calls.remove(&holder).is_some_and(|answer| answer.send(key).is_ok());
            if !answered {
                drop(slots);
                self.give_back(model, key, &holder);
            }
            return;
        }
        slots.sending.insert(holder.clone());
        slots.granted.push(Grant { task_id: holder, model, key, tried });
    }

    /// Hands the pool's free slots to the jobs next in line (slots counted here).
    fn hand_on(&self, slots: &mut Slots, model: &'static ModelSpec) {
        if self.shared.is_some() {
            self.granted.notify_one();
            return;
        }
        let id = pool_id(model);
        self.pool(slots, model);
        let mut woke = false;
        loop {
            let Slots { pools, queues, granted, sending, queued, .. } = &mut *slots;
            let (Some(pool), Some(queue)) = (pools.get_mut(&id), queues.get_mut(&id)) else { break };
            if !pool.has_free() {
                break;
            }
            let Some((_, waiter)) = queue.pop() else { break };
            match waiter {
                Waiter::Call { answer, since, .. } => {
                    let Some(key) = pool.take(&[]) else { break };
                    crate::support::metrics::queue_wait(since.elapsed());
                    if answer.send(key).is_err() {
                        pool.give_back(key);
                    }
                }
                Waiter::Task { task_id, model, tried, since, .. } => {
                    let Some(key) = pool.take_after(&tried) else { break };
                    crate::support::metrics::queue_wait(since.elapsed());
                    queued.remove(&task_id);
                    sending.insert(task_id.clone());
                    granted.push(Grant { task_id, model, key, tried });
                    woke = true;
                }
            }
        }
        if woke {
            self.granted.notify_one();
        }
    }

    /// Per pool: the region, the model code, `(used, cap)` per key and the jobs waiting per account.
    pub fn snapshot(&self) -> Vec<PoolFigures> {
        let slots = self.lock();
        let mut pools: Vec<PoolFigures> = slots
            .pools
            .iter()
            .map(|(id, pool)| {
                let waiting = match &self.shared {
                    Some(_) => slots.depths.get(id).cloned(),
                    None => slots.queues.get(id).map(|q| q.depths().map(|(a, n)| (a.to_string(), n)).collect()),
                };
                (id.0, id.1, pool.slots().collect(), waiting.unwrap_or_default())
            })
            .collect();
        pools.sort_by_key(|p| (p.0, p.1));
        pools
    }
}
