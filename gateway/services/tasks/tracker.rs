//! The poller's memory of in-flight tasks: one small struct per task (ids, model, creation, deadline) in a
//! slab, a due-time index and lookups by gateway and upstream id. No task record is held, so a task costs
//! its ids and a few numbers, and a list report costs one hash lookup per task.

use crate::domain::catalog::ModelSpec;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

/// A task id (gateway or upstream), shared between the slab and the lookups.
pub type Id = Rc<str>;
/// A task's place in the slab; reused once the task ends (tickets tell a stale job from the new task).
pub type Slot = u32;

/// No job holds the task: it waits in the due index.
pub const IDLE: u64 = 0;
/// Taken by a sweep, not yet handed to a job.
pub const TAKEN: u64 = u64::MAX;

/// Per region, tasks per creation second, kept this long (the upstream lists tasks for 24 hours).
const CREATED_KEPT_S: i64 = 25 * 3600;

/// When the upstream created a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamCreated {
    /// Between these times by the gateway's clock (epoch ms).
    Between(i64, i64),
    /// As the upstream reported it (epoch ms).
    At(i64),
}

/// What the poller keeps of one in-flight task.
#[derive(Debug)]
pub struct Tracked {
    pub task_id: Id,
    pub upstream_id: Option<Id>,
    /// The key (upstream account) that created it: queries and lists about it go with that key. `None`
    /// when unknown (any key will do).
    pub key: Option<u16>,
    /// The job's trace (`TaskRecord::trace`), which its polls are traced under.
    pub trace: Option<Id>,
    pub model: &'static ModelSpec,
    /// The gateway's creation time (epoch ms): the task's age.
    pub created_ms: i64,
    /// The upstream's creation time (epoch ms): estimated from the gateway's clock as lying between the
    /// record's creation and the forward's answer, exact once a list has reported it.
    pub upstream_created: UpstreamCreated,
    pub deadline_ms: i64,
    /// Recorded as running (or being recorded).
    pub running: bool,
    /// The job looking at the task ([`IDLE`] when none): reports from any other job are stale.
    pub holder: u64,
    /// The store gave the task to this process again while a job held it: if that job finds it ended (its
    /// write found it leased elsewhere), it is looked at once more rather than forgotten.
    pub given_again: bool,
    /// When the current holder took it (epoch ms): a job holding a task for minutes is a bug to report.
    pub held_since_ms: i64,
    /// Its key in the due index while idle.
    due_key: i64,
}

impl Tracked {
    pub fn new(task_id: Id, model: &'static ModelSpec, created_ms: i64, deadline_ms: i64) -> Tracked {
        Tracked {
            task_id,
            upstream_id: None,
            key: None,
            trace: None,
            model,
            created_ms,
            upstream_created: UpstreamCreated::Between(created_ms, created_ms),
            deadline_ms,
            running: false,
            holder: IDLE,
            given_again: false,
            held_since_ms: 0,
            due_key: 0,
        }
    }
}

#[derive(Default)]
pub struct Tracker {
    slots: Vec<Option<Tracked>>,
    free: Vec<Slot>,
    by_task: HashMap<Id, Slot>,
    by_upstream: HashMap<Id, Slot>,
    /// (due or deadline if sooner, slot) of every idle task.
    due: BTreeSet<(i64, Slot)>,
    /// Per region, tracked tasks per creation second: what a list window is expected to hold.
    created: HashMap<&'static str, BTreeMap<i64, u32>>,
}

impl Tracker {
    /// How many tasks are tracked.
    pub fn count(&self) -> usize {
        self.by_task.len()
    }

