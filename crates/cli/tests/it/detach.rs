//! A conversation outlives its agent process: a session end that is no discard detaches the
//! session (its children run on in its headless host, its results wait for the conversation's
//! next process); children get the person's environment whichever door dispatched them; and a
//! hermes inside a child finds its lineage from the process tree and the ledger, whatever an
//! agent between them stripped. Driven as the agents drive hermes: stand-in agent processes
//! running `hermes mcp` and `hermes hook EVENT --agent NAME` with JSON on stdin, and `hermes -z`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Hermes, process_alive, until_told, wait_for};
use crate::mcp_and_hooks::hooks::payload;
use crate::mcp_and_hooks::standin::{Agent, context_of, wait_ready};

const HERMES: &str = env!("CARGO_BIN_EXE_hermes");
const LIMIT: Duration = Duration::from_secs(30);

/// The session's state as `session list --json` shows it.
fn state(h: &Hermes, session: &str) -> Value {
    let list = h.json(&["session", "list", "--json"]);
    list["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["id"] == session))
        .map_or(Value::Null, |s| s["state"].clone())
}

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

/// Waits until the delegation has ended; its status.
fn ended(h: &Hermes, id: &str) -> Value {
    wait_for(LIMIT, "the delegation to end", || {
        let s = status(h, id);
        (!matches!(s["status"].as_str(), Some("running" | "queued"))).then_some(s)
    })
}

/// Waits until the delegation's child runs (its pid recorded), so that stopping it interrupts it.
fn started(h: &Hermes, id: &str) {
    wait_for(LIMIT, "the child to start", || {
        status(h, id)["tasks"][0]["pid"].as_u64().map(|_| ())
    });
}

/// The agent's hook JSON for `event`, with `fields` set.
fn input(session: &str, event: &str, fields: &[(&str, Value)]) -> String {
    let mut value: Value = serde_json::from_str(&payload(session, event)).expect("payload");
    for (k, v) in fields {
        value[*k] = v.clone();
    }
    value.to_string()
}

/// Dispatches through the agent's MCP server; the dispatch answer.
fn dispatch(agent: &mut Agent, args: Value) -> Value {
    let answer = agent.tool("delegate_task", args);
    assert_eq!(answer["is_error"], false, "{answer}");
    serde_json::from_str(answer["text"].as_str().expect("text")).expect("dispatch JSON")
}

fn id_of(answer: &Value) -> String {
    answer["delegation_id"].as_str().expect("id").to_owned()
}

/// `claude -p` fires `SessionEnd` with reason `other` when it exits.
fn headless_exit(agent: &mut Agent, session: &str) {
    agent.hook_with(
        "session-end",
        &input(session, "SessionEnd", &[("reason", json!("other"))]),
    );
}

#[test]
fn a_headless_exit_detaches_and_the_next_process_gets_the_result_once() {
    let h = Hermes::new();
    let go = h.path().join("go");
    let mut first = Agent::start(&h);
    first.hook("session-start", "conv-d", "SessionStart");
    let answer = dispatch(
        &mut first,
        json!({"goal": "runs on", "command": ["sh", "-c", until_told(&go, "ran-on")]}),
    );
    let id = id_of(&answer);
    assert!(
        answer["on_agent_exit"]
            .as_str()
            .is_some_and(|s| s.starts_with("detach:")),
        "the answer says what the agent's exit does: {answer}"
    );
    headless_exit(&mut first, "conv-d");
    assert_eq!(state(&h, "conv-d"), "detached");
    drop(first);
    assert_eq!(
        status(&h, &id)["status"],
        "running",
        "the exit stopped nothing"
    );
    std::fs::write(&go, "").expect("go");
    wait_ready(&h, &id);
    // An idle detached session costs nothing: its host leaves, and delivery needs none.
    let host = answer["host_pid"].as_u64().expect("host pid");
    wait_for(LIMIT, "the idle host to exit", || {
        (!process_alive(host)).then_some(())
    });
    assert_eq!(state(&h, "conv-d"), "detached");

    let mut next = Agent::start(&h);
    next.hook_with(
        "session-start",
        &input("conv-d", "SessionStart", &[("source", json!("resume"))]),
    );
    assert_eq!(state(&h, "conv-d"), "active", "the conversation is back");
    let text = next.context("user-prompt-submit", "conv-d", "UserPromptSubmit");
    assert!(text.contains(&id) && text.contains("ran-on"), "{text}");
    assert_eq!(
        next.context("post-tool-use", "conv-d", "PostToolUse"),
        "",
        "delivered once"
    );
    assert_eq!(
        next.context("user-prompt-submit", "conv-d", "UserPromptSubmit"),
        ""
    );
    assert_eq!(
        status(&h, &id)["tasks"][0]["delivery"]["state"],
        "delivered"
    );
}

#[test]
fn a_discard_still_ends_and_session_end_stays_an_explicit_end() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    // `/clear`: Claude Code's discard.
    agent.hook("session-start", "conv-clear", "SessionStart");
    let cleared = id_of(&dispatch(
        &mut agent,
        json!({"goal": "long", "command": ["sleep", "60"]}),
    ));
    started(&h, &cleared);
    agent.hook_with(
        "session-end",
        &input("conv-clear", "SessionEnd", &[("reason", json!("clear"))]),
    );
    assert_eq!(ended(&h, &cleared)["status"], "interrupted");
    assert_eq!(state(&h, "conv-clear"), "ended");

    // A detached session ended by hand: its work stops, its results go.
    agent.hook("session-start", "conv-quit", "SessionStart");
    let quit = id_of(&dispatch(
        &mut agent,
        json!({"goal": "long", "command": ["sleep", "60"]}),
    ));
    agent.hook_with(
        "session-end",
        &input(
            "conv-quit",
            "SessionEnd",
            &[("reason", json!("prompt_input_exit"))],
        ),
    );
    assert_eq!(state(&h, "conv-quit"), "detached");
    started(&h, &quit);
    let run = h.run(&["session", "end", "conv-quit"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ended(&h, &quit)["status"], "interrupted");
    assert_eq!(state(&h, "conv-quit"), "ended");

    // Gemini CLI: `exit` detaches, `clear` discards (its profile's data).
    for (session, reason, after) in [
        ("g-exit", "exit", "detached"),
        ("g-clear", "clear", "ended"),
    ] {
        h.run(&["delegate", "--session", session, "--", "true"]);
        let hook = agent.exec(
            &[
                "sh".into(),
                "-c".into(),
                "\"$HERMES\" hook session-end --agent gemini".into(),
            ],
            &json!({"session_id": session, "hook_event_name": "SessionEnd", "reason": reason})
                .to_string(),
        );
        assert_eq!(hook["code"], 0, "{hook}");
        assert_eq!(state(&h, session), after, "gemini {reason}");
    }
}

#[test]
fn on_agent_exit_end_keeps_the_old_behaviour() {
    let h = Hermes::new();
    h.write("config.toml", "[session]\non_agent_exit = \"end\"\n");
    let mut agent = Agent::start(&h);
    agent.hook("session-start", "conv-old", "SessionStart");
    let answer = dispatch(
        &mut agent,
        json!({"goal": "long", "command": ["sleep", "60"]}),
    );
    assert!(
        answer["on_agent_exit"]
            .as_str()
            .is_some_and(|s| s.starts_with("end:")),
        "{answer}"
    );
    started(&h, &id_of(&answer));
    headless_exit(&mut agent, "conv-old");
    assert_eq!(ended(&h, &id_of(&answer))["status"], "interrupted");
    assert_eq!(state(&h, "conv-old"), "ended");
}

#[test]
fn a_detached_childs_limits_hold_and_results_nobody_resumes_expire_visibly() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    agent.hook("session-start", "conv-gone", "SessionStart");
    let answer = dispatch(
        &mut agent,
        json!({"goal": "slow", "command": ["sleep", "60"], "timeout_seconds": 1}),
    );
    let id = id_of(&answer);
    headless_exit(&mut agent, "conv-gone");
    drop(agent);
    assert_eq!(ended(&h, &id)["status"], "timeout");
    wait_ready(&h, &id);
    let host = answer["host_pid"].as_u64().expect("host pid");
    wait_for(LIMIT, "the idle host to exit", || {
        (!process_alive(host)).then_some(())
    });
    // Nobody resumes it: a sweep past `delivery.replay_max_age_hours` drops it, visibly.
    let ledger = hermes_ledger::Ledger::open_at(
        &h.location,
        hermes_ledger::LedgerConfig {
            replay_max_age_ms: 1,
            ..hermes_ledger::LedgerConfig::default()
        },
    )
    .expect("ledger");
    let now = hermes_ledger::Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64,
    );
    let report = ledger
        .recover(
            &hermes_registry::OsReaper::new(),
            now.plus_ms(10),
            hermes_ledger::Sweep::Now,
        )
        .expect("sweep");
    assert_eq!(report.expired_events, 1);
    drop(ledger);
    let delivery = status(&h, &id)["tasks"][0]["delivery"].clone();
    assert_eq!(
        (delivery["state"].as_str(), delivery["drop_reason"].as_str()),
        (Some("dropped"), Some("replay_expired")),
        "{delivery}"
    );
    let mut late = Agent::start(&h);
    assert_eq!(
        late.context("user-prompt-submit", "conv-gone", "UserPromptSubmit"),
        ""
    );
}

