//! GitHub Copilot CLI (`@github/copilot`, pinned in `tests/agents/package.json`) with hermes,
//! installed as a user would (`hermes hook install copilot`), run headless (`copilot -p`)
//! against the scripted chat-completions server. What is pinned here, and where:
//!
//! - `COPILOT_OFFLINE=true` with `COPILOT_PROVIDER_BASE_URL` and `COPILOT_MODEL`: no GitHub
//!   login, no network but the provider; `COPILOT_AUTO_UPDATE=false` keeps the pinned version
//!   (`copilot help environment`); its package unpacks under `COPILOT_PKG_CACHE_HOME` (the
//!   loader in `@github/copilot-linux-x64/copilot`), shared by the tests;
//! - `--session-id UUID` names a new conversation, `--allow-all-tools` runs tools unasked
//!   (`copilot --help`); a project is trusted in `trustedFolders` of
//!   `~/.copilot/config.json` (its project MCP server is offered only then, asserted below);
//! - MCP tools are offered as `hermes-delegate_task`; `additionalContext` of
//!   `userPromptSubmitted` lands in the user message, of `postToolUse` after the tool's
//!   result; `agentStop`'s `reason` is the next prompt; a subagent's hooks carry
//!   `parentAgentId` (what the model is sent, asserted below).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use hermes_testkit::model::{
    ModelServer, Reply, Script, Turn, Wire, by_prompt, occurrences, text_of,
};
use serde_json::{Value, json};

use super::Machine;
use crate::common::wait_for;

/// The MCP tools' prefix, as Copilot names them to its model.
const TOOL: &str = "hermes-";

/// Environment variables added to a command of the test's.
type Env<'a> = &'a [(&'a str, &'a Path)];

