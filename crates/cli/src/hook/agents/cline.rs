//! Cline. Every fact here is from its hook reference,
//! <https://docs.cline.bot/features/hooks/hook-reference> (`docs/features/hooks/hook-reference.mdx`
//! in <https://github.com/cline/cline>), its hooks page,
//! <https://docs.cline.bot/customization/hooks>, and its CLI's MCP page,
//! <https://docs.cline.bot/cline-cli/mcp-servers>:
//!
//! - a hook is an executable **script named after its event** (`TaskStart`, `TaskResume`,
//!   `UserPromptSubmit`, `PostToolUse`, …, no extension) in `<workspace>/.clinerules/hooks/`
//!   or, for every project, `~/Documents/Cline/Rules/Hooks/` (the reference's "Hook Discovery";
//!   the overview page says `~/Documents/Cline/Hooks/`);
//! - every input is camelCase: `clineVersion`, `hookName`, `timestamp`, `taskId`,
//!   `workspaceRoots`, `userId`, and one object named after the event (`postToolUse`, …);
//! - the answer is the last JSON object on stdout: `{"cancel": false, "contextModification":
//!   …}` (at most 50 KB), injected into the conversation for the model's next request — after
//!   a tool (`PostToolUse`) and with a prompt (`UserPromptSubmit`); no JSON: the action
//!   proceeds;
//! - **a non-zero exit, invalid JSON or a timeout blocks the action**: a failing hermes
//!   therefore prints `{"cancel": false}` and exits 0, its one `hermes:` line on stderr;
//! - a task starts (`TaskStart`), resumes (`TaskResume`), is cancelled (`TaskCancel`, and can
//!   be resumed) or completes (`TaskComplete`, and the user may go on with it): no event ends
//!   a conversation for good, so its session ends by idleness and its results wait;
//! - the CLI's MCP servers are `mcpServers` of `.cline/mcp.json` (`{command, args, type:
//!   "stdio"}`); the VS Code extension keeps them in its MCP settings.

use std::path::{Path, PathBuf};

use formatter::Boundary;
use serde_json::{Value, json};

use super::{Action, Agent, HookEvent, InstallOptions, Start};
use crate::exit::{Code, fail};
use crate::hook::install;
use crate::output;

/// Cline's profile.
pub struct Cline;

const EVENTS: &[HookEvent] = &[
    HookEvent {
        command: "session-start",
        name: "TaskStart",
        action: Action::Start,
    },
    HookEvent {
        command: "session-start",
        name: "TaskResume",
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
];

/// Cline keeps 50 KB of `contextModification`; in characters, with room for wide ones.
const BUDGET: usize = 12_000;

const SERVER: &str = "hermes";

impl Agent for Cline {
    fn name(&self) -> &'static str {
        "cline"
    }

    fn events(&self) -> &'static [HookEvent] {
        EVENTS
    }

    fn executables(&self) -> &'static [&'static str] {
        &["cline"]
    }

    fn budget(&self) -> usize {
        BUDGET
    }

    fn session_field(&self) -> &'static str {
        "taskId"
    }

    fn subagent_field(&self) -> Option<&'static str> {
        None
    }

    fn event_field(&self) -> &'static str {
        "hookName"
    }

    fn start(&self, input: &Value) -> Start {
        match input.get("hookName").and_then(Value::as_str) {
            Some("TaskResume") => Start::Resume,
            _ => Start::Fresh,
        }
    }

    fn stop_active(&self, _input: &Value) -> bool {
        false
    }

    fn answer(&self, _event: &HookEvent, text: &str) -> Value {
        json!({"cancel": false, "contextModification": text})
    }

    fn fail_open(&self) -> Option<Value> {
        Some(json!({"cancel": false}))
    }

    fn install(&self, options: &InstallOptions) -> anyhow::Result<Code> {
        let program = install::program(options.absolute)?;
        let quoted = install::quoted(&program)?;
        let root = options.root()?;
        let dir = if options.user {
            root.join("Documents")
                .join("Cline")
                .join("Rules")
                .join("Hooks")
        } else {
            root.join(".clinerules").join("hooks")
        };
        let scripts: Vec<(PathBuf, &str, String)> = EVENTS
            .iter()
            .map(|e| {
                let body = format!(
                    "#!/bin/sh\n# Written by `hermes hook install cline`: hands hermes' background results to Cline.\nexec {quoted} hook {} --agent cline\n",
                    e.command
                );
                (dir.join(e.name), e.command, body)
            })
            .collect();
        let mut mcp =
            install::files(&[root.join(".cline").join("mcp.json")], options.print)?.remove(0);
        let servers = install::object_at(&mut mcp.doc, "mcpServers", &mcp.path)?;
        install::upsert_server(
            servers,
            SERVER,
            &program,
            &["mcp"],
            Some("stdio"),
            &mcp.path,
        )?;
        if options.print {
            let mut text = format!("# {}\n{}", mcp.path.display(), mcp.text()?);
            for (path, _, body) in &scripts {
                text.push_str(&format!("# {} (executable)\n{body}", path.display()));
            }
            output::print(&text)?;
            return Ok(Code::Ok);
        }
        // A script of the user's under one of these names cannot be merged: refuse before
        // writing anything.
        let mut current = Vec::new();
        for (path, subcommand, _) in &scripts {
            let text = install::read_text(path)?;
            if !text.is_empty() && !is_hermes_script(&text, subcommand) {
                return Err(fail(
                    Code::Usage,
                    format!(
                        "{}: a hook script of yours is already there; hermes cannot merge into it and wrote nothing (run `hermes hook {subcommand} --agent cline` from it, or use hermes hook install cline --print)",
                        path.display()
                    ),
                ));
            }
            current.push(text);
        }
        mcp.write()?;
        for ((path, _, body), text) in scripts.iter().zip(&current) {
            if text != body {
                install::write_text(path, body)?;
            }
            make_executable(path)?;
        }
        let mut text = format!(
            "registered the MCP server `{SERVER}` in {} and the hook scripts TaskStart, TaskResume, UserPromptSubmit, PostToolUse in {}\nturn hooks on in Cline's settings if they are off (the VS Code extension takes its MCP servers from its MCP settings: add `{quoted} mcp` there); Cline has no hook that ends a conversation, so its session ends when idle and its results wait for a resume\n",
            mcp.path.display(),
            dir.display(),
        );
        text.push_str(install::path_note(options.absolute));
        output::print(&text)?;
        Ok(Code::Ok)
    }
}

/// Whether the script `text` is hermes' hook for `subcommand` (a line running it).
fn is_hermes_script(text: &str, subcommand: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        let line = line.strip_prefix("exec ").unwrap_or(line);
        install::is_hermes_hook(line, subcommand)
    })
}

fn make_executable(path: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}
