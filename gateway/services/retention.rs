//! Retention: finished work past its time (`domain::retention`) is purged in small batches, off the request
//! path, until a pass finds no more; then the next pass waits.

use crate::domain::clock::now_ms;
use crate::services::runtime::Gateway;
use std::sync::Arc;
use std::time::Duration;

/// Most of each kind removed by one write.
const BATCH: usize = 500;

/// Purges until the process ends. Call once, on the actix system.
pub async fn run(state: Arc<Gateway>) {
    let retention = state.settings.retention;
    let every = Duration::from_millis(u64::try_from(retention.pass_every_ms()).unwrap_or(60_000));
    loop {
        tokio::time::sleep(every).await;
        loop {
            match state.store.purge(&retention, now_ms(), BATCH).await {
                Ok(purged) => {
                    crate::support::metrics::purged(purged.tasks, purged.deliveries, purged.idempotency);
                    if purged.tasks.max(purged.deliveries).max(purged.idempotency) < BATCH {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not purge finished work; the next pass tries again");
                    break;
                }
            }
        }
    }
}
