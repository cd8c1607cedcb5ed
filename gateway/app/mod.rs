//! The binary's parts: its config, the wiring of adapters, use cases and edges into a running gateway, the
//! demo, and the simulated upstream.

pub mod config;
pub mod demo;
pub mod server;
pub mod simulator;
