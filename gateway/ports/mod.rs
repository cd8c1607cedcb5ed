//! The ports: the traits the use cases reach durable state, the upstream and result files through,
//! implemented by the adapters.

pub mod files;
pub mod storage;
pub mod upstream;
pub mod webhooks;
