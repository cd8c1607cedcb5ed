//! The edges: how people and programs reach the use cases: the HTTP API, the console and the admin CLI.

pub mod cli;
pub mod console;
pub mod http;
pub mod schemas;
pub mod web;
