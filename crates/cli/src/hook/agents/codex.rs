//! Codex CLI. Its hooks are Claude-shaped; every fact here is from its hooks page,
//! <https://developers.openai.com/codex/hooks>, the input and output schemas it publishes
//! (`codex-rs/hooks/schema/generated/*.schema.json` in <https://github.com/openai/codex>) and
//! its MCP page, <https://developers.openai.com/codex/mcp>:
//!
//! - hooks live in `hooks.json` (or an inline `[hooks]` table of `config.toml`) beside a
//!   config layer: `<repo>/.codex/hooks.json`, `~/.codex/hooks.json`; the shape is Claude's
//!   (event → groups → `{type: "command", command, timeout}`, the timeout in seconds); hooks
//!   run only in a project the user trusts, and on older releases only with
//!   `[features] codex_hooks = true`;
//! - the events are `SessionStart` (`source` `startup`|`resume`|`clear`), `UserPromptSubmit`,
//!   `PreToolUse`, `PermissionRequest`, `PostToolUse`, `Stop` (`stop_hook_active`), and the
//!   compaction ones; there is **no `SessionEnd`**: a Codex session ends by idleness;
//! - every input has `session_id`, `turn_id`, `cwd`, `hook_event_name`, `model`,
//!   `transcript_path`; `hookSpecificOutput.additionalContext` of `SessionStart`,
//!   `UserPromptSubmit` and `PostToolUse` is added to the model's context; `Stop` answers
//!   `{"decision":"block","reason":…}` to keep going; exit 2 blocks, other codes are errors
//!   Codex reports and goes on;
//! - MCP servers are `[mcp_servers.NAME]` tables (`command`, `args`, `env`) of `config.toml`.
//!
//! The injected context is small: Codex keeps far less of it than Claude Code (about 2,500
//! tokens, per issue 20's survey; the page names no number), so hermes fits answers to 2,500
//! characters and a long result is shortened with the way to read all of it.

use formatter::Boundary;
use serde_json::{Value, json};

use super::{Action, Agent, HookEvent, InstallOptions, Start};
use crate::exit::Code;
use crate::hook::install::{self, Hook, Layout};
use crate::output;

/// Codex CLI's profile.
pub struct Codex;

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
        command: "stop",
        name: "Stop",
        action: Action::Stop,
    },
];

/// Characters of one answer (see the module's documentation).
const BUDGET: usize = 2_500;

/// Seconds Codex gives each hook.
const HOOK_TIMEOUT: u64 = 10;

const SERVER: &str = "hermes";

impl Agent for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn events(&self) -> &'static [HookEvent] {
        EVENTS
    }

    fn executables(&self) -> &'static [&'static str] {
        &["codex"]
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
                let command = format!("{quoted} hook {} --agent codex", e.command);
                Hook {
                    event: e.name,
                    subcommand: e.command,
                    entry: install::command_entry(
                        "command",
                        &command,
                        &[("timeout", install::number(HOOK_TIMEOUT))],
                    ),
                    command,
                    matcher: None,
                }
            })
            .collect();
        let dir = options.root()?.join(".codex");
        let (hooks_path, config_path) = (dir.join("hooks.json"), dir.join("config.toml"));
        let mut file = install::files(&[hooks_path], options.print)?.remove(0);
        let hooks_obj = install::object_at(&mut file.doc, "hooks", &file.path)?;
        install::upsert_hooks(hooks_obj, &hooks, Layout::Groups, "command", &file.path)?;
        let config_text = if options.print {
            String::new()
        } else {
            install::read_text(&config_path)?
        };
        let config = with_server(&config_text, &program, &config_path)?;
        if options.print {
            output::print(&format!(
                "# {}\n{config}# {}\n{}",
                config_path.display(),
                file.path.display(),
                file.text()?
            ))?;
            return Ok(Code::Ok);
        }
        if config != config_text {
            install::write_text(&config_path, &config)?;
        }
        file.write()?;
        let mut text = format!(
            "registered the MCP server `{SERVER}` in {} and the hooks SessionStart, UserPromptSubmit, PostToolUse, Stop in {}\ntrust the project when codex asks, so its hooks run (older codex releases also need [features] codex_hooks = true); Codex has no session-end hook, so a conversation's session ends when idle and its results wait for a resume\n",
            config_path.display(),
            file.path.display(),
        );
        text.push_str(install::path_note(options.absolute));
        output::print(&text)?;
        Ok(Code::Ok)
    }
}

/// `text` (a `config.toml`) with `[mcp_servers.hermes]` running `program mcp`; everything
/// else, comments and layout included, as it was.
fn with_server(text: &str, program: &str, path: &std::path::Path) -> anyhow::Result<String> {
    let refuse = |key: &str, why: &str| install::refuse(path, key, why);
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        refuse("the file", &format!("is not TOML ({})", e.message()))
    })?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or_else(|| refuse("mcp_servers", "is not a table"))?;
    let entry = servers
        .entry(SERVER)
        .or_insert(toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_like_mut()
        .ok_or_else(|| refuse("mcp_servers.hermes", "is not a table"))?;
    let same_command = entry.get("command").and_then(|v| v.as_str()) == Some(program);
    if !same_command {
        entry.insert("command", toml_edit::value(program));
    }
    let same_args = entry
        .get("args")
        .and_then(|v| v.as_array())
        .is_some_and(|a| a.len() == 1 && a.get(0).and_then(|v| v.as_str()) == Some("mcp"));
    if !same_args {
        let mut args = toml_edit::Array::new();
        args.push("mcp");
        entry.insert("args", toml_edit::value(args));
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_table_is_added_once_and_the_users_config_stays() {
        let path = std::path::Path::new("/p/.codex/config.toml");
        let user = "# mine\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n";
        let once = with_server(user, "hermes", path).expect("merges");
        assert!(once.starts_with(user), "{once}");
        assert!(
            once.contains("[mcp_servers.hermes]\ncommand = \"hermes\"\nargs = [\"mcp\"]"),
            "{once}"
        );
        assert_eq!(with_server(&once, "hermes", path).expect("merges"), once);
        let moved = with_server(&once, "/new/hermes", path).expect("merges");
        assert!(moved.contains("command = \"/new/hermes\""), "{moved}");
        assert!(with_server("mcp_servers = 3", "hermes", path).is_err());
        assert!(with_server("[[x", "hermes", path).is_err());
    }
}
