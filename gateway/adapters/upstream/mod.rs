//! The upstream family of `spec/upstream.yaml`, implementing the upstream port: its HTTP client (create,
//! query, list, cancel, a result file's download), how each region is reached, its answers read into the
//! port's types (`answers`), and its error codes classified (`errors`). A second vendor is a module like
//! this one.

mod answers;
pub mod client;
pub mod connect;
mod errors;

pub use client::{Reach, RegionUpstream, UpstreamConfig, Upstreams};
pub use connect::ProxyChoice;
