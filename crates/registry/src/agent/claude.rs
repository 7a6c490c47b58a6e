//! Claude Code: `claude -p PROMPT --output-format stream-json --verbose [--model M]
//! [--allowedTools …]`, and its stream-json events (one JSON object per line: `system` with
//! subtype `init` naming the model, `assistant` messages whose content holds `text` and
//! `tool_use` blocks, `user` messages carrying `tool_result` blocks, and a last `result` with
//! the answer, `is_error`, `usage` and `total_cost_usd`). Format:
//! <https://code.claude.com/docs/en/headless> (`--output-format stream-json`) and the Agent
//! SDK's message types.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::event::Event;
use super::profile::{AgentCli, ReadState};
use super::stream::short;

/// Claude Code.
#[derive(Debug)]
pub struct Claude;

impl AgentCli for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn argv(&self, prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String> {
        let mut argv: Vec<String> = [
            "claude",
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--verbose",
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(model) = model {
            argv.extend(["--model".to_owned(), model.to_owned()]);
        }
        if !tools.is_empty() {
            argv.extend(["--allowedTools".to_owned(), tools.join(",")]);
        }
        argv
    }

    fn streams(&self, args: &[String]) -> bool {
        args.iter().any(|a| a == "--output-format=stream-json")
            || args
                .windows(2)
                .any(|w| w[0] == "--output-format" && w[1] == "stream-json")
    }

    fn toolset(&self, name: &str) -> &'static [&'static str] {
        match name {
            "terminal" | "shell" => &["Bash"],
            "file" | "files" => &["Read", "Write", "Edit", "Glob", "Grep"],
            "web" => &["WebFetch", "WebSearch"],
            _ => &[],
        }
    }

    fn read(&self, line: &[u8], state: &mut ReadState, out: &mut Vec<Event>) -> bool {
        // Typed, borrowing and skipping what it does not need: most of a line is content.
        let Ok(line) = serde_json::from_slice::<Line<'_>>(line) else {
            return false;
        };
        let subtype = line.subtype.as_deref().unwrap_or("");
        match &*line.kind {
            "system" if subtype == "init" => out.push(Event::Init { model: line.model }),
            "system" => out.push(Event::Note(format!("system {subtype}"))),
            "assistant" => {
                let Some(message) = line.message else {
                    return true;
                };
                let id = message.id.as_deref();
                if id.is_none() || id != state.message_id.as_deref() {
                    state.message_id = id.map(str::to_owned);
                    out.push(Event::ModelCall);
                }
                for block in message.content.0 {
                    match &*block.kind {
                        "text" => out.push(Event::Assistant {
                            text: block.text.unwrap_or_default(),
                            delta: false,
                        }),
                        "tool_use" => out.push(Event::ToolStart {
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
                        out.push(Event::ToolEnd {
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
                if line.usage.is_some() || line.total_cost_usd.is_some() {
                    let u = line.usage.unwrap_or_default();
                    out.push(Event::Usage(hermes_ledger::Usage {
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
                    out.push(Event::Error(message));
                } else {
                    out.push(Event::Answer(text));
                }
            }
            other => out.push(Event::Note(other.to_owned())),
        }
        true
    }
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

#[cfg(test)]
mod tests {
    use super::super::stream::tests::replay;

    #[test]
    fn a_documented_stream_gives_calls_tools_model_answer_and_usage() {
        let (report, text) = replay(
            "claude",
            include_str!("../../tests/fixtures/agents/claude.jsonl"),
        );
        assert_eq!(report.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert_eq!(report.api_calls, 3);
        assert_eq!(report.current_tool, None);
        assert_eq!(report.error, None);
        assert_eq!(
            report.answer.as_deref(),
            Some("All 12 tests pass. I ran cargo test; nothing was left undone.")
        );
        let usage = report.usage.expect("usage");
        assert_eq!((usage.input_tokens, usage.output_tokens), (4135, 310));
        assert_eq!(usage.cost_usd, Some(0.0213));
        assert!(text.contains("prg | tool Bash: cargo test\n"), "{text}");
        assert!(
            text.contains("out | assistant: I will run the tests first.\n"),
            "{text}"
        );
        assert!(
            text.contains("prg | init model claude-sonnet-4-5-20250929\n"),
            "{text}"
        );
    }

    #[test]
    fn an_error_result_is_the_agents_failure() {
        let (report, text) = replay(
            "claude",
            include_str!("../../tests/fixtures/agents/claude-error.jsonl"),
        );
        assert_eq!(report.error.as_deref(), Some("Credit balance is too low"));
        assert!(
            text.contains("err | error: Credit balance is too low\n"),
            "{text}"
        );
    }
}
