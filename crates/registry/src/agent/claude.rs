//! Claude Code: `claude -p PROMPT --output-format stream-json --verbose [--model M]
//! [--allowedTools …]`, and its stream-json events (one JSON object per line: `system` with
//! subtype `init` naming the model, `assistant` messages whose content holds `text` and
//! `tool_use` blocks, `user` messages carrying `tool_result` blocks, and a last `result` with
//! the answer, `is_error`, `usage` and `total_cost_usd`). Format:
//! <https://code.claude.com/docs/en/headless> (`--output-format stream-json`) and the Agent
//! SDK's message types.

use serde_json::Value;

use super::event::Event;
use super::profile::{AgentCli, ReadState};
use super::stream::{short, str_at};

/// Claude Code.
#[derive(Debug)]
pub struct Claude;

impl AgentCli for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn program(&self) -> &'static str {
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

    fn read(&self, line: &Value, state: &mut ReadState, out: &mut Vec<Event>) {
        match str_at(line, "type") {
            "system" if str_at(line, "subtype") == "init" => out.push(Event::Init {
                model: line.get("model").and_then(Value::as_str).map(str::to_owned),
            }),
            "system" => out.push(Event::Note(format!("system {}", str_at(line, "subtype")))),
            "assistant" => {
                let message = &line["message"];
                let id = message.get("id").and_then(Value::as_str);
                if id.is_none() || id != state.message_id.as_deref() {
                    state.message_id = id.map(str::to_owned);
                    out.push(Event::ModelCall);
                }
                for block in message["content"].as_array().into_iter().flatten() {
                    match str_at(block, "type") {
                        "text" => out.push(Event::Assistant {
                            text: str_at(block, "text").to_owned(),
                            delta: false,
                        }),
                        "tool_use" => out.push(Event::ToolStart {
                            id: str_at(block, "id").to_owned(),
                            name: str_at(block, "name").to_owned(),
                            detail: tool_detail(&block["input"]),
                        }),
                        _ => {}
                    }
                }
            }
            "user" => {
                for block in line["message"]["content"].as_array().into_iter().flatten() {
                    if str_at(block, "type") == "tool_result" {
                        out.push(Event::ToolEnd {
                            id: str_at(block, "tool_use_id").to_owned(),
                            ok: !block["is_error"].as_bool().unwrap_or(false),
                            detail: short(&content_text(&block["content"])),
                        });
                    }
                }
            }
            "result" => {
                let usage = &line["usage"];
                let count = |k: &str| usage[k].as_u64().unwrap_or(0);
                if usage.is_object() || line["total_cost_usd"].is_number() {
                    out.push(Event::Usage(ledger::Usage {
                        input_tokens: count("input_tokens")
                            + count("cache_creation_input_tokens")
                            + count("cache_read_input_tokens"),
                        output_tokens: count("output_tokens"),
                        cached_input_tokens: count("cache_read_input_tokens"),
                        cost_usd: line["total_cost_usd"].as_f64(),
                    }));
                }
                let text = str_at(line, "result");
                let subtype = str_at(line, "subtype");
                if line["is_error"].as_bool().unwrap_or(false) || subtype.starts_with("error") {
                    let message = if text.is_empty() { subtype } else { text };
                    out.push(Event::Error(message.to_owned()));
                } else {
                    out.push(Event::Answer(text.to_owned()));
                }
            }
            other => out.push(Event::Note(other.to_owned())),
        }
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
