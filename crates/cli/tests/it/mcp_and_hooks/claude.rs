//! Claude Code as its users run it: a stand-in Claude that starts `hermes mcp`
//! through each launcher shape, speaks MCP to it through rmcp's client, runs every hook through
//! `sh -c` with the documented JSON (`fixtures.rs`), exits normally and resumes, clears,
//! crashes, runs a subagent's tool call, and closes the server as the MCP SDKs do (stdin
//! closed, 2 s, SIGTERM). Each test pins one of issue 19's defects; the page each fact comes
//! from is named where it is used.

use std::time::Duration;

use serde_json::{Value, json};

use super::fixtures::{claude, with};
use super::standin::{Agent, LAUNCHERS, context_of, wait_ready};
use crate::common::{Hermes, wait_for};

/// The `hermes hook` subcommand Claude Code's settings run for `event`.
fn sub(event: &str) -> &'static str {
    match event {
        "SessionStart" => "session-start",
        "UserPromptSubmit" => "user-prompt-submit",
        "PostToolUse" => "post-tool-use",
        "PostToolUseFailure" => "post-tool-use-failure",
        "Stop" => "stop",
        "SessionEnd" => "session-end",
        other => panic!("{other}"),
    }
}

/// Runs `event`'s documented input (with `fields` set) for `session`; returns its answer.
fn fire(agent: &mut Agent, event: &str, session: &str, fields: &[(&str, Value)]) -> Value {
    agent.hook_with(sub(event), &with(event, session, fields))
}

/// The additional context `event` hands over for `session` (empty: none).
fn context(agent: &mut Agent, event: &str, session: &str) -> String {
    let answer = fire(agent, event, session, &[]);
    context_of(&answer, event)
}

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

fn wait_ended(h: &Hermes, id: &str) -> Value {
    wait_for(Duration::from_secs(30), "the delegation to end", || {
        let s = status(h, id);
        (!matches!(s["status"].as_str(), Some("running" | "queued"))).then_some(s)
    })
}

/// Item 4: whatever launches `hermes mcp` — directly, `sh -c`, `env`, a wrapper script that
/// stays its parent, an `npx`-like launcher — the server and the hooks meet at the same agent.
#[test]
fn every_launcher_shape_finds_the_conversation_the_hooks_name() {
    let h = Hermes::new();
    for launcher in LAUNCHERS {
        let mut agent = Agent::start_with(&h, launcher);
        let conv = format!("conv-{launcher}");
        fire(&mut agent, "SessionStart", &conv, &[]);
        let answer = agent.tool(
            "delegate_task",
            json!({"goal": "where", "command": ["sh", "-c", format!("echo via-{launcher}")]}),
        );
        let handle: Value =
            serde_json::from_str(answer["text"].as_str().expect("text")).expect("dispatch JSON");
        assert_eq!(handle["session"], conv.as_str(), "{launcher}: {handle}");
        assert!(handle.get("warning").is_none(), "{launcher}: {handle}");
        let id = handle["delegation_id"].as_str().expect("id").to_owned();
        wait_ready(&h, &id);
        let text = context(&mut agent, "UserPromptSubmit", &conv);
        assert!(
            text.contains(&format!("via-{launcher}")),
            "{launcher}: {text}"
        );
    }
}

/// Item 4: with no hook to bind the conversation, the dispatch says so in `warning`, and
/// `delegation_results` is the way to collect.
#[test]
fn a_dispatch_no_hook_can_deliver_carries_a_warning() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let answer = agent.tool(
        "delegate_task",
        json!({"goal": "alone", "command": ["sh", "-c", "echo lonely"]}),
    );
    let handle: Value =
        serde_json::from_str(answer["text"].as_str().expect("text")).expect("dispatch JSON");
    let warning = handle["warning"].as_str().expect("a warning");
    assert!(warning.contains("delegation_results"), "{warning}");
    wait_ready(&h, handle["delegation_id"].as_str().expect("id"));
    let results = agent.tool("delegation_results", json!({}));
    assert!(
        results["text"].as_str().unwrap_or("").contains("lonely"),
        "{results}"
    );
}

