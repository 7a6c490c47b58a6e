//! `hermes mcp`: a Model Context Protocol server on stdio (SPEC §13), built on the official
//! Rust SDK (`rmcp`). The process is its conversation's host: a registry `Host` runs the
//! children it dispatches, and its tools consume the conversation's results.

mod conversation;
mod params;
mod server;
mod tools;

pub use server::run;
