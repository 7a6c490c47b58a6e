//! Cursor (the editor's agent and `cursor-agent`). Its hooks reference is
//! <https://cursor.com/docs/agent/hooks>; its MCP page <https://cursor.com/docs/context/mcp>.
//! The facts below were checked against those pages as quoted by hook tools that implement
//! them (GitButler's "Deep Dive into the new Cursor Hooks", Cupcake's Cursor reference,
//! hookshot's `reference-cursor.md`), the pages themselves not being readable from here:
//!
//! - hooks are `hooks.json` (`<project>/.cursor/hooks.json`, `~/.cursor/hooks.json`, all of
//!   them run): `{"version": 1, "hooks": {event: [{command}, …]}}`;
//! - every input has `hook_event_name`, `conversation_id`, `generation_id`,
//!   `workspace_roots`; `stop` adds `status` (`completed`|`aborted`|`error`) and `loop_count`;
//! - `beforeSubmitPrompt` can only let the prompt through or not (`continue`), and the
//!   `after*` hooks (`afterShellExecution`, `afterMCPExecution`, `afterFileEdit`, …) only
//!   observe: no hook adds context after a tool call or before a prompt, so `inject` results
//!   are delivered as `after_turn`;
//! - `stop` answers `{"followup_message": …}`, sent as the next user message, at most
//!   `loop_limit` times in a row (default 5) — the one boundary that delivers;
//! - `sessionStart` and `sessionEnd` open and close a conversation;
//! - MCP servers are `mcpServers` of `.cursor/mcp.json` (`~/.cursor/mcp.json` for every
//!   project), a local server `{command, args, env}`.

use crate::{
    Action, Agent, Answer, Entry, HookEvent, Hooks, Install, Layout, Place, Server, StartRule,
    StopActive,
};

/// Cursor.
pub const CURSOR: Agent = Agent {
    name: "cursor",
    title: "Cursor",
    events: EVENTS,
    executables: &["cursor-agent", "cursor", "Cursor"],
    script_markers: &[],
    budget: 9_500,
    result_tool: "delegation_result",
    mcp_budget: None,
    session_field: "conversation_id",
    subagent_field: None,
    event_field: "hook_event_name",
    start: StartRule::ALWAYS_FRESH,
    stop_active: StopActive::Count("loop_count"),
    answer: Answer::Followup,
    discard: crate::Discard::NEVER,
    install: Install {
        server: Server::Json {
            file: Place::both(&[".cursor", "mcp.json"]),
            kind: None,
            all_tools: false,
            pass_env: None,
        },
        hooks: Hooks::Json {
            file: Place::both(&[".cursor", "hooks.json"]),
            local: None,
            layout: Layout::Flat,
            // A bare `{command}`: no type, no timeout.
            entry: Entry {
                typed: false,
                command_key: "command",
                named: false,
                timeout: None,
            },
            tool_matcher: None,
            versioned: true,
            enable_server: None,
        },
        print_note: "",
        advice: "enable the `hermes` server in Cursor's MCP settings; Cursor's hooks cannot add context after a tool call, so results arrive when the agent stops (as a follow-up message), inject ones too",
    },
    child: None,
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "sessionStart", Action::Start),
    HookEvent::new("stop", "stop", Action::Stop),
    HookEvent::new("session-end", "sessionEnd", Action::End),
];
