//! `hermes mcp` and `hermes hook` end to end: an MCP client (rmcp's client side)
//! drives the server over stdio; hooks run as `sh -c 'hermes hook …'` children with the JSON
//! agents send; stand-in agent processes run both, one conversation each — Claude Code's
//! protocol (`claude.rs`) and the other agents' (`agents.rs`, `agent_fixtures.rs`).

mod agent_fixtures;
mod agents;
mod claude;
pub(crate) mod client;
mod fixtures;
mod fuzz;
pub(crate) mod hooks;
mod inspector;
mod mcp;
pub(crate) mod standin;
mod uninstall;
