//! Each agent's hook protocol as its reference page documents it: the payload of each event
//! (the page's example, the conversation's id put in), how an installed hook is run, how its
//! answer reads, and what a failing hook may exit with. The page each comes from is named
//! above it.

use std::path::Path;

use serde_json::{Value, json};

use super::agents::Spec;

/// The hermes hook entry among `entries` (the one whose `key` runs `hermes … hook`).
fn hermes_command(entries: &[Value], key: &str) -> String {
    entries
        .iter()
        .filter_map(|e| e[key].as_str())
        .find(|c| c.contains(" hook ") && c.contains("--agent"))
        .unwrap_or_else(|| panic!("no hermes hook among {entries:?}"))
        .to_owned()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Claude's shape (event → groups → hooks), run by a shell.
fn grouped_hook(file: &Path, event: &str) -> Vec<String> {
    let doc = read_json(file);
    let entries: Vec<Value> = doc["hooks"][event]
        .as_array()
        .unwrap_or_else(|| panic!("{event} not installed: {doc}"))
        .iter()
        .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
        .collect();
    vec![
        "sh".into(),
        "-c".into(),
        hermes_command(&entries, "command"),
    ]
}

/// A flat list of entries, the command under `key`, run by `shell`.
fn flat_hook(file: &Path, event: &str, key: &str, shell: &str) -> Vec<String> {
    let doc = read_json(file);
    let entries = doc["hooks"][event]
        .as_array()
        .unwrap_or_else(|| panic!("{event} not installed: {doc}"))
        .clone();
    vec![shell.into(), "-c".into(), hermes_command(&entries, key)]
}

/// `mcpServers.hermes`'s command and arguments.
fn json_server(file: &Path) -> Vec<String> {
    let doc = read_json(file);
    let entry = &doc["mcpServers"]["hermes"];
    let mut argv = vec![entry["command"].as_str().expect("command").to_owned()];
    argv.extend(
        entry["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_owned()),
    );
    argv
}

/// `hookSpecificOutput.additionalContext` (for `event`), or a stop's `reason` under
/// `decision` = `stop_decision`.
fn claude_shaped(event: &str, stdout: &str, stop_event: &str, stop_decision: &str) -> String {
    if stdout.is_empty() {
        return String::new();
    }
    let v: Value = serde_json::from_str(stdout).expect("the hook answers one JSON object");
    if event == stop_event {
        assert_eq!(v["decision"], stop_decision, "{v}");
        return v["reason"].as_str().expect("reason").to_owned();
    }
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], event, "{v}");
    v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("additionalContext")
        .to_owned()
}

// Codex CLI: <https://developers.openai.com/codex/hooks> and the input schemas of
// `codex-rs/hooks/schema/generated/` (`session_id`, `turn_id`, `transcript_path`, `cwd`,
// `hook_event_name`, `model`, `permission_mode`; `source`; `prompt`; `tool_name`,
// `tool_input`, `tool_response`, `tool_use_id`; `stop_hook_active`, `last_assistant_message`).
// Hooks are shell commands in `.codex/hooks.json`; exit 2 blocks, other codes are errors.
fn codex_payload(event: &str, session: &str) -> Value {
    let mut p = json!({
        "session_id": session,
        "turn_id": "019d036d-c7fa-72d2-b6fd-78878bfe34e4",
        "transcript_path": null,
        "cwd": "/repo",
        "hook_event_name": event,
        "model": "gpt-5-codex",
        "permission_mode": "default",
    });
    match event {
        "SessionStart" => p["source"] = json!("startup"),
        "UserPromptSubmit" => p["prompt"] = json!("what's a stonpet?"),
        "PostToolUse" => {
            p["tool_name"] = json!("Bash");
            p["tool_input"] = json!({"command": "npm test"});
            p["tool_response"] = json!("All tests passed");
            p["tool_use_id"] = json!("call_1");
        }
        "Stop" => {
            p["stop_hook_active"] = json!(false);
            p["last_assistant_message"] = json!("Done.");
        }
        _ => {}
    }
    p
}

