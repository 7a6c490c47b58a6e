//! Cline's CLI (`cline`, pinned in `tests/agents/package.json`; a native binary with its SDK,
//! `@cline/core` and `@cline/shared`, installed beside it) with hermes, installed as a user
//! would (`hermes hook install cline`), run headless (`cline PROMPT`, act mode, tools
//! approved) against the scripted chat-completions server. What is pinned here, and where:
//!
//! - `cline auth -p openai -k KEY -m MODEL -b URL` configures an OpenAI-compatible provider
//!   in `~/.cline/data/settings/providers.json` (`cline auth --help`);
//! - its MCP servers are the home's `~/.cline/data/settings/cline_mcp_settings.json`
//!   (`@cline/shared`'s `dist/storage/index.js`), offered as `hermes__delegate_task`;
//! - only `PostToolUse` is awaited: its `contextModification` reaches the model as a user
//!   message `<hook_context source="PostToolUse" …>` after the tool's result (`@cline/core`'s
//!   `dist/index.js`; what the model is sent, asserted below);
//! - act mode offers `spawn_agent` (`@cline/core`'s `dist/index.js`: `enableSpawnAgent` of the
//!   `act` tools): a subagent whose hooks carry `parent_agent_id`, its `TaskStart` under a
//!   task id of its own; it is driven by the same model server, told apart by its system
//!   prompt.

use std::path::Path;
use std::sync::Arc;

use hermes_testkit::model::{ModelServer, Reply, Turn, Wire, occurrences, text_of};
use serde_json::{Value, json};

use super::Machine;
use super::copilot::{
    assert_big_result_within_budget, big_result_script, dispatch_args, dispatched_id,
    wait_ready_command,
};

/// Environment variables added to a command of the test's.
type Env<'a> = &'a [(&'a str, &'a Path)];

