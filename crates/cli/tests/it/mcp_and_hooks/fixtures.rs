//! Claude Code's hook input, as its hooks reference documents it, one example per event:
//! <https://code.claude.com/docs/en/hooks> ("Hook input": common fields `session_id`,
//! `transcript_path`, `cwd`, `permission_mode`, `hook_event_name`; "SessionStart" `source`
//! = `startup`|`resume`|`clear`|`compact` and `model`; "UserPromptSubmit" `prompt`;
//! "PostToolUse" `tool_name`, `tool_input`, `tool_response`, `tool_use_id`;
//! "PostToolUseFailure" `error` and `is_interrupt` instead of `tool_response`; "Stop"
//! `stop_hook_active`, `last_assistant_message`; "SessionEnd" `reason` = `clear`|`logout`|
//! `prompt_input_exit`|`bypass_permissions_disabled`|`other`; a call made inside a subagent
//! adds `agent_id` and `agent_type`). The examples' `abc123` is replaced by the conversation's
//! id, nothing else is changed.

use serde_json::{Value, json};

/// The documented example input of `event` for conversation `session`.
pub fn claude(event: &str, session: &str) -> Value {
    let transcript =
        "/Users/me/.claude/projects/my-project/00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl";
    let mut v = match event {
        "SessionStart" => json!({
            "session_id": "abc123",
            "transcript_path": transcript,
            "cwd": "/Users/me/my-project",
            "hook_event_name": "SessionStart",
            "source": "startup",
            "model": "claude-sonnet-4-6"
        }),
        "UserPromptSubmit" => json!({
            "session_id": "abc123",
            "transcript_path": transcript,
            "cwd": "/Users/me/my-project",
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": "Write a function to calculate the factorial of a number"
        }),
        "PostToolUse" => json!({
            "session_id": "abc123",
            "transcript_path": transcript,
            "cwd": "/Users/me/my-project",
            "permission_mode": "default",
            "hook_event_name": "PostToolUse",
            "tool_name": "Write",
            "tool_input": {"file_path": "/path/to/file.txt", "content": "file content"},
            "tool_response": {"filePath": "/path/to/file.txt", "success": true},
            "tool_use_id": "toolu_01ABC123"
        }),
        "PostToolUseFailure" => json!({
            "session_id": "abc123",
            "transcript_path": transcript,
            "cwd": "/Users/me/my-project",
            "permission_mode": "default",
            "hook_event_name": "PostToolUseFailure",
            "tool_name": "Bash",
            "tool_input": {"command": "npm test", "description": "Run test suite"},
            "tool_use_id": "toolu_01ABC123",
            "error": "Command exited with non-zero status code 1",
            "is_interrupt": false
        }),
        "Stop" => json!({
            "session_id": "abc123",
            "transcript_path": transcript,
            "cwd": "/Users/me/my-project",
            "permission_mode": "default",
            "hook_event_name": "Stop",
            "stop_hook_active": false,
            "last_assistant_message": "I've finished the task."
        }),
        "SessionEnd" => json!({
            "session_id": "abc123",
            "transcript_path": transcript,
            "cwd": "/Users/me/my-project",
            "permission_mode": "default",
            "hook_event_name": "SessionEnd",
            "reason": "other"
        }),
        other => panic!("no fixture for {other}"),
    };
    v["session_id"] = json!(session);
    v
}

/// `event`'s input with `key` set to `value` (a `source`, a `reason`, an `agent_id`).
pub fn with(event: &str, session: &str, fields: &[(&str, Value)]) -> String {
    let mut v = claude(event, session);
    for (k, val) in fields {
        v[*k] = val.clone();
    }
    v.to_string()
}
