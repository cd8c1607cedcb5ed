//! mediagate: a spec-driven API gateway in front of media-generation models.
//!
//! See ARCHITECTURE.md for the map: `catalog` is the spec compiled in, `http` the edge, `admission` the
//! checks before anything is forwarded, `store` the durable state.

pub mod admin_client;
pub mod admission;
pub mod billing;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod console;
pub mod demo;
pub mod error;
pub mod failpoint;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod mirror;
pub mod server;
pub mod simulator;
pub mod state;
pub mod store;
pub mod tasks;
pub mod tls;
pub mod upstream;
pub mod validate;
pub mod webhooks;
