//! A request id on every response (`X-Request-Id`) and in every error body.
//!
//! The id lives in a task-local for the duration of the request, so error rendering deep in the stack can
//! read it without threading it through every call. Submit handlers replace it with the task's request id.

use actix_web::http::header::HeaderName;
use std::cell::RefCell;

tokio::task_local! {
    static REQUEST_ID: RefCell<String>;
}

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The current request's id (given one now if it has none yet), or `-` outside a request.
pub fn current() -> String {
    with_current(|id| id.clone()).unwrap_or_else(|| "-".into())
}

/// `read` of the current request's id, given one now if it has none yet; `None` outside a request.
fn with_current<T>(read: impl FnOnce(&mut String) -> T) -> Option<T> {
    REQUEST_ID
        .try_with(|id| {
            let mut id = id.borrow_mut();
            if id.is_empty() {
                *id = generate("req-");
            }
            read(&mut id)
        })
        .ok()
}

/// Replaces the current request's id (a submit uses the id it stores on the task).
pub fn set(id: String) {
    let _ = REQUEST_ID.try_with(|current| *current.borrow_mut() = id);
}

/// A fresh id with the given prefix.
pub fn generate(prefix: &str) -> String {
    crate::domain::clock::prefixed(prefix, uuid::Uuid::new_v4())
}

/// Runs `request` as one request: with an id of its own, made only when first asked for (a submit sets
/// the id of its task instead). Returns what `request` did and the id it ended with.
pub async fn scope<T>(request: impl Future<Output = T>) -> (T, String) {
    REQUEST_ID
        .scope(RefCell::default(), async {
            let done = request.await;
            (done, with_current(std::mem::take).unwrap_or_default())
        })
        .await
}
