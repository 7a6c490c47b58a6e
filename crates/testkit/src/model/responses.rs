//! OpenAI Responses: `POST …/responses` with `input` items and `tools`, answered as server-sent
//! events: `response.created`, `response.output_item.added`, the item's deltas
//! (`response.output_text.delta`, `response.function_call_arguments.delta`),
//! `response.output_item.done` and `response.completed` with `usage`.
//!
//! Codex CLI 0.171 is its client. What it sends, as seen on this server: an uncompressed JSON
//! body (no `Content-Encoding`, although it accepts `zstd,gzip` answers) with `stream: true`;
//! no `GET …/models` for a provider of the user's own. Its MCP tools are one tool of type
//! `namespace` (`mcp__hermes`) holding `function` tools, and a call of one names both:
//! `{"type": "function_call", "namespace": "mcp__hermes", "name": "delegate_task", …}`. The
//! script sees such a tool as `NAMESPACE.NAME` (`mcp__hermes.delegate_task`); a call of that
//! name is split back.

use serde_json::{Value, json};

use super::{Answer, Logged, Read, Reply, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, text_of};

/// The input items that carry a tool's result back to the model.
const TOOL_OUTPUTS: &[&str] = &[
    "function_call_output",
    "custom_tool_call_output",
    "mcp_tool_call_output",
];

pub(super) fn read(request: &Logged) -> Read {
    if request.method == "GET" {
        if request.path.contains("/models") {
            return Read::Answer(200, json!({"models": []}));
        }
        return Read::Answer(404, json!({"error": {"message": "not found"}}));
    }
    let input = request.body["input"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let after_tool = input
        .last()
        .is_some_and(|item| TOOL_OUTPUTS.contains(&item["type"].as_str().unwrap_or("")));
    let last_user = input
        .iter()
        .rev()
        .find(|item| item["type"] == "message" && item["role"] == "user")
        .map(|item| text_of(&item["content"]))
        .unwrap_or_default();
    let tools = request.body["tools"]
        .as_array()
        .map(|tools| tools.iter().flat_map(tool_names).collect())
        .unwrap_or_default();
    Read::Turn {
        last_user,
        after_tool,
        tools,
    }
}

/// The names a tool offers: a function's name, each function of a namespace as
/// `NAMESPACE.NAME`.
fn tool_names(tool: &Value) -> Vec<String> {
    let name = tool["name"].as_str().unwrap_or_default();
    match tool["type"].as_str() {
        Some("namespace") => tool["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .map(|inner| format!("{name}.{inner}"))
            .collect(),
        _ if !name.is_empty() => vec![name.to_owned()],
        _ => Vec::new(),
    }
}

pub(super) fn answer(request: &Logged, reply: &Reply, id: u64) -> Answer {
    let model = request.body["model"]
        .as_str()
        .unwrap_or("test-model")
        .to_owned();
    let item_id = format!("item_{id}");
    let (item, delta) = match reply {
        Reply::Error { status, message } => {
            return Answer::json(
                *status,
                &json!({"error": {"message": message, "type": "invalid_request_error", "code": null}}),
            );
        }
        Reply::Text(text) => (
            json!({"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}),
            json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
                   "content_index": 0, "delta": text}),
        ),
        Reply::Call { tool, args } => {
            let arguments = args.to_string();
            let mut item = json!({"type": "function_call", "id": item_id, "status": "completed",
                                  "call_id": format!("call_{id}"), "arguments": arguments});
            match tool.rsplit_once('.') {
                Some((namespace, name)) => {
                    item["namespace"] = json!(namespace);
                    item["name"] = json!(name);
                }
                None => item["name"] = json!(tool),
            }
            let delta = json!({"type": "response.function_call_arguments.delta",
                               "item_id": item_id, "output_index": 0, "delta": arguments});
            (item, delta)
        }
    };
    let response_id = format!("resp_{id}");
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    if added["type"] == "message" {
        added["content"] = json!([]);
    } else {
        added["arguments"] = json!("");
    }
    Answer::sse([
        (
            Some("response.created"),
            json!({"type": "response.created", "response": {"id": response_id, "model": model, "status": "in_progress"}}),
        ),
        (
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
        ),
        (delta["type"].as_str(), delta.clone()),
        (
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            Some("response.completed"),
            json!({"type": "response.completed", "response": {
                "id": response_id, "model": model, "status": "completed",
                "usage": {
                    "input_tokens": USAGE_INPUT_TOKENS,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": USAGE_OUTPUT_TOKENS,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
                },
            }}),
        ),
    ])
}
