//! Gemini CLI (`@google/gemini-cli`, pinned in `tests/agents/package.json`) with hermes, against
//! the scripted Gemini API (`Wire::Gemini`). The facts these tests lean on, each read in the
//! installed package (`node_modules/@google/gemini-cli/bundle/`):
//!
//! - `chunk-JDPZ4CE3.js` (`getAuthTypeFromEnv`, the GenAI client's base URL):
//!   `GOOGLE_GEMINI_BASE_URL` sends every model request to our server, `GEMINI_API_KEY` is
//!   the key, and `security.auth.selectedType = "gemini-api-key"` in `~/.gemini/settings.json`
//!   skips the first-run auth dialog;
//! - `docs/cli/trusted-folders.md`: folder trust is on by default; an untrusted folder makes
//!   `gemini -p` exit 55 (and ignores the project's hooks and MCP servers); trust is kept in
//!   `~/.gemini/trustedFolders.json` (`{"<dir>": "TRUST_FOLDER"}`);
//! - `chunk-JDPZ4CE3.js` (the policy engine's `defaultDecision: interactive ? ASK_USER :
//!   DENY`) and `gemini --help` (`--allowed-tools`): headless, a tool that would ask is not
//!   offered at all, so MCP tools reach the model only when allowed;
//! - `chunk-JDPZ4CE3.js` (`createBaseInput`): every hook input has the process's
//!   `session_id` and the main conversation's `transcript_path`, a subagent's tool calls too;
//!   the subagent tool is `invoke_agent` (`agent_name`, `prompt`), whose own `AfterTool` comes
//!   after every hook of the subagent's calls;
//! - `gemini-3HFX2LNT.js` (`JsonStreamEventType.INIT` with `config.getModel()`, `result` with
//!   `convertToStreamStats`): the init event names the configured model (`auto` by default),
//!   the result's `stats.models` the models that answered.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_testkit::model::{ModelServer, Reply, Turn, Wire, by_prompt, occurrences};
use serde_json::{Value, json};

use super::Machine;
use crate::common::{Run, until_told, wait_for};

const LIMIT: Duration = Duration::from_secs(60);

/// hermes' six tools as Gemini names them (`mcp_<server>_<tool>`), allowed for headless runs.
pub(super) const TOOLS: &str = "mcp_hermes_delegate_task,mcp_hermes_delegation_status,mcp_hermes_delegation_list,mcp_hermes_delegation_stop,mcp_hermes_delegation_results,mcp_hermes_delegation_result";

/// A person's machine with Gemini CLI set up against the scripted model.
pub(super) struct Gemini {
    pub(super) machine: Machine,
    pub(super) model: ModelServer,
}

impl Gemini {
    pub(super) fn new(script: impl Fn(&Turn<'_>) -> Reply + Send + Sync + 'static) -> Gemini {
        let machine = Machine::new();
        let dir = machine.home().join(".gemini");
        std::fs::create_dir_all(&dir).expect("~/.gemini");
        std::fs::write(
            dir.join("settings.json"),
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
        )
        .expect("settings.json");
        let project = machine.project().canonicalize().expect("the project");
        std::fs::write(
            dir.join("trustedFolders.json"),
            json!({ project.to_str().expect("utf-8"): "TRUST_FOLDER" }).to_string(),
        )
        .expect("trustedFolders.json");
        Gemini {
            machine,
            model: ModelServer::with_script(Wire::Gemini, Arc::new(script)),
        }
    }

    fn user_settings(&self) -> PathBuf {
        self.machine.home().join(".gemini/settings.json")
    }

    /// `program args…` with the model server and key in the environment.
    pub(super) fn run(&self, program: &str, args: &[&str]) -> Run {
        let mut c = self.machine.command(program);
        c.args(args)
            .env("GOOGLE_GEMINI_BASE_URL", self.model.base_url())
            .env("GEMINI_API_KEY", "test-key");
        Run::from(c.output().expect("it runs"))
    }

    /// `hermes hook install gemini ARGS` in the project, as a person types it.
    pub(super) fn install(&self, args: &[&str]) {
        let mut all = vec!["hook", "install", "gemini"];
        all.extend_from_slice(args);
        let run = self.run("hermes", &all);
        assert_eq!(run.code, 0, "{run:?}");
    }

    /// One headless turn (`gemini -p PROMPT`, resuming the latest session with `resume`), with
    /// hermes' tools allowed.
    fn turn(&self, prompt: &str, resume: bool) -> Run {
        let mut args = vec!["-p", prompt, "--output-format", "stream-json"];
        args.extend(["--allowed-tools", TOOLS]);
        if resume {
            args.extend(["--resume", "latest"]);
        }
        let run = self.run("gemini", &args);
        assert_eq!(run.code, 0, "gemini -p failed: {run:?}");
        run
    }

    /// The conversation's model requests (not the router's side requests), in order.
    fn requests(&self) -> Vec<Value> {
        self.model
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(":streamGenerateContent"))
            .map(|r| r.body)
            .collect()
    }

