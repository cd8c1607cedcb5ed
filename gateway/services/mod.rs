//! The use cases: submitting, reading and cancelling tasks, accounts and money, webhook settings, and the
//! background work (the poller, the copy worker, the webhook dispatcher). They run on the `Gateway` of
//! `runtime`, which holds their shared parts and imports none of them.

pub mod accounts;
pub mod auth;
pub mod copies;
pub mod deliveries;
pub mod errors;
pub mod models;
pub mod operators;
pub mod quotes;
pub mod retention;
pub mod runtime;
pub mod startup;
pub mod submit;
pub mod tasks;
pub mod webhook_settings;
