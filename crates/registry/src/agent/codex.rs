//! Codex CLI: `codex exec --json [-m M] PROMPT`, and its JSONL events (`thread.started`,
//! `turn.started`, `item.started` / `item.completed` for `reasoning`, `agent_message`,
//! `command_execution`, `mcp_tool_call`, `web_search`, `file_change`, and `turn.completed` with
//! `usage`; `turn.failed` and `error` on failure). Codex has no per-tool allow-list, so
//! toolsets are recorded only. Format: <https://github.com/openai/codex/blob/main/docs/exec.md>
//! and `codex-rs/exec/src/exec_events.rs`.

use serde_json::Value;

use super::event::Event;
use super::profile::{AgentCli, ReadState};
use super::stream::{read_object_line, short, str_at};

/// Codex CLI.
#[derive(Debug)]
pub struct Codex;

impl AgentCli for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn argv(&self, prompt: &str, model: Option<&str>, _tools: &[String]) -> Vec<String> {
        let mut argv: Vec<String> = vec!["codex".into(), "exec".into(), "--json".into()];
        if let Some(model) = model {
            argv.extend(["-m".to_owned(), model.to_owned()]);
        }
        argv.push(prompt.to_owned());
        argv
    }

    fn streams(&self, args: &[String]) -> bool {
        args.first().is_some_and(|a| a == "exec" || a == "e")
            && args
                .iter()
                .any(|a| a == "--json" || a == "--experimental-json")
    }

    fn toolset(&self, _name: &str) -> &'static [&'static str] {
        &[]
    }

    fn read(&self, line: &[u8], state: &mut ReadState, out: &mut Vec<Event>) -> bool {
        read_object_line(line, state, out, read_object)
    }
}

fn read_object(line: &Value, state: &mut ReadState, out: &mut Vec<Event>) {
    let item = &line["item"];
    match str_at(line, "type") {
        "thread.started" => {
            out.push(Event::Note(format!("thread {}", str_at(line, "thread_id"))));
        }
        "turn.started" => {
            state.in_model_turn = false;
            out.push(Event::Note("turn started".into()));
        }
        "item.started" => {
            if let kind @ ("command_execution" | "mcp_tool_call" | "web_search") =
                str_at(item, "type")
            {
                state.model_output(out);
                out.push(Event::ToolStart {
                    id: str_at(item, "id").to_owned(),
                    name: tool_name(kind, item),
                    detail: tool_detail(kind, item),
                });
            }
        }
        "item.updated" => {}
        "item.completed" => match str_at(item, "type") {
            "agent_message" => {
                state.model_output(out);
                out.push(Event::Assistant {
                    text: str_at(item, "text").to_owned(),
                    delta: false,
                });
            }
            "reasoning" => {
                state.model_output(out);
                out.push(Event::Note(format!(
                    "thinking: {}",
                    short(str_at(item, "text"))
                )));
            }
            "command_execution" | "mcp_tool_call" | "web_search" => {
                let ok = match item["exit_code"].as_i64() {
                    Some(code) => code == 0,
                    None => str_at(item, "status") != "failed",
                };
                let detail = match item["exit_code"].as_i64() {
                    Some(code) => format!("exit {code}"),
                    None => str_at(item, "status").to_owned(),
                };
                out.push(Event::ToolEnd {
                    id: str_at(item, "id").to_owned(),
                    ok,
                    detail,
                });
                state.in_model_turn = false;
            }
            "file_change" => {
                state.model_output(out);
                let paths: Vec<&str> = item["changes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| str_at(c, "path"))
                    .collect();
                out.push(Event::Note(format!(
                    "file change: {}",
                    short(&paths.join(", "))
                )));
                state.in_model_turn = false;
            }
            "error" => out.push(Event::Note(format!("error: {}", str_at(item, "message")))),
            other => out.push(Event::Note(other.to_owned())),
        },
        "turn.completed" => {
            let usage = &line["usage"];
            let count = |k: &str| usage[k].as_u64().unwrap_or(0);
            state.usage.input_tokens += count("input_tokens");
            state.usage.cached_input_tokens += count("cached_input_tokens");
            state.usage.output_tokens += count("output_tokens");
            out.push(Event::Usage(state.usage.clone()));
        }
        "turn.failed" => out.push(Event::Error(error_text(&line["error"]))),
        "error" => out.push(Event::Error(error_text(line))),
        other => out.push(Event::Note(other.to_owned())),
    }
}

fn tool_name(kind: &str, item: &Value) -> String {
    match kind {
        "command_execution" => "shell".to_owned(),
        "mcp_tool_call" => format!("{}.{}", str_at(item, "server"), str_at(item, "tool")),
        other => other.to_owned(),
    }
}

fn tool_detail(kind: &str, item: &Value) -> String {
    match kind {
        "command_execution" => short(str_at(item, "command")),
        "web_search" => short(str_at(item, "query")),
        _ => String::new(),
    }
}

fn error_text(error: &Value) -> String {
    let message = str_at(error, "message");
    if message.is_empty() {
        "codex reported an error".to_owned()
    } else {
        message.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream::tests::replay;

    #[test]
    fn a_documented_stream_gives_calls_the_command_the_last_message_and_usage() {
        let (report, text) = replay(
            "codex",
            include_str!("../../tests/fixtures/agents/codex.jsonl"),
        );
        assert_eq!(report.api_calls, 2);
        assert_eq!(report.current_tool, None);
        assert_eq!(
            report.answer.as_deref(),
            Some("The tests pass: 12 passed, 0 failed.")
        );
        let usage = report.usage.expect("usage");
        assert_eq!(
            (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.output_tokens
            ),
            (24763, 24448, 122)
        );
        assert!(
            text.contains("prg | tool shell: bash -lc 'cargo test'\n"),
            "{text}"
        );
        assert!(text.contains("prg | tool shell done (exit 0)\n"), "{text}");
    }

    #[test]
    fn a_failed_turn_is_the_agents_failure() {
        let (report, _) = replay(
            "codex",
            include_str!("../../tests/fixtures/agents/codex-error.jsonl"),
        );
        assert_eq!(
            report.error.as_deref(),
            Some("stream disconnected before completion: model not found")
        );
    }
}