    /// The main thread's requests (a subagent is offered `complete_task`, never `invoke_agent`).
    pub(super) fn main_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|b| offers(b, "invoke_agent"))
            .collect()
    }

    pub(super) fn hermes_json(&self, args: &[&str]) -> Value {
        let run = self.run("hermes", args);
        assert_eq!(run.code, 0, "{args:?}: {run:?}");
        run.json()
    }

    /// The delegations that have ended, latest first.
    pub(super) fn ended(&self) -> Vec<Value> {
        let list = self.hermes_json(&["delegation", "list", "--all", "--json"]);
        list["recent"].as_array().cloned().unwrap_or_default()
    }

    /// The only delegation so far, once it has completed.
    fn completed(&self) -> Value {
        wait_for(LIMIT, "the delegation to complete", || {
            let unit = self.ended().first()?.clone();
            (unit["status"] == "completed").then_some(unit)
        })
    }
}

fn offers(body: &Value, tool: &str) -> bool {
    body["tools"].to_string().contains(&format!("\"{tool}\""))
}

/// The number of `functionResponse` parts in a request: how many tool calls it answers.
fn responses(turn: &Turn<'_>) -> usize {
    turn.request.body["contents"]
        .to_string()
        .matches("\"functionResponse\"")
        .count()
}

/// A script that, on the line `DISPATCH <json>`, calls `delegate_task` with it, then holds its
/// next answer until `ready` says so (the child finished), and then goes on as `then` says.
fn dispatching(
    ready: impl Fn() -> bool + Send + Sync + 'static,
    then: impl Fn(&Turn<'_>) -> Reply + Send + Sync + 'static,
) -> impl Fn(&Turn<'_>) -> Reply + Send + Sync + 'static {
    move |turn| {
        let dispatch = turn
            .last_user
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("DISPATCH "));
        match (dispatch, turn.after_tool, responses(turn)) {
            (Some(args), false, _) => Reply::Call {
                tool: "mcp_hermes_delegate_task".into(),
                args: serde_json::from_str(args).expect("DISPATCH's JSON"),
            },
            (Some(_), true, 1) => {
                let deadline = Instant::now() + LIMIT;
                while !ready() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                then(turn)
            }
            _ => then(turn),
        }
    }
}

/// Whether `home`'s ledger has a completed delegation (read by our CLI, from the script's
/// thread).
fn any_completed(home: PathBuf) -> impl Fn() -> bool + Send + Sync + 'static {
    move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hermes"))
            .args(["delegation", "list", "--all", "--json"])
            .env("HERMES_HOME", &home)
            .output();
        out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"completed\""))
    }
}

fn dispatch_line(command: &str, delivery: &str) -> String {
    let args = json!({
        "goal": "a background check",
        "command": ["sh", "-c", command],
        "result_delivery": delivery,
    });
    format!("DISPATCH {args}")
}

