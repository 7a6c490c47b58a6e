//! Agent profiles: what one hook-driven agent CLI sends, expects and keeps, are
//! `hermes_agents`' (one file per agent, one table). A profile says how the agent's hook events
//! map onto hermes' boundaries, which input fields name the conversation and a subagent, the
//! shape of an answer, how many characters of an answer the agent keeps, and which files
//! `hermes hook install NAME` writes. Everything else (binding, claiming, fitting,
//! acknowledging) is written once, in `event.rs` and `services/delivery/consume.rs`.
//!
//! What an agent lacks follows from its events: one without a tool boundary that can add
//! context ([`Agent::has_tool_boundary`]) gets `inject` results at its next turn boundary, and
//! the dispatch answer says so; one without a session end ([`Agent::has_session_end`]) leaves
//! its sessions to end by idleness (`host.idle_exit_seconds`), their results pending for a
//! resume.

pub use hermes_agents::{Action, Agent, HookBoundary, HookEvent, Start, find};

/// The formatter's boundary for an agent's.
pub fn boundary(b: hermes_agents::HookBoundary) -> hermes_formatter::Boundary {
    match b {
        hermes_agents::HookBoundary::Tool => hermes_formatter::Boundary::Tool,
        hermes_agents::HookBoundary::Turn => hermes_formatter::Boundary::Turn,
    }
}