/// `copilot -p PROMPT` on `machine` against `server`, as conversation `session`, in the
/// project, trusted unless `untrusted`, with `env` added.
fn copilot(
    machine: &Machine,
    server: &ModelServer,
    session: &str,
    prompt: &str,
    untrusted: bool,
    env: Env<'_>,
) -> Output {
    let mut c = command(machine, server, untrusted);
    c.envs(env.iter().copied())
        .args(["--session-id", session, "--allow-all-tools", "-p", prompt]);
    let out = c.output().expect("copilot runs");
    assert!(
        out.status.success(),
        "copilot: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `copilot` on `machine` against `server`, offline, in the project, trusted unless
/// `untrusted`.
pub(super) fn command(machine: &Machine, server: &ModelServer, untrusted: bool) -> Command {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("copilot-pkg");
    let mut c = machine.command("copilot");
    c.env("COPILOT_OFFLINE", "true")
        .env("COPILOT_AUTO_UPDATE", "false")
        .env("COPILOT_PKG_CACHE_HOME", cache)
        .env(
            "COPILOT_PROVIDER_BASE_URL",
            format!("{}/v1", server.base_url()),
        )
        .env("COPILOT_MODEL", "test-model");
    if !untrusted {
        // Where Copilot keeps the folders a user trusted: `trustedFolders` of
        // `~/.copilot/config.json` (not settings.json, which `copilot help config` suggests);
        // `--trust-folder` trusts for one run, but not with `--session-id`.
        let settings = machine.home().join(".copilot/config.json");
        std::fs::create_dir_all(settings.parent().expect("a directory")).expect("~/.copilot");
        let trusted = json!({"trustedFolders": [machine.project()]});
        std::fs::write(&settings, trusted.to_string()).expect("config.json");
    }
    c
}

/// `hermes hook install copilot` (and `extra`) in the project, as a user would, with `env`
/// added.
pub(super) fn install(machine: &Machine, extra: &[&str], env: Env<'_>) -> String {
    machine.hook_install("copilot", extra, env)
}

/// The names of the tools `body` offers the model.
fn offered(body: &Value) -> Vec<&str> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// Every text the model was sent, in order of the requests.
pub(super) fn sent(server: &ModelServer) -> Vec<Value> {
    server.turns().into_iter().map(|r| r.body).collect()
}

/// The delegation id (`deleg_` and 12 hex digits) when the last tool result of `turn`'s
/// conversation is a dispatch answer.
pub fn dispatched_id(turn: &Turn<'_>) -> Option<String> {
    let messages = turn.request.body["messages"].as_array()?;
    let text = text_of(&messages.iter().rev().find(|m| m["role"] == "tool")?["content"]);
    if !text.contains("host_pid") {
        return None;
    }
    text.match_indices("deleg_").find_map(|(at, _)| {
        let id = text.get(at..at + 18)?;
        id[6..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
            .then(|| id.to_owned())
    })
}

/// The shell command that waits (with a deadline) until delegation `id`'s result is ready.
pub fn wait_ready_command(id: &str) -> String {
    format!(
        "for i in $(seq 400); do hermes delegation status {id} --json | tr -d ' \\n' | grep -q '\"events\":\\[{{' && exit 0; sleep 0.05; done; exit 1"
    )
}

/// The arguments of a `delegate_task` whose child prints `NAME-42` (a text its command line
/// does not hold, so only the result carries it).
pub fn dispatch_args(name: &str, delivery: &str) -> Value {
    json!({
        "goal": "check",
        "command": ["sh", "-c", format!("echo {name}-$((6*7))")],
        "result_delivery": delivery,
    })
}

/// The text of the conversation's first user message.
fn first_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default()
}

/// The model of most scenarios: dispatch (`delivery`), then wait in the shell until the
/// result is ready (a tool call the result can follow), then say `done`; a prompt after that
/// (a stop hook's) is answered by [`by_prompt`].
fn dispatch_then_wait(name: &'static str, delivery: &'static str) -> Script {
    Arc::new(move |turn: &Turn<'_>| {
        let called = turn.request.body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if !called {
            return Reply::Call {
                tool: format!("{TOOL}delegate_task"),
                args: dispatch_args(name, delivery),
            };
        }
        match dispatched_id(turn) {
            Some(id) if turn.after_tool => Reply::Call {
                tool: "bash".into(),
                args: json!({"command": wait_ready_command(&id), "description": "wait"}),
            },
            _ => by_prompt(turn),
        }
    })
}

/// A fresh conversation id (Copilot takes a UUID).
pub(super) fn uuid(n: u8) -> String {
    format!("00000000-0000-4000-8000-0000000000{n:02x}")
}

/// Installed into a project, Copilot offers hermes' tools, its hooks bind the conversation
/// (the dispatch lands in Copilot's own session, with no warning), an `after_turn` result
/// waits past the tool call, and reaches the model when the agent would stop (`agentStop`),
/// exactly once.
#[test]
fn installed_its_hooks_bind_the_conversation_and_the_stop_hook_delivers_once() {
    let machine = Machine::new();
    let printed = install(&machine, &[], &[]);
    assert!(
        printed.contains("trustedFolders"),
        "folder trust is said: {printed}"
    );
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("STOP", "after_turn"));
    let session = uuid(1);
    copilot(
        &machine,
        &server,
        &session,
        "dispatch the check",
        false,
        &[],
    );
    let turns = sent(&server);
    let tools = offered(&turns[0]);
    assert!(tools.contains(&"hermes-delegate_task"), "{tools:?}");
    let last = turns.last().expect("a request");
    let results: Vec<String> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| text_of(&m["content"]))
        .collect();
    assert!(
        results[0].contains(&session) && !results[0].contains("warning"),
        "the dispatch landed in Copilot's own session: {}",
        results[0]
    );
    assert!(
        !results[1].contains("STOP-42"),
        "after_turn waits past the tool: {}",
        results[1]
    );
    assert_eq!(occurrences(last, "STOP-42"), 1, "{last}");
}

/// A result dispatched with `inject` reaches the model after a tool call, appended to that
/// tool's result by `postToolUse`, exactly once: the dispatch's own call when the child (an
/// `echo`) finished before its hook ran, else the next one.
#[test]
fn an_inject_result_arrives_after_a_tool_call_once() {
    let machine = Machine::new();
    install(&machine, &[], &[]);
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("INJECT", "inject"));
    copilot(
        &machine,
        &server,
        &uuid(2),
        "dispatch the check",
        false,
        &[],
    );
    let last = sent(&server).pop().expect("a request");
    let results: Vec<String> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| text_of(&m["content"]))
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    let carrying: Vec<&String> = results.iter().filter(|r| r.contains("INJECT-42")).collect();
    assert!(
        carrying.len() == 1 && carrying[0].contains("postToolUse"),
        "behind one tool's result, by postToolUse: {results:?}"
    );
    assert_eq!(occurrences(&last, "INJECT-42"), 1, "{last}");
}