/// Item 2: `/exit` fires `SessionEnd` (reason `prompt_input_exit`); `claude --resume` comes
/// back with the same `session_id` and `SessionStart` `source: "resume"`
/// (https://code.claude.com/docs/en/hooks, "SessionStart", "SessionEnd"). An exit is no
/// discard: what was still running finishes meanwhile and the resumed conversation gets it
/// once, beside its own new work; what the first process received is not delivered again.
#[test]
fn a_conversation_resumed_after_exit_gets_what_ran_on_once_and_nothing_twice() {
    let h = Hermes::new();
    let conv = "conv-resume";
    let mut first = Agent::start(&h);
    fire(&mut first, "SessionStart", conv, &[]);
    let (early, _) =
        first.delegate(json!({"goal": "before exit", "command": ["sh", "-c", "echo before-exit"]}));
    wait_ready(&h, &early);
    assert!(context(&mut first, "UserPromptSubmit", conv).contains("before-exit"));
    let go = h.path().join("go");
    let (ran_on, _) = first.delegate(json!({
        "goal": "runs on",
        "command": ["sh", "-c", crate::common::until_told(&go, "ran-on")]
    }));
    fire(
        &mut first,
        "SessionEnd",
        conv,
        &[("reason", json!("prompt_input_exit"))],
    );
    drop(first);
    std::fs::write(&go, "").expect("go");
    wait_ready(&h, &ran_on);
    let mut resumed = Agent::start(&h);
    let start = fire(
        &mut resumed,
        "SessionStart",
        conv,
        &[("source", json!("resume"))],
    );
    assert_eq!(start["code"], 0, "{start}");
    let (id, session) = resumed
        .delegate(json!({"goal": "after resume", "command": ["sh", "-c", "echo after-resume"]}));
    assert_eq!(session, conv);
    wait_ready(&h, &id);
    let text = context(&mut resumed, "UserPromptSubmit", conv);
    assert!(
        text.contains("after-resume") && text.contains("ran-on"),
        "{text}"
    );
    assert!(!text.contains("before-exit"), "{text}");
    assert_eq!(context(&mut resumed, "UserPromptSubmit", conv), "");
    assert_eq!(wait_ended(&h, &ran_on)["status"], "completed");
}

/// Item 2: any later hook of a session `SessionEnd` closed reopens it (no exit 5).
#[test]
fn a_later_hook_of_an_ended_session_reopens_it() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    fire(&mut agent, "SessionStart", "conv-late", &[]);
    agent.delegate(json!({"goal": "x", "command": ["true"]}));
    fire(&mut agent, "SessionEnd", "conv-late", &[]);
    let answer = fire(&mut agent, "UserPromptSubmit", "conv-late", &[]);
    assert_eq!(answer["code"], 0, "{answer}");
    let (_, session) = agent.delegate(json!({"goal": "y", "command": ["true"]}));
    assert_eq!(session, "conv-late");
}

/// Item 8: `--resume` may fire two `SessionStart`s, a fresh id (`startup`) and the original
/// one (`resume`), in either order; what a dispatch between them collected is delivered.
#[test]
fn a_double_session_start_on_resume_keeps_what_was_dispatched_between() {
    let h = Hermes::new();
    for (first, second) in [("startup", "resume"), ("resume", "startup")] {
        let mut agent = Agent::start(&h);
        let ids = |source: &str| {
            if source == "startup" {
                format!("random-{first}")
            } else {
                format!("orig-{first}")
            }
        };
        fire(
            &mut agent,
            "SessionStart",
            &ids(first),
            &[("source", json!(first))],
        );
        let (id, _) = agent
            .delegate(json!({"goal": "between", "command": ["sh", "-c", "echo between-starts"]}));
        fire(
            &mut agent,
            "SessionStart",
            &ids(second),
            &[("source", json!(second))],
        );
        wait_ready(&h, &id);
        let text = context(&mut agent, "UserPromptSubmit", &ids("resume"));
        assert!(
            text.contains("between-starts"),
            "{first} then {second}: {text}"
        );
    }
}

/// Item 3: Claude Code keeps at most 10,000 characters of `additionalContext`
/// (https://code.claude.com/docs/en/hooks, "Add context"): a 3,000-line log is shortened to
/// fit, says how to read it all, and `delegation_result` pages the whole stored result.
#[test]
fn a_result_too_large_for_the_hook_is_shortened_and_can_be_read_in_full() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let conv = "conv-big";
    fire(&mut agent, "SessionStart", conv, &[]);
    let (id, _) = agent.delegate(json!({
        "goal": "a long log", "result_delivery": "inject",
        "command": ["sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo \"log line $i of the build\"; i=$((i+1)); done"]
    }));
    wait_ready(&h, &id);
    let text = context(&mut agent, "PostToolUse", conv);
    assert!(
        text.chars().count() < 10_000,
        "{} characters",
        text.chars().count()
    );
    assert!(text.starts_with("[DELEGATION RESULT READY"), "{text}");
    assert!(
        text.contains("characters cut here") && text.contains("delegation_result"),
        "{text}"
    );
    assert!(text.contains("log line 0 of"), "the head is kept");
    assert_eq!(
        status(&h, &id)["tasks"][0]["delivery"]["state"],
        "delivered"
    );
    let mut offset = 0u64;
    let mut all = String::new();
    for _ in 0..20 {
        let page = agent.tool(
            "delegation_result",
            json!({"delegation_id": id, "offset": offset}),
        );
        assert_eq!(page["is_error"], false, "{page}");
        let page = page["text"].as_str().expect("text").to_owned();
        assert!(page.chars().count() <= 30_000);
        let (head, body) = page.split_once('\n').expect("a header line");
        all.push_str(body);
        match head.split("next page: offset ").nth(1) {
            Some(rest) => {
                offset = rest
                    .split(';')
                    .next()
                    .and_then(|n| n.trim().parse().ok())
                    .expect("offset")
            }
            None => break,
        }
    }
    assert!(
        all.contains("log line 2999 of the build"),
        "the tail of the stored result"
    );
}

