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

use formatter::Boundary;
use serde_json::{Value, json};

use super::{Action, Agent, HookEvent, InstallOptions, Start};
use crate::exit::Code;
use crate::hook::install::{self, Doc, Hook, Layout};
use crate::output;

/// Gemini CLI's profile.
pub struct Gemini;

const EVENTS: &[HookEvent] = &[
    HookEvent {
        command: "session-start",
        name: "SessionStart",
        action: Action::Start,
    },
    HookEvent {
        command: "user-prompt-submit",
        name: "BeforeAgent",
        action: Action::Deliver(Boundary::Turn),
    },
    HookEvent {
        command: "post-tool-use",
        name: "AfterTool",
        action: Action::Deliver(Boundary::Tool),
    },
    HookEvent {
        command: "stop",
        name: "AfterAgent",
        action: Action::Stop,
    },
    HookEvent {
        command: "session-end",
        name: "SessionEnd",
        action: Action::End,
    },
];

const BUDGET: usize = 9_500;

/// Milliseconds Gemini gives each hook.
const HOOK_TIMEOUT_MS: u64 = 10_000;

const SERVER: &str = "hermes";

impl Agent for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn events(&self) -> &'static [HookEvent] {
        EVENTS
    }

    fn executables(&self) -> &'static [&'static str] {
        &["gemini"]
    }

    fn budget(&self) -> usize {
        BUDGET
    }

    fn session_field(&self) -> &'static str {
        "session_id"
    }

    fn subagent_field(&self) -> Option<&'static str> {
        None
    }

    fn start(&self, input: &Value) -> Start {
        match input.get("source").and_then(Value::as_str) {
            Some("resume") => Start::Resume,
            Some("startup") | None => Start::Fresh,
            Some(_) => Start::Other,
        }
    }

    fn stop_active(&self, input: &Value) -> bool {
        input.get("stop_hook_active").and_then(Value::as_bool) == Some(true)
    }

    fn answer(&self, event: &HookEvent, text: &str) -> Value {
        match event.action {
            Action::Stop => json!({"decision": "deny", "reason": text}),
            _ => json!({"hookSpecificOutput": {
                "hookEventName": event.name,
                "additionalContext": text,
            }}),
        }
    }

    fn install(&self, options: &InstallOptions) -> anyhow::Result<Code> {
        let program = install::program(options.absolute)?;
        let quoted = install::quoted(&program)?;
        let hooks: Vec<Hook<'_>> = EVENTS
            .iter()
            .map(|e| {
                let command = format!("{quoted} hook {} --agent gemini", e.command);
                Hook {
                    event: e.name,
                    subcommand: e.command,
                    entry: install::command_entry(
                        "command",
                        &command,
                        &[
                            ("name", Doc::string(format!("hermes-{}", e.command))),
                            ("timeout", install::number(HOOK_TIMEOUT_MS)),
                        ],
                    ),
                    command,
                    // A regular expression for tool events: every tool.
                    matcher: matches!(e.action, Action::Deliver(Boundary::Tool)).then_some(".*"),
                }
            })
            .collect();
        let path = options.root()?.join(".gemini").join("settings.json");
        let mut file = install::files(&[path], options.print)?.remove(0);
        let servers = install::object_at(&mut file.doc, "mcpServers", &file.path)?;
        install::upsert_server(servers, SERVER, &program, &["mcp"], None, &file.path)?;
        let hooks_obj = install::object_at(&mut file.doc, "hooks", &file.path)?;
        install::upsert_hooks(hooks_obj, &hooks, Layout::Groups, "command", &file.path)?;
        if options.print {
            return install::print_files(&[&file], "");
        }
        file.write()?;
        let mut text = format!(
            "registered the MCP server `{SERVER}` and the hooks SessionStart, BeforeAgent, AfterTool, AfterAgent, SessionEnd in {}\nstart gemini in {}\n",
            file.path.display(),
            options.project.display(),
        );
        text.push_str(install::path_note(options.absolute));
        output::print(&text)?;
        Ok(Code::Ok)
    }
}
