//! Gemini CLI. Every fact here is from its hooks reference,
//! <https://geminicli.com/docs/hooks/reference> (`docs/hooks/reference.md` in
//! <https://github.com/google-gemini/gemini-cli>), and its MCP settings
//! (<https://geminicli.com/docs/tools/mcp-server>):
//!
//! - hooks are the `hooks` object of `settings.json` (`<project>/.gemini/settings.json`,
//!   `~/.gemini/settings.json`): event → groups with a `matcher` (a regular expression for
//!   tool events, an exact string for lifecycle ones) and `hooks` of
//!   `{type: "command", command, name, timeout}`, the **timeout in milliseconds** (default
//!   60,000);
//! - every input has `session_id`, `transcript_path`, `cwd`, `hook_event_name`, `timestamp`;
//!   `SessionStart` adds `source` (`startup`|`resume`|`clear`), `SessionEnd` a `reason`,
//!   `AfterAgent` `prompt`, `prompt_response` and `stop_hook_active`;
//! - `BeforeAgent` (after the user's prompt, before planning) and `AfterTool` answer
//!   `hookSpecificOutput.additionalContext`, appended to the prompt or the tool's result;
//!   `AfterAgent` answers `{"decision":"deny","reason":…}` to reject the final response and
//!   retry with `reason` as a new prompt; `SessionEnd` is best effort (not awaited);
//! - exit 0 with JSON on stdout is an answer, exit 2 blocks, any other code is a warning and
//!   the CLI goes on; stdout must hold nothing but the JSON;
//! - MCP servers are `mcpServers` in the same `settings.json` (`command`, `args`, `env`).
//!
//! The reference names no limit on added context; hermes keeps Claude Code's budget.

use super::{Action, Answer, HookEvent, Profile, StartRule, StopActive};
use crate::hook::install::{Entry, Hooks, Install, Layout, Place, Server};

/// Gemini CLI's settings file, which holds both its MCP servers and its hooks.
const SETTINGS: Place = Place::both(&[".gemini", "settings.json"]);

/// Gemini CLI's profile.
pub const GEMINI: Profile = Profile {
    name: "gemini",
    events: EVENTS,
    executables: &["gemini"],
    budget: 9_500,
    session_field: "session_id",
    subagent_field: None,
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    answer: Answer::AdditionalContext {
        stop_decision: "deny",
    },
    install: Install {
        server: Server::Json {
            file: SETTINGS,
            kind: None,
            all_tools: false,
        },
        hooks: Hooks::Json {
            file: SETTINGS,
            local: None,
            layout: Layout::Groups,
            // Milliseconds Gemini gives each hook.
            entry: Entry {
                named: true,
                ..Entry::typed("command", Some(("timeout", 10_000)))
            },
            // A regular expression for tool events: every tool.
            tool_matcher: Some(".*"),
            versioned: false,
            enable_server: None,
        },
        print_note: "",
        advice: "start gemini in {project}",
    },
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "SessionStart", Action::Start),
    HookEvent::new("user-prompt-submit", "BeforeAgent", Action::TURN),
    HookEvent::new("post-tool-use", "AfterTool", Action::TOOL),
    HookEvent::new("stop", "AfterAgent", Action::Stop),
    HookEvent::new("session-end", "SessionEnd", Action::End),
];
