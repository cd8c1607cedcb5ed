//! Planning a sweep: which due tasks to ask about with one list call over their creation-time window, and
//! which with a direct query each.
//!
//! A list page costs one query however many tasks it reports, so a window pays when it covers at least two
//! due tasks per page it is expected to take. Pages are estimated from the tasks the poller has tracked per
//! creation second (finished ones included: the upstream lists them for 24 hours). Due tasks are grouped in
//! creation order; a group grows while each added task costs at most one more page, so a window is never
//! dearer than the direct queries it replaces, and stragglers far apart get direct queries.
//!
//! Where processes share the polling, each polls the tasks of its own turns of creation time, and a second
//! it tracks no task of may be full of another's: a window then never covers such a second (it is cut at
//! the edge of the tracked seconds around its task), since its pages cannot be estimated.

use super::tracker::Slot;
use std::collections::BTreeMap;

/// The upstream refuses list windows longer than 24 hours; a little is kept back for rounding to seconds.
const MAX_SPAN_MS: i64 = 24 * 3600 * 1000 - 4000;

/// A due task and where its upstream creation time lies (epoch ms, bounds included).
#[derive(Debug, Clone)]
pub struct Due {
    pub task: Slot,
    pub earliest_ms: i64,
    pub latest_ms: i64,
    /// The second the gateway created it in, by its own clock (where the poller tracks it).
    pub created_second: i64,
}

/// How to look at some due tasks.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// One list call (paged) over tasks created in `[start_ms, end_ms]`.
    Window { start_ms: i64, end_ms: i64, tasks: Vec<Slot> },
    /// One task query.
    Direct(Slot),
}

/// Plans the due tasks of one region. `created` counts tracked tasks per creation second; `shared`: other
/// processes poll the tasks of the seconds this one tracks none of.
pub fn plan(due: Vec<Due>, created: Option<&BTreeMap<i64, u32>>, page_size: u64, shared: bool) -> Vec<Plan> {
    let empty = BTreeMap::new();
    let counts = Counts { seconds: created.unwrap_or(&empty), page_size: page_size.max(1), shared };
    let mut plans = Vec::new();
    let mut due: Vec<Due> = due
        .into_iter()
        .filter_map(|task| match counts.clip(&task) {
            Some(clipped) => Some(clipped),
            None => {
                plans.push(Plan::Direct(task.task));
                None
            }
        })
        .collect();
    due.sort_by_key(|d| d.earliest_ms);
    let mut group: Option<Group> = None;
    for task in due {
        if let Some(g) = group.as_mut()
            && g.try_extend(&task, &counts)
        {
            continue;
        }
        if let Some(g) = group.take() {
            g.close(&counts, &mut plans);
        }
        group = Some(Group::start(task, &counts));
    }
    if let Some(g) = group {
        g.close(&counts, &mut plans);
    }
    plans
}

struct Counts<'a> {
    seconds: &'a BTreeMap<i64, u32>,
    page_size: u64,
    shared: bool,
}

impl Counts<'_> {
    /// Tracked tasks created in the whole seconds `first..=last`; `None` if that cannot be told (shared, and
    /// one of the seconds is untracked).
    fn between(&self, first: i64, last: i64) -> Option<u64> {
        if first > last {
            return Some(0);
        }
        let (mut seconds, mut tasks) = (0, 0);
        for (_, n) in self.seconds.range(first..=last) {
            seconds += 1;
            tasks += u64::from(*n);
        }
        (!self.shared || seconds == last - first + 1).then_some(tasks)
    }

    /// Where shared, `task`'s window cut to the tracked seconds around the one it was created in; `None`
    /// when nothing is left of it (an exact upstream time in an untracked second).
    fn clip(&self, task: &Due) -> Option<Due> {
        if !self.shared {
            return Some(task.clone());
        }
        let tracked = |second: i64| self.seconds.contains_key(&second);
        let (mut first, mut last) = (task.created_second, task.created_second);
        while first > second(task.earliest_ms) && tracked(first - 1) {
            first -= 1;
        }
        while last < second(task.latest_ms) && tracked(last + 1) {
            last += 1;
        }
        let earliest_ms = task.earliest_ms.max(first * 1000);
        let latest_ms = task.latest_ms.min(last * 1000 + 999);
        (earliest_ms <= latest_ms).then(|| Due { earliest_ms, latest_ms, ..task.clone() })
    }

    fn pages(&self, tasks: u64) -> u64 {
        tasks.div_ceil(self.page_size).max(1)
    }
}

struct Group {
    start_ms: i64,
    end_ms: i64,
    /// Tracked tasks created within the group's whole seconds.
    expected: u64,
    tasks: Vec<Slot>,
}

impl Group {
    fn start(task: Due, counts: &Counts) -> Group {
        // An unknown count makes the group, and whatever joins it, direct queries.
        let expected = counts.between(second(task.earliest_ms), second(task.latest_ms)).unwrap_or(u64::MAX);
        Group { start_ms: task.earliest_ms, end_ms: task.latest_ms, expected, tasks: vec![task.task] }
    }

