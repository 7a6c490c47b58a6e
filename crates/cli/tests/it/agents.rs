//! Agent CLIs as children, driven end to end: stand-in executables named `claude`,
//! `codex` and `gemini` on the test's `PATH` replay fixture streams shaped after each CLI's
//! documentation (`crates/registry/tests/it/fixtures/agents/`), pausing where a fixture says
//! `#wait NAME` until the test creates `$STANDIN_DIR/NAME`, so every observation below is of a
//! state the test holds the child in, not of a race.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Hermes, wait_for};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// The stand-in: replays `$STANDIN_FIXTURE`, obeying its `#` directions, and records its argv.
const STANDIN: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$STANDIN_DIR/argv-$(basename "$0")"
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in
    '#sleep '*) sleep "${line#\#sleep }" ;;
    '#wait '*) n=0; while [ ! -e "$STANDIN_DIR/${line#\#wait }" ] && [ "$n" -lt 1200 ]; do sleep 0.05; n=$((n+1)); done ;;
    '#exit '*) exit "${line#\#exit }" ;;
    '#sh '*) sh -c "${line#\#sh }" ;;
    '#'*) ;;
    *) printf '%s\n' "$line" ;;
  esac
done < "$STANDIN_FIXTURE"
"#;

/// A home with the stand-ins on `PATH` and a directory for their fixtures and releases.
struct Agents {
    h: Hermes,
    dir: tempfile::TempDir,
    path: String,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../registry/tests/it/fixtures/agents")
        .join(name)
}

