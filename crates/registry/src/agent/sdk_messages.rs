//! Agent SDK messages ([`hermes_agents::StreamFormat::SdkMessages`]): one JSON object per
//! line, `system` with subtype `init` naming the model, `assistant` messages whose content holds
//! `text` and `tool_use` blocks, `user` messages carrying `tool_result` blocks, and a last
//! `result` with the answer, `is_error`, `usage` and `total_cost_usd`. Which agent emits it,
//! and where its format is documented, is that agent's file in `hermes_agents`.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::event::StreamEvent;
use super::profile::ReadState;
use super::stream::short;

/// Reads one line of the stream (without its newline) into events; `false` if it is not a
/// JSON object of its shape, which is then shown as it is.
pub(crate) fn read(line: &[u8], state: &mut ReadState, out: &mut Vec<StreamEvent>) -> bool {
    // Typed, borrowing and skipping what it does not need: most of a line is content.
    let Ok(line) = serde_json::from_slice::<Line<'_>>(line) else {
        return false;
    };
    let subtype = line.subtype.as_deref().unwrap_or("");
    match &*line.kind {
        "system" if subtype == "init" => out.push(StreamEvent::Init { model: line.model }),
        "system" => out.push(StreamEvent::Note(format!("system {subtype}"))),
        "assistant" => {
            let Some(message) = line.message else {
                return true;
            };
            let id = message.id.as_deref();
            if id.is_none() || id != state.message_id.as_deref() {
                state.message_id = id.map(str::to_owned);
                out.push(StreamEvent::ModelCall);
            }
            for block in message.content.0 {
                match &*block.kind {
                    "text" => out.push(StreamEvent::Assistant {
                        text: block.text.unwrap_or_default(),
                        delta: false,
                    }),
                    "tool_use" => out.push(StreamEvent::ToolStart {
                        id: block.id.as_deref().unwrap_or("").to_owned(),
                        name: block.name.as_deref().unwrap_or("").to_owned(),
                        detail: block.input.as_ref().map(tool_detail).unwrap_or_default(),
                    }),
                    _ => {}
                }
            }
        }
        "user" => {
            for block in line.message.map(|m| m.content.0).unwrap_or_default() {
                if block.kind == "tool_result" {
                    out.push(StreamEvent::ToolEnd {
                        id: block.tool_use_id.as_deref().unwrap_or("").to_owned(),
                        ok: !block.is_error.unwrap_or(false),
                        detail: block
                            .content
                            .as_ref()
                            .map(|c| short(&content_text(c)))
                            .unwrap_or_default(),
                    });
                }
            }
        }
        "result" => {
            for denial in line.permission_denials.unwrap_or_default() {
                let detail = tool_detail(&denial.tool_input);
                out.push(StreamEvent::Denied(if detail.is_empty() {
                    denial.tool_name
                } else {
                    format!("{}: {detail}", denial.tool_name)
                }));
            }
            if line.usage.is_some() || line.total_cost_usd.is_some() {
                let u = line.usage.unwrap_or_default();
                out.push(StreamEvent::Usage(hermes_ledger::Usage {
                    input_tokens: u.input_tokens
                        + u.cache_creation_input_tokens
                        + u.cache_read_input_tokens,
                    output_tokens: u.output_tokens,
                    cached_input_tokens: u.cache_read_input_tokens,
                    cost_usd: line.total_cost_usd,
                }));
            }
            let text = line.result.unwrap_or_default();
            if line.is_error.unwrap_or(false) || subtype.starts_with("error") {
                let message = if text.is_empty() {
                    subtype.to_owned()
                } else {
                    text
                };
                out.push(StreamEvent::Error(message));
            } else {
                out.push(StreamEvent::Answer(text));
            }
        }
        other => out.push(StreamEvent::Note(other.to_owned())),
    }
    true
}

/// One line of the stream: the fields hermes reads, borrowed where it can.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    subtype: Option<Cow<'a, str>>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default, borrow)]
    message: Option<Message<'a>>,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default)]
    total_cost_usd: Option<f64>,
    /// The calls its permission system refused (`tool_name`, `tool_use_id`, `tool_input`).
    #[serde(default)]
    permission_denials: Option<Vec<Denial>>,
}

/// One refused call of a `result` line.
#[derive(Deserialize)]
struct Denial {
    tool_name: String,
    #[serde(default)]
    tool_input: Value,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Blocks<'a>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default, borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Default, Deserialize)]
struct RawUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// A message's content blocks; content that is not a list of blocks (a plain string) has none.
#[derive(Default)]
struct Blocks<'a>(Vec<Block<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Blocks<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Visit<'a> {
            type Value = Blocks<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("content blocks or text")
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Blocks<'a>, S::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element::<Option<Block<'a>>>()? {
                    blocks.extend(block);
                }
                Ok(Blocks(blocks))
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Blocks<'a>, E> {
                Ok(Blocks::default())
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Blocks<'a>, E> {
                Ok(Blocks::default())
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Blocks<'a>, M::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Blocks::default())
            }
        }
        deserializer.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// The main argument of a tool call, in a few words.
fn tool_detail(input: &Value) -> String {
    for key in [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "query",
        "description",
    ] {
        if let Some(text) = input.get(key).and_then(Value::as_str) {
            return short(text);
        }
    }
    input
        .as_object()
        .and_then(|o| o.values().find_map(Value::as_str))
        .map(short)
        .unwrap_or_default()
}

/// A tool result's content: a string, or text blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}
