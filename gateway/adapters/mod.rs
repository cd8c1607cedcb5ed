//! The adapters: what implements the ports against the world: the stores, the upstream family of
//! `spec/upstream.yaml`, and object storage for result copies.

pub mod files;
pub mod store;
pub mod upstream;
pub mod webhooks;
