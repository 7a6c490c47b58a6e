//! What hermes knows of each agent CLI it speaks to — Claude Code, Codex, Gemini CLI and the
//! others — as data: one file per agent and one table, [`AGENTS`], listing them. An agent's
//! file holds all of it: the executable names it runs as, its hook events and the boundaries
//! they are, the input fields that name a conversation or a subagent, the shape and budget of
//! an answer, where `hermes hook install` writes its MCP server and hooks and in which format,
//! and, for an agent hermes can run as a child, the argv that runs it headless and the stream
//! format of its stdout. Everything else in hermes (help texts, error messages, MCP schemas,
//! `hermes doctor`, the hooks, the registry's stream adapters) reads this table and never
//! names an agent itself.
//!
//! This crate is facts and pure functions of them: it never does I/O (no files, no
//! environment, no processes spawned or looked for), and knows nothing of the ledger, the
//! registry or the cli. Adding an agent is adding its file and one line of [`AGENTS`].

mod child;
mod hook;
mod install;

pub use child::{ChildProfile, Permissions, Sandbox, StateDir, StreamFormat};
pub use hook::{
    Action, Answer, Discard, HookBoundary, HookEvent, Start, StartRule, StopActive, StopAnswer,
    SubagentTool,
};
pub use install::{Entry, HomeVar, Hooks, Install, Layout, Place, Server};

/// The table: each line is an agent's file (`src/MODULE.rs`) and the constant it defines.
macro_rules! table {
    ($($module:ident::$agent:ident),* $(,)?) => {
        $(mod $module;)*

        /// Every agent hermes speaks to, in the order they are listed to the user.
        pub const AGENTS: &[&Agent] = &[$(&$module::$agent),*];
    };
}

table![
    claude::CLAUDE,
    codex::CODEX,
    gemini::GEMINI,
    copilot::COPILOT,
    cursor::CURSOR,
    cline::CLINE,
    hermes_agent::HERMES_AGENT,
];

/// The agent whose protocol `hermes hook EVENT` speaks when no `--agent` is given: the first.
pub const DEFAULT_HOOK_AGENT: &str = AGENTS[0].name;

/// One agent CLI: the facts of its documentation, as data. What hermes does with them is
/// written once, elsewhere, for every agent.
#[derive(Debug)]
pub struct Agent {
    /// Its name on the command line (`hermes hook install NAME`, `--agent NAME`).
    pub name: &'static str,
    /// Its name in prose.
    pub title: &'static str,
    /// Its hook events.
    pub events: &'static [HookEvent],
    /// The executable names its CLI runs as: the binding walks up to the nearest of them.
    pub executables: &'static [&'static str],
    /// Pieces of a path that, in the first two words of a process's argv, show the process
    /// is this agent (a package it runs from on an interpreter).
    pub script_markers: &'static [&'static str],
    /// Characters of one answer the agent keeps, the carrier and headers included.
    pub budget: usize,
    /// How the agent shows hermes' MCP tool `delegation_result` to its model: a shortened
    /// result names it so, for the model to call it as written.
    pub result_tool: &'static str,
    /// Characters of one MCP tool answer the agent keeps, when it keeps fewer than hermes'
    /// default for MCP answers (30,000); `None`: that default.
    pub mcp_budget: Option<usize>,
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
    /// Which session ends discard the conversation; every other one detaches it.
    pub discard: Discard,
    /// What `hermes hook install NAME` writes.
    pub install: Install,
    /// How hermes runs it as a child (`--agent NAME`), if it can.
    pub child: Option<ChildProfile>,
}

/// The agent called `name`.
pub fn find(name: &str) -> Option<&'static Agent> {
    AGENTS.iter().copied().find(|a| a.name == name)
}

/// The agents hermes can run as a child, with how, in table order.
pub fn children() -> impl Iterator<Item = (&'static Agent, &'static ChildProfile)> {
    AGENTS
        .iter()
        .copied()
        .filter_map(|a| a.child.as_ref().map(|c| (a, c)))
}

/// The agent called `name` that hermes can run as a child.
pub fn child(name: &str) -> Option<(&'static Agent, &'static ChildProfile)> {
    children().find(|(a, _)| a.name == name)
}

/// An example of a command running an agent on `prompt`, for help texts: the headless argv of
/// the first agent hermes can run as a child, up to its prompt.
pub fn example_command(prompt: &str) -> Vec<String> {
    let Some((_, child)) = children().next() else {
        return Vec::new();
    };
    let argv = (child.argv)(prompt, None, &[]);
    let end = argv
        .iter()
        .position(|w| w == prompt)
        .map_or(argv.len(), |i| i + 1);
    argv[..end].to_vec()
}

/// Every executable name of every agent.
pub fn executables() -> impl Iterator<Item = &'static str> {
    AGENTS.iter().flat_map(|a| a.executables.iter().copied())
}

/// Every script marker of every agent.
pub fn script_markers() -> impl Iterator<Item = &'static str> {
    AGENTS.iter().flat_map(|a| a.script_markers.iter().copied())
}

/// Whether the agent `name` gets `inject` results at its turn boundary instead (it has no
/// tool boundary that adds context).
pub fn inject_falls_back(name: &str) -> bool {
    find(name).is_some_and(|a| !a.has_tool_boundary())
}

/// The names of every agent, for prose: `a, b, c or d` with `last` = `"or"`.
pub fn names(last: &str) -> String {
    listed(AGENTS.iter().map(|a| a.name), last)
}

/// The names of the agents hermes can run as a child, for prose (see [`names`]).
pub fn child_names(last: &str) -> String {
    listed(children().map(|(a, _)| a.name), last)
}

/// `words` joined by `, `, the last two by ` {last} ` (by `, ` too when `last` is empty).
pub fn listed<'a>(words: impl IntoIterator<Item = &'a str>, last: &str) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        Some((tail, head)) if !head.is_empty() && !last.is_empty() => {
            format!("{} {last} {tail}", head.join(", "))
        }
        _ => words.join(", "),
    }
}
