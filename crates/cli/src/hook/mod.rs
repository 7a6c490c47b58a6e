//! `hermes hook EVENT`: the hooks of hook-driven agent CLIs. Each reads the
//! hook's JSON on stdin and answers in the agent's protocol on stdout; `install` registers
//! them, with `hermes mcp`, in the agent's settings. What differs between agents is one profile
//! each, in `hermes_agents` (see `agents.rs`).

mod agents;
mod event;
mod input;

pub use event::run;
