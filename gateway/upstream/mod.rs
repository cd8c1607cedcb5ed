//! Everything that talks to the upstream: the envelope renderer, the HTTP client and the error mapping.

pub mod client;
pub mod connect;
pub mod envelope;
pub mod errors;
pub mod usage;

pub use client::{Reach, RegionUpstream, Upstreams};
pub use connect::ProxyChoice;
pub use errors::UpstreamError;
pub use usage::Usage;
