//! A conversation outlives its agent process, and its children run with the person's
//! environment, with the real CLIs:
//!
//! - a headless turn (`claude -p`, `copilot -p`) dispatches a child that ends after the agent
//!   exited (each fires its session-end hook at exit: Claude Code with reason `other`, Copilot
//!   with `complete`, its `copilot-sdk/types.d.ts` naming complete, error, abort, timeout and
//!   user_exit); the resumed turn (`claude -p --resume ID`, `copilot --resume ID`) gets the
//!   result at its first request, once; an explicit discard still ends the session;
//! - a child dispatched through the MCP server of Claude Code, Codex (which passes its servers
//!   a fixed whitelist of variables) and Gemini CLI (which drops names that look secret) has
//!   the person's `FAKE_API_KEY`, and hermes writes its value nowhere;
//! - a leaf Codex child (Codex strips `HERMES_CHILD_*` from its server) cannot delegate, an
//!   orchestrator can;
//! - Gemini's strict mode (`GITHUB_SHA` set) passes hermes' variables to `hermes mcp` because
//!   `hook install` allowed them by name.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_testkit::model::{ModelServer, Reply, Turn, Wire, by_prompt, occurrences};
use serde_json::{Value, json};

use super::Machine;
use super::claude::{Claude, delegate, events, first_with, say, session_of};
use super::codex::{
    Codex, KEY_VAR, child_codex, delegation_id, dispatch_step, hermes_call, once_finished,
    printing, steps, tool_outputs,
};
use super::gemini::{Gemini, TOOLS};
use crate::common::{until_told, wait_for};

const LIMIT: Duration = Duration::from_secs(60);

/// The secret the person's agent has: only a child that got the agent's environment can
/// print its length, and hermes must write it nowhere.
const SECRET: &str = "fake-secret-value-7c1e0b93d2a4";

/// A command printing the length of `$FAKE_API_KEY` (its output must not hold the value).
const KEY_LENGTH: &str = "echo KEYLEN-${#FAKE_API_KEY}";

/// What [`KEY_LENGTH`] prints for [`SECRET`].
fn key_length() -> String {
    format!("KEYLEN-{}", SECRET.len())
}

/// `delegation status ID --json` in `machine`'s home.
fn status(machine: &Machine, id: &str) -> Value {
    machine.hermes.json(&["delegation", "status", id, "--json"])
}

/// Waits until delegation `id` has ended; its status.
fn ended(machine: &Machine, id: &str) -> Value {
    wait_for(LIMIT, "the child to end", || {
        let status = status(machine, id);
        (!matches!(status["status"].as_str(), Some("running" | "queued") | None)).then_some(status)
    })
}

/// The only delegation of `machine`'s home that is still running, once there is one.
fn the_running(machine: &Machine) -> String {
    wait_for(LIMIT, "a running child", || {
        let list = machine
            .hermes
            .json(&["delegation", "list", "--all", "--json"]);
        list["running"][0]["delegation_id"]
            .as_str()
            .map(str::to_owned)
    })
}

/// That the session's discard interrupted child `id` and dropped its result.
fn assert_discarded(machine: &Machine, id: &str) {
    let status = ended(machine, id);
    assert_eq!(status["status"], "interrupted", "{status}");
    let delivery = &status["tasks"][0]["delivery"];
    assert_eq!(delivery["state"], "dropped", "{status}");
}

/// That no file under `dir` holds [`SECRET`].
fn assert_secret_nowhere(dir: &Path) {
    let mut seen = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let entries = std::fs::read_dir(&path).expect("a directory");
            stack.extend(entries.filter_map(|e| Some(e.ok()?.path())));
        } else if meta.is_file() {
            seen += 1;
            let bytes = std::fs::read(&path).unwrap_or_default();
            let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
            assert!(!found, "the secret is in {}", path.display());
        }
    }
    assert!(seen > 0, "nothing under {}", dir.display());
}

