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

/// Claude Code's hooks reference (https://code.claude.com/docs/en/hooks, "Exit code 2
/// behavior"): exit 2 blocks — a `UserPromptSubmit` prompt is erased, a `Stop` keeps Claude
/// going — while any other non-zero code is a non-blocking error. hermes' own failures are 1.
#[test]
fn bad_json_exits_1_never_2_with_one_line_and_consumes_nothing() {
    let h = Hermes::new();
    ready_result(&h, "conv-bad", "inject", "still-here");
    for bad in ["", "not json", "[1,2]", r#"{"session_id": 7}"#] {
        let run = hook(
            &h,
            "post-tool-use",
            bad,
            &[("HERMES_SESSION_ID", "conv-bad")],
        );
        run.assert_one_error_line(1);
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
    run.assert_one_error_line(1);
    assert!(run.stderr.contains("session_id"), "{}", run.stderr);
    let bad = hook(&h, "stop", r#"{"session_id":"has spaces"}"#, &[]);
    bad.assert_one_error_line(1);
}

/// `HERMES_SESSION_ID` names the session when the hook's input names none (or the same); a
/// session the input names wins over a disagreeing inherited one — an agent may export its own
/// id process-wide, or run under another conversation's hermes (issue 41).
#[test]
fn the_hooks_session_id_wins_over_a_disagreeing_hermes_session_id() {
    let h = Hermes::new();
    ready_result(&h, "pinned", "after_turn", "pinned-result");
    let other = hook(
        &h,
        "user-prompt-submit",
        &payload("agent-own-id", "UserPromptSubmit"),
        &[("HERMES_SESSION_ID", "pinned")],
    );
    assert_eq!(other.code, 0, "{}", other.stderr);
    assert!(other.stdout.is_empty(), "{}", other.stdout);
    let run = hook(
        &h,
        "user-prompt-submit",
        r#"{"hook_event_name":"UserPromptSubmit"}"#,
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
fn hook_install_registers_the_server_and_the_six_hooks_once() {
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
        mcp["mcpServers"]["hermes"]["command"], "hermes",
        "a committed file names hermes on PATH"
    );
    let settings = read(".claude/settings.json");
    assert_eq!(settings["permissions"]["allow"], json!(["Bash(ls)"]));
    assert_eq!(settings["enabledMcpjsonServers"], json!(["hermes"]));
    for (event, sub) in [
        ("SessionStart", "session-start"),
        ("UserPromptSubmit", "user-prompt-submit"),
        ("PostToolUse", "post-tool-use"),
        ("PostToolUseFailure", "post-tool-use-failure"),
        ("Stop", "stop"),
        ("SessionEnd", "session-end"),
    ] {
        let groups = settings["hooks"][event].as_array().expect(event);
        assert_eq!(groups.len(), 1, "{event} registered once: {settings}");
        let command = groups[0]["hooks"][0]["command"].as_str().expect("command");
        assert_eq!(command, format!("hermes hook {sub} --agent claude"));
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

/// Item 1: hermes' own failures — a bad `config.toml`, an invalid `HERMES_SESSION_ID`, a
/// missing `session_id` — exit 1, never 2 (https://code.claude.com/docs/en/hooks, "Exit code
/// 2 behavior": 2 erases a `UserPromptSubmit` prompt and keeps a `Stop` from stopping).
#[test]
fn hermes_failures_never_block_the_agent() {
    let h = Hermes::new();
    ready_result(&h, "conv-cfg", "after_turn", "kept-through-failures");
    let events = [
        ("user-prompt-submit", "UserPromptSubmit"),
        ("stop", "Stop"),
        ("post-tool-use", "PostToolUse"),
        ("session-start", "SessionStart"),
        ("session-end", "SessionEnd"),
    ];
    for (event, name) in events {
        // The input names no session: the (malformed) variable is the one asked.
        let bad_id = hook(
            &h,
            event,
            &format!(r#"{{"hook_event_name":"{name}"}}"#),
            &[("HERMES_SESSION_ID", "not a valid id")],
        );
        bad_id.assert_one_error_line(1);
        let unknown_key = hook(
            &h,
            event,
            &payload("conv-cfg", name),
            &[("HERMES_DELIVERY_NO_SUCH_KEY", "1")],
        );
        unknown_key.assert_one_error_line(1);
        let bad_flag = h
            .shell(&format!(
                "\"$HERMES\" hook {event} --no-such-flag </dev/null"
            ))
            .output()
            .expect("runs");
        assert_eq!(bad_flag.status.code(), Some(1), "{event}: {bad_flag:?}");
    }
    std::fs::write(h.path().join("config.toml"), "[delegation\nbroken").expect("config");
    let run = hook(
        &h,
        "user-prompt-submit",
        &payload("conv-cfg", "UserPromptSubmit"),
        &[],
    );
    run.assert_one_error_line(1);
    std::fs::remove_file(h.path().join("config.toml")).expect("config");
    let drained = h.run(&["drain", "--session", "conv-cfg"]);
    assert!(
        drained.stdout.contains("kept-through-failures"),
        "{}",
        drained.stdout
    );
}

/// Item 11: a stdin that stays open and silent does not hold the hook: it gives up after its
/// deadline, exit 1, having taken nothing.
#[test]
fn a_silent_open_stdin_does_not_hang_a_hook() {
    let h = Hermes::new();
    let started = std::time::Instant::now();
    let mut child = h
        .shell("\"$HERMES\" hook session-end")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let _stdin = child.stdin.take();
    let out = child.wait_with_output().expect("hook ends");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("within"),
        "{out:?}"
    );
}

fn install(h: &Hermes, project: &std::path::Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "hook",
        "install",
        "claude",
        "--project",
        project.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    h.run(&args)
}

/// Item 9: installing again after the binary moved updates hermes' own entries wherever they
/// point, keeps the user's keys (an `env` in the server entry), and writes `hermes` (PATH)
/// into the committed settings; `--absolute` writes the path, `--local` the uncommitted file.
#[test]
fn install_updates_its_own_entries_and_keeps_the_users() {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let p = project.path();
    std::fs::create_dir(p.join(".claude")).expect(".claude");
    std::fs::write(
        p.join(".mcp.json"),
        r#"{"mcpServers":{"hermes":{"command":"/old/place/hermes","args":["mcp"],"env":{"HERMES_HOME":"/srv/h"}},"other":{"command":"x"}}}"#,
    )
    .expect("mcp");
    std::fs::write(
        p.join(".claude/settings.json"),
        r#"{"zeta":1,"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/old/place/hermes hook stop","timeout":30}]},{"hooks":[{"type":"command","command":"my-linter"}]}]},"alpha":2}"#,
    )
    .expect("settings");
    let run = install(&h, p, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mcp: Value =
        serde_json::from_str(&std::fs::read_to_string(p.join(".mcp.json")).expect("mcp"))
            .expect("JSON");
    assert_eq!(mcp["mcpServers"]["hermes"]["command"], "hermes");
    assert_eq!(mcp["mcpServers"]["hermes"]["env"]["HERMES_HOME"], "/srv/h");
    assert_eq!(mcp["mcpServers"]["other"]["command"], "x");
    let text = std::fs::read_to_string(p.join(".claude/settings.json")).expect("settings");
    assert!(!text.contains("/old/place"), "{text}");
    let (z, a, hk) = (
        text.find("\"zeta\""),
        text.find("\"alpha\""),
        text.find("\"hooks\""),
    );
    assert!(z < hk && hk < a, "the user's key order is kept: {text}");
    let settings: Value = serde_json::from_str(&text).expect("JSON");
    let stop = settings["hooks"]["Stop"].as_array().expect("Stop");
    assert_eq!(stop.len(), 2, "{text}");
    assert_eq!(
        stop[0]["hooks"][0]["command"],
        "hermes hook stop --agent claude"
    );
    assert_eq!(
        stop[0]["hooks"][0]["timeout"], 30,
        "the user's timeout is kept"
    );
    let again = install(&h, p, &[]);
    assert_eq!(again.code, 0);
    assert_eq!(
        std::fs::read_to_string(p.join(".claude/settings.json")).expect("settings"),
        text
    );
    let local = install(&h, p, &["--local"]);
    assert_eq!(local.code, 0, "{}", local.stderr);
    let local: Value = serde_json::from_str(
        &std::fs::read_to_string(p.join(".claude/settings.local.json")).expect("local"),
    )
    .expect("JSON");
    let command = local["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .expect("command");
    assert!(
        command.starts_with(env!("CARGO_BIN_EXE_hermes")),
        "{command}"
    );
}

/// Item 10: a BOM is read; what cannot be merged is refused with one line naming the key, and
/// nothing is written.
#[test]
fn install_refuses_what_it_cannot_merge_and_writes_nothing() {
    let h = Hermes::new();
    let cases = [
        (r#"{"hooks":["not","an","object"]}"#, "\"hooks\""),
        (
            r#"{"hooks":{"PostToolUse":{"matcher":"*"}}}"#,
            "\"PostToolUse\"",
        ),
        (
            r#"{"enabledMcpjsonServers":"hermes"}"#,
            "enabledMcpjsonServers",
        ),
    ];
    for (settings, key) in cases {
        let project = tempfile::tempdir().expect("project");
        let p = project.path();
        std::fs::create_dir(p.join(".claude")).expect(".claude");
        std::fs::write(p.join(".claude/settings.json"), settings).expect("settings");
        let run = install(&h, p, &[]);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(key), "{key}: {}", run.stderr);
        assert_eq!(
            std::fs::read_to_string(p.join(".claude/settings.json")).expect("s"),
            settings
        );
        assert!(!p.join(".mcp.json").exists(), "nothing written");
    }
    let project = tempfile::tempdir().expect("project");
    let p = project.path();
    std::fs::create_dir(p.join(".claude")).expect(".claude");
    std::fs::write(p.join(".claude/settings.json"), "\u{feff}{\"model\":\"x\"}").expect("bom");
    let run = install(&h, p, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = std::fs::read_to_string(p.join(".claude/settings.json")).expect("settings");
    let settings: Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).expect("JSON");
    assert_eq!(settings["model"], "x");
    assert_eq!(settings["enabledMcpjsonServers"], json!(["hermes"]));
}

/// The `.sock` files hosts offer their hooks under the home.
fn host_sockets(h: &Hermes) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(h.path().join("run"))
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until a host offers its hooks a socket.
fn wait_for_host_socket(h: &Hermes) {
    wait_for(Duration::from_secs(20), "the host's socket", || {
        (!host_sockets(h).is_empty()).then_some(())
    });
}

/// The I/O counts a process recorded with `HERMES_DEBUG_SYNC_COUNT`.
fn io_counts(file: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(file).expect("counts recorded");
    serde_json::from_str(text.lines().last().expect("one line")).expect("JSON counts")
}

fn context_of(run: &Run) -> String {
    let answer: Value = serde_json::from_str(&run.stdout).expect("JSON answer");
    answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("context")
        .to_owned()
}

/// A session's headless host claims and acknowledges for its hooks: the hook prints the result
/// without opening the ledger (no sync, no commit of its own), once.
#[test]
fn a_hook_delivers_through_its_sessions_host_without_a_ledger_of_its_own() {
    let h = Hermes::new();
    ready_result(&h, "conv-relay", "after_turn", "relayed-result");
    wait_for_host_socket(&h);
    let counts = h.path().join("counts.jsonl");
    let counts_env = counts.to_str().expect("utf-8 path");
    let env = [
        ("HERMES_SESSION_ID", "conv-relay"),
        ("HERMES_DEBUG_SYNC_COUNT", counts_env),
    ];
    let run = hook(
        &h,
        "user-prompt-submit",
        &payload("conv-relay", "UserPromptSubmit"),
        &env,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        context_of(&run).contains("relayed-result"),
        "{}",
        run.stdout
    );
    let io = io_counts(&counts);
    assert_eq!(
        (io["syncs"].as_u64(), io["commits"].as_u64()),
        (Some(0), Some(0)),
        "{io}"
    );
    // Acknowledged: nothing comes back, through the host or without it.
    let again = hook(
        &h,
        "user-prompt-submit",
        &payload("conv-relay", "UserPromptSubmit"),
        &env,
    );
    assert_eq!(
        (again.code, again.stdout.as_str()),
        (0, ""),
        "{}",
        again.stderr
    );
    let drained = h.run(&["drain", "--session", "conv-relay"]);
    assert!(
        !drained.stdout.contains("relayed-result"),
        "{}",
        drained.stdout
    );
}

/// A hook that cannot print what its host claimed for it (its reader went away before it
/// printed: a broken pipe) says so, and the host gives the result back: the next hook gets it,
/// once.
#[test]
fn what_a_hook_could_not_print_its_host_gives_back() {
    let h = Hermes::new();
    ready_result(&h, "conv-closed", "after_turn", "given-back");
    wait_for_host_socket(&h);
    let body = payload("conv-closed", "UserPromptSubmit");
    let mut c = h.command(&["hook", "user-prompt-submit"]);
    let mut child = c
        .env("HERMES_SESSION_ID", "conv-closed")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook runs");
    // The reader is gone before the hook has its input, so its answer meets a broken pipe.
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(body.as_bytes()).expect("payload written");
    drop(stdin);
    let closed = Run::from(child.wait_with_output().expect("hook ends"));
    assert!(closed.code == 0 || closed.code == 1, "{}", closed.stderr);
    let env = [("HERMES_SESSION_ID", "conv-closed")];
    // The host learns of the broken pipe and gives the claim back on its own time (on a busy
    // machine, after the first hook has exited): a hook asking meanwhile finds nothing ready
    // and takes nothing, so ask until the result is offered again.
    let run = wait_for(
        Duration::from_secs(20),
        "the result to be given back",
        || {
            let run = hook(&h, "user-prompt-submit", &body, &env);
            assert_eq!(run.code, 0, "{}", run.stderr);
            (!run.stdout.is_empty()).then_some(run)
        },
    );
    assert!(context_of(&run).contains("given-back"), "{}", run.stdout);
    let again = hook(&h, "user-prompt-submit", &body, &env);
    assert_eq!(again.stdout, "", "{}", again.stderr);
}

/// A host killed outright leaves its socket behind; the next hook finds nobody there and
/// delivers by itself.
#[test]
fn a_dead_hosts_socket_is_passed_by() {
    let h = Hermes::new();
    ready_result(&h, "conv-dead", "after_turn", "outlived-its-host");
    wait_for_host_socket(&h);
    for pid in h.host_pids() {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    wait_for(Duration::from_secs(20), "the host to be gone", || {
        h.host_pids()
            .iter()
            .all(|&p| !crate::common::process_alive(p))
            .then_some(())
    });
    assert!(
        !host_sockets(&h).is_empty(),
        "a killed host removes nothing"
    );
    let env = [("HERMES_SESSION_ID", "conv-dead")];
    let run = hook(
        &h,
        "user-prompt-submit",
        &payload("conv-dead", "UserPromptSubmit"),
        &env,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        context_of(&run).contains("outlived-its-host"),
        "{}",
        run.stdout
    );
}
