//! Claude Code (`@anthropic-ai/claude-code`, the version pinned in `tests/agents/package.json`)
//! with hermes, as a person sets it up: `hermes hook install claude` in the project, then
//! `claude` against a scripted Anthropic Messages server on 127.0.0.1.
//!
//! Facts about Claude Code each test leans on, and where they are pinned in the installed
//! package (`node_modules/@anthropic-ai/claude-code/bin/claude.exe`, a native binary carrying
//! its JavaScript, and `claude --help`):
//!
//! - `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` point it at the server; `DISABLE_TELEMETRY`,
//!   `DISABLE_AUTOUPDATER` and `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` keep it off every
//!   other address (all read in `claude.exe`);
//! - as root, `--dangerously-skip-permissions` is refused unless `IS_SANDBOX=1`
//!   (`isSandboxEnvSet:()=>process.env.IS_SANDBOX==="1"` in `claude.exe`);
//! - `-p` skips the workspace trust dialog (`claude --help`, `--print`); interactively, an
//!   untrusted folder ignores the project's `enabledMcpjsonServers` and `claude mcp list` shows
//!   the server as "Pending approval" until the folder is trusted (`hasTrustDialogAccepted` of
//!   `projects[DIR]` in `~/.claude.json`);
//! - MCP tools are deferred: the model sees their names in a system message and loads one with
//!   the `ToolSearch` tool (`select:NAME`) before calling it; hooks' `additionalContext` reaches
//!   the model in its input (what the tests read);
//! - `--input-format stream-json` reads one user message per line and runs them as turns of
//!   one conversation in one process (`claude --help`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use hermes_testkit::model::{
    Logged, ModelServer, Reply, Turn, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, Wire, occurrences,
};
use serde_json::{Value, json};

use super::Machine;
use crate::common::wait_for;

/// How long one conversation may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Claude Code on a machine, talking to a scripted model.
pub(super) struct Claude {
    pub(super) machine: Machine,
    pub(super) model: ModelServer,
    /// The file a gated child waits for (`common::until_told`).
    pub(super) gate: PathBuf,
}

impl Claude {
    /// A machine with hermes installed into its project the way a person does it, and a model
    /// answering with [`steps`].
    pub(super) fn new() -> Claude {
        let claude = Claude::without_hooks();
        let out = claude.hermes(&["hook", "install", "claude"]);
        assert!(out.status.success(), "{out:?}");
        claude
    }

    /// A machine where hermes is not installed into Claude (Claude only as hermes' child).
    fn without_hooks() -> Claude {
        let machine = Machine::new();
        let gate = machine.home().join("gate");
        let hermes_home = machine.hermes.path().to_owned();
        let ledger_url = machine.hermes.ledger_url.clone();
        let waiter = Waiter {
            gate: gate.clone(),
            hermes_home,
            ledger_url,
        };
        let model = ModelServer::with_script(
            Wire::Anthropic,
            Arc::new(move |turn: &Turn<'_>| steps(turn, &waiter)),
        );
        Claude {
            machine,
            model,
            gate,
        }
    }

    /// A shell command that waits for the gate (a `STEP WAIT`), then runs `then`.
    pub(super) fn gated(&self, then: &str) -> String {
        format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; {then}",
            self.gate.display()
        )
    }

    /// `hermes ARGS` in the project, with the machine's environment (Claude's included: a
    /// child gets the environment of whoever dispatched it).
    pub(super) fn hermes(&self, args: &[&str]) -> std::process::Output {
        let c = self.command();
        let mut hermes = self.machine.command("hermes");
        for (key, value) in c.get_envs() {
            match value {
                Some(value) => hermes.env(key, value),
                None => hermes.env_remove(key),
            };
        }
        hermes.args(args).output().expect("hermes runs")
    }

    /// `hermes delegation status ID --json`.
    pub(super) fn status(&self, id: &str) -> Value {
        let out = self.hermes(&["delegation", "status", id, "--json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"))
    }

