//! mediagate: a spec-driven API gateway in front of media-generation models.
//!
//! The code is in layers, each importing only the layers below it (ARCHITECTURE.md has the map and the
//! rules; `tests/architecture.rs` holds the code to them), from the outermost in:
//! - `app`: the binary's parts: config, wiring, the demo and the simulator;
//! - `edges`: the HTTP API, the console and the admin CLI;
//! - `services`: the use cases;
//! - `adapters`: the stores, the upstream family and object storage, implementing `ports`;
//! - `ports`: the traits the use cases reach storage and the upstream through;
//! - `support`: metrics, TLS and failpoints, for every layer above the domain;
//! - `domain`: the catalog, validation, admission, billing and the records, with no I/O.

pub mod adapters;
pub mod app;
pub mod domain;
pub mod edges;
pub mod ports;
pub mod services;
pub mod support;
