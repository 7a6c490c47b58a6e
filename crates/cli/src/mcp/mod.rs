//! `hermes mcp`: a Model Context Protocol server on stdio, built on the official
//! Rust SDK (`rmcp`). A named conversation's background children run in its session's headless
//! host, so the server is a front end that can come and go; the server itself runs the
//! `background: false` units and a provisional session's, and its tools consume the
//! conversation's results.

mod background;
mod conversation;
mod inline;
mod params;
mod results;
mod schema;
mod server;
mod spec;
mod tools;

pub use server::run;