impl Agents {
    fn new() -> Agents {
        use std::os::unix::fs::PermissionsExt;
        let h = Hermes::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        for name in ["claude", "codex", "gemini"] {
            let p = bin.join(name);
            std::fs::write(&p, STANDIN).expect("stand-in");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Agents { h, dir, path }
    }

    /// Runs hermes with the stand-ins replaying `fixture`.
    fn run(&self, fixture: &Path, args: &[&str], env: &[(&str, &str)]) -> crate::common::Run {
        let mut c = self.h.command(args);
        c.env("PATH", &self.path)
            .env("STANDIN_DIR", self.dir.path())
            .env("STANDIN_FIXTURE", fixture)
            .env("HERMES", env!("CARGO_BIN_EXE_hermes"))
            .env_remove("HERMES_CHILD_ROLE")
            .env_remove("HERMES_CHILD_DEPTH");
        for (k, v) in env {
            c.env(k, v);
        }
        crate::common::Run::from(c.output().expect("hermes runs"))
    }

    /// Lets a stand-in waiting at `#wait name` go on.
    fn release(&self, name: &str) {
        std::fs::write(self.dir.path().join(name), "").expect("release");
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("fixture");
        p
    }

    fn status(&self, id: &str) -> Value {
        self.h.json(&["delegation", "status", id, "--json"])
    }

    fn dispatch(&self, fixture: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
        let mut all = vec!["delegate", "--session", "S", "--json"];
        all.extend_from_slice(args);
        let run = self.run(fixture, &all, env);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()["delegation_id"]
            .as_str()
            .expect("an id")
            .to_owned()
    }
}

fn read(path: &Value) -> String {
    std::fs::read_to_string(path.as_str().expect("a path")).expect("readable")
}

#[test]
fn a_claude_child_shows_its_calls_tool_model_answer_and_usage_as_it_streams() {
    let a = Agents::new();
    let id = a.dispatch(
        &fixture("claude.jsonl"),
        &[
            "--agent",
            "claude",
            "--goal",
            "run the tests",
            "--model",
            "sonnet",
        ],
        &[],
    );
    // Held inside its Bash call: one model call so far, the tool in flight.
    let task = wait_for(LIMIT, "the tool in flight", || {
        let s = a.status(&id);
        let t = s["tasks"][0].clone();
        (t["progress"]["current_tool"] == "Bash").then_some(t)
    });
    assert_eq!(task["progress"]["api_calls"], 1, "{task}");
    assert_eq!(task["agent"], "claude", "{task}");
    a.release("tool");
    // Past the tool, held before its answer: two calls, no tool.
    wait_for(LIMIT, "the second call with no tool in flight", || {
        let t = a.status(&id)["tasks"][0].clone();
        (t["progress"]["api_calls"] == 2 && t["progress"]["current_tool"].is_null()).then_some(())
    });
    a.release("answer");
    let task = wait_for(LIMIT, "the child to complete", || {
        let t = a.status(&id)["tasks"][0].clone();
        (t["status"] == "completed").then_some(t)
    });
    assert_eq!(
        task["result"],
        "All 12 tests pass. I ran cargo test; nothing was left undone."
    );
    assert_eq!(task["model"], "claude-sonnet-4-5-20250929", "{task}");
    assert_eq!(task["usage"]["input_tokens"], 4135, "{task}");
    assert_eq!(task["usage"]["output_tokens"], 310, "{task}");
    assert_eq!(task["usage"]["cost_usd"], 0.0213, "{task}");

    // The argv the profile built: print mode, the subagent prompt, the stream, the model, and
    // the permission flags of its sandbox (`full`, the command line's default).
    let argv = std::fs::read_to_string(a.dir.path().join("argv-claude")).expect("argv");
    assert!(argv.starts_with("-p\nYou are a subagent"), "{argv}");
    assert!(argv.contains("GOAL:\nrun the tests\n"), "{argv}");
    assert!(
        argv.contains("--output-format\nstream-json\n--verbose\n--model\nsonnet\n"),
        "{argv}"
    );
    assert!(
        argv.ends_with("--permission-mode\nacceptEdits\n--permission-prompts\nnone\n"),
        "{argv}"
    );

    // One readable line per event, the raw stream beside it.
    let log = read(&task["transcript"]);
    assert!(log.contains(" prg | tool Bash: cargo test\n"), "{log}");
    assert!(
        log.contains(" out | assistant: I will run the tests first.\n"),
        "{log}"
    );
    assert!(log.contains(" out | result: All 12 tests pass."), "{log}");
    assert!(
        !log.contains("\"type\":\"assistant\""),
        "the log is readable: {log}"
    );
    let raw = std::fs::read_to_string(
        task["transcript"]
            .as_str()
            .expect("path")
            .replace(".log", ".jsonl"),
    )
    .expect("the raw stream");
    assert_eq!(raw.lines().count(), 8, "every line of the stream: {raw}");

    let block = a.h.run(&["drain", "--session", "S"]);
    assert_eq!(block.code, 0, "{}", block.stderr);
    let text = &block.stdout;
    assert!(text.contains("Model: claude-sonnet-4-5-20250929"), "{text}");
    assert!(text.contains("Progress: 3 calls"), "{text}");
    assert!(
        text.contains("Usage: 4135 input tokens (3000 cached), 310 output, $0.0213"),
        "{text}"
    );
    assert!(text.contains("All 12 tests pass."), "{text}");
}

#[test]
fn codex_and_gemini_children_give_their_answers_and_models() {
    let a = Agents::new();
    a.release("tool");
    a.release("answer");
    let codex = a.run(
        &fixture("codex.jsonl"),
        &[
            "-z",
            "--json",
            "--agent",
            "codex",
            "--goal",
            "run the tests",
            "--model",
            "gpt-5",
        ],
        &[],
    );
    assert_eq!(codex.code, 0, "{}", codex.stderr);
    let task = &codex.json()["tasks"][0];
    assert_eq!(
        task["result"], "The tests pass: 12 passed, 0 failed.",
        "{task}"
    );
    let argv = std::fs::read_to_string(a.dir.path().join("argv-codex")).expect("argv");
    assert!(
        argv.starts_with("exec\n--json\n--skip-git-repo-check\n-m\ngpt-5\nYou are a subagent"),
        "{argv}"
    );

    let gemini = a.run(
        &fixture("gemini.jsonl"),
        &["-z", "--agent", "gemini", "--goal", "run the tests"],
        &[],
    );
    assert_eq!(gemini.code, 0, "{}", gemini.stderr);
    assert!(
        gemini.stdout.contains("Model: gemini-2.5-pro"),
        "{}",
        gemini.stdout
    );
    assert!(
        gemini.stdout.contains("Progress: 2 calls"),
        "{}",
        gemini.stdout
    );
    assert!(
        gemini.stdout.contains("All 12 tests pass."),
        "{}",
        gemini.stdout
    );
    assert!(
        gemini
            .stdout
            .contains("Usage: 2480 input tokens (1200 cached), 110 output\n"),
        "{}",
        gemini.stdout
    );
}

#[test]
fn an_agents_own_error_fails_the_child_with_its_message() {
    let a = Agents::new();
    for (agent, file, message) in [
        ("claude", "claude-error.jsonl", "Credit balance is too low"),
        ("codex", "codex-error.jsonl", "model not found"),
        ("gemini", "gemini-error.jsonl", "Please set an Auth method"),
    ] {
        // Each stand-in exits 0: the stream alone says it failed.
        let run = a.run(
            &fixture(file),
            &["-z", "--json", "--agent", agent, "--goal", "g"],
            &[],
        );
        assert_eq!(run.code, 1, "{agent}: {}", run.stderr);
        let task = &run.json()["tasks"][0];
        assert_eq!(task["status"], "failed", "{agent}: {task}");
        let result = task["result"].as_str().expect("result");
        assert!(
            result.contains(&format!("{agent} reported an error")),
            "{result}"
        );
        assert!(result.contains(message), "{agent}: {result}");
    }
}

#[test]
fn the_in_tool_threshold_holds_while_a_tool_runs_and_the_idle_one_after() {
    let a = Agents::new();
    let stall = [
        ("HERMES_DELEGATION_STALL_IDLE_SECONDS", "1"),
        ("HERMES_DELEGATION_STALL_IN_TOOL_SECONDS", "60"),
        ("HERMES_DELEGATION_STALL_GRACE_SECONDS", "1"),
    ];
    let id = a.dispatch(
        &fixture("claude.jsonl"),
        &["--agent", "claude", "--goal", "run the tests"],
        &stall,
    );
    // Quiet inside its tool for longer than the idle threshold, and still running.
    wait_for(LIMIT, "quiet in a tool past the idle threshold", || {
        let t = a.status(&id)["tasks"][0].clone();
        assert!(
            t["status"] == "running" || t["status"] == "pending",
            "the in-tool threshold applies: {t}"
        );
        (t["progress"]["current_tool"] == "Bash"
            && t["progress"]["quiet_seconds"].as_f64() > Some(2.5))
        .then_some(())
    });
    a.release("tool");
    // Out of the tool and quiet before its answer: the idle threshold stops it.
    let task = wait_for(LIMIT, "the child to stall idle", || {
        let t = a.status(&id)["tasks"][0].clone();
        (t["status"] == "stalled").then_some(t)
    });
    assert_eq!(task["detail"]["stall_phase"], "idle", "{task}");
    assert_eq!(task["detail"]["stall_threshold_seconds"], 1.0, "{task}");
}

#[test]
fn garbage_and_half_lines_fall_back_without_loss() {
    let a = Agents::new();
    let f = a.write(
        "garbage.jsonl",
        concat!(
            "{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m-1\"}\n",
            "Warning: something printed by a wrapper\n",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"a\",\"content\":[{\"type\":\"te\n",
            "\u{1}\u{2} binary-ish\n",
            "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"survived\"}\n",
        ),
    );
    let run = a.run(
        &f,
        &["-z", "--json", "--agent", "claude", "--goal", "g"],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let task = &run.json()["tasks"][0];
    assert_eq!(task["result"], "survived");
    let log = read(&task["transcript"]);
    assert_eq!(log.matches("cannot read some lines").count(), 1, "{log}");
    for line in [
        " out | Warning: something printed by a wrapper\n",
        " out | {\"type\":\"assistant\",\"message\":{\"id\":\"a\",\"content\":[{\"type\":\"te\n",
        " out | \u{1}\u{2} binary-ish\n",
        " prg | init model m-1\n",
    ] {
        assert!(log.contains(line), "{line:?} in {log}");
    }
}

#[test]
fn an_agent_whose_program_is_missing_is_refused_naming_it() {
    let h = Hermes::new();
    let run = h.run_env(
        &["-z", "--agent", "claude", "--goal", "g"],
        &[("PATH", "/nonexistent")],
    );
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("\"claude\" is not installed"),
        "{}",
        run.stderr
    );
    let run = h.run(&[
        "delegate",
        "--session",
        "S",
        "--agent",
        "nosuch",
        "--goal",
        "g",
    ]);
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("unknown agent \"nosuch\""),
        "{}",
        run.stderr
    );
    let run = h.run(&["-z", "--agent", "claude"]);
    run.assert_one_error_line(2);
    let run = h.run(&["-z", "--adapter", "xml", "--", "echo", "x"]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("unknown adapter"), "{}", run.stderr);
}