/// A result that waits for the conversation (dispatched into it while no agent ran) comes
/// with the next prompt, through `userPromptSubmitted`, exactly once.
#[test]
fn a_waiting_result_comes_with_the_next_prompt_once() {
    let machine = Machine::new();
    install(&machine, &[], &[]);
    let session = uuid(3);
    let out = machine
        .command("hermes")
        .args(["delegate", "--session", &session, "--json", "--"])
        .args(["sh", "-c", "echo PROMPT-$((6*7))"])
        .output()
        .expect("hermes runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = serde_json::from_slice::<Value>(&out.stdout).expect("JSON")["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    wait_for(Duration::from_secs(20), "the result", || {
        let status = machine
            .hermes
            .json(&["delegation", "status", &id, "--json"]);
        status["events"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
            .then_some(())
    });
    let server = ModelServer::start(Wire::Chat);
    copilot(&machine, &server, &session, "SAY hello", false, &[]);
    let turns = sent(&server);
    let prompt = turns[0]["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    assert!(prompt.contains("PROMPT-42"), "with the prompt: {prompt}");
    let last = turns.last().expect("a request");
    assert_eq!(occurrences(last, "PROMPT-42"), 1, "{last}");
}

/// A subagent's tool call (the `task` tool) takes nothing: the result waits for the main
/// thread's own boundary (`postToolUse` of `task`) and reaches the main conversation, once.
/// Afterwards hermes' MCP server still dispatches into the main conversation (the subagent's
/// hooks bound none of their own).
#[test]
fn a_subagents_tool_call_takes_nothing() {
    let machine = Machine::new();
    install(&machine, &[], &[]);
    let server = ModelServer::with_script(
        Wire::Chat,
        Arc::new(|turn: &Turn<'_>| {
            let sub = first_user(&turn.request.body).contains("SUBAGENT");
            match (sub, turn.after_tool, dispatched_id(turn)) {
                (false, false, _) => Reply::Call {
                    tool: format!("{TOOL}delegate_task"),
                    args: dispatch_args("SUB", "inject"),
                },
                (false, true, Some(id)) => Reply::Call {
                    tool: "task".into(),
                    args: json!({
                        "description": "wait for it", "agent_type": "general-purpose", "name": "sub",
                        "prompt": format!("SUBAGENT\n{}", wait_ready_command(&id)),
                    }),
                },
                (true, false, _) => Reply::Call {
                    tool: "bash".into(),
                    args: json!({
                        "command": turn.last_user.lines().find(|l| l.starts_with("for i")).unwrap_or("false"),
                        "description": "wait",
                    }),
                },
                (false, true, None) if dispatched_ids(&turn.request.body).len() == 1 => {
                    Reply::Call {
                        tool: format!("{TOOL}delegate_task"),
                        args: dispatch_args("AFTER", "inject"),
                    }
                }
                _ => Reply::Text("done".into()),
            }
        }),
    );
    copilot(
        &machine,
        &server,
        &uuid(4),
        "dispatch the check",
        false,
        &[],
    );
    let turns = sent(&server);
    let (sub, main): (Vec<&Value>, Vec<&Value>) = turns
        .iter()
        .partition(|t| first_user(t).contains("SUBAGENT"));
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
    let dispatches: Vec<String> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| text_of(&m["content"]))
        .filter(|t| t.contains("delegation_id"))
        .collect();
    assert!(
        dispatches.len() == 2 && dispatches[1].contains(&uuid(4)),
        "dispatched into the main conversation after the subagent: {last}"
    );
}

/// `--user` puts the hooks in `~/.copilot/settings.json` and the server in
/// `~/.copilot/mcp-config.json`, nothing in the project, and they work in a project nobody
/// trusted.
#[test]
fn a_user_install_works_in_an_untrusted_project() {
    let machine = Machine::new();
    install(&machine, &["--user"], &[]);
    let settings = std::fs::read_to_string(machine.home().join(".copilot/settings.json"))
        .expect("~/.copilot/settings.json");
    assert!(
        settings.contains("hook post-tool-use --agent copilot"),
        "{settings}"
    );
    assert!(machine.home().join(".copilot/mcp-config.json").is_file());
    assert!(
        !machine.project().join(".github").exists(),
        "nothing in the project"
    );
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("USER", "inject"));
    copilot(&machine, &server, &uuid(5), "dispatch the check", true, &[]);
    let last = sent(&server).pop().expect("a request");
    assert_eq!(occurrences(&last, "USER-42"), 1, "{last}");
}

