//! `hermes mcp` through rmcp's client: tools and schemas, background and foreground dispatch,
//! status, list, stop, results exactly once, and what a misbehaving client gets.

use std::time::Duration;

use serde_json::{Value, json};

use super::client::{Mcp, Raw};
use crate::common::{Hermes, wait_for};

const SESSION: (&str, &str) = ("HERMES_SESSION_ID", "conv-mcp");

/// Waits until the delegation has ended.
fn wait_ended(h: &Hermes, id: &str) -> Value {
    wait_for(Duration::from_secs(20), "the delegation to end", || {
        let status = h.json(&["delegation", "status", id, "--json"]);
        let s = status["status"].as_str().unwrap_or("");
        (!matches!(s, "running" | "queued")).then_some(status)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_offers_six_tools_with_precise_schemas() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let info = mcp.client.peer_info().expect("server info");
    let server = info.server_info.as_ref().expect("server info");
    assert_eq!(server.name, "hermes");
    assert!(
        info.instructions
            .as_deref()
            .is_some_and(|i| i.contains("delegate_task"))
    );
    let tools = mcp.client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "delegate_task",
            "delegation_list",
            "delegation_result",
            "delegation_results",
            "delegation_status",
            "delegation_stop"
        ]
    );
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or("");
        assert!(description.len() > 80, "{}: {description:?}", tool.name);
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        assert_eq!(
            tool.input_schema["additionalProperties"], false,
            "{} refuses unknown fields",
            tool.name
        );
    }
    let delegate = tools
        .iter()
        .find(|t| t.name == "delegate_task")
        .expect("delegate_task");
    let schema = Value::Object((*delegate.input_schema).clone());
    let props = &schema["properties"];
    for field in [
        "goal",
        "command",
        "context",
        "toolsets",
        "role",
        "model",
        "tasks",
        "background",
        "result_delivery",
        "timeout_seconds",
        "cwd",
        "pool",
        "workspace",
        "sandbox",
        "network",
    ] {
        assert!(
            props.get(field).is_some(),
            "delegate_task lacks {field}: {schema}"
        );
        assert!(
            props[field]["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{field} has no description: {schema}"
        );
    }
    let text = schema.to_string();
    assert!(
        text.contains("after_turn") && text.contains("inject"),
        "{text}"
    );
    assert!(text.contains("orchestrator"), "{text}");
    let status = tools
        .iter()
        .find(|t| t.name == "delegation_status")
        .expect("delegation_status");
    assert_eq!(status.input_schema["required"], json!(["delegation_id"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_dispatch_returns_at_once_and_its_result_is_taken_exactly_once() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let answer = mcp
        .call(
            "delegate_task",
            json!({"goal": "count files", "command": ["sh", "-c", "sleep 0.3; echo forty-two"], "context": "the repo root"}),
        )
        .await;
    assert!(!answer.is_error, "{}", answer.text);
    let handle = answer.json();
    assert_eq!(handle["status"], "dispatched");
    assert_eq!(handle["mode"], "background");
    assert_eq!(handle["session"], "conv-mcp");
    assert_eq!(handle["tasks"], 1);
    let id = handle["delegation_id"].as_str().expect("id").to_owned();

    let status = mcp
        .call("delegation_status", json!({"delegation_id": id}))
        .await;
    assert!(!status.is_error, "{}", status.text);
    assert_eq!(status.json()["delegation_id"], id.as_str());
    let listed = mcp.call("delegation_list", json!({})).await.json();
    let everywhere: Vec<&Value> = ["running", "queued", "recent"]
        .iter()
        .flat_map(|k| listed[k].as_array().into_iter().flatten())
        .collect();
    assert!(
        everywhere.iter().any(|u| u["delegation_id"] == id.as_str()),
        "{listed}"
    );

    wait_ended(&h, &id);
    let first = mcp.call("delegation_results", json!({})).await;
    assert!(!first.is_error, "{}", first.text);
    assert!(
        first
            .text
            .starts_with(&format!("[ASYNC DELEGATION COMPLETE — {id}]")),
        "{}",
        first.text
    );
    assert!(first.text.contains("forty-two"), "{}", first.text);
    assert!(
        first.text.contains("Context you provided:"),
        "{}",
        first.text
    );
    assert!(first.text.contains("the repo root"), "{}", first.text);
    let second = mcp.call("delegation_results", json!({})).await;
    assert!(
        second.text.starts_with("No delegation results are ready"),
        "{}",
        second.text
    );
    // Nobody else gets it either.
    let drained = h.run(&["drain", "--session", "conv-mcp"]);
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    assert_eq!(drained.stdout, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_dispatch_runs_inline_and_returns_the_rendered_result() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let answer = mcp
        .call(
            "delegate_task",
            json!({"goal": "say hi", "command": ["sh", "-c", "echo hi there"], "background": false}),
        )
        .await;
    assert!(!answer.is_error, "{}", answer.text);
    assert!(
        answer
            .text
            .starts_with("[ASYNC DELEGATION COMPLETE — deleg_"),
        "{}",
        answer.text
    );
    assert!(answer.text.contains("hi there"), "{}", answer.text);
    assert!(answer.text.contains("Status: completed"), "{}", answer.text);

    let batch = mcp
        .call(
            "delegate_task",
            json!({"background": false, "tasks": [
                {"goal": "ok", "command": ["true"]},
                {"goal": "fails", "command": ["sh", "-c", "echo broken >&2; exit 3"]}
            ]}),
        )
        .await;
    assert!(
        batch.is_error,
        "a batch with a failed child is a tool error: {}",
        batch.text
    );
    assert!(
        batch.text.contains("[ASYNC DELEGATION RESULTS — deleg_"),
        "{}",
        batch.text
    );
    assert!(
        batch.text.contains("1 of 2 tasks completed"),
        "{}",
        batch.text
    );
    let last = batch.text.lines().last().unwrap_or("");
    assert!(last.starts_with("hermes: deleg_"), "{last}");
    // Inline results were handed over in the call: nothing waits for delivery.
    let results = mcp.call("delegation_results", json!({})).await;
    assert!(
        results.text.starts_with("No delegation results"),
        "{}",
        results.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_interrupts_a_delegation_and_its_block_says_so() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let id = mcp
        .call(
            "delegate_task",
            json!({"goal": "long", "command": ["sleep", "60"]}),
        )
        .await
        .json()["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let listed = mcp
        .call("delegation_list", json!({"all": true}))
        .await
        .json();
    assert_eq!(listed["running_count"], 1, "{listed}");
    let stopped = mcp
        .call("delegation_stop", json!({"delegation_id": id}))
        .await;
    assert!(!stopped.is_error, "{}", stopped.text);
    assert_eq!(stopped.json()["status"], "stopping");
    let status = wait_ended(&h, &id);
    assert_eq!(status["status"], "interrupted", "{status}");
    let results = mcp
        .call("delegation_results", json!({"boundary": "turn"}))
        .await;
    assert!(results.text.contains(&id), "{}", results.text);
    assert!(results.text.contains("interrupted"), "{}", results.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_unit_waits_for_a_worker_and_its_result_comes_back_to_the_conversation() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let answer = mcp
        .call(
            "delegate_task",
            json!({"goal": "on the pool", "command": ["sh", "-c", "echo from-a-worker"], "pool": "mcp"}),
        )
        .await;
    assert!(!answer.is_error, "{}", answer.text);
    let handle = answer.json();
    assert_eq!(handle["status"], "queued", "{handle}");
    assert_eq!(handle["pool"], "mcp");
    assert_eq!(handle["workers"], 0, "no worker yet");
    let id = handle["delegation_id"].as_str().expect("id").to_owned();
    let mut worker = h
        .command(&["worker", "--pool", "mcp", "--capacity", "1"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("worker starts");
    let status = wait_ended(&h, &id);
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["pool"], "mcp");
    let results = mcp
        .call("delegation_results", json!({"boundary": "turn"}))
        .await;
    assert!(results.text.contains("from-a-worker"), "{}", results.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_tool_errors_with_the_command_lines_one_line_message() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let plain = tempfile::tempdir().expect("a directory outside any repository");
    let cases = [
        (
            json!({"goal": "x", "command": ["true"], "cwd": "/no/such/dir"}),
            "not a directory",
        ),
        (
            json!({"goal": "x", "command": ["true"], "cwd": plain.path(), "workspace": "worktree"}),
            "not inside a git repository",
        ),
        (json!({"command": ["true"]}), "goal is required"),
        (json!({"goal": "x"}), "give command"),
        (
            json!({"goal": "x", "command": ["true"], "pool": "gpu", "background": false}),
            "pool: a pool unit runs in the background",
        ),
        (
            json!({"goal": "x", "command": ["true"], "pool": "no spaces"}),
            "invalid pool name",
        ),
        (json!({"tasks": []}), "tasks is empty"),
        (
            json!({"goal": "x", "command": ["hermes-test-no-such-program"]}),
            "cannot run \"hermes-test-no-such-program\"",
        ),
        (
            json!({"tasks": [{"goal": "a", "command": []}]}),
            "tasks[0].command",
        ),
        (
            json!({"goal": "x", "command": ["true"], "timeout_seconds": -1}),
            "timeout_seconds -1 must be",
        ),
    ];
    for (args, expected) in cases {
        let answer = mcp.call("delegate_task", args.clone()).await;
        assert!(answer.is_error, "{args} should fail: {}", answer.text);
        assert!(answer.text.starts_with("hermes: "), "{}", answer.text);
        assert_eq!(answer.text.lines().count(), 1, "{}", answer.text);
        assert!(
            answer.text.contains(expected),
            "{args}: {} lacks {expected}",
            answer.text
        );
    }
    // Another conversation's delegation is not this one's to see or stop.
    let other = h.json(&[
        "delegate",
        "--session",
        "someone-else",
        "--json",
        "--",
        "true",
    ]);
    let other_id = other["delegation_id"].as_str().expect("id");
    for tool in ["delegation_status", "delegation_stop"] {
        let answer = mcp.call(tool, json!({"delegation_id": other_id})).await;
        assert!(answer.is_error, "{tool}: {}", answer.text);
        assert!(
            answer.text.contains("not found in this conversation"),
            "{}",
            answer.text
        );
    }
    let bad = mcp
        .call("delegation_status", json!({"delegation_id": "nope"}))
        .await;
    assert!(
        bad.is_error && bad.text.starts_with("hermes: "),
        "{}",
        bad.text
    );
}

#[test]
fn malformed_requests_get_protocol_errors_and_never_end_the_server() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send("this is not json {");
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"no/such/method"}"#);
    let unknown = raw.response(1);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#);
    let no_tool = raw.response(2);
    assert!(no_tool["error"]["code"].is_i64(), "{no_tool}");
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delegate_task","arguments":{"goal":["not","a","string"],"command":["true"]}}}"#);
    let wrong_type = raw.response(3);
    // Arguments that do not fit the schema: rmcp answers them as a tool error the model can
    // correct (MCP's input validation errors), never by ending the server.
    let refused = wrong_type.get("error").is_some() || wrong_type["result"]["isError"] == true;
    assert!(refused, "{wrong_type}");
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"delegation_list","arguments":{"colour":"red"}}}"#);
    let unknown_field = raw.response(4);
    assert!(
        unknown_field.get("error").is_some() || unknown_field["result"]["isError"] == true,
        "{unknown_field}"
    );
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#);
    let listed = raw.response(5);
    assert_eq!(
        listed["result"]["tools"].as_array().map(Vec::len),
        Some(6),
        "{listed}"
    );
    assert!(
        raw.child.try_wait().expect("try_wait").is_none(),
        "the server is still running"
    );
}

#[test]
fn a_provisional_conversation_ends_with_its_client() {
    // No hook ever named the conversation: when the client goes away nobody can resume it, so
    // the server stops its children and ends the session.
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delegate_task","arguments":{"goal":"long","command":["sleep","60"]}}}"#);
    let answer = raw.response(1);
    let handle: Value = serde_json::from_str(
        answer["result"]["content"][0]["text"]
            .as_str()
            .expect("text"),
    )
    .expect("dispatch JSON");
    let session = handle["session"].as_str().expect("session").to_owned();
    assert!(session.starts_with("mcp-"), "{session}");
    let id = handle["delegation_id"].as_str().expect("id").to_owned();
    raw.close();
    let status = wait_ended(&h, &id);
    assert_eq!(status["status"], "interrupted", "{status}");
    let exited = wait_for(Duration::from_secs(15), "hermes mcp to exit", || {
        raw.child.try_wait().expect("try_wait")
    });
    assert!(exited.success(), "{exited:?}");
    let sessions = h.json(&["session", "list", "--json"]);
    let state = sessions["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == session.as_str()))
        .map(|s| s["state"].clone());
    assert_eq!(state, Some(json!("ended")), "{sessions}");
}

#[test]
fn a_named_conversation_keeps_its_children_running_after_the_client_leaves() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delegate_task","arguments":{"goal":"finishes later","command":["sh","-c","sleep 1; echo survived"]}}}"#);
    let answer = raw.response(1);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    raw.close();
    // The child runs in the session's headless host: the server leaves at once, the child
    // finishes, and its result waits for the conversation's next boundary.
    let exited = wait_for(Duration::from_secs(20), "hermes mcp to exit", || {
        raw.child.try_wait().expect("try_wait")
    });
    assert!(exited.success(), "{exited:?}");
    let id = answer["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| v["delegation_id"].as_str().map(str::to_owned))
        .expect("delegation id");
    let status = wait_ended(&h, &id);
    assert_eq!(status["status"], "completed", "{status}");
    let drained = h.run(&["drain", "--session", "conv-mcp"]);
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    assert!(drained.stdout.contains("survived"), "{}", drained.stdout);
    assert!(
        drained.stdout.contains("Status: completed"),
        "{}",
        drained.stdout
    );
}

#[test]
fn a_cancelled_foreground_call_stops_its_children() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delegate_task","arguments":{"goal":"wait","command":["sleep","60"],"background":false}}}"#);
    let id = wait_for(Duration::from_secs(20), "the inline unit to run", || {
        let listed = h.json(&["delegation", "list", "--json"]);
        listed["running"]
            .as_array()
            .and_then(|r| r.first())
            .and_then(|u| u["delegation_id"].as_str().map(str::to_owned))
    });
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9,"reason":"the user pressed Esc"}}"#);
    let status = wait_ended(&h, &id);
    assert_eq!(status["status"], "interrupted", "{status}");
    raw.send(r#"{"jsonrpc":"2.0","id":10,"method":"tools/list"}"#);
    assert!(raw.response(10)["result"]["tools"].is_array());
}

/// Item 14: a `tools/call` whose params cannot be read at all (arguments not an object, no
/// tool name) is invalid params (-32602), not "method not found".
#[test]
fn unreadable_tool_call_params_are_invalid_params() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delegation_list","arguments":"not an object"}}"#);
    assert_eq!(raw.response(1)["error"]["code"], -32602);
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{}}}"#);
    assert_eq!(raw.response(2)["error"]["code"], -32602);
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"no/such/method","params":{}}"#);
    assert_eq!(raw.response(4)["error"]["code"], -32601);
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#);
    assert!(raw.response(5)["result"]["tools"].is_array());
}