/// Install (project), then: `gemini mcp list` shows hermes connected; a turn offers hermes'
/// tools, the model dispatches through `delegate_task` (no warning: the hooks bound the
/// conversation), and when the model would stop with the result ready, the `AfterAgent` hook
/// keeps it going once with the result, which the model then reads exactly once.
#[test]
fn dispatch_through_the_model_comes_back_at_the_stop_hook_exactly_once() {
    let started = Instant::now();
    let mut g = Gemini::new(by_prompt);
    let home = g.machine.hermes.path().to_owned();
    g.model = ModelServer::with_script(Wire::Gemini, {
        let ready = any_completed(home);
        Arc::new(dispatching(ready, by_prompt))
    });
    g.install(&[]);
    let list = g.run("gemini", &["mcp", "list"]);
    let listed = format!("{}{}", list.stdout, list.stderr);
    assert!(
        listed.contains("hermes") && listed.contains("Connected"),
        "{listed}"
    );

    let line = dispatch_line("printf 'MARK-%s\\n' stop", "after_turn");
    g.turn(&format!("check this in the background\n{line}"), false);
    let main = g.main_requests();
    let first = main.first().expect("a request");
    for tool in TOOLS.split(',') {
        assert!(offers(first, tool), "{tool} is not offered");
    }
    // The dispatch answer, as the model read it: hermes found the conversation.
    let answered = main
        .iter()
        .find(|b| occurrences(&b["contents"], "deleg_") > 0)
        .expect("the dispatch answer reached the model");
    assert_eq!(
        occurrences(&answered["contents"], "warning"),
        0,
        "{answered}"
    );
    g.completed();
    // The stop hook kept the model going once, with the result: it is in the last request
    // exactly once, as a retry prompt.
    let last = main.last().expect("a request");
    assert_eq!(occurrences(&last["contents"], "MARK-stop"), 1, "{last}");
    assert_eq!(
        occurrences(&last["contents"], "[ASYNC DELEGATION COMPLETE —"),
        1
    );
    let retries = main
        .iter()
        .filter(|b| occurrences(&b["contents"], "MARK-stop") > 0)
        .count();
    assert_eq!(retries, 1, "the stop hook kept it going once");
    eprintln!(
        "gemini: install → stop-hook delivery in {:?}",
        started.elapsed()
    );
}

/// An `inject` result reaches the model at the next tool boundary (`AfterTool`), appended to
/// that tool's result behind the carrier, once.
#[test]
fn an_inject_result_arrives_with_the_next_tool_result() {
    let mut g = Gemini::new(by_prompt);
    let home = g.machine.hermes.path().to_owned();
    g.model = ModelServer::with_script(Wire::Gemini, {
        Arc::new(dispatching(any_completed(home), |turn| {
            if responses(turn) == 1 {
                Reply::Call {
                    tool: "list_directory".into(),
                    args: json!({"dir_path": "."}),
                }
            } else {
                Reply::Text("done".into())
            }
        }))
    });
    g.install(&[]);
    let line = dispatch_line("printf 'MARK-%s\\n' inject", "inject");
    g.turn(&format!("look around\n{line}"), false);
    g.completed();
    let main = g.main_requests();
    let after_list = main
        .iter()
        .find(|b| occurrences(&b["contents"], "Directory listing") > 0)
        .expect("the listing reached the model");
    let text = after_list["contents"].to_string();
    assert_eq!(text.matches("MARK-inject").count(), 1, "{text}");
    assert!(text.contains("DELEGATION RESULT READY"), "{text}");
    let last = main.last().expect("a request");
    assert_eq!(occurrences(&last["contents"], "MARK-inject"), 1);
}

/// A subagent's tool call takes nothing: its `AfterTool` (the process's `session_id`, no agent
/// field) fires between the `BeforeTool` and `AfterTool` of `invoke_agent`, and the result
/// waits for the main thread's boundary (the `AfterTool` of `invoke_agent` itself).
#[test]
fn a_subagents_tool_call_takes_nothing() {
    let mut g = Gemini::new(by_prompt);
    let home = g.machine.hermes.path().to_owned();
    g.model = ModelServer::with_script(Wire::Gemini, {
        Arc::new(dispatching(any_completed(home), |turn| {
            if turn.tools.iter().any(|t| t == "invoke_agent") && responses(turn) == 1 {
                return Reply::Call {
                    tool: "invoke_agent".into(),
                    args: json!({
                        "agent_name": "generalist",
                        "prompt": "CALL list_directory {\"dir_path\": \".\"}",
                    }),
                };
            }
            by_prompt(turn)
        }))
    });
    g.install(&[]);
    let line = dispatch_line("printf 'MARK-%s\\n' sub", "inject");
    g.turn(&format!("ask a subagent\n{line}"), false);
    g.completed();
    let subagent: Vec<Value> = g
        .requests()
        .into_iter()
        .filter(|b| offers(b, "complete_task"))
        .collect();
    assert!(
        subagent
            .iter()
            .any(|b| occurrences(&b["contents"], "Directory listing") > 0),
        "the subagent ran its tool"
    );
    for body in &subagent {
        assert_eq!(
            occurrences(&body["contents"], "MARK-sub"),
            0,
            "a subagent took the result: {body}"
        );
    }
    let last = g.main_requests().pop().expect("a request");
    assert_eq!(occurrences(&last["contents"], "MARK-sub"), 1, "{last}");
}

