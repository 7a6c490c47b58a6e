//! `hermes hook EVENT`: the hooks of hook-driven agent CLIs. Each reads the
//! hook's JSON on stdin and answers in the agent's protocol on stdout; `install` registers
//! them, with `hermes mcp`, in the agent's settings. What differs between agents is one profile
//! each (`agents.rs`, `agents/*.rs`).

mod agents;
mod doc;
mod event;
mod input;
mod install;
mod installed;
mod merge;

pub use agents::executables as agent_executables;
pub use agents::inject_falls_back;
pub use event::run;
pub use installed::{agent_programs, installed};