/// Item 6: SIGTERM ends the server promptly even while its stdin stays open.
#[test]
fn sigterm_ends_the_server_while_stdin_stays_open() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    raw.response(1);
    let pid = raw.child.id() as i32;
    // SAFETY: kill(2) only sends a signal.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let started = std::time::Instant::now();
    let exited = wait_for(Duration::from_secs(10), "hermes mcp to exit", || {
        raw.child.try_wait().expect("try_wait")
    });
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(exited.success(), "{exited:?}");
}

/// Item 13: a `background: false` call with a `progressToken` gets `notifications/progress`
/// while its child works (the TypeScript SDK's request timeout resets on progress only).
#[test]
fn a_foreground_call_with_a_progress_token_gets_progress_notifications() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delegate_task","_meta":{"progressToken":"tok-1"},"arguments":{"goal":"ticks","background":false,"command":["sh","-c","for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.5; done"]}}}"#);
    let mut progress = Vec::new();
    let answer = loop {
        let line = raw.line();
        if line["method"] == "notifications/progress" {
            progress.push(line);
        } else if line["id"] == 7 {
            break line;
        }
    };
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "tok-1")
    );
    let values: Vec<f64> = progress
        .iter()
        .filter_map(|p| p["params"]["progress"].as_f64())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

/// Item 15: `delegation_list` shows `background: false` units while they run, and its
/// description says what its counts count.
#[test]
fn delegation_list_shows_a_running_foreground_unit() {
    let h = Hermes::new();
    let mut raw = Raw::start(&h, &[SESSION]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    let tools = raw.response(1);
    let list = tools["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "delegation_list"))
        .expect("delegation_list")
        .clone();
    let description = list["description"].as_str().expect("description");
    assert!(!description.contains("machine-wide"), "{description}");
    assert!(description.contains("this conversation's"), "{description}");
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delegate_task","arguments":{"goal":"in the foreground","background":false,"command":["sleep","30"]}}}"#);
    let listed = wait_for(
        Duration::from_secs(20),
        "the foreground unit to be listed",
        || {
            raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delegation_list","arguments":{}}}"#);
            let answer = raw.response(3);
            let listing: Value =
                serde_json::from_str(answer["result"]["content"][0]["text"].as_str()?).ok()?;
            (listing["running_count"] == 1).then_some(listing)
        },
    );
    assert_eq!(
        listed["running"][0]["goal"], "in the foreground",
        "{listed}"
    );
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#);
}

/// Item 3: `background: false` and `delegation_results` answers are bounded like hook answers
/// (MCP clients cut long tool output too: https://code.claude.com/docs/en/mcp,
/// `MAX_MCP_OUTPUT_TOKENS`), and say how to read all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_answers_are_bounded_and_name_delegation_result() {
    let h = Hermes::new();
    let mcp = Mcp::start(&h, &[SESSION]).await;
    let flood = "i=0; while [ $i -lt 4000 ]; do echo \"a long line of build output number $i\"; i=$((i+1)); done";
    let inline = mcp
        .call(
            "delegate_task",
            json!({"goal": "flood", "background": false, "command": ["sh", "-c", flood]}),
        )
        .await;
    assert!(!inline.is_error, "{}", inline.text);
    assert!(
        inline.text.chars().count() <= 30_000,
        "{}",
        inline.text.chars().count()
    );
    assert!(inline.text.contains("delegation_result"), "{}", inline.text);
    let id = mcp
        .call(
            "delegate_task",
            json!({"goal": "flood", "command": ["sh", "-c", flood]}),
        )
        .await
        .json()["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    wait_ended(&h, &id);
    let results = mcp.call("delegation_results", json!({})).await;
    assert!(
        results.text.chars().count() <= 30_000,
        "{}",
        results.text.chars().count()
    );
    assert!(results.text.contains(&id) && results.text.contains("characters cut here"));
    let page = mcp
        .call(
            "delegation_result",
            json!({"delegation_id": id, "offset": 0}),
        )
        .await;
    assert!(!page.is_error, "{}", page.text);
    assert!(
        page.text.contains("next page: offset"),
        "{}",
        page.text.lines().next().unwrap_or("")
    );
}
