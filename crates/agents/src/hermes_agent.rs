//! Hermes Agent (NousResearch, PyPI `hermes-agent`; facts checked against 0.19.0). Every fact
//! here is from the installed package:
//!
//! - plugins are `$HERMES_HOME/plugins/<name>/` (a `plugin.yaml` and an `__init__.py` with
//!   `register(ctx)`) or a pip entry point `hermes_agent.plugins`, loaded only when named in
//!   `plugins.enabled` of `config.yaml` (`hermes_cli/plugins.py`: `ENTRY_POINTS_GROUP`,
//!   `_get_enabled_plugins`); they register hooks (`VALID_HOOKS`), middleware and tools;
//! - `pre_llm_call` runs once per turn and a `{"context": …}` answer is appended to the user
//!   message sent (`agent/turn_context.py`); `transform_tool_result` may return a string that
//!   replaces a tool's result (`model_tools.py`); `pre_api_request` sees the messages sent;
//! - `on_session_end` fires after **every** turn (`agent/turn_finalizer.py`),
//!   `on_session_finalize` at every process exit (reason `shutdown`) and at `/new` (reason
//!   `session_boundary`), `on_session_reset` at a reset (`cli.py`); no stop hook;
//! - a hook's context longer than 10,000 characters is spilled to a file
//!   (`tools/hook_output_spill.py`);
//! - there is no project-level configuration: `config.yaml` lives in its home
//!   (`$HERMES_HOME`, default `~/.hermes`, where older versions of hermes made their home too);
//! - MCP servers are `mcp_servers.<name>: {command, args, env, enabled}`, their tools named
//!   `mcp__<server>__<tool>`; a server gets a filtered environment (`PATH`, `HOME`, … and its
//!   `env`) and runs under `tools/mcp_stdio_watchdog.py`, a Python process between it and the
//!   agent (`tools/mcp_tool.py`), walked past as an interpreter;
//! - it runs as `python …/bin/hermes` (a console script of `hermes_cli.main`), recognized by
//!   its script markers — its executable name is hermes' own; it exports `HERMES_SESSION_ID`
//!   process-wide (`agent/agent_init.py`).
//!
//! Its hooks are a plugin (`integrations/hermes-agent/` in this repository) that runs
//! `hermes delegate`, `hermes drain --hold --json` and `hermes delivery ack|release`, and
//! `hermes hook session-start|session-end --agent hermes-agent` for the binding and a `/new`.
//!
//! As a child (`--agent hermes-agent`): `hermes chat -Q -q PROMPT [-m MODEL] [-t TOOLSETS]`
//! (`hermes_cli/_parser.py`), its final answer on stdout, run from the `hermes` on `PATH`
//! that is not this one, without hermes' `HERMES_HOME` (its own home is its own).

use crate::{
    Action, Agent, Answer, ChildProfile, HookEvent, Permissions, Hooks, Install, Place, Server, StartRule,
    StopActive, StreamFormat,
};

/// Hermes Agent.
pub const HERMES_AGENT: Agent = Agent {
    name: "hermes-agent",
    title: "Hermes Agent",
    events: EVENTS,
    // Its console script is named like hermes' own binary: found by its markers instead.
    executables: &[],
    script_markers: &["/bin/hermes", "hermes_cli"],
    budget: 10_000,
    result_tool: "mcp__hermes__delegation_result",
    mcp_budget: None,
    session_field: "session_id",
    subagent_field: None,
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::Never,
    answer: Answer::Context,
    // Its plugin forwards a reset (`reset`) and `/new` (`session_boundary`), never `shutdown`.
    discard: crate::Discard::when("reason", &["reset", "session_boundary"]),
    install: Install {
        server: Server::Yaml {
            file: Place {
                project: &["config.yaml"],
                user: None,
                moved_by: &[],
            },
        },
        hooks: Hooks::Plugin {
            dir: Place {
                project: &["plugins", "hermes_delegation"],
                user: None,
                moved_by: &[],
            },
            name: "hermes_delegation",
        },
        print_note: "",
        advice: "start `hermes chat` (Hermes Agent's) as usual: its plugin delivers results at the next turn and after tool calls",
    },
    // `hermes chat -Q -q PROMPT`: the final answer alone on stdout (`-Q`, `hermes_cli/_parser.py`),
    // no structured stream.
    child: Some(ChildProfile {
        program: "hermes",
        argv,
        streams: |_| false,
        toolset: |_| &[],
        stream: StreamFormat::Plain,
        own_home: Some("HERMES_HOME"),
        not_self: true,
        permissions: |_| Permissions::NONE,
        state: &[],
    }),
};

/// The plugin's hooks, as the events `hermes hook` is run for.
const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "on_session_start", Action::Start),
    HookEvent::new("user-prompt-submit", "pre_llm_call", Action::TURN),
    HookEvent::new("post-tool-use", "transform_tool_result", Action::TOOL),
    HookEvent::new("session-end", "on_session_reset", Action::End),
];

fn argv(prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = ["hermes", "chat", "-Q", "-q", prompt]
        .map(str::to_owned)
        .to_vec();
    if let Some(model) = model {
        argv.extend(["-m".to_owned(), model.to_owned()]);
    }
    if !tools.is_empty() {
        argv.extend(["-t".to_owned(), tools.join(",")]);
    }
    argv
}
