//! Agent profiles: what one hook-driven agent CLI sends, expects and keeps.
//!
//! Each agent is one file under `agents/` holding one constant [`Profile`], listed once in
//! [`AGENTS`]. A profile says how the agent's hook events map onto hermes' boundaries, which input fields
//! name the conversation and a subagent, the shape of an answer, how many characters of an
//! answer the agent keeps, and which files `hermes hook install NAME` writes. Everything else
//! (binding, claiming, fitting, acknowledging) is written once, in `event.rs` and `deliver.rs`.
//!
//! What an agent lacks follows from its events: one without a tool boundary that can add
//! context ([`has_tool_boundary`]) gets `inject` results at its next turn boundary, and the
//! dispatch answer says so; one without a session end ([`has_session_end`]) leaves its
//! sessions to end by idleness (`host.idle_exit_seconds`), their results pending for a resume.

use hermes_formatter::Boundary;
use serde_json::{Value, json};

use crate::hook::install::{self, Install};
use crate::services::exit::Code;

mod claude;
mod cline;
mod codex;
mod copilot;
mod cursor;
mod gemini;

/// Every agent hermes speaks to, by name.
pub const AGENTS: &[&Profile] = &[
    &claude::CLAUDE,
    &codex::CODEX,
    &gemini::GEMINI,
    &copilot::COPILOT,
    &cursor::CURSOR,
    &cline::CLINE,
];

/// The profile called `name`.
pub fn find(name: &str) -> Option<&'static Profile> {
    AGENTS.iter().copied().find(|a| a.name == name)
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

impl Action {
    /// A tool boundary's delivery.
    pub const TOOL: Action = Action::Deliver(Boundary::Tool);
    /// A turn boundary's delivery.
    pub const TURN: Action = Action::Deliver(Boundary::Turn);
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

impl HookEvent {
    /// The agent's event `name`, whose hook runs `hermes hook COMMAND`, doing `action`.
    pub const fn new(command: &'static str, name: &'static str, action: Action) -> HookEvent {
        HookEvent {
            command,
            name,
            action,
        }
    }
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
            crate::services::exit::fail(
                Code::Usage,
                "--user: HOME is not set, so hermes cannot find your home directory",
            )
        })
    }
}

/// One hook-driven agent CLI: the facts of its documentation, as data. What hermes does with
/// them is written once, in the functions of [`Profile`] and in `install.rs`.
#[derive(Debug)]
pub struct Profile {
    /// Its name on the command line (`claude`).
    pub name: &'static str,
    /// Its hook events.
    pub events: &'static [HookEvent],
    /// The executable names its CLI runs as: the binding walks up to the nearest of them.
    pub executables: &'static [&'static str],
    /// Characters of one answer the agent keeps, the carrier and headers included.
    pub budget: usize,
    /// The input field naming the conversation.
    pub session_field: &'static str,
    /// The input field that is set when a subagent (not the main thread) made the call, if
    /// the agent's hooks run for subagents at all.
    pub subagent_field: Option<&'static str>,
    /// The input field naming the event (informational).
    pub event_field: &'static str,
    /// How a session start says whether it is a resume.
    pub start: StartRule,
    /// How the agent says that a stop hook already kept it going.
    pub stop_active: StopActive,
    /// The shape of an answer.
    pub answer: Answer,
    /// What `hermes hook install NAME` writes.
    pub install: Install,
}

/// How a session start says how it came about: the value of an input field.
#[derive(Clone, Copy, Debug)]
pub struct StartRule {
    /// The field; `None`: every start is [`Start::Fresh`].
    pub field: Option<&'static str>,
    /// The value that means [`Start::Resume`].
    pub resume: &'static str,
    /// The values that mean [`Start::Fresh`] (so does a missing field).
    pub fresh: &'static [&'static str],
    /// What any other value means.
    pub other: Start,
}

impl StartRule {
    /// Claude's `source` field (`startup`, `resume`, `clear`, `compact`), which Codex and
    /// Gemini share.
    pub const SOURCE: StartRule = StartRule {
        field: Some("source"),
        resume: "resume",
        fresh: &["startup"],
        other: Start::Other,
    };
    /// No field: every start is a new conversation.
    pub const ALWAYS_FRESH: StartRule = StartRule {
        field: None,
        resume: "",
        fresh: &[],
        other: Start::Fresh,
    };
}

