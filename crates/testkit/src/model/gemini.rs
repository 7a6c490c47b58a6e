//! The Gemini API (Gemini CLI): `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`
//! and `:generateContent` with `contents` (`role` `user` or `model`, `parts` holding `text`,
//! `functionCall` or `functionResponse`) and `tools` of `functionDeclarations`, answered as
//! one `GenerateContentResponse` (`candidates[0].content.parts`, `finishReason`,
//! `usageMetadata`, `modelVersion`), as a single server-sent event when streaming; errors as
//! `{"error": {"code", "message", "status"}}`. `:countTokens` answers a count.
//!
//! Gemini CLI also asks its model for JSON of a given schema on the side (with its default
//! model `auto`, a router scores each prompt's complexity before the turn:
//! `generationConfig.responseJsonSchema`). Those are not turns of the conversation: they are
//! answered here with an object of the schema's properties (strings `scripted`, numbers 10,
//! booleans `false`), never shown to the script.

use serde_json::{Map, Value, json};

use super::{Answer, Logged, Read, Reply, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS};

pub(super) fn read(request: &Logged) -> Read {
    if request.path.contains(":countTokens") {
        return Read::Answer(200, json!({"totalTokens": USAGE_INPUT_TOKENS}));
    }
    let turn = [":generateContent", ":streamGenerateContent"]
        .iter()
        .any(|verb| request.path.contains(verb));
    if request.method != "POST" || !turn {
        return Read::Answer(404, error(404, "not found"));
    }
    let config = &request.body["generationConfig"];
    if config["responseMimeType"] == "application/json" {
        let schema = config
            .get("responseJsonSchema")
            .or_else(|| config.get("responseSchema"))
            .unwrap_or(&Value::Null);
        let text = filled(schema).to_string();
        return Read::Answer(
            200,
            response(json!([{ "text": text }]), "STOP", &model_of(&request.path)),
        );
    }
    let contents = request.body["contents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let after_tool = contents
        .last()
        .is_some_and(|c| parts(c).any(|p| p.get("functionResponse").is_some()));
    let last_user = contents
        .iter()
        .rev()
        .find(|c| c["role"] == "user" && parts(c).any(|p| p.get("text").is_some()))
        .map(|c| {
            parts(c)
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let tools = request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["functionDeclarations"].as_array().into_iter().flatten())
        .filter_map(|f| f["name"].as_str().map(str::to_owned))
        .collect();
    Read::Turn {
        last_user,
        after_tool,
        tools,
    }
}

pub(super) fn answer(request: &Logged, reply: &Reply, _id: u64) -> Answer {
    let (parts, finish) = match reply {
        Reply::Error { status, message } => return Answer::json(*status, &error(*status, message)),
        Reply::Text(text) => (json!([{ "text": text }]), "STOP"),
        Reply::Call { tool, args } => (
            json!([{ "functionCall": { "name": tool, "args": args } }]),
            "STOP",
        ),
    };
    let body = response(parts, finish, &model_of(&request.path));
    if request.path.contains("alt=sse") {
        Answer::sse([(None, body)])
    } else {
        Answer::json(200, &body)
    }
}

/// The model a request names in its path (`/v1beta/models/MODEL:generateContent`): the model
/// that answers it, as `modelVersion` says.
pub fn model_of(path: &str) -> String {
    path.split("/models/")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or("gemini-test")
        .to_owned()
}

fn parts(content: &Value) -> impl Iterator<Item = &Value> {
    content["parts"].as_array().into_iter().flatten()
}

fn response(parts: Value, finish: &str, model: &str) -> Value {
    json!({
        "candidates": [{
            "content": { "role": "model", "parts": parts },
            "finishReason": finish,
            "index": 0,
        }],
        "usageMetadata": {
            "promptTokenCount": USAGE_INPUT_TOKENS,
            "candidatesTokenCount": USAGE_OUTPUT_TOKENS,
            "totalTokenCount": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
        },
        "modelVersion": model,
    })
}

/// The Gemini API's error body, with the status name Google's APIs give each HTTP status.
fn error(code: u16, message: &str) -> Value {
    let status = match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": code, "message": message, "status": status}})
}

/// A value of `schema` (an OpenAPI-style schema, types upper or lower case).
fn filled(schema: &Value) -> Value {
    let kind = schema["type"].as_str().unwrap_or("").to_ascii_lowercase();
    match kind.as_str() {
        "object" => {
            let mut object = Map::new();
            for (key, property) in schema["properties"].as_object().into_iter().flatten() {
                object.insert(key.clone(), filled(property));
            }
            Value::Object(object)
        }
        "array" => json!([]),
        "integer" | "number" => json!(10),
        "boolean" => json!(false),
        _ => json!("scripted"),
    }
}
