//! Starting the use cases: the model switches and the live tasks read once, the accounts' limits restored
//! from them, and each live task sorted to the poller or back in line for a slot.

use crate::domain::registry::Registry;
use crate::ports::storage::Topology;
use crate::services::runtime::answers::FinishedAnswers;
use crate::services::runtime::capacity::Capacity;
use crate::services::runtime::inbox::Poller;
use crate::services::runtime::limits::Limits;
use crate::services::runtime::{Gateway, Parts};
use crate::services::tasks;
use std::sync::Arc;

/// Reads what the use cases start from: the model switches and the live tasks this process polls.
pub async fn start(parts: Parts) -> Result<Gateway, String> {
    let Parts { store, upstream, webhooks, copies, operators, settings, finished_task_cache_bytes } = parts;
    let switches = store.model_switches().await.map_err(|e| e.to_string())?;
    // Read once: the tasks this process polls from now on (every live one, on a store it owns alone,
    // which its in-flight slots start from too; a store shared by replicas keeps the limits itself).
    let claimed = store.claim().await.map_err(|e| e.to_string())?;
    // Where the store is this process's alone, the accounts' limits are kept here.
    let limits = Limits::new(&settings.limits, store.topology() == Topology::Owned);
    limits.restore(claimed.iter().map(|t| t.account.clone()));
    let shared = (store.topology() == Topology::Shared && settings.shared_upstream_slots).then(|| store.clone());
    let capacity = Arc::new(Capacity::new(upstream.clone(), shared));
    let polled = tasks::dispatch::sort_claimed(&*store, &capacity, claimed).await;
    Ok(Gateway {
        registry: Registry::new(switches)?,
        poller: Poller::new(polled),
        capacity,
        finished: FinishedAnswers::new(finished_task_cache_bytes, settings.retention.tasks_ms),
        started_ms: crate::domain::clock::now_ms(),
        store,
        upstream,
        webhooks,
        limits,
        copies,
        operators,
        settings,
    })
}
