//! Planning a sweep: which due tasks to ask about with one list call over their creation-time window, and
//! which with a direct query each.
//!
//! A list page costs one query however many tasks it reports, so a window pays when it covers at least two
//! due tasks per page it is expected to take. Pages are estimated from the tasks the poller has tracked per
//! creation second (finished ones included: the upstream lists them for 24 hours). Due tasks are grouped in
//! creation order; a group grows while each added task costs at most one more page, so a window is never
//! dearer than the direct queries it replaces, and stragglers far apart get direct queries.

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
}

/// How to look at some due tasks.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// One list call (paged) over tasks created in `[start_ms, end_ms]`.
    Window { start_ms: i64, end_ms: i64, tasks: Vec<Slot> },
    /// One task query.
    Direct(Slot),
}

/// Plans the due tasks of one region. `created` counts tracked tasks per creation second.
pub fn plan(mut due: Vec<Due>, created: Option<&BTreeMap<i64, u32>>, page_size: u64) -> Vec<Plan> {
    let empty = BTreeMap::new();
    let counts = Counts { seconds: created.unwrap_or(&empty), page_size: page_size.max(1) };
    due.sort_by_key(|d| d.earliest_ms);
    let mut plans = Vec::new();
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
}

impl Counts<'_> {
    /// Tracked tasks created in the whole seconds `first..=last`.
    fn between(&self, first: i64, last: i64) -> u64 {
        if first > last {
            return 0;
        }
        self.seconds.range(first..=last).map(|(_, n)| u64::from(*n)).sum()
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
        let expected = counts.between(second(task.earliest_ms), second(task.latest_ms));
        Group { start_ms: task.earliest_ms, end_ms: task.latest_ms, expected, tasks: vec![task.task] }
    }

    /// Takes `task` in if the window stays within 24 hours and grows by at most one page.
    fn try_extend(&mut self, task: &Due, counts: &Counts) -> bool {
        let end_ms = self.end_ms.max(task.latest_ms);
        if end_ms - self.start_ms > MAX_SPAN_MS {
            return false;
        }
        let expected = self.expected + counts.between(second(self.end_ms) + 1, second(end_ms));
        if counts.pages(expected) > counts.pages(self.expected) + 1 {
            return false;
        }
        self.end_ms = end_ms;
        self.expected = expected;
        self.tasks.push(task.task);
        true
    }

    /// A window if its pages cover at least two due tasks each, else direct queries.
    fn close(self, counts: &Counts, plans: &mut Vec<Plan>) {
        if self.tasks.len() >= 2 && 2 * counts.pages(self.expected) <= self.tasks.len() as u64 {
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
        Due { task, earliest_ms: at_ms, latest_ms: at_ms + 500 }
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
        assert_eq!(shape(&plan(vec![due(7, 10_000)], Some(&created), 100)), ["direct 7"]);
    }

    #[test]
    fn a_dense_band_is_one_window_and_far_stragglers_are_direct() {
        // 300 tasks per second for 10 s; 50 due in second 3, one due in second 9.
        let created: BTreeMap<i64, u32> = (0..10).map(|s| (s, 300)).collect();
        let mut tasks: Vec<Due> = (0..50).map(|i| due(i, 3_000 + i64::from(i) * 10)).collect();
        tasks.push(due(99, 9_100));
        let plans = plan(tasks, Some(&created), 100);
        assert_eq!(shape(&plans), ["window 50", "direct 99"]);
        let Plan::Window { start_ms, end_ms, .. } = &plans[0] else { unreachable!() };
        assert_eq!((*start_ms, *end_ms), (3_000, 3_990));
    }

    #[test]
    fn a_window_never_spans_more_than_a_day() {
        let created = BTreeMap::new();
        let day = 24 * 3600 * 1000;
        let tasks = vec![due(1, 0), due(2, 10), due(3, day), due(4, day + 10)];
        assert_eq!(shape(&plan(tasks, Some(&created), 1000)), ["window 2", "window 2"]);
    }
}
