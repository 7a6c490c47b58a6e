//! GitHub Copilot CLI. Its hooks reference,
//! <https://docs.github.com/en/copilot/reference/copilot-cli-reference/cli-hooks-reference>,
//! and its MCP page,
//! <https://docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/add-mcp-servers>,
//! checked against Copilot CLI 1.0.102 (`@github/copilot`, pinned in `tests/agents/`) by
//! `crates/cli/tests/it/real/copilot.rs`:
//!
//! - hooks are `{"version": 1, "hooks": {…}}`, each event a flat list of `{type: "command",
//!   bash, timeoutSec}` (the timeout in **seconds**), in a repository's `.github/hooks/*.json`
//!   or, for every project, under `hooks` of `~/.copilot/settings.json` ("in the user
//!   settings.json these act as user-level hooks": `copilot help config`);
//! - the events send camelCase payloads: `sessionId`, `timestamp` (ms), `cwd`; `sessionStart`
//!   adds `source` (`new`, `startup`, `resume`), `agentStop` a `stop_hook_active` flag,
//!   `sessionEnd` a `reason` (`complete` after every `-p` run);
//! - `userPromptSubmitted` and `postToolUse` read `{"additionalContext": …}` (top level; a
//!   `hookSpecificOutput` object is ignored): the prompt's is appended to the user message, the
//!   tool's to the tool result; `agentStop` answers `{"decision": "block", "reason": …}` to go
//!   on with `reason` as the next prompt;
//! - a subagent (the `task` tool) runs its own hooks under a `sessionId` of its own, with
//!   `agentId` and `parentAgentId` set;
//! - `COPILOT_HOME`, when set, is the directory instead of `~/.copilot` ("where configuration
//!   and state files are stored": `copilot help environment`), so every home file above is
//!   under it;
//! - a hook's failure (non-zero exit, timeout) is logged and skipped, never blocking;
//! - MCP servers are `mcpServers` of `~/.copilot/mcp-config.json` (`copilot --help`,
//!   `--additional-mcp-config`) or a repository's `.github/mcp.json`, a local server
//!   `{type: "stdio", command, args, tools: ["*"]}`;
//! - a repository's hooks and MCP servers load only in a trusted folder: `--trust-folder` for
//!   one `-p` run (`copilot --help`), or `trustedFolders` of `~/.copilot/config.json` (what
//!   Copilot 1.0.102 reads); the user's own load everywhere.

use crate::{
    Action, Agent, Answer, Entry, HomeVar, HookEvent, Hooks, Install, Layout, Place, Server,
    Start, StartRule, StopActive,
};

/// What moves `~/.copilot` (`copilot help environment`).
const COPILOT_HOME: &[HomeVar] = &[HomeVar::dir("COPILOT_HOME")];

/// GitHub Copilot CLI.
pub const COPILOT: Agent = Agent {
    name: "copilot",
    title: "GitHub Copilot CLI",
    events: EVENTS,
    executables: &["copilot"],
    script_markers: &[],
    budget: 9_500,
    result_tool: "delegation_result",
    mcp_budget: None,
    session_field: "sessionId",
    subagent_field: Some("parentAgentId"),
    event_field: "hook_event_name",
    start: StartRule {
        field: Some("source"),
        resume: "resume",
        fresh: &["startup", "new"],
        other: Start::Other,
    },
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    answer: Answer::TopLevelContext,
    // `sessionEnd`'s reasons are complete, error, abort, timeout, user_exit (1.0.102's
    // `copilot-sdk/types.d.ts`, unpacked from `@github/copilot-linux-x64`): `-p` fires it after
    // every turn with `complete`, and `/clear` gives no reason of its own, so no session end
    // is a discard (`hermes session end` is).
    discard: crate::Discard::NEVER,
    install: Install {
        server: Server::Json {
            file: Place::new(&[".github", "mcp.json"], &[".copilot", "mcp-config.json"])
                .moved_by(COPILOT_HOME),
            kind: Some("stdio"),
            all_tools: true,
            pass_env: None,
        },
        hooks: Hooks::Json {
            file: Place::new(&[".github", "hooks", "hermes.json"], &[".copilot", "settings.json"])
                .moved_by(COPILOT_HOME),
            local: None,
            layout: Layout::Flat,
            // Seconds Copilot gives each hook.
            entry: Entry::typed("bash", Some(("timeoutSec", 10))),
            tool_matcher: None,
            versioned: true,
            enable_server: None,
        },
        print_note: "",
        advice: "Copilot loads a repository's hooks and MCP servers only in a trusted folder: trust {project} when Copilot asks, or add it to `trustedFolders` in ~/.copilot/config.json (`copilot -p` takes `--trust-folder` for one run); hooks installed with --user load everywhere",
    },
    child: None,
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "sessionStart", Action::Start),
    HookEvent::new("user-prompt-submit", "userPromptSubmitted", Action::TURN),
    HookEvent::new("post-tool-use", "postToolUse", Action::TOOL),
    HookEvent::new("stop", "agentStop", Action::Stop),
    HookEvent::new("session-end", "sessionEnd", Action::End),
];
