//! `hermes hook EVENT` run the way agents run hooks (`sh -c`, the JSON on stdin), with this
//! test process as the agent; and `hermes hook install`.

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Hermes, Run, wait_for};

/// Runs `hermes hook EVENT` through `sh -c` with `payload` on stdin.
pub fn hook(h: &Hermes, event: &str, payload: &str, env: &[(&str, &str)]) -> Run {
    let mut c = h.shell(&format!("\"$HERMES\" hook {event}"));
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(payload.as_bytes())
        .expect("payload written");
    drop(stdin);
    Run::from(child.wait_with_output().expect("hook ends"))
}

/// The JSON an agent sends with `event`.
pub fn payload(session: &str, event: &str) -> String {
    let mut p = json!({
        "session_id": session,
        "transcript_path": format!("/tmp/{session}.jsonl"),
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": event,
    });
    match event {
        "PostToolUse" => {
            p["tool_name"] = json!("Bash");
            p["tool_input"] = json!({"command": "ls"});
            p["tool_response"] = json!({"stdout": "a\nb\n", "stderr": "", "interrupted": false});
            p["tool_use_id"] = json!("toolu_01");
        }
        "UserPromptSubmit" => p["prompt"] = json!("what did the checks find?"),
        "Stop" => p["stop_hook_active"] = json!(false),
        "SessionStart" => p["source"] = json!("startup"),
        "SessionEnd" => p["reason"] = json!("prompt_input_exit"),
        _ => {}
    }
    p.to_string()
}

/// Dispatches into `session` from the command line and waits until its result is ready.
fn ready_result(h: &Hermes, session: &str, delivery: &str, text: &str) -> String {
    let handle = h.json(&[
        "delegate",
        "--session",
        session,
        "--delivery",
        delivery,
        "--json",
        "--",
        "sh",
        "-c",
        &format!("echo {text}"),
    ]);
    let id = handle["delegation_id"].as_str().expect("id").to_owned();
    wait_for(Duration::from_secs(20), "the result to be ready", || {
        let status = h.json(&["delegation", "status", &id, "--json"]);
        (status["events"].as_array().is_some_and(|e| !e.is_empty())).then_some(())
    });
    id
}

#[test]
fn bad_json_exits_2_with_one_line_and_consumes_nothing() {
    let h = Hermes::new();
    ready_result(&h, "conv-bad", "inject", "still-here");
    for bad in ["", "not json", "[1,2]", r#"{"session_id": 7}"#] {
        let run = hook(
            &h,
            "post-tool-use",
            bad,
            &[("HERMES_SESSION_ID", "conv-bad")],
        );
        run.assert_one_error_line(2);
        assert_eq!(run.stdout, "");
    }
    let drained = h.run(&["drain", "--session", "conv-bad"]);
    assert!(drained.stdout.contains("still-here"), "{}", drained.stdout);
}

#[test]
fn nothing_ready_means_exit_0_and_no_output() {
    let h = Hermes::new();
    for (event, name) in [
        ("session-start", "SessionStart"),
        ("user-prompt-submit", "UserPromptSubmit"),
        ("post-tool-use", "PostToolUse"),
        ("stop", "Stop"),
    ] {
        let run = hook(&h, event, &payload("conv-quiet", name), &[]);
        assert_eq!(run.code, 0, "{event}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{event}");
        assert_eq!(run.stderr, "", "{event}");
    }
}

#[test]
fn a_hook_without_a_session_is_refused() {
    let h = Hermes::new();
    let run = hook(&h, "stop", r#"{"hook_event_name":"Stop"}"#, &[]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("session_id"), "{}", run.stderr);
    let bad = hook(&h, "stop", r#"{"session_id":"has spaces"}"#, &[]);
    bad.assert_one_error_line(2);
}

#[test]
fn hermes_session_id_wins_over_the_hooks_session_id() {
    let h = Hermes::new();
    ready_result(&h, "pinned", "after_turn", "pinned-result");
    let run = hook(
        &h,
        "user-prompt-submit",
        &payload("agent-own-id", "UserPromptSubmit"),
        &[("HERMES_SESSION_ID", "pinned")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let answer: Value = serde_json::from_str(&run.stdout).expect("JSON answer");
    assert_eq!(
        answer["hookSpecificOutput"]["hookEventName"],
        "UserPromptSubmit"
    );
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("context");
    assert!(context.contains("pinned-result"), "{context}");
}

#[test]
fn hook_install_registers_the_server_and_the_five_hooks_once() {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    std::fs::create_dir(project.path().join(".claude")).expect(".claude");
    std::fs::write(
        project.path().join(".claude/settings.json"),
        r#"{"permissions":{"allow":["Bash(ls)"]}}"#,
    )
    .expect("settings");
    let dir = project.path().to_str().expect("utf-8");
    for _ in 0..2 {
        let run = h.run(&["hook", "install", "claude", "--project", dir]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(project.path().join(p)).expect(p))
            .expect("JSON")
    };
    let mcp = read(".mcp.json");
    assert_eq!(mcp["mcpServers"]["hermes"]["args"], json!(["mcp"]));
    assert_eq!(
        mcp["mcpServers"]["hermes"]["command"],
        env!("CARGO_BIN_EXE_hermes")
    );
    let settings = read(".claude/settings.json");
    assert_eq!(settings["permissions"]["allow"], json!(["Bash(ls)"]));
    assert_eq!(settings["enabledMcpjsonServers"], json!(["hermes"]));
    for (event, sub) in [
        ("SessionStart", "session-start"),
        ("UserPromptSubmit", "user-prompt-submit"),
        ("PostToolUse", "post-tool-use"),
        ("Stop", "stop"),
        ("SessionEnd", "session-end"),
    ] {
        let groups = settings["hooks"][event].as_array().expect(event);
        assert_eq!(groups.len(), 1, "{event} registered once: {settings}");
        let command = groups[0]["hooks"][0]["command"].as_str().expect("command");
        assert!(command.ends_with(&format!(" hook {sub}")), "{command}");
    }
    let printed = h.run(&["hook", "install", "claude", "--print"]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    assert!(
        printed.stdout.contains("\"PostToolUse\""),
        "{}",
        printed.stdout
    );
    assert!(printed.stdout.contains("mcpServers"), "{}", printed.stdout);
}