/// Item 3: whole blocks that fit are delivered; the rest waits for the next boundary.
#[test]
fn blocks_that_do_not_fit_together_wait_for_the_next_boundary() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let conv = "conv-two";
    fire(&mut agent, "SessionStart", conv, &[]);
    let mut ids = Vec::new();
    for n in 0..2 {
        let (id, _) = agent.delegate(json!({
            "goal": format!("half {n}"),
            "command": ["sh", "-c", format!("i=0; while [ $i -lt 110 ]; do echo \"block {n} line $i padding padding padding\"; i=$((i+1)); done")]
        }));
        ids.push(id);
    }
    for id in &ids {
        wait_ready(&h, id);
    }
    let first = context(&mut agent, "UserPromptSubmit", conv);
    let second = context(&mut agent, "UserPromptSubmit", conv);
    assert!(first.chars().count() < 10_000 && second.chars().count() < 10_000);
    assert!(
        !first.contains("characters cut here"),
        "whole blocks: {first}"
    );
    for id in &ids {
        assert!(
            first.contains(id.as_str()) != second.contains(id.as_str()),
            "{id} delivered once, in one of the two answers"
        );
    }
    assert_eq!(context(&mut agent, "UserPromptSubmit", conv), "");
}

/// Item 7: a tool call inside a subagent carries `agent_id`
/// (https://code.claude.com/docs/en/hooks, "Hook input"): it delivers nothing; the main
/// thread's next tool call gets the result.
#[test]
fn a_subagents_tool_call_leaves_the_result_for_the_main_thread() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let conv = "conv-sub";
    fire(&mut agent, "SessionStart", conv, &[]);
    let (id, _) = agent.delegate(
        json!({"goal": "g", "result_delivery": "inject", "command": ["sh", "-c", "echo for-main"]}),
    );
    wait_ready(&h, &id);
    let sub = fire(
        &mut agent,
        "PostToolUse",
        conv,
        &[
            ("agent_id", json!("agent-7f3a")),
            ("agent_type", json!("Explore")),
        ],
    );
    assert_eq!(
        (sub["code"].clone(), sub["stdout"].clone()),
        (json!(0), json!("")),
        "{sub}"
    );
    let main = context(&mut agent, "PostToolUse", conv);
    assert!(main.contains("for-main"), "{main}");
}

/// Item 12: a failed tool call fires `PostToolUseFailure`, which can add context like
/// `PostToolUse` (https://code.claude.com/docs/en/hooks, "PostToolUseFailure").
#[test]
fn a_failed_tool_call_delivers_inject_results_too() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let conv = "conv-fail";
    fire(&mut agent, "SessionStart", conv, &[]);
    let (id, _) = agent.delegate(json!({"goal": "g", "result_delivery": "inject", "command": ["sh", "-c", "echo after-failure"]}));
    wait_ready(&h, &id);
    let text = context(&mut agent, "PostToolUseFailure", conv);
    assert!(
        text.starts_with("[DELEGATION RESULT READY") && text.contains("after-failure"),
        "{text}"
    );
}