    /// Dispatches Claude as a child on `goal` with `model`; returns the delegation id.
    fn dispatch_claude(&self, goal: &str, model: &str) -> String {
        let out = self.hermes(&[
            "delegate",
            "--session",
            "s-child",
            "--agent",
            "claude",
            "--model",
            model,
            "--toolsets",
            "terminal",
            "--goal",
            goal,
            "--json",
        ]);
        assert!(out.status.success(), "{out:?}");
        let answer: Value = serde_json::from_slice(&out.stdout).expect("the dispatch answer");
        answer["delegation_id"].as_str().expect("an id").to_owned()
    }

    /// Waits until the delegation `id` has ended; its status.
    fn ended(&self, id: &str) -> Value {
        wait_for(LIMIT, "the child to end", || {
            let status = self.status(id);
            (!matches!(status["status"].as_str(), Some("running" | "queued"))).then_some(status)
        })
    }

    /// `claude` in the project, pointed at the model server and nothing else.
    pub(super) fn command(&self) -> Command {
        let mut c = self.machine.command("claude");
        c.env("ANTHROPIC_BASE_URL", self.model.base_url())
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("ANTHROPIC_MODEL")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("IS_SANDBOX", "1");
        c
    }

    /// `claude -p PROMPT` (stream-json); its events.
    pub(super) fn print(&self, prompt: &str) -> Vec<Value> {
        let out = self
            .command()
            .args(["-p", prompt, "--output-format", "stream-json", "--verbose"])
            .arg("--dangerously-skip-permissions")
            .output()
            .expect("claude runs");
        let events = events(&out.stdout);
        assert!(
            out.status.success(),
            "claude failed: {:?}\n{events:#?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        events
    }

    /// `claude mcp list`'s line for the server `hermes`, if it lists one.
    fn mcp_list(&self) -> Option<String> {
        let out = self
            .command()
            .args(["mcp", "list"])
            .output()
            .expect("claude runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("hermes:"))
            .map(str::to_owned)
    }

    /// Marks the project as trusted, as accepting Claude's trust dialog does.
    fn trust_project(&self) {
        let path = self.machine.home().join(".claude.json");
        let mut config: Value = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| json!({}));
        let project = self.machine.project().display().to_string();
        config["projects"][project] = json!({"hasTrustDialogAccepted": true});
        std::fs::write(&path, config.to_string()).expect("write ~/.claude.json");
    }

    /// The requests of the main conversation (not a subagent's, not a side request).
    pub(super) fn main_turns(&self) -> Vec<Logged> {
        self.model
            .turns()
            .into_iter()
            .filter(|r| !is_subagent(&r.body))
            .collect()
    }
}

/// One `claude -p --input-format stream-json` process: a conversation of several turns.
struct Session {
    child: Child,
    stdin: ChildStdin,
    events: Receiver<Value>,
}

impl Session {
    fn start(claude: &Claude) -> Session {
        let mut child = claude
            .command()
            .args(["-p", "--input-format", "stream-json"])
            .args(["--output-format", "stream-json", "--verbose"])
            .arg("--dangerously-skip-permissions")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("claude starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, events) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && tx.send(event).is_err()
                {
                    break;
                }
            }
        });
        Session {
            child,
            stdin,
            events,
        }
    }

    /// Sends a user message and waits for the turn's `result` event; returns the turn's events.
    fn turn(&mut self, text: &str) -> Vec<Value> {
        let message = json!({"type": "user", "message": {"role": "user", "content": text}});
        writeln!(self.stdin, "{message}").expect("claude reads its stdin");
        let mut seen = Vec::new();
        loop {
            let event = self
                .events
                .recv_timeout(LIMIT)
                .unwrap_or_else(|_| panic!("no result from claude; saw {seen:#?}"));
            let done = event["type"] == "result";
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    fn end(mut self) {
        drop(self.stdin);
        let status = wait_for(LIMIT, "claude to exit", || self.child.try_wait().ok()?);
        assert!(status.success(), "{status:?}");
    }
}

/// What [`steps`] waits on at a `STEP WAIT`: lets the gated children go, then waits until no
/// delegation of hermes' is queued or running.
struct Waiter {
    gate: PathBuf,
    hermes_home: PathBuf,
    ledger_url: Option<String>,
}

impl Waiter {
    fn wait(&self) {
        std::fs::write(&self.gate, "").expect("open the gate");
        wait_for(LIMIT, "hermes' delegations to finish", || {
            let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
            c.args(["delegation", "list", "--all", "--json"])
                .env("HERMES_HOME", &self.hermes_home);
            match &self.ledger_url {
                Some(url) => c.env("HERMES_LEDGER_URL", url),
                None => c.env_remove("HERMES_LEDGER_URL"),
            };
            let out = c.output().ok()?;
            let list: Value = serde_json::from_slice(&out.stdout).ok()?;
            let idle = list["running_count"] == 0
                && list["queued_count"] == 0
                && list["recent_count"].as_u64() > Some(0);
            idle.then_some(())
        });
    }
}

/// The model of these tests. The prompt of a conversation (its last user message of its own)
/// holds its script, one line each:
///
/// - `STEP TOOL JSON`: call `TOOL` with `JSON` (`$ID` in it is the delegation id the
///   conversation has seen last), one call per answer, in order; a tool Claude has deferred
///   is first loaded with `ToolSearch` (`select:TOOL`), as a model does;
/// - `STEP WAIT`: before the next call, open the gate and wait for hermes' children;
/// - `SAY TEXT`: the text of the last answer (default `done`);
/// - `FAIL STATUS MESSAGE`: answer every request with that API error.
fn steps(turn: &Turn<'_>, waiter: &Waiter) -> Reply {
    let body = &turn.request.body;
    let prompt = prompt_of(body);
    if let Some(rest) = prompt.lines().find_map(|l| l.strip_prefix("FAIL ")) {
        let (status, message) = rest.split_once(' ').unwrap_or((rest, "scripted failure"));
        return Reply::Error {
            status: status.parse().unwrap_or(500),
            message: message.to_owned(),
        };
    }
    let calls = calls_since_prompt(body);
    let made = calls.iter().filter(|c| c.as_str() != "ToolSearch").count();
    let mut index = 0;
    let mut wait = false;
    for line in prompt.lines() {
        let Some(step) = line.strip_prefix("STEP ") else {
            continue;
        };
        if step.trim() == "WAIT" {
            wait = true;
            continue;
        }
        if index < made {
            index += 1;
            wait = false;
            continue;
        }
        let (tool, args) = step.split_once(' ').unwrap_or((step, "{}"));
        let loaded = turn.tools.iter().any(|t| t == tool);
        let searched = calls.last().is_some_and(|c| c == "ToolSearch");
        if !loaded && !searched && turn.tools.iter().any(|t| t == "ToolSearch") {
            return Reply::Call {
                tool: "ToolSearch".to_owned(),
                args: json!({"query": format!("select:{tool}"), "max_results": 1}),
            };
        }
        if wait {
            waiter.wait();
        }
        let args = args.replace("$ID", &last_delegation(body));
        return Reply::Call {
            tool: tool.to_owned(),
            args: serde_json::from_str(&args).unwrap_or_else(|e| panic!("{args}: {e}")),
        };
    }
    if wait {
        waiter.wait();
    }
    let say = prompt.lines().find_map(|l| l.strip_prefix("SAY "));
    Reply::Text(say.unwrap_or("done").to_owned())
}

/// The text of the conversation's last user message of its own (not a tool's answer): its
/// prompt, with whatever Claude attached to it.
fn prompt_of(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user" && !has_tool_result(m) && !is_feedback(m))
        .map(text_of)
        .unwrap_or_default()
}

/// Whether a request is a subagent's: its conversation's first prompt is the one the
/// `Agent` call gave, whose first line is `SUBAGENT`.
fn is_subagent(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .is_some_and(|m| text_of(m).lines().any(|l| l == "SUBAGENT"))
}

/// The last message of the user or the assistant (Claude appends `system` messages after it).
fn last_message(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rfind(|m| m["role"] != "system"))
        .cloned()
        .unwrap_or_default()
}

fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(parts) => parts.clone(),
        _ => Vec::new(),
    }
}

fn text_of(message: &Value) -> String {
    blocks(message)
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn has_tool_result(message: &Value) -> bool {
    blocks(message).iter().any(|b| b["type"] == "tool_result")
}

/// Whether a user message is Claude's own (a stop hook's context it goes on with), not a prompt.
fn is_feedback(message: &Value) -> bool {
    let text = text_of(message);
    !text.contains("STEP ") && !text.contains("SAY ") && !text.contains("FAIL ")
}

/// The tools called since the prompt, in order.
fn calls_since_prompt(body: &Value) -> Vec<String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let start = messages
        .iter()
        .rposition(|m| m["role"] == "user" && !has_tool_result(m) && !is_feedback(m))
        .unwrap_or(0);
    messages[start..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(blocks)
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["name"].as_str().map(str::to_owned))
        .collect()
}

/// The last delegation id in the conversation.
fn last_delegation(body: &Value) -> String {
    let text = body["messages"].to_string();
    text.rmatch_indices("deleg_")
        .map(|(at, _)| &text[at..])
        .find_map(|s| {
            let id: String = s.chars().take(18).collect();
            (id.len() == 18 && id[6..].chars().all(|c| c.is_ascii_hexdigit())).then_some(id)
        })
        .unwrap_or_default()
}

