//! The upstream family of `spec/upstream.yaml`: its HTTP client (create, query, list, cancel), how each
//! region is reached, and its error codes mapped onto the gateway's.

pub mod client;
pub mod connect;
pub mod errors;

pub use client::{Reach, RegionUpstream, Upstreams};
pub use connect::ProxyChoice;
pub use errors::UpstreamError;
