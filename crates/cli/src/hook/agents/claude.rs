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

use formatter::Boundary;
use serde_json::{Value, json};

use super::{Action, Agent, HookEvent, InstallOptions, Start};
use crate::exit::Code;
use crate::hook::install::{self, Hook, Layout};
use crate::output;

/// Claude Code's profile.
pub struct Claude;

/// Its hook events.
const EVENTS: &[HookEvent] = &[
    HookEvent {
        command: "session-start",
        name: "SessionStart",
        action: Action::Start,
    },
    HookEvent {
        command: "user-prompt-submit",
        name: "UserPromptSubmit",
        action: Action::Deliver(Boundary::Turn),
    },
    HookEvent {
        command: "post-tool-use",
        name: "PostToolUse",
        action: Action::Deliver(Boundary::Tool),
    },
    HookEvent {
        command: "post-tool-use-failure",
        name: "PostToolUseFailure",
        action: Action::Deliver(Boundary::Tool),
    },
    HookEvent {
        command: "stop",
        name: "Stop",
        action: Action::Stop,
    },
    HookEvent {
        command: "session-end",
        name: "SessionEnd",
        action: Action::End,
    },
];

/// Claude keeps 10,000 characters of `additionalContext`; hermes stays clear of the edge.
const BUDGET: usize = 9_500;

/// Seconds Claude gives each hook before it gives up on it.
const HOOK_TIMEOUT: u64 = 10;

/// The name the MCP server is registered under.
const SERVER: &str = "hermes";

impl Agent for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn events(&self) -> &'static [HookEvent] {
        EVENTS
    }

    fn executables(&self) -> &'static [&'static str] {
        &["claude"]
    }

    fn budget(&self) -> usize {
        BUDGET
    }

    fn session_field(&self) -> &'static str {
        "session_id"
    }

    fn subagent_field(&self) -> Option<&'static str> {
        Some("agent_id")
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
            Action::Stop => json!({"decision": "block", "reason": text}),
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
                let command = format!("{quoted} hook {} --agent claude", e.command);
                Hook {
                    event: e.name,
                    subcommand: e.command,
                    entry: install::command_entry(
                        "command",
                        &command,
                        &[("timeout", install::number(HOOK_TIMEOUT))],
                    ),
                    command,
                    matcher: matches!(e.action, Action::Deliver(Boundary::Tool)).then_some("*"),
                }
            })
            .collect();
        let root = options.root()?;
        let settings_name = if options.local {
            "settings.local.json"
        } else {
            "settings.json"
        };
        let mcp_path = if options.user {
            root.join(".claude.json")
        } else {
            root.join(".mcp.json")
        };
        let paths = [mcp_path, root.join(".claude").join(settings_name)];
        let [mut mcp, mut settings]: [install::File; 2] = install::files(&paths, options.print)?
            .try_into()
            .map_err(|_| anyhow::anyhow!("internal error: two files"))?;
        let servers = install::object_at(&mut mcp.doc, "mcpServers", &mcp.path)?;
        install::upsert_server(
            servers,
            SERVER,
            &program,
            &["mcp"],
            Some("stdio"),
            &mcp.path,
        )?;
        if !options.user {
            install::ensure_listed(
                &mut settings.doc,
                "enabledMcpjsonServers",
                SERVER,
                &settings.path,
            )?;
        }
        let hooks_obj = install::object_at(&mut settings.doc, "hooks", &settings.path)?;
        install::upsert_hooks(hooks_obj, &hooks, Layout::Groups, "command", &settings.path)?;
        if options.print {
            return install::print_files(
                &[&mcp, &settings],
                &format!("# (or: claude mcp add {SERVER} -- {quoted} mcp)\n"),
            );
        }
        mcp.write()?;
        settings.write()?;
        let names: Vec<&str> = EVENTS.iter().map(|e| e.name).collect();
        let mut text = format!(
            "registered the MCP server `{SERVER}` in {} and the hooks {} in {}\nstart claude in {} and approve the `{SERVER}` server if asked\n",
            mcp.path.display(),
            names.join(", "),
            settings.path.display(),
            options.project.display(),
        );
        text.push_str(install::path_note(options.absolute));
        output::print(&text)?;
        Ok(Code::Ok)
    }
}
