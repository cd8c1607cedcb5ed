//! The ports: the traits the use cases reach durable state and the upstream through, implemented by the
//! adapters.

pub mod storage;