/// What `printf %s "$FAKE_API_KEY" | cksum` prints for `value`: a child shows it has the key
/// without the key itself landing in its result.
fn cksum(value: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", "printf %s \"$V\" | cksum"])
        .env("V", value)
        .output()
        .expect("cksum");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn children_dispatched_through_a_filtered_mcp_server_get_the_agents_environment_unwritten() {
    let h = Hermes::new();
    let secret = "fake-key-5b8e1d-not-in-any-file";
    // The agent has the key; it starts its MCP server without it (as Gemini CLI and Codex do).
    let server: Vec<String> = ["env", "-u", "FAKE_API_KEY", HERMES, "mcp"]
        .map(str::to_owned)
        .to_vec();
    let mut agent = Agent::start_server_in(&h, &server, &[("FAKE_API_KEY", secret)]);
    let probe = json!(["sh", "-c", "printf %s \"$FAKE_API_KEY\" | cksum"]);
    // Before any hook: the server runs it itself; after: the session's headless host does.
    let early = id_of(&dispatch(
        &mut agent,
        json!({"goal": "early", "command": probe}),
    ));
    agent.hook("session-start", "conv-env", "SessionStart");
    let named = dispatch(&mut agent, json!({"goal": "named", "command": probe}));
    assert_eq!(named["session"], "conv-env");
    let later = id_of(&named);
    wait_ready(&h, &early);
    wait_ready(&h, &later);
    let expected = cksum(secret);
    for id in [&early, &later] {
        let result = status(&h, id)["tasks"][0]["result"].clone();
        assert_eq!(
            result.as_str().map(str::trim),
            Some(expected.as_str()),
            "{id}"
        );
    }
    let text = agent.context("user-prompt-submit", "conv-env", "UserPromptSubmit");
    assert_eq!(text.matches(&expected).count(), 2, "{text}");
    // Nothing hermes wrote holds it: ledger, transcripts, logs, binding files.
    assert_eq!(
        files_holding(h.path(), secret.as_bytes()),
        Vec::<String>::new()
    );
}