    /// Takes `task` in if the window stays within 24 hours and grows by at most one page.
    fn try_extend(&mut self, task: &Due, counts: &Counts) -> bool {
        let end_ms = self.end_ms.max(task.latest_ms);
        if end_ms - self.start_ms > MAX_SPAN_MS {
            return false;
        }
        let more = counts.between(second(self.end_ms) + 1, second(end_ms));
        let Some(expected) = more.and_then(|more| self.expected.checked_add(more)) else { return false };
        if counts.pages(expected) > counts.pages(self.expected).saturating_add(1) {
            return false;
        }
        self.end_ms = end_ms;
        self.expected = expected;
        self.tasks.push(task.task);
        true
    }

    /// A window if its pages cover at least two due tasks each, else direct queries.
    fn close(self, counts: &Counts, plans: &mut Vec<Plan>) {
        if self.tasks.len() >= 2 && counts.pages(self.expected).saturating_mul(2) <= self.tasks.len() as u64 {
            plans.push(Plan::Window { start_ms: self.start_ms, end_ms: self.end_ms, tasks: self.tasks });
        } else {
            plans.extend(self.tasks.into_iter().map(Plan::Direct));
        }
    }
}

fn second(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(task: Slot, at_ms: i64) -> Due {
        Due { task, earliest_ms: at_ms, latest_ms: at_ms + 500, created_second: second(at_ms) }
    }

    fn shape(plans: &[Plan]) -> Vec<String> {
        plans
            .iter()
            .map(|p| match p {
                Plan::Window { tasks, .. } => format!("window {}", tasks.len()),
                Plan::Direct(id) => format!("direct {id}"),
            })
            .collect()
    }

    #[test]
    fn a_lone_due_task_is_queried_directly() {
        let created = BTreeMap::from([(10, 1)]);
        assert_eq!(shape(&plan(vec![due(7, 10_000)], Some(&created), 100, false)), ["direct 7"]);
    }

    #[test]
    fn a_dense_band_is_one_window_and_far_stragglers_are_direct() {
        // 300 tasks per second for 10 s; 50 due in second 3, one due in second 9.
        let created: BTreeMap<i64, u32> = (0..10).map(|s| (s, 300)).collect();
        let mut tasks: Vec<Due> = (0..50).map(|i| due(i, 3_000 + i64::from(i) * 10)).collect();
        tasks.push(due(99, 9_100));
        let plans = plan(tasks, Some(&created), 100, false);
        assert_eq!(shape(&plans), ["window 50", "direct 99"]);
        let Plan::Window { start_ms, end_ms, .. } = &plans[0] else { unreachable!() };
        assert_eq!((*start_ms, *end_ms), (3_000, 3_990));
    }

    #[test]
    fn a_window_never_spans_more_than_a_day() {
        let created = BTreeMap::new();
        let day = 24 * 3600 * 1000;
        let tasks = vec![due(1, 0), due(2, 10), due(3, day), due(4, day + 10)];
        assert_eq!(shape(&plan(tasks, Some(&created), 1000, false)), ["window 2", "window 2"]);
    }

    #[test]
    fn shared_windows_stop_at_seconds_another_process_polls() {
        // This process tracks seconds 0..10 and 30..40; seconds 10..30 are another's.
        let created: BTreeMap<i64, u32> = (0..10).chain(30..40).map(|s| (s, 300)).collect();
        let mut tasks: Vec<Due> = (0..20).map(|i| due(i, 9_000 + i64::from(i) * 10)).collect();
        tasks.extend((20..40).map(|i| due(i, 30_000 + i64::from(i) * 10)));
        // Alone, the gap costs nothing and both bands are one window.
        assert_eq!(shape(&plan(tasks.clone(), Some(&created), 1000, false)), ["window 40"]);
        assert_eq!(shape(&plan(tasks, Some(&created), 1000, true)), ["window 20", "window 20"]);
    }

    #[test]
    fn a_shared_window_is_cut_to_the_tracked_seconds_around_its_task() {
        let created: BTreeMap<i64, u32> = (10..20).map(|s| (s, 300)).collect();
        // The clock skew widens a first look by two seconds each side, into untracked seconds.
        let widened = |task, at_ms: i64| Due {
            task,
            earliest_ms: at_ms - 2000,
            latest_ms: at_ms + 2000,
            created_second: second(at_ms),
        };
        let tasks = vec![widened(1, 10_500), widened(2, 10_600), widened(3, 10_700)];
        let plans = plan(tasks, Some(&created), 1000, true);
        let Plan::Window { start_ms, end_ms, .. } = &plans[0] else { panic!("{plans:?}") };
        assert_eq!((*start_ms, *end_ms), (10_000, 12_700));
        // An exact upstream time in an untracked second cannot be listed cheaply: a direct query.
        let exact = Due { task: 4, earliest_ms: 20_001, latest_ms: 20_001, created_second: 19 };
        assert_eq!(shape(&plan(vec![exact], Some(&created), 1000, true)), ["direct 4"]);
    }
}