/// The arguments of a `delegate_task` (`inject`) whose child waits (with a deadline) until
/// `gate` exists, then prints `lines` numbered lines (`row 00001`, …), or `NAME-42` when
/// `lines` is 0. Both texts are absent from the command line, so only the result carries
/// them.
pub fn gated_args(gate: &Path, name: &str, lines: u32) -> Value {
    let print = if lines == 0 {
        format!("echo {name}-$((6*7))")
    } else {
        format!("seq -f 'row %05g' {lines}")
    };
    json!({
        "goal": name,
        "command": ["sh", "-c", format!(
            "for i in $(seq 400); do [ -e '{}' ] && break; sleep 0.05; done; {print}",
            gate.display()
        )],
        "result_delivery": "inject",
    })
}

/// Every delegation id the conversation's dispatch answers hold, in the order dispatched.
pub fn dispatched_ids(body: &Value) -> Vec<String> {
    let Some(messages) = body["messages"].as_array() else {
        return Vec::new();
    };
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| {
            let text = text_of(&m["content"]);
            // The answer's JSON, or (Cline) that JSON quoted inside the MCP result's.
            let at = text.find("delegation_id")?;
            let id = text[at..].find("deleg_").map(|i| &text[at + i..])?;
            Some(id.get(..18)?.to_owned())
        })
        .collect()
}

/// The model of the 3,000-line scenario: dispatch `BIG` (3,000 lines) and `SMALL`, both held
/// back by `gate`; open the gate and wait until both are ready (one tool boundary, where they
/// are ready together); call one more tool; then say `done`. `delegate` names the offered
/// `delegate_task`, `shell` calls the agent's shell tool with a command.
pub fn big_result_script(
    gate: PathBuf,
    delegate: fn(&Turn<'_>) -> String,
    shell: fn(&Turn<'_>, String) -> Reply,
) -> Script {
    Arc::new(move |turn: &Turn<'_>| {
        let ids = dispatched_ids(&turn.request.body);
        let tool_results = turn.request.body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        match (tool_results, ids.as_slice()) {
            (0, _) => Reply::Call {
                tool: delegate(turn),
                args: gated_args(&gate, "BIG", 3_000),
            },
            (1, _) => Reply::Call {
                tool: delegate(turn),
                args: gated_args(&gate, "SMALL", 0),
            },
            (2, [big, small]) => shell(
                turn,
                format!(
                    "touch '{}' && ({}) && ({})",
                    gate.display(),
                    wait_ready_command(big),
                    wait_ready_command(small)
                ),
            ),
            (3, _) => shell(turn, "true".into()),
            _ => Reply::Text("done".into()),
        }
    })
}

/// How what hermes delivers begins: the carrier at a tool boundary, a block's header at a turn
/// boundary (Cline's `PostToolUse` is one).
const STARTS: [&str; 2] = ["[DELEGATION RESULT READY", "[ASYNC DELEGATION COMPLETE"];

/// What the 3,000-line scenario must show: in the conversation's last request (which holds
/// every message the model was given), `SMALL` whole and `BIG` shortened (its head and tail,
/// naming `delegation_result`), each exactly once and in messages of their own, no message
/// that carries a result longer than `budget` characters; and both results delivered in the
/// ledger.
pub fn assert_big_result_within_budget(machine: &Machine, last: &Value, budget: usize) {
    assert_eq!(occurrences(last, "SMALL-42"), 1, "{last}");
    assert_eq!(
        occurrences(last, "row 00001\n"),
        1,
        "the head, once: {last}"
    );
    assert_eq!(occurrences(last, "row 03000"), 1, "the tail, once: {last}");
    assert_eq!(
        occurrences(last, "row 01500"),
        0,
        "the middle is cut: {last}"
    );
    let carriers: Vec<String> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| text_of(&m["content"]))
        .filter(|t| t.contains("SMALL-42") || t.contains("row 00001"))
        .collect();
    assert_eq!(carriers.len(), 2, "at two boundaries: {carriers:#?}");
    for text in &carriers {
        // What hermes handed over: from its first line to the end, less the agent's own
        // wrapping (Copilot's tool result before it, Cline's tags around it).
        let at = STARTS
            .iter()
            .find_map(|start| text.find(start))
            .unwrap_or_else(|| panic!("hermes' answer: {text}"));
        let handed = text[at..].trim_end().trim_end_matches("</hook_context>");
        let chars = handed.chars().count();
        assert!(
            chars <= budget,
            "{chars} characters over {budget}: {handed}"
        );
    }
    let big = carriers
        .iter()
        .find(|t| t.contains("row 00001"))
        .expect("the big one");
    assert!(
        big.contains("delegation_result") && !big.contains("SMALL-42"),
        "shortened, naming how to read it all, alone: {big}"
    );
    for id in dispatched_ids(last) {
        let status = machine
            .hermes
            .json(&["delegation", "status", &id, "--json"]);
        assert_eq!(
            status["tasks"][0]["delivery"]["state"], "delivered",
            "{status}"
        );
    }
}