/// `hermes -z --role ROLE -- ARGV…`; the child's result text.
fn inline(h: &Hermes, role: &str, argv: &[&str]) -> String {
    let mut args = vec!["-z", "--json", "--role", role, "--"];
    args.extend_from_slice(argv);
    let run = h.run(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()["tasks"][0]["result"]
        .as_str()
        .expect("result")
        .to_owned()
}

const STRIP: &str = "env -u HERMES_CHILD_ROLE -u HERMES_CHILD_DEPTH";

#[test]
fn a_leaf_child_cannot_delegate_even_with_its_variables_stripped() {
    let h = Hermes::new();
    let home = format!("HERMES_HOME={}", h.path().display());
    let path = format!("PATH={}", std::env::var("PATH").unwrap_or_default());
    let nested = format!("{HERMES} delegate --session x --goal nested -- true; echo rc=$?");
    let stripped = format!("{STRIP} {nested}");
    let one_shot = format!("{STRIP} {HERMES} -z -q -- true; echo rc=$?");
    let cases: [Vec<&str>; 4] = [
        vec!["sh", "-c", &nested],
        vec!["sh", "-c", &stripped],
        vec!["sh", "-c", &one_shot],
        // The child started with its environment wiped: the ledger's record of its pid says.
        vec!["env", "-i", &path, &home, "sh", "-c", &nested],
    ];
    for argv in &cases {
        let result = inline(&h, "leaf", argv);
        assert!(result.contains("rc=2"), "{argv:?}: {result}");
        let refusals: Vec<&str> = result.lines().filter(|l| l.contains("hermes:")).collect();
        assert_eq!(refusals.len(), 1, "{argv:?}: {result}");
        assert!(refusals[0].contains("leaf child"), "{result}");
    }
    let sessions = h.json(&["session", "list", "--json"]);
    assert_eq!(sessions["sessions"], json!([]), "nothing was dispatched");
}

#[test]
fn an_orchestrator_delegates_down_to_max_depth_without_its_variables() {
    let h = Hermes::new();
    let inner = format!("{STRIP} {HERMES} -z -q -- true; echo inner=$?");
    let outer =
        format!("{STRIP} {HERMES} -z -q --role orchestrator -- sh -c '{inner}'; echo outer=$?");
    let result = inline(&h, "orchestrator", &["sh", "-c", &outer]);
    assert!(result.contains("outer=0"), "depth 2 may: {result}");
    assert!(result.contains("inner=2"), "depth 3 may not: {result}");
    assert!(result.contains("delegation.max_depth is 2"), "{result}");
}

#[test]
fn the_mcp_server_of_a_leaf_child_refuses_delegate_task_when_its_variables_were_stripped() {
    let h = Hermes::new();
    let go = h.path().join("go");
    let out = h.path().join("mcp-out");
    let requests = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"delegate_task","arguments":{"goal":"g","command":["true"]}}}),
    ];
    let lines: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let requests_file = h.write("requests.jsonl", &lines);
    // The agent child (here a shell) starts its MCP server with its hermes variables removed,
    // and keeps the server's stdin open until the test has read the answer.
    let script = format!(
        "{{ cat '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; }} | HERMES_SESSION_ID=S {STRIP} {HERMES} mcp > '{}'",
        requests_file.display(),
        go.display(),
        out.display()
    );
    let mut run = h
        .command(&["-z", "-q", "--role", "leaf", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("hermes -z starts");
    let answer = wait_for(LIMIT, "the tool call's answer", || {
        std::fs::read_to_string(&out)
            .ok()?
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["id"] == 2)
    });
    std::fs::write(&go, "").expect("go");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(answer.to_string().contains("leaf child"), "{answer}");
    assert!(run.wait().expect("hermes -z ends").success());
}

