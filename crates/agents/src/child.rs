//! An agent run as a child: the argv that runs it headless on a prompt, how to tell that a
//! command given as is asks for its structured stream, its toolsets, and which stream format it
//! emits. The parsers of those formats are the registry's; it finds them through
//! [`StreamFormat`], never by an agent's name.

/// How hermes runs an agent as a child.
#[derive(Clone, Copy, Debug)]
pub struct ChildProfile {
    /// The executable.
    pub program: &'static str,
    /// The argv that runs `prompt` headless, streaming JSON, with `model` and the allowed
    /// `tools` (empty: the agent's defaults) where the agent has such flags.
    pub argv: fn(prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String>,
    /// Whether `args` (what follows the program in a command given as is) ask for the
    /// structured stream.
    pub streams: fn(args: &[String]) -> bool,
    /// The agent's tools for a toolset name (`terminal`, `file`, `web`); empty if unknown.
    pub toolset: fn(name: &str) -> &'static [&'static str],
    /// The format of its structured stdout.
    pub stream: StreamFormat,
    /// The variable naming the agent's own home when it is one hermes reads too
    /// (`HERMES_HOME`): a child of hermes does not inherit hermes' value of it.
    pub own_home: Option<&'static str>,
    /// Whether its program is named like hermes' own: the one found on `PATH` that is not
    /// this hermes runs.
    pub not_self: bool,
    /// How its own permission system is set to match the child's sandbox, so that headless
    /// (nobody can answer a question) it neither asks nor fails in silence.
    pub permissions: fn(Sandbox) -> Permissions,
    /// Where it keeps its own state (sessions, settings, logs): writable in every sandbox.
    pub state: &'static [StateDir],
}

/// A child's sandbox, as an agent's permission flags are chosen for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sandbox {
    /// It may change nothing.
    ReadOnly,
    /// It may edit files and run commands in its workspace.
    WorkspaceWrite,
    /// Unconfined.
    Full,
}

/// An agent's permission flags for one sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permissions {
    /// Flags added to its argv.
    pub flags: &'static [&'static str],
    /// The tools it may use without asking when the dispatch names no toolsets (handed to
    /// [`ChildProfile::argv`] as its `tools`).
    pub tools: &'static [&'static str],
}

impl Permissions {
    /// No flags, no tools: the agent's own defaults.
    pub const NONE: Permissions = Permissions {
        flags: &[],
        tools: &[],
    };
}

/// A directory (or file) an agent writes its state to: the value of `var` when it is set, else
/// `home` under the user's home directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateDir {
    /// The variable that moves it, if any.
    pub var: Option<&'static str>,
    /// Its place under the home directory.
    pub home: &'static str,
    /// For a file, what a missing one starts as; `None` for a directory. Either is made when
    /// missing: a sandboxed agent may write its own file in place, but not create one in the
    /// directory that holds it (Landlock grants rights on a file or beneath a directory, never
    /// on a name pattern), and a directory is made so the agent can fill it.
    pub file: Option<&'static str>,
}

/// A format of structured stdout, one JSON object per line, that the registry can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFormat {
    /// Agent SDK messages: `system` (subtype `init` naming the model), `assistant` messages
    /// whose content holds `text` and `tool_use` blocks, `user` messages carrying `tool_result`
    /// blocks, and a last `result` with the answer, `is_error`, `usage` and `total_cost_usd`.
    SdkMessages,
    /// Thread events: `thread.started`, `turn.started`, `item.started` / `item.completed` for
    /// `reasoning`, `agent_message`, `command_execution`, `mcp_tool_call`, `web_search`,
    /// `file_change`, and `turn.completed` with `usage`; `turn.failed` and `error` on failure.
    ThreadItems,
    /// Headless events: `init` naming the model, `message` chunks of the user and the
    /// assistant, `tool_use` and `tool_result`, `error` warnings, and a last `result` with
    /// `status` and `stats`.
    HeadlessEvents,
    /// No structured stream: its output, the final answer, is the result as it is.
    Plain,
}

/// Whether `args` hold `--output-format stream-json` (or `=stream-json`), the flag also spelled
/// as one of `short` (`-o`).
pub fn asks_stream_json(args: &[String], short: &[&str]) -> bool {
    args.iter().any(|a| a == "--output-format=stream-json")
        || args.windows(2).any(|w| {
            (w[0] == "--output-format" || short.contains(&w[0].as_str())) && w[1] == "stream-json"
        })
}