/// A stand-in agent that tries to delegate from inside itself and reports how that went.
const NESTED: &str = concat!(
    "{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m\"}\n",
    "#sh \"$HERMES\" -z -q --role orchestrator --agent claude --goal deeper ",
    ">\"$STANDIN_DIR/out-$HERMES_CHILD_DEPTH\" 2>\"$STANDIN_DIR/err-$HERMES_CHILD_DEPTH\"; ",
    "echo $? >\"$STANDIN_DIR/code-$HERMES_CHILD_DEPTH\"\n",
    "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"tried\"}\n",
);

#[test]
fn a_leaf_cannot_delegate_and_an_orchestrator_can_until_max_depth() {
    let a = Agents::new();
    let f = a.write("nested.jsonl", NESTED);
    let file = |name: &str| std::fs::read_to_string(a.dir.path().join(name)).unwrap_or_default();

    // A leaf (the default role): its hermes refuses with one line, exit 2.
    let run = a.run(&f, &["-z", "--agent", "claude", "--goal", "g"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(file("code-1").trim(), "2");
    assert!(file("err-1").contains("leaf child"), "{}", file("err-1"));
    assert_eq!(file("err-1").lines().count(), 1);

    // An orchestrator at depth 1 may: its child at depth 2 (max_depth) may not.
    std::fs::remove_file(a.dir.path().join("code-1")).expect("reset");
    let run = a.run(
        &f,
        &[
            "-z",
            "--role",
            "orchestrator",
            "--agent",
            "claude",
            "--goal",
            "g",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(file("code-1").trim(), "0", "{}", file("err-1"));
    assert_eq!(file("code-2").trim(), "2");
    assert!(
        file("err-2").contains("delegation.max_depth is 2"),
        "{}",
        file("err-2")
    );

    // A plain command child is a leaf too, unless dispatched as an orchestrator: then it may
    // run hermes, within the depth limit.
    let run = a.h.run(&[
        "-z",
        "--json",
        "--role",
        "orchestrator",
        "--",
        env!("CARGO_BIN_EXE_hermes"),
        "-z",
        "-q",
        "--",
        "echo",
        "nested",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// `hermes mcp` started inside a leaf agent child (as that agent would start it) refuses
/// `delegate_task` with a tool error, and keeps serving.
#[test]
fn the_mcp_server_inside_a_leaf_child_refuses_delegate_task() {
    use std::io::{BufRead, BufReader, Write};
    let h = Hermes::new();
    let mut c = h.command(&["mcp"]);
    let mut server = c
        .env("HERMES_SESSION_ID", "S")
        .env("HERMES_CHILD_ROLE", "leaf")
        .env("HERMES_CHILD_DEPTH", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("hermes mcp starts");
    let mut stdin = server.stdin.take().expect("stdin");
    let stdout = server.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").expect("write");
        stdin.flush().expect("flush");
    };
    let answer = |id: u64| loop {
        let v = rx.recv_timeout(LIMIT).expect("an answer in time");
        if v["id"] == id {
            break v;
        }
    };
    send(
        serde_json::json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
    );
    answer(1);
    send(serde_json::json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"delegate_task","arguments":{"goal":"g","command":["true"]}}}),
    );
    let refused = answer(2);
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(refused.to_string().contains("leaf child"), "{refused}");
    send(serde_json::json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}));
    let tools = answer(3);
    assert!(
        tools.to_string().contains("delegate_task"),
        "still serving: {tools}"
    );
    let _ = server.kill();
    let _ = server.wait();
}