#[test]
fn the_hook_answer_for_a_resumed_detached_session_needs_no_host() {
    // What a resumed process receives does not depend on which hook comes first: a stop hook
    // of the next process delivers it too.
    let h = Hermes::new();
    let handle = h.json(&[
        "delegate",
        "--session",
        "conv-stop",
        "--json",
        "--",
        "sh",
        "-c",
        "echo stop-out",
    ]);
    let id = handle["delegation_id"].as_str().expect("id").to_owned();
    let mut first = Agent::start(&h);
    first.hook("session-start", "conv-stop", "SessionStart");
    headless_exit(&mut first, "conv-stop");
    drop(first);
    wait_ready(&h, &id);
    let host = handle["host_pid"].as_u64().expect("host pid");
    wait_for(LIMIT, "the idle host to exit", || {
        (!process_alive(host)).then_some(())
    });
    let mut next = Agent::start(&h);
    let stop = next.hook("stop", "conv-stop", "Stop");
    let context = context_of(&stop, "Stop");
    assert!(context.contains("stop-out"), "{context}");
    assert_eq!(
        context_of(
            &next.hook("post-tool-use", "conv-stop", "PostToolUse"),
            "PostToolUse"
        ),
        ""
    );
}

/// The README's table of what each agent's exit and discard do is the profiles' data.
#[test]
fn the_readme_says_what_each_agents_exit_and_discard_do() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let table = readme
        .split("| agent | discards a conversation")
        .nth(1)
        .expect("the README has the table");
    for agent in hermes_agents::AGENTS {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {}", agent.title)))
            .unwrap_or_else(|| panic!("no row for {}", agent.title));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (discard, otherwise) = (cells[2], cells[3]);
        if agent.discard.reasons.is_empty() {
            assert_eq!(discard, "—", "{row}");
        }
        for reason in agent.discard.reasons {
            assert!(discard.contains(&format!("`{reason}`")), "{row}");
        }
        assert!(otherwise.starts_with("detached"), "{row}");
    }
}
