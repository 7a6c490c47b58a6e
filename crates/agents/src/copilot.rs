//! GitHub Copilot CLI. Every fact here is from its hooks reference,
//! <https://docs.github.com/en/copilot/reference/copilot-cli-reference/cli-hooks-reference>, its
//! hooks configuration page, <https://docs.github.com/en/copilot/reference/hooks-configuration>,
//! and its MCP page,
//! <https://docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/add-mcp-servers>:
//!
//! - hooks are `.github/hooks/*.json` files of the repository, `{"version": 1, "hooks": {…}}`,
//!   each event a flat list of `{type: "command", bash, powershell, cwd, env, timeoutSec}`
//!   (the timeout in **seconds**, default 30);
//! - configured under their camelCase names (`sessionStart`, `userPromptSubmitted`,
//!   `postToolUse`, `agentStop`, `sessionEnd`, …) the events send camelCase payloads:
//!   `sessionId`, `timestamp` (ms), `cwd`; `sessionStart` adds `source`
//!   (`startup`|`resume`|`new`), `sessionEnd` a `reason`;
//! - the output of `sessionStart`, `userPromptSubmitted` and (for command hooks) `postToolUse`
//!   is **not processed**: no hook after a tool call can add context, so `inject` results are
//!   delivered as `after_turn`; `agentStop` (the main agent finishes a turn; subagents have
//!   `subagentStop`) answers `{"decision":"block","reason":…}` to force another turn with
//!   `reason` as its prompt — the one boundary that delivers;
//! - a hook's failure (non-zero exit, timeout) is logged and skipped, never blocking;
//! - MCP servers are `mcpServers` of `~/.copilot/mcp-config.json` (user) or a repository's
//!   `.github/mcp.json`, a local server `{type: "stdio", command, args, tools: ["*"]}`.

use crate::{
    Action, Agent, Answer, Entry, HookEvent, Hooks, Install, Layout, Place, Server, Start,
    StartRule, StopActive,
};

/// GitHub Copilot CLI.
pub const COPILOT: Agent = Agent {
    name: "copilot",
    title: "GitHub Copilot CLI",
    events: EVENTS,
    executables: &["copilot"],
    script_markers: &[],
    budget: 9_500,
    mcp_budget: None,
    session_field: "sessionId",
    subagent_field: None,
    event_field: "hook_event_name",
    start: StartRule {
        field: Some("source"),
        resume: "resume",
        fresh: &["startup", "new"],
        other: Start::Other,
    },
    stop_active: StopActive::Never,
    answer: Answer::Block,
    install: Install {
        server: Server::Json {
            file: Place {
                project: &[".github", "mcp.json"],
                user: Some(&[".copilot", "mcp-config.json"]),
                user_var: None,
            },
            kind: Some("stdio"),
            all_tools: true,
        },
        hooks: Hooks::Json {
            // Hooks are a repository's: `--user` moves only the server.
            file: Place {
                project: &[".github", "hooks", "hermes.json"],
                user: None,
                user_var: None,
            },
            local: None,
            layout: Layout::Flat,
            // Seconds Copilot gives each hook.
            entry: Entry::typed("bash", Some(("timeoutSec", 10))),
            tool_matcher: None,
            versioned: true,
            enable_server: None,
        },
        print_note: "",
        advice: "Copilot reads no hook's answer after a tool call or a prompt, so results arrive when the agent finishes a turn (agentStop), inject ones too",
    },
    child: None,
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "sessionStart", Action::Start),
    HookEvent::new("stop", "agentStop", Action::Stop),
    HookEvent::new("session-end", "sessionEnd", Action::End),
];