pub const CODEX: Spec = Spec {
    name: "codex",
    start: "SessionStart",
    tool: Some("PostToolUse"),
    turn: Some("UserPromptSubmit"),
    stop: Some("Stop"),
    end: Some("SessionEnd"),
    payload: codex_payload,
    delivered: |event, out| claude_shaped(event, out, "Stop", "block"),
    hook_argv: |p, event| grouped_hook(&p.join(".codex/hooks.json"), event),
    server_argv: |p| {
        let text = std::fs::read_to_string(p.join(".codex/config.toml")).expect("config.toml");
        let doc: toml_edit::DocumentMut = text.parse().expect("TOML");
        let entry = &doc["mcp_servers"]["hermes"];
        let mut argv = vec![entry["command"].as_str().expect("command").to_owned()];
        argv.extend(
            entry["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|a| a.as_str().expect("arg").to_owned()),
        );
        argv
    },
    seed: &[
        (
            ".codex/config.toml",
            "# my settings\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\nargs = [\"--stdio\"]\n",
        ),
        (
            ".codex/hooks.json",
            r#"{"hooks":{"PostToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"./lint.sh","timeout":30}]}]}}"#,
        ),
    ],
    keeps: &["# my settings", "model = \"o3\"", "docs-mcp", "./lint.sh"],
    fail_code: 1,
    user_file: ".codex/config.toml",
};

// Gemini CLI: <https://geminicli.com/docs/hooks/reference> (base fields `session_id`,
// `transcript_path`, `cwd`, `hook_event_name`, `timestamp`; `SessionStart` `source`;
// `BeforeAgent` `prompt`; `AfterTool` `tool_name`, `tool_input`, `tool_response`;
// `AfterAgent` `prompt`, `prompt_response`, `stop_hook_active`; `SessionEnd` `reason`). Exit
// 0 with JSON is an answer, 2 blocks, any other code is a warning.
fn gemini_payload(event: &str, session: &str) -> Value {
    let mut p = json!({
        "session_id": session,
        "transcript_path": format!("/home/u/.gemini/tmp/{session}.json"),
        "cwd": "/repo",
        "hook_event_name": event,
        "timestamp": "2026-12-02T01:00:00.000Z",
    });
    match event {
        "SessionStart" => p["source"] = json!("startup"),
        "BeforeAgent" => p["prompt"] = json!("fix the failing test"),
        "AfterTool" => {
            p["tool_name"] = json!("run_shell_command");
            p["tool_input"] = json!({"command": "npm test"});
            p["tool_response"] = json!({"llmContent": "ok", "returnDisplay": "ok"});
        }
        "AfterAgent" => {
            p["prompt"] = json!("fix the failing test");
            p["prompt_response"] = json!("Fixed.");
            p["stop_hook_active"] = json!(false);
        }
        "SessionEnd" => p["reason"] = json!("exit"),
        _ => {}
    }
    p
}

pub const GEMINI: Spec = Spec {
    name: "gemini",
    start: "SessionStart",
    tool: Some("AfterTool"),
    turn: Some("BeforeAgent"),
    stop: Some("AfterAgent"),
    end: Some("SessionEnd"),
    payload: gemini_payload,
    delivered: |event, out| claude_shaped(event, out, "AfterAgent", "deny"),
    hook_argv: |p, event| grouped_hook(&p.join(".gemini/settings.json"), event),
    server_argv: |p| json_server(&p.join(".gemini/settings.json")),
    seed: &[(
        ".gemini/settings.json",
        r#"{"theme":"GitHub","mcpServers":{"docs":{"command":"docs-mcp"}},"hooks":{"AfterTool":[{"matcher":"write_file","hooks":[{"type":"command","command":"./fmt.sh","timeout":5000}]}]}}"#,
    )],
    keeps: &["GitHub", "docs-mcp", "./fmt.sh"],
    fail_code: 1,
    user_file: ".gemini/settings.json",
};

// GitHub Copilot CLI 1.0.102, as `real/copilot.rs` pins it (camelCase payloads: `sessionId`,
// `timestamp` in ms, `cwd`; `sessionStart` `source`, `initialPrompt`; `userPromptSubmitted`
// `prompt`; `postToolUse` `toolName`, `toolArgs`, `toolResult`; `agentStop` `transcriptPath`,
// `stopReason`, `stop_hook_active`; `sessionEnd` `reason`). Hooks are `bash` commands in
// `.github/hooks/*.json`; `additionalContext` is read at the top level; a failing hook is
// logged and skipped.
fn copilot_payload(event: &str, session: &str) -> Value {
    let mut p =
        json!({"sessionId": session, "timestamp": 1704614400000_u64, "cwd": "/path/to/project"});
    match event {
        "sessionStart" => {
            p["source"] = json!("new");
            p["initialPrompt"] = json!("Create a new feature");
        }
        "userPromptSubmitted" => p["prompt"] = json!("what did the checks find?"),
        "postToolUse" => {
            p["toolName"] = json!("bash");
            p["toolArgs"] = json!({"command": "npm test"});
            p["toolResult"] = json!({"resultType": "success", "textResultForLlm": "ok"});
        }
        "agentStop" => {
            p["transcriptPath"] = json!("/tmp/t.jsonl");
            p["stopReason"] = json!("end_turn");
            p["stop_hook_active"] = json!(false);
        }
        "sessionEnd" => p["reason"] = json!("complete"),
        _ => {}
    }
    p
}

pub const COPILOT: Spec = Spec {
    name: "copilot",
    start: "sessionStart",
    tool: Some("postToolUse"),
    turn: Some("userPromptSubmitted"),
    stop: Some("agentStop"),
    end: Some("sessionEnd"),
    payload: copilot_payload,
    delivered: |event, out| {
        if out.is_empty() {
            return String::new();
        }
        let v: Value = serde_json::from_str(out).expect("one JSON object");
        if event == "agentStop" {
            assert_eq!(v["decision"], "block", "{v}");
            return v["reason"].as_str().expect("reason").to_owned();
        }
        v["additionalContext"]
            .as_str()
            .expect("additionalContext")
            .to_owned()
    },
    hook_argv: |p, event| flat_hook(&p.join(".github/hooks/hermes.json"), event, "bash", "bash"),
    server_argv: |p| json_server(&p.join(".github/mcp.json")),
    seed: &[
        (
            ".github/hooks/audit.json",
            r#"{"version":1,"hooks":{"sessionStart":[{"type":"command","bash":"./audit/log-session-start.sh"}]}}"#,
        ),
        (
            ".github/mcp.json",
            r#"{"mcpServers":{"docs":{"type":"stdio","command":"docs-mcp","args":[],"tools":["*"]}}}"#,
        ),
    ],
    keeps: &["./audit/log-session-start.sh", "docs-mcp"],
    fail_code: 1,
    user_file: ".copilot/settings.json",
};

// Cursor: <https://cursor.com/docs/agent/hooks> (common fields `hook_event_name`,
// `conversation_id`, `generation_id`, `workspace_roots`; `stop` `status`, `loop_count`;
// `stop` answers `followup_message`). Hooks are shell commands in `.cursor/hooks.json`.
fn cursor_payload(event: &str, session: &str) -> Value {
    let mut p = json!({
        "hook_event_name": event,
        "conversation_id": session,
        "generation_id": "gen-456",
        "workspace_roots": ["/path/to/project"],
        "model": "gpt-4",
        "cursor_version": "2.0.77",
    });
    if event == "stop" {
        p["status"] = json!("completed");
        p["loop_count"] = json!(0);
    }
    p
}

pub const CURSOR: Spec = Spec {
    name: "cursor",
    start: "sessionStart",
    tool: None,
    turn: None,
    stop: Some("stop"),
    end: Some("sessionEnd"),
    payload: cursor_payload,
    delivered: |_, out| {
        if out.is_empty() {
            return String::new();
        }
        let v: Value = serde_json::from_str(out).expect("one JSON object");
        v["followup_message"]
            .as_str()
            .expect("followup_message")
            .to_owned()
    },
    hook_argv: |p, event| flat_hook(&p.join(".cursor/hooks.json"), event, "command", "sh"),
    server_argv: |p| json_server(&p.join(".cursor/mcp.json")),
    seed: &[
        (
            ".cursor/hooks.json",
            r#"{"version":1,"hooks":{"stop":[{"command":"hooks/notify.sh"}],"afterFileEdit":[{"command":"hooks/format.sh"}]}}"#,
        ),
        (
            ".cursor/mcp.json",
            r#"{"mcpServers":{"docs":{"command":"docs-mcp"}}}"#,
        ),
    ],
    keeps: &["hooks/notify.sh", "hooks/format.sh", "docs-mcp"],
    fail_code: 1,
    user_file: ".cursor/hooks.json",
};

// Cline 3.0.65, as `real/cline.rs` pins it: a hook is a script named after its event
// (`.clinerules/hooks/PostToolUse`), its input camelCase around a snake-case `hookName`
// (`agent_start`, `agent_resume`, `tool_result`), `taskId` the conversation, `agent_id` and
// `parent_agent_id` (set in a subagent); `PostToolUse` reads `contextModification`. The MCP
// servers are the home's (`~/.cline/data/settings/cline_mcp_settings.json`).
fn cline_payload(event: &str, session: &str) -> Value {
    let hook_name = match event {
        "TaskStart" => "agent_start",
        "TaskResume" => "agent_resume",
        "PostToolUse" => "tool_result",
        other => other,
    };
    let mut p = json!({
        "clineVersion": "",
        "hookName": hook_name,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "taskId": session,
        "workspaceRoots": ["/repo"],
        "userId": "user-1",
        "agent_id": "agent_1",
        "parent_agent_id": null,
    });
    match event {
        "TaskStart" => p["taskStart"] = json!({"taskMetadata": {}}),
        "TaskResume" => p["taskResume"] = json!({"taskMetadata": {}, "previousState": {}}),
        "PostToolUse" => {
            p["postToolUse"] = json!({
                "toolName": "run_commands",
                "parameters": {"commands": "[\"npm test\"]"},
                "result": "ok",
                "success": true,
                "executionTimeMs": 120,
            })
        }
        _ => {}
    }
    p
}

pub const CLINE: Spec = Spec {
    name: "cline",
    start: "TaskStart",
    tool: None,
    turn: Some("PostToolUse"),
    stop: None,
    end: None,
    payload: cline_payload,
    delivered: |_, out| {
        if out.is_empty() {
            return String::new();
        }
        let v: Value = serde_json::from_str(out).expect("one JSON object");
        assert_eq!(v["cancel"], false, "{v}");
        v["contextModification"].as_str().unwrap_or("").to_owned()
    },
    hook_argv: |p, event| {
        vec![
            p.join(".clinerules/hooks")
                .join(event)
                .display()
                .to_string(),
        ]
    },
    server_argv: |p| json_server(&p.join(".home/.cline/data/settings/cline_mcp_settings.json")),
    seed: &[(
        ".clinerules/hooks/PreToolUse",
        "#!/bin/sh\necho '{\"cancel\": false}'\n",
    )],
    keeps: &["echo '{\"cancel\": false}'"],
    fail_code: 0,
    user_file: ".cline/hooks/PostToolUse",
};
