//! Cline, as its CLI 3.0.65 (`cline`, pinned in `tests/agents/`) does it: the hook runner and
//! the paths of its SDK (`@cline/core`'s `dist/index.js`, `@cline/shared`'s
//! `dist/storage/index.js` and `dist/hooks/events.d.ts`, installed beside it), checked by
//! `crates/cli/tests/it/real/cline.rs`:
//!
//! - a hook is a script **named after its event** (`TaskStart`, `TaskResume`, `PostToolUse`,
//!   …; no extension or a script's own) in `~/Documents/Cline/Hooks/`, `~/.cline/hooks/`
//!   (`cline --help`: `--hooks-dir`), or a workspace's `.clinerules/hooks/` or
//!   `.cline/hooks/`, run by its `#!` line;
//! - every input is camelCase around snake-case event names: `taskId` (the conversation),
//!   `hookName` (`agent_start`, `agent_resume`, `tool_result`, …), `agent_id`, and
//!   `parent_agent_id`, set in every hook of a subagent (`spawn_agent`), whose own
//!   `TaskStart` comes under a task id of its own;
//! - only the tool hooks are awaited: `PostToolUse`'s `{"cancel": false, "contextModification":
//!   …}` (the last JSON on stdout, at most 50,000 characters) reaches the model as a user
//!   message after the tool's result. `TaskStart`, `TaskResume`, `UserPromptSubmit` and
//!   `TaskComplete` run detached, their output unread: no boundary between turns delivers, so
//!   every result, `after_turn` too, arrives after the next tool call;
//! - a hook that fails, times out or prints no JSON is logged and the action goes on (a
//!   failing hermes still prints `{"cancel": false}`, as older Cline blocked on it);
//! - no event ends a conversation (a task can always be resumed with `--id`): its session ends
//!   by idleness and its results wait;
//! - MCP servers are `mcpServers` of `~/.cline/data/settings/cline_mcp_settings.json` (a user's
//!   file, read for every project), `{type: "stdio", command, args}`;
//! - the home's paths move with the environment (`@cline/shared`'s `dist/storage/index.js`):
//!   `CLINE_DIR` stands for `~/.cline` (its `hooks/` and `data/`), `CLINE_DATA_DIR` for
//!   `~/.cline/data`, and `CLINE_MCP_SETTINGS_PATH` names the MCP settings file itself, the
//!   most specific one set winning.

use crate::{
    Action, Agent, Answer, HomeVar, HookEvent, Hooks, Install, Place, Server, Start, StartRule,
    StopActive,
};

/// What moves `~/.cline` (`@cline/shared`'s `dist/storage/index.js`).
const CLINE_DIR: HomeVar = HomeVar::dir("CLINE_DIR");

/// Cline.
pub const CLINE: Agent = Agent {
    name: "cline",
    title: "Cline",
    events: EVENTS,
    executables: &["cline"],
    script_markers: &[],
    // Cline keeps 50,000 characters of `contextModification`; a quarter of it, as the model's
    // context is the conversation's.
    budget: 12_000,
    result_tool: "delegation_result",
    mcp_budget: None,
    session_field: "taskId",
    subagent_field: Some("parent_agent_id"),
    event_field: "hookName",
    start: StartRule {
        field: Some("hookName"),
        resume: "agent_resume",
        fresh: &["agent_start"],
        other: Start::Fresh,
    },
    stop_active: StopActive::Never,
    answer: Answer::ContextModification,
    discard: crate::Discard::NEVER,
    install: Install {
        server: Server::Json {
            file: Place::home(&[".cline", "data", "settings", "cline_mcp_settings.json"]).moved_by(
                &[
                    HomeVar::path("CLINE_MCP_SETTINGS_PATH", 4),
                    HomeVar::path("CLINE_DATA_DIR", 2),
                    CLINE_DIR,
                ],
            ),
            kind: Some("stdio"),
            all_tools: false,
            pass_env: None,
        },
        hooks: Hooks::Scripts {
            dir: Place::new(&[".clinerules", "hooks"], &[".cline", "hooks"]).moved_by(&[CLINE_DIR]),
            title: "Cline",
        },
        print_note: "",
        advice: "Cline reads the MCP servers of your home for every project and has no folder trust to grant; it reads no hook's answer between turns, so results arrive after the next tool call (or when the model calls delegation_results), and with no hook that ends a conversation its session ends when idle and its results wait for a resume (`cline --id`)",
    },
    child: None,
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "TaskStart", Action::Start),
    HookEvent::new("session-start", "TaskResume", Action::Start),
    // The one boundary whose answer Cline reads: it takes what is ready between turns too.
    HookEvent::new("post-tool-use", "PostToolUse", Action::TURN),
];
