//! Listing an account's tasks, newest first, a page at a time. A page ends at a task, and the next starts
//! strictly after it in the listing's order (creation time, then task id, both descending): tasks created
//! meanwhile are newer than every page still to come, so paging shows each task once.

use crate::domain::tasks::{TaskRecord, TaskStatus};

/// Where a listing's order puts a task: its creation time, then its id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListPosition {
    pub created_ms: i64,
    pub task_id: String,
}

impl ListPosition {
    pub fn of(task: &TaskRecord) -> ListPosition {
        ListPosition { created_ms: task.created_ms, task_id: task.task_id.clone() }
    }
}

/// Which of an account's tasks to list, and how many.
#[derive(Debug, Clone)]
pub struct TaskQuery {
    pub account: String,
    /// Only tasks after this one in the listing's order (older): the cursor.
    pub after: Option<ListPosition>,
    pub status: Option<TaskStatus>,
    pub model: Option<String>,
    /// Creation time bounds, epoch milliseconds, inclusive.
    pub created_since: Option<i64>,
    pub created_until: Option<i64>,
    pub limit: usize,
}

impl TaskQuery {
    /// The account's newest `limit` tasks.
    pub fn recent(account: &str, limit: usize) -> TaskQuery {
        TaskQuery {
            account: account.to_string(),
            after: None,
            status: None,
            model: None,
            created_since: None,
            created_until: None,
            limit,
        }
    }

    /// Whether the query lists `task`, one of the account's tasks: after the cursor, within the creation
    /// time bounds, and passing the filters. Backends narrow by position first; this is the whole rule.
    pub fn keeps(&self, task: &TaskRecord) -> bool {
        let position = (task.created_ms, task.task_id.as_str());
        self.after.as_ref().is_none_or(|after| position < (after.created_ms, after.task_id.as_str()))
            && self.created_since.is_none_or(|since| task.created_ms >= since)
            && self.created_until.is_none_or(|until| task.created_ms <= until)
            && self.status.is_none_or(|status| task.status == status)
            && self.model.as_deref().is_none_or(|model| task.model == model)
    }

    /// The first position after the newest task the query may list (exclusive), by the cursor and the
    /// creation time's upper bound.
    pub fn upper_bound(&self) -> ListPosition {
        let created_ms = self.created_until.map_or(i64::MAX, |until| until.saturating_add(1));
        let until = ListPosition { created_ms, task_id: String::new() };
        match &self.after {
            Some(after) if *after < until => after.clone(),
            _ => until,
        }
    }
}
