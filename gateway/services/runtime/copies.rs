//! Where result copies are kept and how their links are signed: what the copy worker
//! (`services::copies`), the task's end and the downloads share.

use super::links::Links;
use crate::domain::clock::local_time;
use crate::domain::results::{Mirror, MirrorState};
use crate::domain::tasks::TaskRecord;
use crate::ports::files::ResultFiles;
use std::sync::Arc;

/// What keeps and serves result copies: the storage (read even with mirroring off, for the copies made
/// before), whether new copies are made, and the link signer.
pub struct Copies {
    pub files: Arc<dyn ResultFiles>,
    copies: bool,
    pub links: Arc<Links>,
    retention_ms: i64,
}

impl Copies {
    /// Copies into `files` (made only if `copies` is on), their links signed by `links` and kept
    /// `retention_days`.
    pub fn new(files: Arc<dyn ResultFiles>, links: Links, copies: bool, retention_days: u64) -> Copies {
        let retention_ms = i64::try_from(retention_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
        Copies { files, copies, links: Arc::new(links), retention_ms }
    }

    /// What the write ending a task applies if it succeeds, where mirroring is on.
    pub fn adoption(&self) -> Option<Adoption> {
        self.copies.then(|| Adoption { links: self.links.clone(), retention_ms: self.retention_ms })
    }
}

/// Marks a task that has just succeeded for mirroring.
pub struct Adoption {
    links: Arc<Links>,
    retention_ms: i64,
}

impl Adoption {
    /// If it has results: the upstream's are kept aside, and the task's become the gateway's links,
    /// expiring with the copies.
    pub fn apply(&self, task: &mut TaskRecord) {
        if task.results.is_empty() || task.mirror.is_some() {
            return;
        }
        let expires_ms = task.ended_ms().saturating_add(self.retention_ms);
        let sources = task.results.clone();
        for (index, result) in task.results.iter_mut().enumerate() {
            result.url = self.links.link(&task.task_id, index, expires_ms);
            result.expires_at = local_time(expires_ms);
        }
        task.mirror = Some(Mirror {
            state: MirrorState::Pending,
            sources,
            expires_ms,
            files: Vec::new(),
            attempts: 0,
            error: None,
        });
    }
}
