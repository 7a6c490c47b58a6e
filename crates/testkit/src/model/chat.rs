//! OpenAI chat completions: `POST …/chat/completions` with `messages` and `tools`, answered as
//! one `chat.completion` object or, when the request sets `stream`, as `chat.completion.chunk`
//! events ending in `data: [DONE]`. `GET …/models` lists one model.

use serde_json::{Value, json};

use super::{Answer, Logged, Read, Reply, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, text_of};

pub(super) fn read(request: &Logged) -> Read {
    if request.method == "GET" {
        if request.path.ends_with("/models") {
            return Read::Answer(
                200,
                json!({"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "hermes-tests"}]}),
            );
        }
        return Read::Answer(404, json!({"error": {"message": "not found"}}));
    }
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let after_tool = messages.last().is_some_and(|m| m["role"] == "tool");
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    let tools = request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Read::Turn {
        last_user,
        after_tool,
        tools,
    }
}

pub(super) fn answer(request: &Logged, reply: &Reply, id: u64) -> Answer {
    let model = request.body["model"]
        .as_str()
        .unwrap_or("test-model")
        .to_owned();
    let usage = json!({
        "prompt_tokens": USAGE_INPUT_TOKENS,
        "completion_tokens": USAGE_OUTPUT_TOKENS,
        "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
    });
    let (message, finish) = match reply {
        Reply::Error { status, message } => {
            return Answer::json(
                *status,
                &json!({"error": {"message": message, "type": "invalid_request_error", "code": status}}),
            );
        }
        Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Reply::Call { tool, args } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{id}"),
                "type": "function",
                "function": {"name": tool, "arguments": args.to_string()},
            }]}),
            "tool_calls",
        ),
    };
    let chat_id = format!("chatcmpl-{id}");
    if request.body["stream"] != Value::Bool(true) {
        return Answer::json(
            200,
            &json!({
                "id": chat_id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }),
        );
    }
    let mut delta = message;
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (index, call) in calls.iter_mut().enumerate() {
            call["index"] = json!(index);
        }
    }
    let chunk = |delta: Value, finish: Value, usage: Value| {
        (
            None,
            json!({
                "id": chat_id, "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                "usage": usage,
            }),
        )
    };
    let mut answer = Answer::sse([
        chunk(delta, Value::Null, Value::Null),
        chunk(json!({}), json!(finish), usage),
    ]);
    answer.body.extend_from_slice(b"data: [DONE]\n\n");
    answer
}
