//! Agent profiles: what one hook-driven agent CLI sends, expects and keeps (SPEC §13.1–§13.2).
//!
//! Each agent is one file under `agents/` implementing [`Agent`], listed once in [`AGENTS`].
//! A profile says how the agent's hook events map onto hermes' boundaries, which input fields
//! name the conversation and a subagent, the shape of an answer, how many characters of an
//! answer the agent keeps, and which files `hermes hook install NAME` writes. Everything else
//! (binding, claiming, fitting, acknowledging) is written once, in `event.rs` and `deliver.rs`.
//!
//! What an agent lacks follows from its events: one without a tool boundary that can add
//! context ([`has_tool_boundary`]) gets `inject` results at its next turn boundary, and the
//! dispatch answer says so; one without a session end ([`has_session_end`]) leaves its
//! sessions to end by idleness (`host.idle_exit_seconds`), their results pending for a resume.

use formatter::Boundary;
use serde_json::Value;

use crate::exit::Code;

mod claude;
mod cline;
mod codex;
mod copilot;
mod cursor;
mod gemini;

/// Every agent hermes speaks to, by name.
pub const AGENTS: &[&dyn Agent] = &[
    &claude::Claude,
    &codex::Codex,
    &gemini::Gemini,
    &copilot::Copilot,
    &cursor::Cursor,
    &cline::Cline,
];

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
    /// Write the agent's user-level configuration (under `home`) instead of the project's.
    pub user: bool,
    /// The user's home directory (`$HOME`), for `user`.
    pub home: Option<std::path::PathBuf>,
}

impl InstallOptions {
    /// The directory the agent's files go under: the user's home with `user`, else the
    /// project.
    pub fn root(&self) -> anyhow::Result<std::path::PathBuf> {
        if !self.user {
            return Ok(self.project.clone());
        }
        self.home.clone().ok_or_else(|| {
            crate::exit::fail(
                Code::Usage,
                "--user: HOME is not set, so hermes cannot find your home directory",
            )
        })
    }
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
    /// The input field that is set when a subagent (not the main thread) made the call, if
    /// the agent's hooks run for subagents at all.
    fn subagent_field(&self) -> Option<&'static str>;
    /// The input field naming the event (informational).
    fn event_field(&self) -> &'static str {
        "hook_event_name"
    }
    /// How a session start came about.
    fn start(&self, input: &Value) -> Start;
    /// Whether the agent goes on because a stop hook already kept it going.
    fn stop_active(&self, input: &Value) -> bool;
    /// The answer handing `text` over at `event`.
    fn answer(&self, event: &HookEvent, text: &str) -> Value;
    /// What a failing hook prints on stdout, exiting 0, for an agent that treats *every*
    /// non-zero exit as "block" (Cline); `None`: hermes' failures exit 1, which the agent
    /// takes as a non-blocking error.
    fn fail_open(&self) -> Option<Value> {
        None
    }
    /// Writes (or prints) the agent's MCP and hook configuration.
    fn install(&self, options: &InstallOptions) -> anyhow::Result<Code>;
}

/// Whether `agent` has a tool boundary whose answer the model reads.
pub fn has_tool_boundary(agent: &dyn Agent) -> bool {
    agent
        .events()
        .iter()
        .any(|e| e.action == Action::Deliver(Boundary::Tool))
}

/// Whether `agent` tells hermes when a conversation ends.
#[cfg(test)]
pub fn has_session_end(agent: &dyn Agent) -> bool {
    agent.events().iter().any(|e| e.action == Action::End)
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

/// Whether the agent profile `name` gets `inject` results at its turn boundary instead (it
/// has no tool boundary that adds context).
pub fn inject_falls_back(name: &str) -> bool {
    find(name).is_some_and(|a| !has_tool_boundary(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_offers_the_boundaries_its_documentation_names() {
        let table: Vec<(&str, bool, bool)> = AGENTS
            .iter()
            .map(|a| (a.name(), has_tool_boundary(*a), has_session_end(*a)))
            .collect();
        assert_eq!(
            table,
            [
                ("claude", true, true),
                ("codex", true, false),
                ("gemini", true, true),
                ("copilot", false, true),
                ("cursor", false, true),
                ("cline", true, false),
            ]
        );
        for agent in AGENTS {
            assert!(
                agent
                    .events()
                    .iter()
                    .any(|e| matches!(e.action, Action::Deliver(Boundary::Turn) | Action::Stop)),
                "{} delivers at some turn boundary",
                agent.name()
            );
            assert!(agent.budget() >= 2_000, "{}", agent.name());
        }
        assert!(inject_falls_back("cursor") && inject_falls_back("copilot"));
        assert!(!inject_falls_back("claude") && !inject_falls_back("nobody"));
    }
}
