//! Everything that talks to the upstream: the envelope renderer, the HTTP client and the error mapping.

pub mod envelope;
