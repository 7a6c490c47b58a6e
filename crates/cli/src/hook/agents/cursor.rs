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

use serde_json::{Value, json};

use super::{Action, Agent, HookEvent, InstallOptions, Start};
use crate::exit::Code;
use crate::hook::install::{self, Hook, Layout};
use crate::output;

/// Cursor's profile.
pub struct Cursor;

const EVENTS: &[HookEvent] = &[
    HookEvent {
        command: "session-start",
        name: "sessionStart",
        action: Action::Start,
    },
    HookEvent {
        command: "stop",
        name: "stop",
        action: Action::Stop,
    },
    HookEvent {
        command: "session-end",
        name: "sessionEnd",
        action: Action::End,
    },
];

const BUDGET: usize = 9_500;

const SERVER: &str = "hermes";

impl Agent for Cursor {
    fn name(&self) -> &'static str {
        "cursor"
    }

    fn events(&self) -> &'static [HookEvent] {
        EVENTS
    }

    fn executables(&self) -> &'static [&'static str] {
        &["cursor-agent", "cursor", "Cursor"]
    }

    fn budget(&self) -> usize {
        BUDGET
    }

    fn session_field(&self) -> &'static str {
        "conversation_id"
    }

    fn subagent_field(&self) -> Option<&'static str> {
        None
    }

    fn start(&self, _input: &Value) -> Start {
        Start::Fresh
    }

    fn stop_active(&self, input: &Value) -> bool {
        input
            .get("loop_count")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 0)
    }

    fn answer(&self, _event: &HookEvent, text: &str) -> Value {
        json!({ "followup_message": text })
    }

    fn install(&self, options: &InstallOptions) -> anyhow::Result<Code> {
        let program = install::program(options.absolute)?;
        let quoted = install::quoted(&program)?;
        let hooks: Vec<Hook<'_>> = EVENTS
            .iter()
            .map(|e| {
                let command = format!("{quoted} hook {} --agent cursor", e.command);
                Hook {
                    event: e.name,
                    subcommand: e.command,
                    entry: {
                        let mut entry = install::Doc::object();
                        entry.set("command", install::Doc::string(command.clone()));
                        entry
                    },
                    command,
                    matcher: None,
                }
            })
            .collect();
        let dir = options.root()?.join(".cursor");
        let mut files = install::files(
            &[dir.join("mcp.json"), dir.join("hooks.json")],
            options.print,
        )?;
        let (mcp, hooks_file) = files.split_at_mut(1);
        let (mcp, hooks_file) = (&mut mcp[0], &mut hooks_file[0]);
        let servers = install::object_at(&mut mcp.doc, "mcpServers", &mcp.path)?;
        install::upsert_server(servers, SERVER, &program, &["mcp"], None, &mcp.path)?;
        if hooks_file.doc.get("version").is_none() {
            hooks_file.doc.set("version", install::number(1));
        }
        let hooks_obj = install::object_at(&mut hooks_file.doc, "hooks", &hooks_file.path)?;
        install::upsert_hooks(hooks_obj, &hooks, Layout::Flat, "command", &hooks_file.path)?;
        if options.print {
            return install::print_files(&[mcp, hooks_file], "");
        }
        mcp.write()?;
        hooks_file.write()?;
        let mut text = format!(
            "registered the MCP server `{SERVER}` in {} and the hooks sessionStart, stop, sessionEnd in {}\nenable the `{SERVER}` server in Cursor's MCP settings; Cursor's hooks cannot add context after a tool call, so results arrive when the agent stops (as a follow-up message), inject ones too\n",
            mcp.path.display(),
            hooks_file.path.display(),
        );
        text.push_str(install::path_note(options.absolute));
        output::print(&text)?;
        Ok(Code::Ok)
    }
}