/// The JSON lines of a stream-json output.
pub(super) fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `session_id` of a run's events.
pub(super) fn session_of(events: &[Value]) -> String {
    events
        .iter()
        .find_map(|e| e["session_id"].as_str())
        .expect("a session id")
        .to_owned()
}

/// A `delegate_task` call's arguments: `script` in `sh -c`, delivered as `delivery`.
pub(super) fn delegate(script: &str, delivery: &str) -> String {
    json!({
        "goal": "a background job",
        "command": ["sh", "-c", script],
        "result_delivery": delivery,
    })
    .to_string()
}

/// A shell command printing `marker` without writing it: the model's input holds the
/// command (the tool call), so only the result may hold the marker itself.
pub(super) fn say(marker: &str) -> String {
    let (head, tail) = marker.split_at(marker.len() / 2);
    format!("printf '%s%s\\n' {head} {tail}")
}

/// The index of the first request whose input holds `needle`.
pub(super) fn first_with(turns: &[Logged], needle: &str) -> Option<usize> {
    turns.iter().position(|r| occurrences(&r.body, needle) > 0)
}

/// The last request's count of `needle`: each request carries the whole conversation.
pub(super) fn in_the_end(turns: &[Logged], needle: &str) -> usize {
    turns.last().map_or(0, |r| occurrences(&r.body, needle))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("the file")
        .permissions()
        .mode()
        & 0o777
}

