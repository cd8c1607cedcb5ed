//! Process-wide support for every layer above the domain: metrics, TLS configurations and failpoints.

pub mod failpoint;
pub mod metrics;
pub mod tls;