/// `claude -p PROMPT --resume ID`: one more turn of the conversation; its events.
fn resume_claude(claude: &Claude, id: &str, prompt: &str) -> Vec<Value> {
    let out = claude
        .command()
        .args(["-p", prompt, "--resume", id])
        .args(["--output-format", "stream-json", "--verbose"])
        .arg("--dangerously-skip-permissions")
        .output()
        .expect("claude runs");
    assert!(out.status.success(), "{out:?}");
    events(&out.stdout)
}

/// Wraps each of hermes' hook commands in `.claude/settings.json` in a script that logs how
/// long it took (microseconds, one line per hook); the log's path.
fn time_the_hooks(claude: &Claude) -> std::path::PathBuf {
    let log = claude.machine.home().join("hook-times");
    let wrapper = claude.machine.home().join("timed-hermes");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ns=$(date +%s%N); hermes \"$@\"; rc=$?; e=$(date +%s%N)\necho \"$2 $(( (e - s) / 1000 ))\" >> '{}'\nexit $rc\n",
            log.display()
        ),
    )
    .expect("the wrapper");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let settings = claude.machine.project().join(".claude/settings.json");
    let text = std::fs::read_to_string(&settings).expect("settings.json");
    let timed = text.replace("\"hermes hook ", &format!("\"{} hook ", wrapper.display()));
    assert_ne!(timed, text, "hermes' hooks in {text}");
    std::fs::write(&settings, timed).expect("settings.json");
    log
}

/// The hook times logged since `from` lines: (count, total microseconds).
fn hook_times(log: &Path, from: usize) -> (usize, u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let times: Vec<u64> = text
        .lines()
        .skip(from)
        .filter_map(|l| l.split_once(' ')?.1.parse().ok())
        .collect();
    (times.len(), times.iter().sum())
}

/// `claude -p` dispatches and exits (`SessionEnd`, reason `other`: detached); the child
/// finishes after; `claude -p --resume ID` gets the result in its first request, once; a third
/// turn adds nothing; `/clear` on a resumed conversation discards it.
#[test]
fn claude_print_then_resume_gets_the_result_once_and_clear_discards() {
    let claude = Claude::new();
    let log = time_the_hooks(&claude);
    let marker = "DETACHED-CLAUDE-RESULT";
    let args = delegate(&claude.gated(&say(marker)), "after_turn");
    let started = Instant::now();
    let first = claude.print(&format!(
        "STEP mcp__hermes__delegate_task {args}\nSAY dispatched"
    ));
    let first_turn = started.elapsed();
    let session = session_of(&first);
    let (hooks_first, micros_first) = hook_times(&log, 0);
    let id = the_running(&claude.machine);
    let sessions = claude.machine.hermes.json(&["session", "list", "--json"]);
    assert!(
        sessions.to_string().contains("detached"),
        "the exit detached the session: {sessions}"
    );
    std::fs::write(&claude.gate, "").expect("open the gate");
    let done = ended(&claude.machine, &id);
    assert_eq!(done["status"], "completed", "it outlived claude: {done}");
    let before = claude.main_turns().len();
    assert_eq!(first_with(&claude.main_turns(), marker), None);
    let resumed = Instant::now();
    resume_claude(&claude, &session, "SAY next turn");
    let resume_turn = resumed.elapsed();
    let (hooks_second, micros_second) = hook_times(&log, hooks_first);
    let turns = claude.main_turns();
    assert_eq!(
        occurrences(&turns[before].body, marker),
        1,
        "the resumed turn's first request: {:#}",
        turns[before].body
    );
    let delivered = status(&claude.machine, &id);
    assert_eq!(
        delivered["tasks"][0]["delivery"]["state"], "delivered",
        "{delivered}"
    );
    eprintln!(
        "claude -p → --resume: first turn {first_turn:?} ({hooks_first} hooks, {micros_first} µs), \
         dispatch (turn start) to delivered (resumed turn done) {:?}, resumed turn {resume_turn:?} ({hooks_second} hooks, {micros_second} µs)",
        started.elapsed()
    );
    resume_claude(&claude, &session, "SAY third turn");
    let last = claude.main_turns().pop().expect("a request");
    assert_eq!(
        occurrences(&last.body, marker),
        1,
        "nothing delivered twice"
    );

    // A second child, then `/clear`: the conversation is discarded, its work with it.
    let gate = claude.machine.home().join("gate-2");
    let args = delegate(&until_told(&gate, "never-delivered"), "after_turn");
    resume_claude(
        &claude,
        &session,
        &format!("STEP mcp__hermes__delegate_task {args}\nSAY dispatched again"),
    );
    let second = the_running(&claude.machine);
    resume_claude(&claude, &session, "/clear");
    assert_discarded(&claude.machine, &second);
}