/// `cline auth` for `server`, as a user would, with `env` added.
fn auth(machine: &Machine, server: &ModelServer, env: Env<'_>) {
    let out = machine
        .command("cline")
        .envs(env.iter().copied())
        .args([
            "auth",
            "-p",
            "openai",
            "-k",
            "test-key",
            "-m",
            "test-model",
            "-b",
        ])
        .arg(format!("{}/v1", server.base_url()))
        .output()
        .expect("cline runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cline PROMPT` in the project, with `env` added.
fn cline(machine: &Machine, prompt: &str, env: Env<'_>) {
    let out = machine
        .command("cline")
        .envs(env.iter().copied())
        .arg(prompt)
        .output()
        .expect("cline runs");
    assert!(
        out.status.success(),
        "cline: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `hermes hook install cline` (and `extra`) in the project, with `env` added.
fn install(machine: &Machine, extra: &[&str], env: Env<'_>) -> String {
    machine.hook_install("cline", extra, env)
}

/// The offered tool whose name ends with `suffix`.
fn offered(turn: &Turn<'_>, suffix: &str) -> String {
    turn.tools
        .iter()
        .find(|t| t.ends_with(suffix))
        .cloned()
        .unwrap_or_else(|| suffix.to_owned())
}

/// Dispatch `name` (`after_turn`), wait in the shell until it is ready, then say `done`.
fn dispatch_then_wait(name: &'static str) -> hermes_testkit::model::Script {
    Arc::new(move |turn: &Turn<'_>| {
        let called = turn.request.body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        let tool = |suffix: &str| offered(turn, suffix);
        if !called {
            return Reply::Call {
                tool: tool("delegate_task"),
                args: dispatch_args(name, "after_turn"),
            };
        }
        match dispatched_id(turn) {
            Some(id) if turn.after_tool => Reply::Call {
                tool: tool("run_commands"),
                args: json!({"commands": [wait_ready_command(&id)]}),
            },
            _ => Reply::Text("done".into()),
        }
    })
}

/// The texts of the last request's messages of `role`.
fn texts(body: &Value, role: &str) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == role)
                .map(|m| text_of(&m["content"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Installed into a project, Cline reads hermes' MCP server from the home and offers its
/// tools; the task's hooks bind the conversation (no warning in the dispatch answer); the
/// result reaches the model after the next tool call, through `PostToolUse`, exactly once.
#[test]
fn installed_the_server_connects_and_the_tool_hook_delivers_once() {
    let machine = Machine::new();
    let printed = install(&machine, &[], &[]);
    assert!(printed.contains("cline_mcp_settings.json"), "{printed}");
    assert!(
        machine
            .home()
            .join(".cline/data/settings/cline_mcp_settings.json")
            .is_file()
    );
    assert!(
        machine
            .project()
            .join(".clinerules/hooks/PostToolUse")
            .is_file()
    );
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("CLINE"));
    auth(&machine, &server, &[]);
    cline(&machine, "dispatch the check", &[]);
    let turns = server.turns();
    let first = &turns[0].body;
    assert!(
        occurrences(&first["tools"], "hermes__delegate_task") == 1,
        "{}",
        first["tools"]
    );
    let last = &turns.last().expect("a request").body;
    let results = texts(last, "tool");
    assert!(
        results[0].contains("conv_") && !results[0].contains("warning"),
        "the dispatch landed in Cline's task: {}",
        results[0]
    );
    let context: Vec<String> = texts(last, "user")
        .into_iter()
        .filter(|t| t.contains("source=\"PostToolUse\""))
        .collect();
    assert!(
        context.iter().any(|t| t.contains("CLINE-42")),
        "after the tool: {context:?}"
    );
    assert_eq!(occurrences(last, "CLINE-42"), 1, "{last}");
}

/// `--user` puts the hook scripts in `~/.cline/hooks/`, where Cline looks for every project,
/// and they deliver.
#[test]
fn a_user_install_delivers_in_any_project() {
    let machine = Machine::new();
    install(&machine, &["--user"], &[]);
    assert!(machine.home().join(".cline/hooks/PostToolUse").is_file());
    assert!(!machine.project().join(".clinerules").exists());
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("USER"));
    auth(&machine, &server, &[]);
    cline(&machine, "dispatch the check", &[]);
    let last = &server.turns().pop().expect("a request").body;
    assert_eq!(occurrences(last, "USER-42"), 1, "{last}");
}

/// A 3,000-line result reaches the model within Cline's budget: at the tool boundary where it
/// and a small one are ready together, the small one is delivered whole and the big one waits;
/// at the next, it comes alone, shortened to its head and tail with the way to read all of it.
/// Nothing is lost or said twice.
#[test]
fn a_3000_line_result_arrives_within_the_budget_once() {
    let machine = Machine::new();
    install(&machine, &[], &[]);
    let server = ModelServer::with_script(
        Wire::Chat,
        big_result_script(
            machine.home().join("gate"),
            |turn| offered(turn, "delegate_task"),
            |turn, command| Reply::Call {
                tool: offered(turn, "run_commands"),
                args: json!({"commands": [command]}),
            },
        ),
    );
    auth(&machine, &server, &[]);
    cline(&machine, "dispatch the checks", &[]);
    let last = &server.turns().pop().expect("a request").body;
    let budget = hermes_agents::find("cline").expect("a profile").budget;
    assert_big_result_within_budget(&machine, last, budget);
}

/// With `CLINE_DIR` set, `--user` puts the hook scripts in its `hooks/`, and with
/// `CLINE_MCP_SETTINGS_PATH` set too, the server in that file (where Cline reads them then),
/// nothing in `~/.cline`; Cline offers hermes' tools and its hook delivers.
#[test]
fn a_user_install_follows_cline_dir_and_its_mcp_settings_path() {
    let machine = Machine::new();
    let dir = tempfile::tempdir().expect("a directory");
    let mcp = tempfile::tempdir().expect("a directory");
    let mcp_file = mcp.path().join("servers.json");
    let env = [
        ("CLINE_DIR", dir.path()),
        ("CLINE_MCP_SETTINGS_PATH", mcp_file.as_path()),
    ];
    install(&machine, &["--user"], &env);
    assert!(dir.path().join("hooks/PostToolUse").is_file());
    let servers = std::fs::read_to_string(&mcp_file).expect("the MCP settings");
    assert!(servers.contains("\"hermes\""), "{servers}");
    assert!(!machine.home().join(".cline").exists(), "not ~/.cline");
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("MOVED"));
    auth(&machine, &server, &env);
    cline(&machine, "dispatch the check", &env);
    let turns = server.turns();
    assert_eq!(
        occurrences(&turns[0].body["tools"], "hermes__delegate_task"),
        1,
        "{}",
        turns[0].body["tools"]
    );
    let last = &turns.last().expect("a request").body;
    assert_eq!(occurrences(last, "MOVED-42"), 1, "{last}");
}

/// Whether `body` is a request of the subagent the scenario spawns (its system prompt or
/// task says `SUBAGENT`).
fn of_subagent(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|m| {
        m.iter()
            .take(2)
            .any(|m| text_of(&m["content"]).contains("SUBAGENT"))
    })
}

/// A subagent's tool call (`spawn_agent`'s) takes nothing: the result, ready while the
/// subagent runs a command, waits for the main thread's own boundary (`PostToolUse` of
/// `spawn_agent`) and reaches the main conversation, once. The subagent's hooks bind no
/// conversation of their own either: afterwards hermes' MCP server still knows whose it is
/// and dispatches into the main one.
#[test]
fn a_subagents_tool_call_takes_nothing() {
    let machine = Machine::new();
    install(&machine, &[], &[]);
    let server = ModelServer::with_script(
        Wire::Chat,
        Arc::new(|turn: &Turn<'_>| {
            if of_subagent(&turn.request.body) {
                if turn.after_tool {
                    return Reply::Text("done".into());
                }
                let command = turn.last_user.lines().find(|l| l.starts_with("for i"));
                return Reply::Call {
                    tool: offered(turn, "run_commands"),
                    args: json!({"commands": [command.unwrap_or("false")]}),
                };
            }
            match (texts(&turn.request.body, "tool").len(), dispatched_id(turn)) {
                (0, _) => Reply::Call {
                    tool: offered(turn, "delegate_task"),
                    args: dispatch_args("SUB", "inject"),
                },
                (1, Some(id)) => Reply::Call {
                    tool: offered(turn, "spawn_agent"),
                    args: json!({
                        "systemPrompt": "SUBAGENT: run the command you are given.",
                        "task": format!("SUBAGENT\n{}", wait_ready_command(&id)),
                    }),
                },
                (2, _) => Reply::Call {
                    tool: offered(turn, "delegate_task"),
                    args: dispatch_args("AFTER", "inject"),
                },
                _ => Reply::Text("done".into()),
            }
        }),
    );
    auth(&machine, &server, &[]);
    cline(&machine, "dispatch the check", &[]);
    let turns: Vec<Value> = server.turns().into_iter().map(|t| t.body).collect();
    let (sub, main): (Vec<&Value>, Vec<&Value>) = turns.iter().partition(|t| of_subagent(t));
    assert!(sub.len() >= 2, "the subagent called a tool and went on");
    for t in &sub {
        assert_eq!(
            occurrences(t, "SUB-42"),
            0,
            "the subagent took nothing: {t}"
        );
    }
    let last = main.last().expect("the main thread");
    assert_eq!(occurrences(last, "SUB-42"), 1, "{last}");
    let results = texts(last, "tool");
    let session = |answer: &str| {
        let at = answer.find("conv_")?;
        answer[at..].split(['"', '\\']).next().map(str::to_owned)
    };
    assert!(
        results.len() == 3 && results[2].contains("delegation_id"),
        "dispatched after the subagent: {results:#?}"
    );
    assert_eq!(session(&results[2]), session(&results[0]), "{results:#?}");
}
