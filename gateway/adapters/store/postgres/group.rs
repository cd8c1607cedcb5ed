//! What the group writers share (`adds.rs` for new tasks, `batch.rs` for task changes, `slots.rs` for the
//! upstream's slots): the next group off a queue, a group's write on a task of its own, and its answers.

use crate::ports::storage::StoreError;
use std::future::Future;
use tokio::sync::{mpsc, oneshot};

/// The next queued item and whatever else is queued by then, `at_most` in all; `None` once the queue closes.
pub(super) async fn next<T>(queue: &mut mpsc::UnboundedReceiver<T>, at_most: usize) -> Option<Vec<T>> {
    let mut group = vec![queue.recv().await?];
    while group.len() < at_most
        && let Ok(next) = queue.try_recv()
    {
        group.push(next);
    }
    Some(group)
}

/// Runs a group's write on a task of its own, so that a panic fails the group and not its writer.
pub(super) async fn isolated<T: Send + 'static>(
    write: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::spawn(write).await.unwrap_or_else(|e| Err(StoreError::new(format!("a database write failed: {e}"))))
}

/// Sends each member of a group its outcome, or each the group's error.
pub(super) fn answer<T>(
    replies: Vec<oneshot::Sender<Result<T, StoreError>>>,
    outcomes: Result<Vec<Result<T, StoreError>>, StoreError>,
) {
    match outcomes {
        Ok(outcomes) => replies.into_iter().zip(outcomes).for_each(|(reply, outcome)| {
            let _ = reply.send(outcome);
        }),
        Err(e) => replies.into_iter().for_each(|reply| {
            let _ = reply.send(Err(e.clone()));
        }),
    }
}