/// `copilot -p` dispatches and exits (`sessionEnd`, reason `complete`: detached); `copilot
/// --resume ID -p` gets the result in its first request, once; a third turn adds nothing;
/// `hermes session end` (Copilot has no discard of its own) still ends it.
#[test]
fn copilot_print_then_resume_gets_the_result_once_and_session_end_discards() {
    let machine = Machine::new();
    super::copilot::install(&machine, &[], &[]);
    let gate = machine.home().join("gate");
    let marker = "DETACHED-COPILOT-RESULT";
    let command = until_told(&gate, &printing(marker));
    let server = ModelServer::with_script(
        Wire::Chat,
        Arc::new(move |turn: &Turn<'_>| {
            let dispatch = turn.last_user.contains("dispatch it");
            if dispatch && !turn.after_tool {
                return Reply::Call {
                    tool: "hermes-delegate_task".into(),
                    args: json!({"goal": "wait", "command": ["sh", "-c", command]}),
                };
            }
            by_prompt(turn)
        }),
    );
    let session = super::copilot::uuid(0x43);
    let turn = |args: &[&str]| {
        let out = super::copilot::command(&machine, &server, false)
            .arg("--allow-all-tools")
            .args(args)
            .output()
            .expect("copilot runs");
        assert!(out.status.success(), "{out:?}");
    };
    turn(&["--session-id", &session, "-p", "dispatch it"]);
    let id = the_running(&machine);
    std::fs::write(&gate, "").expect("open the gate");
    let done = ended(&machine, &id);
    assert_eq!(done["status"], "completed", "it outlived copilot: {done}");
    let before = super::copilot::sent(&server).len();
    turn(&["--resume", &session, "-p", "SAY next turn"]);
    let sent = super::copilot::sent(&server);
    assert_eq!(
        occurrences(&sent[before], marker),
        1,
        "the resumed turn's first request: {:#}",
        sent[before]
    );
    turn(&["--resume", &session, "-p", "SAY third turn"]);
    let last = super::copilot::sent(&server).pop().expect("a request");
    assert_eq!(occurrences(&last, marker), 1, "nothing delivered twice");

    std::fs::remove_file(&gate).expect("close the gate");
    turn(&["--resume", &session, "-p", "dispatch it"]);
    let second = the_running(&machine);
    let out = machine.hermes.run(&["session", "end", &session]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_discarded(&machine, &second);
}

/// Claude's MCP server dispatches a child that has the person's `FAKE_API_KEY`; its value is
/// in no file of hermes' home.
#[test]
fn a_child_dispatched_through_claude_has_the_persons_key() {
    let claude = Claude::new();
    let args = delegate(KEY_LENGTH, "after_turn");
    let out = claude
        .command()
        .env("FAKE_API_KEY", SECRET)
        .args([
            "-p",
            &format!("STEP mcp__hermes__delegate_task {args}\nSAY dispatched"),
        ])
        .args(["--output-format", "stream-json", "--verbose"])
        .arg("--dangerously-skip-permissions")
        .output()
        .expect("claude runs");
    assert!(out.status.success(), "{out:?}");
    let id = wait_for(LIMIT, "the dispatch", || {
        let text = claude
            .machine
            .hermes
            .json(&["delegation", "list", "--all", "--json"])
            .to_string();
        delegation_id(&text)
    });
    let done = ended(&claude.machine, &id);
    assert_eq!(
        done["tasks"][0]["result"].as_str().map(str::trim),
        Some(key_length().as_str()),
        "{done}"
    );
    assert_secret_nowhere(claude.machine.hermes.path());
}