    pub fn get(&self, slot: Slot) -> Option<&Tracked> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, slot: Slot) -> Option<&mut Tracked> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    pub fn slot_of(&self, task_id: &str) -> Option<Slot> {
        self.by_task.get(task_id).copied()
    }

    pub fn slot_of_upstream(&self, upstream_id: &str) -> Option<Slot> {
        self.by_upstream.get(upstream_id).copied()
    }

    /// Starts tracking a task, idle and due at `due_ms`; a task already tracked is left as it is.
    pub fn insert(&mut self, mut task: Tracked, due_ms: i64) -> Slot {
        if let Some(slot) = self.slot_of(&task.task_id) {
            return slot;
        }
        let slot = self.free.pop().unwrap_or(self.slots.len() as Slot);
        if let Some(upstream_id) = &task.upstream_id {
            self.by_upstream.insert(upstream_id.clone(), slot);
        }
        self.by_task.insert(task.task_id.clone(), slot);
        *self.created.entry(task.model.region).or_default().entry(task.created_ms.div_euclid(1000)).or_default() += 1;
        task.holder = IDLE;
        task.due_key = due_ms.min(task.deadline_ms);
        self.due.insert((task.due_key, slot));
        match self.slots.get_mut(slot as usize) {
            Some(place) => *place = Some(task),
            None => self.slots.push(Some(task)),
        }
        slot
    }

    /// Records the upstream id (and creation bounds) of a task submitted after it was first tracked.
    pub fn set_upstream(&mut self, slot: Slot, upstream_id: Id, key: Option<usize>, upstream_created: UpstreamCreated) {
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else { return };
        self.by_upstream.insert(upstream_id.clone(), slot);
        task.upstream_id = Some(upstream_id);
        task.key = key.and_then(|key| u16::try_from(key).ok());
        task.upstream_created = upstream_created;
    }

    /// A list reported the task's upstream creation time: later windows can be exact.
    pub fn set_upstream_created(&mut self, slot: Slot, created_ms: i64) {
        if let Some(task) = self.get_mut(slot) {
            task.upstream_created = UpstreamCreated::At(created_ms);
        }
    }

    pub fn set_running(&mut self, slot: Slot, running: bool) {
        if let Some(task) = self.get_mut(slot) {
            task.running = running;
        }
    }

    /// Every idle task due by `until`, marked [`TAKEN`], with its due time.
    pub fn take_due(&mut self, until: i64) -> Vec<(Slot, i64)> {
        let mut taken = Vec::new();
        while let Some(&(due, slot)) = self.due.first()
            && due <= until
        {
            self.due.pop_first();
            if let Some(task) = self.get_mut(slot) {
                task.holder = TAKEN;
                task.held_since_ms = crate::domain::clock::now_ms();
                taken.push((slot, due));
            }
        }
        taken
    }

    /// Hands a task to job `ticket` (out of the due index).
    pub fn hold(&mut self, slot: Slot, ticket: u64) {
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else { return };
        if task.holder == IDLE {
            self.due.remove(&(task.due_key, slot));
        }
        task.holder = ticket;
        task.held_since_ms = crate::domain::clock::now_ms();
        task.given_again = false;
    }

    /// Notes that the store gave the task, held by a job, to this process again.
    pub fn give_again(&mut self, slot: Slot) {
        if let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            task.given_again = true;
        }
    }

    /// Job `holder` is done with a task: it is due again at `next`, or forgotten when `None` (it ended).
    /// Returns false (and changes nothing) when another job holds the task.
    pub fn release(&mut self, slot: Slot, holder: u64, next: Option<i64>) -> bool {
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else { return false };
        if task.holder != holder {
            return false;
        }
        if holder == IDLE {
            self.due.remove(&(task.due_key, slot));
        }
        match next {
            Some(due) => {
                task.holder = IDLE;
                task.due_key = due.min(task.deadline_ms);
                self.due.insert((task.due_key, slot));
            }
            None => self.remove(slot),
        }
        true
    }

    fn remove(&mut self, slot: Slot) {
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::take) else { return };
        if task.holder == IDLE {
            self.due.remove(&(task.due_key, slot));
        }
        self.by_task.remove(&task.task_id);
        if let Some(upstream_id) = &task.upstream_id {
            self.by_upstream.remove(upstream_id);
        }
        self.free.push(slot);
    }

    /// Tasks tracked per creation second in `region` (the last 25 hours).
    pub fn created(&self, region: &str) -> Option<&BTreeMap<i64, u32>> {
        self.created.get(region)
    }

    /// Forgets creation counts older than anything the upstream still lists.
    pub fn prune_created(&mut self, now_ms: i64) {
        let cutoff = now_ms.div_euclid(1000) - CREATED_KEPT_S;
        for seconds in self.created.values_mut() {
            if seconds.first_key_value().is_some_and(|(s, _)| *s < cutoff) {
                *seconds = seconds.split_off(&cutoff);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> &'static ModelSpec {
        &crate::domain::catalog::MODELS[0]
    }

    fn task(id: &str, upstream: &str) -> Tracked {
        let mut t = Tracked::new(Rc::from(id), model(), 1_000, 100_000);
        t.upstream_id = Some(Rc::from(upstream));
        t
    }

    #[test]
    fn due_tasks_are_taken_once_and_come_back_when_released() {
        let mut tracker = Tracker::default();
        let a = tracker.insert(task("a", "ua"), 10);
        let b = tracker.insert(task("b", "ub"), 20);
        tracker.insert(task("c", "uc"), 200_000);
        assert_eq!(tracker.insert(task("a", "ua"), 5), a, "tracked once");
        assert_eq!(tracker.take_due(20), vec![(a, 10), (b, 20)]);
        assert!(tracker.take_due(50).is_empty());
        tracker.hold(a, 7);
        assert!(!tracker.release(a, 8, Some(30)), "a stale job changes nothing");
        assert!(tracker.release(a, 7, Some(30)));
        assert!(tracker.release(b, TAKEN, None));
        assert!(tracker.get(b).is_none() && tracker.slot_of_upstream("ub").is_none());
        assert_eq!(tracker.slot_of_upstream("ua"), Some(a));
        // A freed slot is reused; the deadline caps the due time.
        assert_eq!(tracker.insert(task("d", "ud"), 40), b);
        assert_eq!(tracker.take_due(99_999).len(), 2);
        assert_eq!(tracker.take_due(100_000).len(), 1);
    }

    #[test]
    fn creation_counts_are_kept_per_second() {
        let mut tracker = Tracker::default();
        tracker.insert(task("a", "ua"), 10);
        tracker.insert(task("b", "ub"), 10);
        let region = model().region;
        assert_eq!(tracker.created(region).and_then(|c| c.get(&1)), Some(&2));
        tracker.prune_created(1_000 + 26 * 3600 * 1000);
        assert_eq!(tracker.created(region).map(BTreeMap::len), Some(0));
    }
}
