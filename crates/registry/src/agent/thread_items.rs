//! Thread events ([`hermes_agents::StreamFormat::ThreadItems`]): JSONL `thread.started`,
//! `turn.started`, `item.started` / `item.completed` for `reasoning`, `agent_message`,
//! `command_execution`, `mcp_tool_call`, `web_search`, `file_change`, and `turn.completed` with
//! `usage`; `turn.failed` and `error` on failure. Which agent emits it, and where its format is
//! documented, is that agent's file in `hermes_agents`.

use serde_json::Value;

use super::event::StreamEvent;
use super::profile::ReadState;
use super::stream::{read_object_line, short, str_at};

/// Reads one line of the stream into events; `false` if it is not a JSON object.
pub(crate) fn read(line: &[u8], state: &mut ReadState, out: &mut Vec<StreamEvent>) -> bool {
    read_object_line(line, state, out, read_object)
}

fn read_object(line: &Value, state: &mut ReadState, out: &mut Vec<StreamEvent>) {
    let item = &line["item"];
    match str_at(line, "type") {
        "thread.started" => {
            out.push(StreamEvent::Note(format!(
                "thread {}",
                str_at(line, "thread_id")
            )));
        }
        "turn.started" => {
            state.in_model_turn = false;
            out.push(StreamEvent::Note("turn started".into()));
        }
        "item.started" => {
            if let kind @ ("command_execution" | "mcp_tool_call" | "web_search") =
                str_at(item, "type")
            {
                state.model_output(out);
                out.push(StreamEvent::ToolStart {
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
                out.push(StreamEvent::Assistant {
                    text: str_at(item, "text").to_owned(),
                    delta: false,
                });
            }
            "reasoning" => {
                state.model_output(out);
                out.push(StreamEvent::Note(format!(
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
                out.push(StreamEvent::ToolEnd {
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
                out.push(StreamEvent::Note(format!(
                    "file change: {}",
                    short(&paths.join(", "))
                )));
                state.in_model_turn = false;
            }
            "error" => out.push(StreamEvent::Note(format!(
                "error: {}",
                str_at(item, "message")
            ))),
            other => out.push(StreamEvent::Note(other.to_owned())),
        },
        "turn.completed" => {
            let usage = &line["usage"];
            let count = |k: &str| usage[k].as_u64().unwrap_or(0);
            state.usage.input_tokens += count("input_tokens");
            state.usage.cached_input_tokens += count("cached_input_tokens");
            state.usage.output_tokens += count("output_tokens");
            out.push(StreamEvent::Usage(state.usage.clone()));
        }
        "turn.failed" => out.push(StreamEvent::Error(error_text(state.agent, &line["error"]))),
        "error" => out.push(StreamEvent::Error(error_text(state.agent, line))),
        other => out.push(StreamEvent::Note(other.to_owned())),
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

fn error_text(agent: &str, error: &Value) -> String {
    let message = str_at(error, "message");
    if message.is_empty() {
        format!("{agent} reported an error")
    } else {
        message.to_owned()
    }
}