/// Codex passes its MCP servers a fixed whitelist of variables: the child still has the
/// person's `FAKE_API_KEY`, and hermes writes its value nowhere.
#[test]
fn a_child_dispatched_through_codex_has_the_persons_key() {
    let codex = Codex::new(|cli| {
        steps(vec![
            dispatch_step(json!({"goal": "the key", "command": ["sh", "-c", KEY_LENGTH]})),
            once_finished(cli, Reply::Text("dispatched".into())),
        ])
    });
    codex.install();
    codex
        .codex(&["exec", "--trust", "SAY trusted"])
        .output()
        .expect("codex runs");
    let before = codex.model.turns().len();
    let out = codex
        .codex(&[
            "exec",
            "--json",
            "--dangerously-bypass-hook-trust",
            "the key",
        ])
        .env("FAKE_API_KEY", SECRET)
        .output()
        .expect("codex runs");
    assert!(out.status.success(), "{out:?}");
    let turns = &codex.model.turns()[before..];
    let answer = tool_outputs(&turns[1].body).join("");
    assert!(!answer.contains("warning"), "{answer}");
    let id = delegation_id(&answer).expect("an id");
    let done = ended(&codex.machine, &id);
    assert_eq!(
        done["tasks"][0]["result"].as_str().map(str::trim),
        Some(key_length().as_str()),
        "{done}"
    );
    assert_secret_nowhere(codex.machine.hermes.path());
}

/// Gemini CLI drops every variable whose name holds KEY from its MCP servers' environment:
/// the child still has the person's `FAKE_API_KEY`, and hermes writes its value nowhere.
#[test]
fn a_child_dispatched_through_gemini_has_the_persons_key() {
    let g = Gemini::new(by_prompt);
    g.install(&[]);
    let line = format!(
        "CALL delegate_task {}",
        json!({"goal": "the key", "command": ["sh", "-c", KEY_LENGTH]})
    );
    let out = g
        .machine
        .command("gemini")
        .args(["-p", &line, "--output-format", "stream-json"])
        .args(["--allowed-tools", TOOLS])
        .env("GOOGLE_GEMINI_BASE_URL", g.model.base_url())
        .env("GEMINI_API_KEY", "test-key")
        .env("FAKE_API_KEY", SECRET)
        .output()
        .expect("gemini runs");
    assert!(out.status.success(), "{out:?}");
    let done = wait_for(LIMIT, "the child to end", || g.ended().first().cloned());
    let id = done["delegation_id"].as_str().expect("an id");
    let status = status(&g.machine, id);
    assert_eq!(
        status["tasks"][0]["result"].as_str().map(str::trim),
        Some(key_length().as_str()),
        "{status}"
    );
    assert_secret_nowhere(g.machine.hermes.path());
}

