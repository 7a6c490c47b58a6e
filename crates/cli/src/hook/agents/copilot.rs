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

use serde_json::{Value, json};

use super::{Action, Agent, HookEvent, InstallOptions, Start};
use crate::exit::Code;
use crate::hook::install::{self, Doc, Hook, Layout};
use crate::output;

/// GitHub Copilot CLI's profile.
pub struct Copilot;

const EVENTS: &[HookEvent] = &[
    HookEvent {
        command: "session-start",
        name: "sessionStart",
        action: Action::Start,
    },
    HookEvent {
        command: "stop",
        name: "agentStop",
        action: Action::Stop,
    },
    HookEvent {
        command: "session-end",
        name: "sessionEnd",
        action: Action::End,
    },
];

const BUDGET: usize = 9_500;

/// Seconds Copilot gives each hook.
const HOOK_TIMEOUT: u64 = 10;

const SERVER: &str = "hermes";

impl Agent for Copilot {
    fn name(&self) -> &'static str {
        "copilot"
    }

    fn events(&self) -> &'static [HookEvent] {
        EVENTS
    }

    fn executables(&self) -> &'static [&'static str] {
        &["copilot"]
    }

    fn budget(&self) -> usize {
        BUDGET
    }

    fn session_field(&self) -> &'static str {
        "sessionId"
    }

    fn subagent_field(&self) -> Option<&'static str> {
        None
    }

    fn start(&self, input: &Value) -> Start {
        match input.get("source").and_then(Value::as_str) {
            Some("resume") => Start::Resume,
            Some("startup" | "new") | None => Start::Fresh,
            Some(_) => Start::Other,
        }
    }

    fn stop_active(&self, _input: &Value) -> bool {
        false
    }

    fn answer(&self, _event: &HookEvent, text: &str) -> Value {
        json!({"decision": "block", "reason": text})
    }

    fn install(&self, options: &InstallOptions) -> anyhow::Result<Code> {
        let program = install::program(options.absolute)?;
        let quoted = install::quoted(&program)?;
        let hooks: Vec<Hook<'_>> = EVENTS
            .iter()
            .map(|e| {
                let command = format!("{quoted} hook {} --agent copilot", e.command);
                Hook {
                    event: e.name,
                    subcommand: e.command,
                    entry: install::command_entry(
                        "bash",
                        &command,
                        &[("timeoutSec", install::number(HOOK_TIMEOUT))],
                    ),
                    command,
                    matcher: None,
                }
            })
            .collect();
        let mcp_path = if options.user {
            options.root()?.join(".copilot").join("mcp-config.json")
        } else {
            options.project.join(".github").join("mcp.json")
        };
        // Hooks are a repository's: `--user` moves only the server.
        let hooks_path = options
            .project
            .join(".github")
            .join("hooks")
            .join("hermes.json");
        let mut files = install::files(&[mcp_path, hooks_path], options.print)?;
        let (mcp, hooks_file) = files.split_at_mut(1);
        let (mcp, hooks_file) = (&mut mcp[0], &mut hooks_file[0]);
        let servers = install::object_at(&mut mcp.doc, "mcpServers", &mcp.path)?;
        let entry = install::upsert_server(
            servers,
            SERVER,
            &program,
            &["mcp"],
            Some("stdio"),
            &mcp.path,
        )?;
        if entry.get("tools").is_none() {
            entry.set("tools", Doc::Array(vec![Doc::string("*")]));
        }
        if hooks_file.doc.get("version").is_none() {
            hooks_file.doc.set("version", install::number(1));
        }
        let hooks_obj = install::object_at(&mut hooks_file.doc, "hooks", &hooks_file.path)?;
        install::upsert_hooks(hooks_obj, &hooks, Layout::Flat, "bash", &hooks_file.path)?;
        if options.print {
            return install::print_files(&[mcp, hooks_file], "");
        }
        mcp.write()?;
        hooks_file.write()?;
        let mut text = format!(
            "registered the MCP server `{SERVER}` in {} and the hooks sessionStart, agentStop, sessionEnd in {}\nCopilot reads no hook's answer after a tool call or a prompt, so results arrive when the agent finishes a turn (agentStop), inject ones too\n",
            mcp.path.display(),
            hooks_file.path.display(),
        );
        text.push_str(install::path_note(options.absolute));
        output::print(&text)?;
        Ok(Code::Ok)
    }
}