/// A 3,000-line result reaches the model within Copilot's budget: at the tool boundary where
/// it and a small one are ready together, the small one is delivered whole and the big one
/// waits; at the next, it comes alone, shortened to its head and tail with the way to read all
/// of it. Nothing is lost or said twice.
#[test]
fn a_3000_line_result_arrives_within_the_budget_once() {
    let machine = Machine::new();
    install(&machine, &[], &[]);
    let gate = machine.home().join("gate");
    let server = ModelServer::with_script(
        Wire::Chat,
        big_result_script(
            gate,
            |_| format!("{TOOL}delegate_task"),
            |_, command| Reply::Call {
                tool: "bash".into(),
                args: json!({"command": command, "description": "wait"}),
            },
        ),
    );
    copilot(
        &machine,
        &server,
        &uuid(6),
        "dispatch the checks",
        false,
        &[],
    );
    let last = sent(&server).pop().expect("a request");
    let budget = hermes_agents::find("copilot").expect("a profile").budget;
    assert_big_result_within_budget(&machine, &last, budget);
}

/// With `COPILOT_HOME` set, `--user` writes into that directory (where Copilot reads its
/// configuration then), nothing into `~/.copilot`; Copilot offers hermes' tools and its hooks
/// deliver, in a project nobody trusted.
#[test]
fn a_user_install_follows_copilot_home() {
    let machine = Machine::new();
    let config = tempfile::tempdir().expect("a directory");
    let env = [("COPILOT_HOME", config.path())];
    install(&machine, &["--user"], &env);
    let settings =
        std::fs::read_to_string(config.path().join("settings.json")).expect("settings.json");
    assert!(
        settings.contains("hook post-tool-use --agent copilot"),
        "{settings}"
    );
    assert!(config.path().join("mcp-config.json").is_file());
    assert!(!machine.home().join(".copilot").exists(), "not ~/.copilot");
    let server = ModelServer::with_script(Wire::Chat, dispatch_then_wait("MOVED", "inject"));
    copilot(
        &machine,
        &server,
        &uuid(7),
        "dispatch the check",
        true,
        &env,
    );
    let turns = sent(&server);
    assert!(
        offered(&turns[0]).contains(&"hermes-delegate_task"),
        "{}",
        turns[0]["tools"]
    );
    let last = turns.last().expect("a request");
    assert_eq!(occurrences(last, "MOVED-42"), 1, "{last}");
}