/// `after_turn`: a result that finishes after the turn (and the process) ended is in the first
/// request of the next turn (`gemini --resume latest -p …`) exactly once, and a third turn
/// adds nothing.
#[test]
fn an_after_turn_result_arrives_on_the_resumed_turn_exactly_once() {
    let g = Gemini::new(by_prompt);
    g.install(&[]);
    let go = g.machine.project().join("go");
    let line = format!(
        "CALL delegate_task {}",
        json!({"goal": "a slow check", "command": ["sh", "-c", until_told(&go, "MARK-$((40+2))")]})
    );
    g.turn(&format!("start it\n{line}"), false);
    std::fs::write(&go, "").expect("go");
    let ended = wait_for(LIMIT, "the delegation to end", || {
        g.ended().first().cloned()
    });
    assert_eq!(
        ended["status"], "completed",
        "the child outlives `gemini -p` (its SessionEnd, reason exit, detaches): {ended}"
    );
    g.turn("SAY what came back?", true);
    let next = g.main_requests().pop().expect("a request");
    assert_eq!(occurrences(&next["contents"], "MARK-42"), 1, "{next}");
    g.turn("SAY anything else?", true);
    let after = g.main_requests().pop().expect("a request");
    assert_eq!(occurrences(&after["contents"], "MARK-42"), 1, "{after}");
}

