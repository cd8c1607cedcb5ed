//! The domain: what mediagate is, as plain data and pure rules. No actix, no tokio, no I/O, no store.

pub mod addresses;
pub mod admission;
pub mod audit;
pub mod billing;
pub mod capacity;
pub mod catalog;
pub mod clock;
pub mod deliveries;
pub mod errors;
pub mod listing;
pub mod polling;
pub mod registry;
pub mod results;
pub mod retention;
pub mod tasks;
pub mod usage;
pub mod usage_log;
pub mod validate;
