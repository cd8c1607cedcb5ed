//! Everything that talks to the upstream: the envelope renderer, the HTTP client and the error mapping.

pub mod client;
pub mod envelope;
pub mod errors;
pub mod usage;

pub use client::{RegionUpstream, Upstreams};
pub use errors::UpstreamError;
pub use usage::Usage;
