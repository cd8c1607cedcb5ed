//! The list index: per region and account, every task's listing facts in creation order, so `GET /tasks` answers with
//! a binary search and a page (O(log n + page)) instead of loading every task. Filters on task, model or
//! status scan only the requested creation window.

use super::task::{SimTask, Timeline};
use std::collections::HashMap;
use std::sync::Arc;

/// What a list answer shows of one task.
#[derive(Debug, Clone)]
pub struct Row {
    pub timeline: Timeline,
    pub task_id: Arc<str>,
    pub request_id: Arc<str>,
    pub model: Arc<str>,
}

/// The filters of one list call; times in epoch ms, both bounds included.
pub struct Filter<'a> {
    pub start_ms: i64,
    pub end_ms: i64,
    pub task_id: Option<&'a str>,
    pub model: Option<&'a str>,
    pub status: Option<&'a str>,
    pub now: i64,
}

impl Filter<'_> {
    fn is_plain(&self) -> bool {
        self.task_id.is_none() && self.model.is_none() && self.status.is_none()
    }

    fn admits(&self, row: &Row) -> bool {
        self.task_id.is_none_or(|id| *row.task_id == *id)
            && self.model.is_none_or(|m| *row.model == *m)
            && self.status.is_none_or(|s| row.timeline.status(self.now) == s)
    }
}

#[derive(Default)]
pub struct ListIndex {
    /// (Region, account) -> rows sorted by (created_ms, task_id).
    regions: HashMap<(String, usize), Vec<Row>>,
    /// One shared copy of each model code.
    models: HashMap<String, Arc<str>>,
}

impl ListIndex {
    /// Adds a task, or refreshes its timeline (a cancel).
    pub fn put(&mut self, task: &SimTask) {
        let model = self.models.entry(task.model.clone()).or_insert_with(|| Arc::from(task.model.as_str())).clone();
        let rows = self.regions.entry((task.region.clone(), task.account)).or_default();
        let key = (task.created_ms, task.task_id.as_str());
        // Tasks arrive in creation order, so the insertion point is almost always the end.
        match rows.binary_search_by(|r| (r.timeline.created_ms, &*r.task_id).cmp(&key)) {
            Ok(i) => rows[i].timeline = task.timeline(),
            Err(i) => rows.insert(
                i,
                Row {
                    timeline: task.timeline(),
                    task_id: Arc::from(task.task_id.as_str()),
                    request_id: Arc::from(task.request_id.as_str()),
                    model,
                },
            ),
        }
    }

    /// The number of `account`'s tasks in `region` passing `filter`, and page `page_no` (from 1) of them,
    /// newest first.
    pub fn page(&self, region: &str, account: usize, filter: &Filter, page_no: u64, page_size: u64) -> (u64, Vec<Row>) {
        let Some(rows) = self.regions.get(&(region.to_string(), account)) else { return (0, Vec::new()) };
        let lo = rows.partition_point(|r| r.timeline.created_ms < filter.start_ms);
        let hi = rows.partition_point(|r| r.timeline.created_ms <= filter.end_ms).max(lo);
        let window = &rows[lo..hi];
        let skip = page_no.saturating_sub(1).saturating_mul(page_size) as usize;
        let size = page_size as usize;
        if filter.is_plain() {
            let end = window.len().saturating_sub(skip);
            let start = end.saturating_sub(size);
            return (window.len() as u64, window[start..end].iter().rev().cloned().collect());
        }
        let mut total = 0usize;
        let mut page = Vec::new();
        for row in window.iter().rev().filter(|r| filter.admits(r)) {
            if total >= skip && page.len() < size {
                page.push(row.clone());
            }
            total += 1;
        }
        (total as u64, page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, created_ms: i64, model: &str) -> SimTask {
        SimTask {
            task_id: id.into(),
            request_id: format!("r-{id}"),
            model: model.into(),
            region: "cn-beijing".into(),
            account: 0,
            created_ms,
            pending_ms: 10,
            running_ms: Some(10),
            fail_code: None,
            cancelled_ms: None,
            input: serde_json::Value::Null,
            parameters: serde_json::Value::Null,
            hooks: Vec::new(),
        }
    }

    fn filter(start_ms: i64, end_ms: i64) -> Filter<'static> {
        Filter { start_ms, end_ms, task_id: None, model: None, status: None, now: 0 }
    }

    fn ids(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| &*r.task_id).collect()
    }

    #[test]
    fn pages_are_newest_first_within_the_window() {
        let mut index = ListIndex::default();
        for (i, created) in [5, 1, 3, 2, 4, 9].iter().enumerate() {
            index.put(&task(&format!("t{created}"), *created * 1000, if i % 2 == 0 { "a" } else { "b" }));
        }
        let (total, page) = index.page("cn-beijing", 0, &filter(2000, 5000), 1, 2);
        assert_eq!((total, ids(&page)), (4, vec!["t5", "t4"]));
        let (_, page) = index.page("cn-beijing", 0, &filter(2000, 5000), 2, 2);
        assert_eq!(ids(&page), vec!["t3", "t2"]);
        let (_, page) = index.page("cn-beijing", 0, &filter(2000, 5000), 3, 2);
        assert!(page.is_empty());
        let model = Filter { model: Some("a"), ..filter(0, 10_000) };
        let (total, page) = index.page("cn-beijing", 0, &model, 1, 10);
        assert_eq!((total, ids(&page)), (3, vec!["t5", "t4", "t3"]));
        assert_eq!(index.page("ap-southeast-1", 0, &filter(0, 10_000), 1, 10).0, 0);
    }

    #[test]
    fn a_cancel_updates_the_row_in_place() {
        let mut index = ListIndex::default();
        let mut t = task("x", 1000, "a");
        index.put(&t);
        t.cancelled_ms = Some(1005);
        index.put(&t);
        let (total, page) = index.page("cn-beijing", 0, &filter(0, 2000), 1, 10);
        assert_eq!(total, 1);
        assert_eq!(page[0].timeline.status(1006), "CANCELED");
    }
}
