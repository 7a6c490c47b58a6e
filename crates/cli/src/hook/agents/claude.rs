//! Claude Code. Every fact here is from its hooks reference,
//! <https://code.claude.com/docs/en/hooks>, and its MCP page, <https://code.claude.com/docs/en/mcp>:
//!
//! - hooks get one JSON object on stdin with `session_id`, `transcript_path`, `cwd`,
//!   `hook_event_name`; `SessionStart` adds `source` (`startup`, `resume`, `clear`, `compact`),
//!   `SessionEnd` a `reason` (`clear`, `logout`, `prompt_input_exit`, `other`, …), `Stop`
//!   `stop_hook_active`, `PostToolUse`/`PostToolUseFailure` the tool; a call made inside a
//!   subagent carries `agent_id` (and `agent_type`);
//! - exit 0 with JSON on stdout is an answer; exit 2 *blocks* (a `UserPromptSubmit` prompt is
//!   erased, a `Stop` keeps Claude going with stderr); any other code is a non-blocking error,
//!   shown to the user, and Claude goes on — which is what a failing hermes must do;
//! - `hookSpecificOutput.additionalContext` of `UserPromptSubmit`, `PostToolUse` and
//!   `PostToolUseFailure` is added to what the model reads, at most 10,000 characters of it
//!   (beyond, the model gets a preview and a file path); `Stop` answers
//!   `{"decision":"block","reason":…}` to keep Claude going with the reason;
//! - project settings are `.claude/settings.json` (committed) and
//!   `.claude/settings.local.json` (not); project MCP servers are `.mcp.json`'s `mcpServers`,
//!   enabled through `enabledMcpjsonServers`; user settings are `~/.claude/settings.json`, and
//!   user-scoped MCP servers `~/.claude.json`'s `mcpServers`.

use super::{Action, Answer, HookEvent, Profile, StartRule, StopActive};
use crate::hook::install::{Entry, Hooks, Install, Layout, Place, Server};

/// Claude Code's profile.
pub const CLAUDE: Profile = Profile {
    name: "claude",
    events: EVENTS,
    executables: &["claude"],
    // Claude keeps 10,000 characters of `additionalContext`; hermes stays clear of the edge.
    budget: 9_500,
    session_field: "session_id",
    subagent_field: Some("agent_id"),
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    answer: Answer::AdditionalContext {
        stop_decision: "block",
    },
    install: Install {
        server: Server::Json {
            file: Place {
                project: &[".mcp.json"],
                user: Some(&[".claude.json"]),
            },
            kind: Some("stdio"),
            all_tools: false,
        },
        hooks: Hooks::Json {
            file: Place::both(&[".claude", "settings.json"]),
            local: Some(&[".claude", "settings.local.json"]),
            layout: Layout::Groups,
            // Seconds Claude gives each hook before it gives up on it.
            entry: Entry::typed("command", Some(("timeout", 10))),
            tool_matcher: Some("*"),
            versioned: false,
            enable_server: Some("enabledMcpjsonServers"),
        },
        print_note: "# (or: claude mcp add hermes -- {quoted} mcp)\n",
        advice: "start claude in {project} and approve the `hermes` server if asked",
    },
};

/// Its hook events.
const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "SessionStart", Action::Start),
    HookEvent::new("user-prompt-submit", "UserPromptSubmit", Action::TURN),
    HookEvent::new("post-tool-use", "PostToolUse", Action::TOOL),
    HookEvent::new("post-tool-use-failure", "PostToolUseFailure", Action::TOOL),
    HookEvent::new("stop", "Stop", Action::Stop),
    HookEvent::new("session-end", "SessionEnd", Action::End),
];
