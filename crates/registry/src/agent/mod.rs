//! Agent CLIs as children: the profiles that build an agent's argv from a goal, and
//! the stream adapters that read its structured stdout as it arrives.
//!
//! One file per agent CLI ([`claude`], [`codex`], [`gemini`]), each implementing the one trait
//! [`AgentCli`] and listed once in [`AGENTS`]; adding another is adding a file and a line.
//! `[agents.NAME]` in `config.toml` adds commands of its own or pins a built-in's flags.

mod claude;
mod codex;
mod depth;
mod event;
mod gemini;
mod profile;
mod prompt;
mod stream;

pub use depth::{CHILD_DEPTH_VAR, CHILD_ROLE_VAR, DepthRefusal, depth_for_dispatch};
pub use event::{Event, Report};
pub use profile::{
    AGENTS, AgentCli, AgentCommand, AgentError, AgentRequest, adapter_by_name, adapter_for,
    command_for, find_program,
};
pub use prompt::{subagent_prompt, tools_for};
pub use stream::{AgentStream, Sink, usage_words};
