//! Agent profiles: what one hook-driven agent CLI sends, expects and keeps (SPEC §13.1–§13.2).
//!
//! Each agent is one file under `agents/` implementing [`Agent`], listed once in [`AGENTS`].
//! A profile says how the agent's hook events map onto hermes' boundaries, which input fields
//! name the conversation and a subagent, the shape of an answer, how many characters of an
//! answer the agent keeps, and which files `hermes hook install NAME` writes. Everything else
//! (binding, claiming, fitting, acknowledging) is written once, in `event.rs` and `deliver.rs`.

use formatter::Boundary;
use serde_json::Value;

use crate::exit::Code;

mod claude;

/// Every agent hermes speaks to, by name.
pub const AGENTS: &[&dyn Agent] = &[&claude::Claude];

/// The profile called `name`.
pub fn find(name: &str) -> Option<&'static dyn Agent> {
    AGENTS.iter().copied().find(|a| a.name() == name)
}

/// What hermes does at one hook event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The conversation starts, resumes, is cleared or compacted: bind it.
    Start,
    /// A boundary: hand over what is ready at it as the event's additional context.
    Deliver(Boundary),
    /// The agent wants to stop: keep it going with what is ready, once.
    Stop,
    /// The conversation ends: end its session.
    End,
}

/// One hook event of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookEvent {
    /// The `hermes hook` subcommand the installed hook runs (`post-tool-use`).
    pub command: &'static str,
    /// The agent's own name for the event (`PostToolUse`).
    pub name: &'static str,
    /// What hermes does.
    pub action: Action,
}

/// How a session start came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A new conversation.
    Fresh,
    /// An earlier conversation comes back under its id.
    Resume,
    /// Anything else (a clear, a compaction): the id says which conversation it is.
    Other,
}

/// What `hermes hook install NAME` was asked.
#[derive(Clone, Debug)]
pub struct InstallOptions {
    /// Print the snippets instead of writing them.
    pub print: bool,
    /// The project directory.
    pub project: std::path::PathBuf,
    /// Write the absolute path of this hermes rather than `hermes` (found on PATH).
    pub absolute: bool,
    /// Write into the agent's uncommitted, per-user project settings.
    pub local: bool,
}

/// One hook-driven agent CLI.
pub trait Agent: Sync {
    /// Its name on the command line (`claude`).
    fn name(&self) -> &'static str;
    /// Its hook events.
    fn events(&self) -> &'static [HookEvent];
    /// The executable names its CLI runs as: the binding walks up to the nearest of them.
    fn executables(&self) -> &'static [&'static str];
    /// Characters of one answer the agent keeps, the carrier and headers included.
    fn budget(&self) -> usize;
    /// The input field naming the conversation.
    fn session_field(&self) -> &'static str;
    /// The input field that is set when a subagent (not the main thread) made the call.
    fn subagent_field(&self) -> &'static str;
    /// How a session start came about.
    fn start(&self, input: &Value) -> Start;
    /// Whether the agent goes on because a stop hook already kept it going.
    fn stop_active(&self, input: &Value) -> bool;
    /// The answer handing `text` over at `event`.
    fn answer(&self, event: &HookEvent, text: &str) -> Value;
    /// Writes (or prints) the agent's MCP and hook configuration.
    fn install(&self, options: &InstallOptions) -> anyhow::Result<Code>;
}

/// The event of `agent` that the `hermes hook` subcommand `command` runs.
pub fn event(agent: &dyn Agent, command: &str) -> Option<HookEvent> {
    agent
        .events()
        .iter()
        .copied()
        .find(|e| e.command == command)
}

/// Every executable name of every agent.
pub fn executables() -> impl Iterator<Item = &'static str> {
    AGENTS.iter().flat_map(|a| a.executables().iter().copied())
}
