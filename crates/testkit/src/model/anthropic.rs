//! Anthropic Messages: `POST …/v1/messages` with `system`, `messages` (each a role and a
//! string or a list of content blocks: `text`, `tool_use`, `tool_result`, …) and `tools`,
//! answered as one `message` object or, when the request sets `stream`, as the events
//! `message_start`, `content_block_start`/`content_block_delta`/`content_block_stop` per block
//! (`text_delta`, or `input_json_delta` for a `tool_use`), `message_delta` (the stop reason and
//! the usage) and `message_stop`. `POST …/v1/messages/count_tokens` counts a fixed number; an
//! API error is `{"type":"error","error":{"type":…,"message":…}}` with its status.

use serde_json::{Value, json};

use super::{Answer, Logged, Read, Reply, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS};

pub(super) fn read(request: &Logged) -> Read {
    let path = request.path.split('?').next().unwrap_or_default();
    if request.method != "POST" || !path.ends_with("/messages") {
        if path.ends_with("/count_tokens") {
            return Read::Answer(200, json!({"input_tokens": USAGE_INPUT_TOKENS}));
        }
        return Read::Answer(404, error("not_found_error", "not found"));
    }
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Claude Code appends `system` messages (its environment, a hook's words) after the turn's
    // last message; the turn is the last message of the user or the assistant.
    let after_tool = messages
        .iter()
        .rfind(|m| m["role"] != "system")
        .is_some_and(|m| m["role"] == "user" && blocks(m).any(|b| b["type"] == "tool_result"));
    // The prompt: the last user message with text of its own (a tool's answer may carry text
    // blocks beside its result, such as a hook's context; those are not the prompt).
    let last_user = messages
        .iter()
        .rev()
        .filter(|m| m["role"] == "user" && !blocks(m).any(|b| b["type"] == "tool_result"))
        .map(text)
        .find(|t| !t.is_empty())
        .unwrap_or_default();
    let tools = request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Read::Turn {
        last_user,
        after_tool,
        tools,
    }
}

/// The content blocks of a message (a string content is one text block).
fn blocks(message: &Value) -> impl Iterator<Item = Value> + '_ {
    let content = &message["content"];
    let parts = match content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(parts) => parts.clone(),
        _ => Vec::new(),
    };
    parts.into_iter()
}

/// The text blocks of a message, one after another.
fn text(message: &Value) -> String {
    blocks(message)
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An API error's body.
fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The error type Anthropic's API gives a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

pub(super) fn answer(request: &Logged, reply: &Reply, id: u64) -> Answer {
    let model = request.body["model"]
        .as_str()
        .unwrap_or("test-model")
        .to_owned();
    let (block, stop) = match reply {
        Reply::Error { status, message } => {
            return Answer::json(*status, &error(error_type(*status), message));
        }
        Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Reply::Call { tool, args } => (
            json!({"type": "tool_use", "id": format!("toolu_{id:020}"), "name": tool, "input": args}),
            "tool_use",
        ),
    };
    let usage = json!({
        "input_tokens": USAGE_INPUT_TOKENS,
        "output_tokens": USAGE_OUTPUT_TOKENS,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    });
    let message_id = format!("msg_{id:020}");
    if request.body["stream"] != Value::Bool(true) {
        return Answer::json(
            200,
            &json!({
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": [block], "stop_reason": stop, "stop_sequence": null, "usage": usage,
            }),
        );
    }
    let (start, delta) = match block["type"].as_str() {
        Some("tool_use") => (
            json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
        ),
        _ => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        ),
    };
    let event = |name: &'static str, data: Value| (Some(name), data);
    Answer::sse([
        event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": 1,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            }}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": USAGE_OUTPUT_TOKENS}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ])
}
