//! Process-wide support for every layer above the domain: metrics, traces, TLS configurations and failpoints.

pub mod failpoint;
pub mod metrics;
pub mod telemetry;
pub mod tls;