/// Items 5 and 6: the SDKs close a server by closing stdin, waiting 2 s, then SIGTERM. The
/// server is gone by then; the child of the hook-bound conversation runs on in the session's
/// headless host, and the resumed conversation gets its result.
#[test]
fn an_sdk_close_leaves_the_conversations_children_running_for_the_resume() {
    let h = Hermes::new();
    let conv = "conv-close";
    let mut agent = Agent::start(&h);
    fire(&mut agent, "SessionStart", conv, &[]);
    let (id, _) = agent.delegate(
        json!({"goal": "outlives", "command": ["sh", "-c", "sleep 3; echo outlived-the-server"]}),
    );
    let closed = agent.ask(&json!({"op": "sdk_close"}));
    assert_eq!(closed["gone"], true, "{closed}");
    // Not stopped by the close (on a busy machine its host may not have started it yet).
    let after_close = status(&h, &id);
    assert!(
        matches!(after_close["status"].as_str(), Some("running" | "queued")),
        "the child survived the close: {after_close}"
    );
    drop(agent);
    let done = wait_ended(&h, &id);
    assert_eq!(done["status"], "completed", "{done}");
    let mut resumed = Agent::start(&h);
    fire(
        &mut resumed,
        "SessionStart",
        conv,
        &[("source", json!("resume"))],
    );
    let text = context(&mut resumed, "UserPromptSubmit", conv);
    assert!(text.contains("outlived-the-server"), "{text}");
}

/// A crash (the agent killed, no `SessionEnd`): the conversation's results wait for the resume.
#[test]
fn after_a_crash_the_resumed_conversation_gets_what_finished() {
    let h = Hermes::new();
    let conv = "conv-crash";
    let mut agent = Agent::start(&h);
    fire(&mut agent, "SessionStart", conv, &[]);
    let (id, _) =
        agent.delegate(json!({"goal": "g", "command": ["sh", "-c", "sleep 1; echo after-crash"]}));
    drop(agent); // SIGKILL: no hook, no close.
    assert_eq!(wait_ended(&h, &id)["status"], "completed");
    let mut resumed = Agent::start(&h);
    fire(
        &mut resumed,
        "SessionStart",
        conv,
        &[("source", json!("resume"))],
    );
    assert!(context(&mut resumed, "UserPromptSubmit", conv).contains("after-crash"));
}

/// `/clear` ends the conversation's work (`SessionEnd` reason `clear`, then a `SessionStart`
/// with `source: "clear"` and a new id): the new conversation starts empty.
#[test]
fn clear_ends_the_old_conversations_work() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    fire(&mut agent, "SessionStart", "conv-before-clear", &[]);
    let (id, _) = agent.delegate(json!({"goal": "long", "command": ["sleep", "30"]}));
    fire(
        &mut agent,
        "SessionEnd",
        "conv-before-clear",
        &[("reason", json!("clear"))],
    );
    fire(
        &mut agent,
        "SessionStart",
        "conv-after-clear",
        &[("source", json!("clear"))],
    );
    assert_eq!(wait_ended(&h, &id)["status"], "interrupted");
    let (_, session) = agent.delegate(json!({"goal": "new", "command": ["true"]}));
    assert_eq!(session, "conv-after-clear");
}

/// Item 16: one agent process serving two conversations (an IDE, an app server) never mixes
/// them: a call must say which, and each conversation's hooks get only its own results.
#[test]
fn one_server_for_two_conversations_keys_each_call_by_what_the_client_says() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    for conv in ["conv-ide-a", "conv-ide-b"] {
        fire(&mut agent, "SessionStart", conv, &[]);
        fire(&mut agent, "UserPromptSubmit", conv, &[]);
    }
    let unsaid = agent.tool("delegate_task", json!({"goal": "g", "command": ["true"]}));
    assert_eq!(unsaid["is_error"], true, "{unsaid}");
    assert!(
        unsaid["text"]
            .as_str()
            .unwrap_or("")
            .contains("pass session"),
        "{unsaid}"
    );
    let (id, session) = agent.delegate(json!({
        "goal": "for a", "command": ["sh", "-c", "echo only-for-a"], "session": "conv-ide-a"
    }));
    assert_eq!(session, "conv-ide-a");
    wait_ready(&h, &id);
    assert_eq!(context(&mut agent, "UserPromptSubmit", "conv-ide-b"), "");
    assert!(context(&mut agent, "UserPromptSubmit", "conv-ide-a").contains("only-for-a"));
}

/// Item 11: Claude Code is reported to leave `SessionEnd`'s stdin open: the hook reads one
/// JSON value and returns without waiting for EOF.
#[test]
fn a_hook_whose_stdin_stays_open_returns_after_one_json_value() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    fire(&mut agent, "SessionStart", "conv-open", &[]);
    let answer = agent.ask(&json!({
        "op": "hook", "event": "session-end", "stdin_open": true,
        "payload": claude("SessionEnd", "conv-open").to_string()
    }));
    assert_eq!(answer["code"], 0, "{answer}");
    assert!(
        answer["elapsed_ms"].as_u64().unwrap_or(u64::MAX) < 1_500,
        "{answer}"
    );
}