/// Gemini's strict mode (`GITHUB_SHA` set, as in GitHub Actions) passes its hooks and MCP
/// servers only a fixed few variables and those the settings allow by name: without hermes'
/// own allowed, the dispatch misses the test's home; `hook install` allows them, and it lands
/// there, bound by the hooks (no warning); `hook uninstall` takes them out again.
#[test]
fn geminis_strict_mode_passes_hermes_variables_that_install_allowed() {
    let g = Gemini::new(by_prompt);
    g.install(&[]);
    let settings = g.machine.project().join(".gemini/settings.json");
    let read = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(&settings).expect("settings")).expect("JSON")
    };
    let mut written = read();
    let allowed = written["security"]["environmentVariableRedaction"]["allowed"].clone();
    for var in ["HERMES_HOME", "HERMES_HOST_IDLE_EXIT_SECONDS"] {
        assert!(
            allowed.as_array().is_some_and(|a| a.contains(&json!(var))),
            "{var}: {written:#}"
        );
    }
    let strict_turn = || {
        let line = format!(
            "CALL delegate_task {}",
            json!({"goal": "strict", "command": ["true"]})
        );
        let out = g
            .machine
            .command("gemini")
            .args(["-p", &line, "--output-format", "stream-json"])
            .args(["--allowed-tools", TOOLS])
            .env("GOOGLE_GEMINI_BASE_URL", g.model.base_url())
            .env("GEMINI_API_KEY", "test-key")
            .env("GITHUB_SHA", "x")
            .output()
            .expect("gemini runs");
        assert!(out.status.success(), "{out:?}");
    };
    // Without them: the dispatch went somewhere else.
    written
        .as_object_mut()
        .expect("an object")
        .remove("security");
    std::fs::write(&settings, written.to_string()).expect("settings");
    strict_turn();
    let list = g.hermes_json(&["delegation", "list", "--all", "--json"]);
    assert_eq!(list["recent_count"], 0, "{list}");
    assert_eq!(list["running_count"], 0, "{list}");
    // Installed again: allowed, and the dispatch is the test's.
    g.install(&[]);
    assert_eq!(
        read()["security"]["environmentVariableRedaction"]["allowed"],
        allowed
    );
    strict_turn();
    let answered = g
        .main_requests()
        .into_iter()
        .rfind(|b| occurrences(&b["contents"], "deleg_") > 0)
        .expect("the dispatch answer reached the model");
    assert_eq!(
        occurrences(&answered["contents"], "warning"),
        0,
        "{answered}"
    );
    let listed = wait_for(LIMIT, "the dispatch in the test's home", || {
        let list = g.hermes_json(&["delegation", "list", "--all", "--json"]);
        (list["recent_count"] == 1).then_some(list)
    });
    assert_eq!(listed["recent"][0]["status"], "completed", "{listed}");
    let run = g.run("hermes", &["hook", "uninstall", "gemini"]);
    assert_eq!(run.code, 0, "{run:?}");
    let left = std::fs::read_to_string(&settings).unwrap_or_default();
    assert!(!left.contains("HERMES_"), "{left}");
}

/// A Codex child's `hermes mcp` (Codex strips `HERMES_CHILD_*` from it) finds its lineage in
/// the process tree: a leaf's `delegate_task` is a tool error, an orchestrator's dispatches.
#[test]
fn a_leaf_codex_child_cannot_delegate_and_an_orchestrator_can() {
    for role in ["leaf", "orchestrator"] {
        let (codex, outside) = child_codex(steps(vec![
            Box::new(|_| {
                hermes_call(
                    "delegate_task",
                    json!({"goal": "nested", "command": ["sh", "-c", printing("GRANDCHILD-RAN")]}),
                )
            }),
            Box::new(|turn| {
                Reply::Text(format!(
                    "the tool said: {}",
                    tool_outputs(&turn.request.body).join("")
                ))
            }),
        ]));
        let out = codex
            .machine
            .command("hermes")
            .args(["hook", "install", "codex", "--user"])
            .env("CODEX_HOME", codex.codex_home())
            .output()
            .expect("hermes runs");
        assert!(out.status.success(), "{out:?}");
        let out = codex
            .machine
            .command("hermes")
            .args(["-z", "--json", "--agent", "codex", "--role", role])
            .args(["--sandbox", "full", "--goal", "delegate", "--cwd"])
            .arg(outside.path())
            .env("CODEX_HOME", codex.codex_home())
            .env(KEY_VAR, "test-key")
            .output()
            .expect("hermes runs");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{role}: {report}");
        let turns = codex.model.turns();
        let said = tool_outputs(&turns.last().expect("requests").body).join("");
        let all = codex
            .machine
            .hermes
            .json(&["delegation", "list", "--all", "--json"]);
        if role == "leaf" {
            assert!(said.contains("leaf child"), "{role}: {said}");
            assert_eq!(all["recent_count"], 1, "no grandchild: {all}");
        } else {
            let id = delegation_id(&said).unwrap_or_else(|| panic!("{role}: {said}"));
            let done = ended(&codex.machine, &id);
            assert_eq!(done["status"], "completed", "{done}");
        }
    }
}
