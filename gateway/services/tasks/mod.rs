//! Tasks: a new one for an admitted submission (`lifecycle`), sent upstream within the capacity the
//! upstream's accounts have (`dispatch`), watched until it ends (`poller`, with `tracker`, `sweep` and
//! `keys`), ended exactly once (`lifecycle`), shown (`views`, `answers`) and cancelled (`cancel`).

pub mod answers;
pub mod cancel;
pub mod dispatch;
mod keys;
pub mod lifecycle;
pub mod poller;
mod sweep;
mod tracker;
pub mod views;
