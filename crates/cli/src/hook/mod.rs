//! `hermes hook EVENT`: the hooks of hook-driven agent CLIs. Each reads the
//! hook's JSON on stdin and answers in the agent's protocol on stdout; `install` registers
//! them, with `hermes mcp`, in the agent's settings. What differs between agents is one profile
//! each, in `hermes_agents` (see `agents.rs`).

mod agents;
mod doc;
mod event;
mod input;
mod install;
mod installed;
mod merge;

pub use event::run;
pub use hermes_agents::inject_falls_back;
pub use installed::{agent_programs, installed};