/// How an agent says that a stop hook already kept it going.
#[derive(Clone, Copy, Debug)]
pub enum StopActive {
    /// It does not say (every stop may be kept going).
    Never,
    /// A boolean field that is `true` then.
    Flag(&'static str),
    /// A counter field of stops kept going in a row, more than zero then.
    Count(&'static str),
}

impl StopActive {
    /// Claude's `stop_hook_active`, which Codex and Gemini share.
    pub const STOP_HOOK_ACTIVE: StopActive = StopActive::Flag("stop_hook_active");
}

/// The shape of the answer that hands a text over.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// `hookSpecificOutput.additionalContext` under the event's name (Claude's shape); at a
    /// stop, `{"decision": stop_decision, "reason": text}`.
    AdditionalContext {
        /// The decision that keeps the agent going (`block`, Gemini's `deny`).
        stop_decision: &'static str,
    },
    /// `{"decision": "block", "reason": text}` at every event.
    Block,
    /// `{"followup_message": text}`, sent as the next user message.
    Followup,
    /// `{"cancel": false, "contextModification": text}`; the agent takes *every* non-zero
    /// exit as "block", so a failing hook answers `{"cancel": false}` and exits 0 (Cline).
    ContextModification,
}

impl Profile {
    /// How a session start came about.
    pub fn start(&self, input: &Value) -> Start {
        let rule = &self.start;
        match rule
            .field
            .and_then(|f| input.get(f))
            .and_then(Value::as_str)
        {
            None => Start::Fresh,
            Some(value) if value == rule.resume => Start::Resume,
            Some(value) if rule.fresh.contains(&value) => Start::Fresh,
            Some(_) => rule.other,
        }
    }

    /// Whether the agent goes on because a stop hook already kept it going.
    pub fn stop_active(&self, input: &Value) -> bool {
        match self.stop_active {
            StopActive::Never => false,
            StopActive::Flag(field) => input.get(field).and_then(Value::as_bool) == Some(true),
            StopActive::Count(field) => input
                .get(field)
                .and_then(Value::as_u64)
                .is_some_and(|n| n > 0),
        }
    }

    /// The answer handing `text` over at `event`.
    pub fn answer(&self, event: &HookEvent, text: &str) -> Value {
        match self.answer {
            Answer::AdditionalContext { stop_decision } => match event.action {
                Action::Stop => json!({"decision": stop_decision, "reason": text}),
                _ => json!({"hookSpecificOutput": {
                    "hookEventName": event.name,
                    "additionalContext": text,
                }}),
            },
            Answer::Block => json!({"decision": "block", "reason": text}),
            Answer::Followup => json!({ "followup_message": text }),
            Answer::ContextModification => {
                json!({"cancel": false, "contextModification": text})
            }
        }
    }

    /// What a failing hook prints on stdout, exiting 0, for an agent that treats *every*
    /// non-zero exit as "block" (Cline); `None`: hermes' failures exit 1, which the agent
    /// takes as a non-blocking error.
    pub fn fail_open(&self) -> Option<Value> {
        match self.answer {
            Answer::ContextModification => Some(json!({"cancel": false})),
            _ => None,
        }
    }

    /// Writes (or prints) the agent's MCP and hook configuration.
    pub fn install(&self, options: &InstallOptions) -> anyhow::Result<Code> {
        install::install(self, options)
    }
}

/// Whether `agent` has a tool boundary whose answer the model reads.
pub fn has_tool_boundary(agent: &Profile) -> bool {
    agent
        .events
        .iter()
        .any(|e| e.action == Action::Deliver(Boundary::Tool))
}

/// Whether `agent` tells hermes when a conversation ends.
#[cfg(test)]
pub fn has_session_end(agent: &Profile) -> bool {
    agent.events.iter().any(|e| e.action == Action::End)
}

/// The event of `agent` that the `hermes hook` subcommand `command` runs.
pub fn event(agent: &Profile, command: &str) -> Option<HookEvent> {
    agent.events.iter().copied().find(|e| e.command == command)
}

/// Every executable name of every agent.
pub fn executables() -> impl Iterator<Item = &'static str> {
    AGENTS.iter().flat_map(|a| a.executables.iter().copied())
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
            .map(|a| (a.name, has_tool_boundary(a), has_session_end(a)))
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
                    .events
                    .iter()
                    .any(|e| matches!(e.action, Action::Deliver(Boundary::Turn) | Action::Stop)),
                "{} delivers at some turn boundary",
                agent.name
            );
            assert!(agent.budget >= 2_000, "{}", agent.name);
        }
        assert!(inject_falls_back("cursor") && inject_falls_back("copilot"));
        assert!(!inject_falls_back("claude") && !inject_falls_back("nobody"));
    }
}