/// Install → Claude lists hermes' server as connected (once the folder is trusted; headless
/// runs need no trust) and its hooks fire; the committed files are readable by everyone who
/// clones the project; installing again changes nothing; uninstalling takes it all away.
#[test]
fn install_connects_the_server_fires_the_hooks_and_uninstall_removes_them() {
    let claude = Claude::new();
    let project = claude.machine.project();
    for file in [".mcp.json", ".claude/settings.json"] {
        assert_eq!(mode(&project.join(file)), 0o644, "{file}");
    }
    assert_eq!(mode(&project.join(".claude")), 0o755);
    let before = std::fs::read(project.join(".claude/settings.json")).expect("settings");
    let again = claude.hermes(&["hook", "install", "claude"]);
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success() && said.contains("unchanged"),
        "{said}"
    );
    // What Claude needs of the person: folder trust.
    assert!(said.contains("folder trust dialog"), "{said}");
    assert_eq!(
        std::fs::read(project.join(".claude/settings.json")).expect("settings"),
        before
    );

    // An untrusted folder: Claude waits for the person's approval.
    let pending = claude.mcp_list().expect("claude lists hermes");
    assert!(pending.contains("Pending approval"), "{pending}");
    claude.trust_project();
    let listed = claude.mcp_list().expect("claude lists hermes");
    assert!(listed.contains("Connected"), "{listed}");

    let events = claude.print("SAY hello");
    let init = events
        .iter()
        .find(|e| e["subtype"] == "init")
        .expect("an init event");
    assert!(
        init["mcp_servers"].as_array().is_some_and(|s| s
            .iter()
            .any(|s| s["name"] == "hermes" && s["status"] == "connected")),
        "{init}"
    );
    assert!(
        init["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == "mcp__hermes__delegate_task")),
        "{init}"
    );
    let started = events
        .iter()
        .find(|e| e["subtype"] == "hook_response" && e["hook_event"] == "SessionStart")
        .expect("the session-start hook ran");
    assert_eq!(started["exit_code"], 0, "{started}");
    // (The other hooks show in what they deliver: the tests below.)
    let out = claude.hermes(&["hook", "uninstall", "claude"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(claude.mcp_list(), None);
    assert!(!project.join(".mcp.json").exists());
    assert!(!project.join(".claude/settings.json").exists());
    let events = claude.print("SAY bye");
    assert!(
        !events.iter().any(|e| e["subtype"] == "hook_started"),
        "{events:#?}"
    );
}

/// The model dispatches through `delegate_task` (loaded with `ToolSearch` first); the work
/// runs in the background in the conversation's session, and its result reaches the model
/// exactly once.
#[test]
fn the_models_delegate_task_runs_in_the_background_of_its_conversation() {
    let claude = Claude::new();
    let args = delegate(&say("RESULT-OF-BACKGROUND"), "after_turn");
    let events = claude.print(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSTEP WAIT\nSAY dispatched"
    ));
    let turns = claude.main_turns();
    let dispatched = turns
        .iter()
        .find(|r| {
            let last = last_message(&r.body);
            has_tool_result(&last) && last.to_string().contains("delegation_id")
        })
        .expect("the dispatch answer reached the model");
    // The MCP server found the conversation the hooks bound (no `warning` in its answer).
    let answer = text_of(&last_message(&dispatched.body)["content"][0]);
    assert!(
        answer.contains("\"delegation_id\"") && !answer.contains("\"warning\""),
        "{answer}"
    );
    let id = last_delegation(&dispatched.body);
    let status = claude.hermes(&["delegation", "status", &id, "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status");
    assert_eq!(status["session"], session_of(&events), "{status}");
    assert_eq!(status["channel"], "background", "{status}");
    // Delivered by the stop hook, once in all the model reads.
    let last = turns.last().expect("requests");
    assert_eq!(occurrences(&last.body, "RESULT-OF-BACKGROUND"), 1);
}

/// `after_turn`: a result that is ready after a turn ended reaches the model with the next
/// prompt (through `UserPromptSubmit`), once, in the same Claude process.
#[test]
fn an_after_turn_result_arrives_with_the_next_prompt_exactly_once() {
    let claude = Claude::new();
    let args = delegate(&claude.gated(&say("RESULT-AFTER-TURN")), "after_turn");
    let mut session = Session::start(&claude);
    session.turn(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSAY first turn over"
    ));
    let first = claude.main_turns().len();
    assert_eq!(first_with(&claude.main_turns(), "RESULT-AFTER-TURN"), None);
    let waiter_gate = claude.gate.clone();
    std::fs::write(&waiter_gate, "").expect("open the gate");
    wait_for(LIMIT, "the result", || {
        let out = claude.hermes(&["delegation", "list", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        (list["running_count"] == 0 && list["queued_count"] == 0).then_some(())
    });
    session.turn("SAY second turn");
    session.end();
    let turns = claude.main_turns();
    assert_eq!(first_with(&turns, "RESULT-AFTER-TURN"), Some(first));
    assert_eq!(in_the_end(&turns, "RESULT-AFTER-TURN"), 1);
}

/// `inject`: a result that became ready while the model worked reaches it after its next tool
/// call (`PostToolUse`), in the same turn, once.
#[test]
fn an_inject_result_rides_on_a_later_tool_call_of_the_same_turn() {
    let claude = Claude::new();
    let args = delegate(&claude.gated(&say("RESULT-INJECTED")), "inject");
    claude.print(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSTEP WAIT\nSTEP Bash {{\"command\":\"echo tool-ran\"}}\nSAY finished"
    ));
    let turns = claude.main_turns();
    let at = first_with(&turns, "RESULT-INJECTED").expect("the result reached the model");
    let last = last_message(&turns[at].body);
    assert!(
        has_tool_result(&last) && last.to_string().contains("tool-ran"),
        "the result came with the Bash call's answer: {last}"
    );
    assert_eq!(in_the_end(&turns, "RESULT-INJECTED"), 1);
}

/// The stop hook: results ready when the model wants to stop keep Claude going once, with
/// them, exactly once in everything the model reads (a blocking stop's reason would be there
/// twice: see `crates/agents/src/claude.rs`); the next stop ends the turn.
#[test]
fn the_stop_hook_keeps_claude_going_once_with_ready_results() {
    let claude = Claude::new();
    let args = delegate(&claude.gated(&say("RESULT-AT-STOP")), "after_turn");
    let events = claude.print(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSTEP WAIT\nSAY stopping"
    ));
    let turns = claude.main_turns();
    let at = first_with(&turns, "RESULT-AT-STOP").expect("the result reached the model");
    let last = last_message(&turns[at].body);
    assert!(
        !has_tool_result(&last) && text_of(&last).contains("Stop hook additional context"),
        "it came with the stop: {last}"
    );
    // One continuation: the request with the result is the last one, and the answer to it
    // ended the turn (nothing new at the next stop).
    assert_eq!(at, turns.len() - 1, "{} requests", turns.len());
    // Once in the whole input: system prompt, messages (`system` ones included) and tools.
    assert_eq!(occurrences(&turns[at].body, "RESULT-AT-STOP"), 1);
    assert!(
        !turns[at]
            .body
            .to_string()
            .contains("Stop hook blocking error"),
        "{}",
        turns[at].body
    );
    let result = events.last().expect("a result event");
    assert_eq!(result["subtype"], "success", "{result}");
}

/// A result of 3,000 lines stays inside what Claude keeps of a hook's context: shortened,
/// naming the tool as Claude shows it, its middle readable through that tool, delivered once.
#[test]
fn a_three_thousand_line_result_fits_claudes_budget_and_names_its_tool() {
    let claude = Claude::new();
    let script = format!(
        "{}; seq -f 'line %04g of the long result' 1 3000",
        claude.gated(&say("LONG-RESULT"))
    );
    let args = delegate(&script, "inject");
    claude.print(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSTEP WAIT\nSTEP Bash {{\"command\":\"true\"}}\nSTEP mcp__hermes__delegation_result {{\"delegation_id\":\"$ID\",\"offset\":45000}}\nSAY read"
    ));
    let turns = claude.main_turns();
    let last = turns.last().expect("requests");
    // The shortened block, as Claude handed it over after the Bash call.
    let block = last.body["messages"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .filter(|m| m["role"] == "system")
                .map(text_of)
                .find(|t| t.contains("line 0001 of the long result"))
        })
        .expect("the block reached the model");
    assert!(
        block.starts_with("PostToolUse:Bash hook additional context"),
        "{block}"
    );
    let chars = block.chars().count();
    assert!(chars < 10_000, "{chars} characters");
    assert!(block.contains("line 3000 of the long result"), "{block}");
    assert!(
        block.contains("the MCP tool mcp__hermes__delegation_result {"),
        "{block}"
    );
    // Once in the conversation; its middle through the tool the block named.
    assert_eq!(occurrences(&last.body, "line 0001 of the long result"), 1);
    let page = last_message(&last.body);
    assert!(has_tool_result(&page), "{page}");
    let middle = text_of(&page["content"][0])
        .lines()
        .filter(|l| l.starts_with("line ") && l.ends_with("of the long result"))
        .nth(1)
        .map(str::to_owned)
        .expect("a page of the result");
    assert!(!block.contains(&middle), "{middle} was in the block");
}

/// A subagent's tool call takes nothing: the result waits for the main conversation's next
/// tool boundary (the subagent's own answer).
#[test]
fn a_subagents_tool_call_takes_nothing() {
    let claude = Claude::new();
    let args = delegate(&claude.gated(&say("RESULT-NOT-FOR-SUBAGENT")), "inject");
    let task = json!({
        "description": "a helper",
        "subagent_type": "general-purpose",
        "run_in_background": false,
        "prompt": "SUBAGENT\nSTEP WAIT\nSTEP Bash {\"command\":\"echo in-subagent\"}\nSAY helped",
    });
    claude.print(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSTEP Agent {task}\nSAY finished"
    ));
    let all = claude.model.turns();
    let sub: Vec<&Logged> = all.iter().filter(|r| is_subagent(&r.body)).collect();
    assert!(
        sub.iter()
            .any(|r| r.body.to_string().contains("in-subagent")),
        "the subagent ran its tool"
    );
    assert!(
        sub.iter()
            .all(|r| occurrences(&r.body, "RESULT-NOT-FOR-SUBAGENT") == 0),
        "a subagent got the result"
    );
    let turns = claude.main_turns();
    assert_eq!(in_the_end(&turns, "RESULT-NOT-FOR-SUBAGENT"), 1);
}

/// Claude Code as hermes' child (`--agent claude`): the model it runs, its API calls, the tool
/// it is in while it runs, its answer and its usage, all read from its stream.
#[test]
fn claude_as_a_child_reports_model_calls_current_tool_answer_and_usage() {
    let claude = Claude::without_hooks();
    let goal = format!(
        "STEP Bash {}\nSAY the child's answer",
        json!({"command": claude.gated("echo tool-ran")})
    );
    let id = claude.dispatch_claude(&goal, "claude-test-model");
    let tool = wait_for(LIMIT, "the child to be in its Bash call", || {
        let status = claude.status(&id);
        let tool = &status["tasks"][0]["progress"]["current_tool"];
        (!tool.is_null()).then(|| tool.to_string())
    });
    assert!(tool.contains("Bash"), "{tool}");
    std::fs::write(&claude.gate, "").expect("open the gate");
    let status = claude.ended(&id);
    let task = &status["tasks"][0];
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(task["result"], "the child's answer", "{task}");
    assert_eq!(task["model"], "claude-test-model", "{task}");
    // One request for the Bash call, one for the answer; each reports the scripted usage.
    let requests = claude.model.turns();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(
        requests
            .iter()
            .all(|r| r.body["model"] == "claude-test-model")
    );
    assert_eq!(task["progress"]["api_calls"], 2, "{task}");
    assert_eq!(
        task["usage"]["input_tokens"],
        2 * USAGE_INPUT_TOKENS,
        "{task}"
    );
    assert_eq!(
        task["usage"]["output_tokens"],
        2 * USAGE_OUTPUT_TOKENS,
        "{task}"
    );
    assert!(task["progress"]["current_tool"].is_null(), "{task}");
}

/// An API error ends the child `failed`, with the message the model's API gave.
#[test]
fn claude_as_a_child_fails_with_the_apis_message() {
    let claude = Claude::without_hooks();
    let id = claude.dispatch_claude(
        "FAIL 400 the scripted model refuses this request",
        "claude-test-model",
    );
    let status = claude.ended(&id);
    let task = &status["tasks"][0];
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(task["status"], "failed", "{task}");
    let said = task["result"].as_str().unwrap_or_default();
    assert!(
        said.contains("400") && said.contains("the scripted model refuses this request"),
        "{task}"
    );
}