/// A 3,000-line result is handed over within Gemini's budget: the block the model reads is
/// shortened to fit and names how to read all of it.
#[test]
fn a_3000_line_result_fits_the_budget() {
    let mut g = Gemini::new(by_prompt);
    let home = g.machine.hermes.path().to_owned();
    g.model = ModelServer::with_script(Wire::Gemini, {
        Arc::new(dispatching(any_completed(home), by_prompt))
    });
    g.install(&[]);
    let line = dispatch_line(
        "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo \"LINE-$i of the long result\"; done",
        "after_turn",
    );
    g.turn(&format!("a long one\n{line}"), false);
    g.completed();
    let last = g.main_requests().pop().expect("a request");
    let block = last["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["parts"].as_array().into_iter().flatten())
        .filter_map(|p| p["text"].as_str())
        .find(|t| t.contains("[ASYNC DELEGATION COMPLETE —"))
        .expect("the result reached the model");
    let budget = hermes_agents::find("gemini").expect("a profile").budget;
    assert!(
        block.chars().count() <= budget,
        "{} > {budget}",
        block.chars().count()
    );
    assert!(block.contains("LINE-1 of"), "the head is kept: {block}");
    assert!(block.contains("LINE-3000 of"), "the tail is kept: {block}");
    assert!(block.contains("delegation_result"), "{block}");
}

/// `hermes delegate --agent gemini`: the child's model (the one that answered, not `auto`),
/// its calls, the tool in flight, its answer and usage.
#[test]
fn gemini_as_a_child_reports_model_calls_tool_answer_and_usage() {
    let g = Gemini::new(|turn| {
        if turn.after_tool {
            return Reply::Text("the-child-answer-42".into());
        }
        Reply::Call {
            tool: "run_shell_command".into(),
            args: json!({"command": "until [ -e go ]; do sleep 0.05; done; echo went"}),
        }
    });
    let dispatched = g.hermes_json(&[
        "delegate",
        "--session",
        "child-test",
        "--agent",
        "gemini",
        "--toolsets",
        "terminal",
        "--goal",
        "wait for the go file",
        "--json",
    ]);
    let id = dispatched["delegation_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let status = || g.hermes_json(&["delegation", "status", &id, "--json"])["tasks"][0].clone();
    let task = wait_for(LIMIT, "the shell call in flight", || {
        let t = status();
        (t["progress"]["current_tool"] == "run_shell_command").then_some(t)
    });
    assert!(task["progress"]["api_calls"].as_u64() >= Some(1), "{task}");
    std::fs::write(g.machine.project().join("go"), "").expect("go");
    let task = wait_for(LIMIT, "the child to complete", || {
        let t = status();
        (t["status"] == "completed" || t["status"] == "failed").then_some(t)
    });
    assert_eq!(task["status"], "completed", "{task}");
    assert!(
        task["result"]
            .as_str()
            .is_some_and(|r| r.contains("the-child-answer-42")),
        "{task}"
    );
    let answered = g.requests();
    let model = hermes_testkit::model::gemini_model_of(
        &g.model
            .requests()
            .into_iter()
            .rfind(|r| r.path.contains(":streamGenerateContent"))
            .expect("a turn")
            .path,
    );
    assert_eq!(task["model"], model.as_str(), "{task}");
    assert_ne!(task["model"], "auto");
    assert!(task["progress"]["api_calls"].as_u64() >= Some(2), "{task}");
    let input = task["usage"]["input_tokens"].as_u64().unwrap_or(0);
    assert!(
        input >= hermes_testkit::model::USAGE_INPUT_TOKENS * answered.len() as u64,
        "{task}"
    );
}

/// An API error ends the child `failed`, with Gemini's message.
#[test]
fn a_gemini_child_whose_api_fails_is_failed_with_its_message() {
    let g = Gemini::new(by_prompt);
    let run = g.run(
        "hermes",
        &[
            "-z",
            "--agent",
            "gemini",
            "--goal",
            "FAIL 400 the-scripted-api-refusal",
        ],
    );
    assert_ne!(run.code, 0, "{run:?}");
    let ended = g.ended();
    let id = ended[0]["delegation_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let task = g.hermes_json(&["delegation", "status", &id, "--json"])["tasks"][0].clone();
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task.to_string().contains("the-scripted-api-refusal"),
        "{task}"
    );
}

/// `hook install gemini --user` merges into a `settings.json` with comments (Gemini reads
/// comments), keeping them and the person's lines, and Gemini still reads the file.
#[test]
fn user_install_keeps_the_comments_of_geminis_settings() {
    let g = Gemini::new(by_prompt);
    let before = "{\n  // how I log in\n  \"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}}, /* keep */\n  \"ui\": {\n    \"theme\": \"GitHub\" // my theme\n  }\n}\n";
    std::fs::write(g.user_settings(), before).expect("settings.json");
    g.install(&["--user"]);
    let after = std::fs::read_to_string(g.user_settings()).expect("settings.json");
    for line in [
        "  // how I log in",
        "/* keep */",
        "    \"theme\": \"GitHub\" // my theme",
    ] {
        assert!(after.contains(line), "{line:?} is gone:\n{after}");
    }
    assert!(
        after.contains("hermes hook post-tool-use --agent gemini"),
        "{after}"
    );
    // Twice changes nothing.
    g.install(&["--user"]);
    assert_eq!(
        std::fs::read_to_string(g.user_settings()).expect("settings.json"),
        after
    );
    let list = g.run("gemini", &["mcp", "list"]);
    let listed = format!("{}{}", list.stdout, list.stderr);
    assert!(
        listed.contains("hermes") && listed.contains("Connected"),
        "{listed}"
    );
    // Uninstalled, hermes' entries are gone and the person's comments are still there.
    let run = g.run("hermes", &["hook", "uninstall", "gemini", "--user"]);
    assert_eq!(run.code, 0, "{run:?}");
    let removed = std::fs::read_to_string(g.user_settings()).expect("settings.json");
    assert!(!removed.contains("hermes"), "{removed}");
    for line in [
        "  // how I log in",
        "/* keep */",
        "    \"theme\": \"GitHub\" // my theme",
    ] {
        assert!(removed.contains(line), "{line:?} is gone:\n{removed}");
    }
}
