//! The use cases: submitting, reading and cancelling tasks, accounts and money, webhook settings, and the
//! background work (the poller, the copy worker, the webhook dispatcher).

pub mod accounts;
pub mod auth;
pub mod copies;
pub mod deliveries;
pub mod errors;
pub mod gateway;
pub mod limits;
pub mod models;
pub mod operators;
pub mod settings;
pub mod submit;
pub mod tasks;
pub mod webhook_settings;
