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
            state.message_done = false;
            out.push(StreamEvent::Note("turn started".into()));
        }
        "item.started" => {
            if let kind @ ("command_execution" | "mcp_tool_call" | "web_search") =
                str_at(item, "type")
            {
                state.model_output(out);
                state.message_done = false;
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
                next_response(state, out);
                state.message_done = true;
                out.push(StreamEvent::Assistant {
                    text: str_at(item, "text").to_owned(),
                    delta: false,
                });
            }
            "reasoning" => {
                next_response(state, out);
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
                if refused(item, ok) {
                    out.push(StreamEvent::Denied(format!(
                        "shell: {}",
                        short(unwrapped(str_at(item, "command")))
                    )));
                }
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

/// Text or reasoning from the model: one call, unless counted already; after a finished
/// message it is the next response (the stream has no event between two responses of one turn).
fn next_response(state: &mut ReadState, out: &mut Vec<StreamEvent>) {
    if std::mem::take(&mut state.message_done) {
        state.in_model_turn = false;
    }
    state.model_output(out);
}

fn tool_name(kind: &str, item: &Value) -> String {
    match kind {
        "command_execution" => "shell".to_owned(),
        "mcp_tool_call" => format!("{}.{}", str_at(item, "server"), str_at(item, "tool")),
        other => other.to_owned(),
    }
}

/// What a refused command says: the system's words for `EACCES`, `EPERM` and `EROFS`, as the
/// kernel's sandbox (Landlock, a read-only mount) answers a write it does not allow.
const REFUSALS: &[&str] = &[
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
];

/// Whether a call that ended (`ok` or not) was refused rather than wrong: the agent declined
/// it, or a command failed saying the system refused it. The stream has no mark of its own for
/// a refusal by the kernel, only the command's output.
fn refused(item: &Value, ok: bool) -> bool {
    str_at(item, "status") == "declined"
        || (!ok
            && str_at(item, "type") == "command_execution"
            && REFUSALS
                .iter()
                .any(|r| str_at(item, "aggregated_output").contains(r)))
}

/// The command a shell wrapper runs (`/bin/bash -lc 'touch f'` is `touch f`), else the line.
fn unwrapped(command: &str) -> &str {
    command
        .split_once(" -lc '")
        .or_else(|| command.split_once(" -c '"))
        .and_then(|(shell, rest)| (!shell.contains(' ')).then_some(rest))
        .and_then(|rest| rest.strip_suffix('\''))
        .unwrap_or(command)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(lines: &[&str]) -> usize {
        events(lines)
            .iter()
            .filter(|e| matches!(e, StreamEvent::ModelCall))
            .count()
    }

    fn events(lines: &[&str]) -> Vec<StreamEvent> {
        let mut state = ReadState::default();
        let mut out = Vec::new();
        for line in lines {
            assert!(read(line.as_bytes(), &mut state, &mut out), "{line}");
        }
        out
    }

    fn denied(lines: &[&str]) -> Vec<String> {
        events(lines)
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::Denied(call) => Some(call),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_command_the_system_refused_is_a_denial_and_a_failing_one_is_not() {
        let completed = |command: &str, output: &str, code: i32| {
            json!({"type": "item.completed", "item": {
                "id": "c", "type": "command_execution", "command": command,
                "aggregated_output": output, "exit_code": code,
                "status": if code == 0 { "completed" } else { "failed" },
            }})
            .to_string()
        };
        // As the pinned agent printed it inside a read-only sandbox.
        let refused = completed(
            "/bin/bash -lc 'touch made-by-child.txt'",
            "touch: cannot touch 'made-by-child.txt': Permission denied\n",
            1,
        );
        assert_eq!(denied(&[&refused]), ["shell: touch made-by-child.txt"]);
        let read_only = completed(
            "sh -c 'echo > .git/x'",
            "sh: .git/x: Read-only file system",
            2,
        );
        assert_eq!(denied(&[&read_only]), ["shell: echo > .git/x"]);
        let declined = json!({"type": "item.completed", "item": {
            "id": "d", "type": "command_execution", "command": "rm -rf /",
            "aggregated_output": "", "exit_code": null, "status": "declined",
        }})
        .to_string();
        assert_eq!(denied(&[&declined]), ["shell: rm -rf /"]);
        // A command that failed on its own, or said the words and succeeded: nothing denied.
        let failed = completed("cargo test", "test result: FAILED", 101);
        let fine = completed("grep -r 'Permission denied' .", "Permission denied", 0);
        assert!(denied(&[&failed, &fine]).is_empty());
    }

    #[test]
    fn each_model_response_is_one_call() {
        let message = |text: &str| {
            format!(
                r#"{{"type":"item.completed","item":{{"id":"m","type":"agent_message","text":"{text}"}}}}"#
            )
        };
        let tool = |event: &str| {
            format!(
                r#"{{"type":"item.{event}","item":{{"id":"t","type":"mcp_tool_call","server":"hermes","tool":"delegate_task","status":"completed"}}}}"#
            )
        };
        let turn = r#"{"type":"turn.started"}"#;
        // A preamble and its tool call are one response; the answer after the tool another;
        // a stop hook's continuation (a second message in a row) a third; reasoning that opens
        // the next response a fourth, its message the same.
        let reasoning =
            r#"{"type":"item.completed","item":{"id":"r","type":"reasoning","text":"hm"}}"#;
        let lines = [
            turn.to_owned(),
            message("let me delegate"),
            tool("started"),
            tool("completed"),
            message("done"),
            message("and the result is in"),
            reasoning.to_owned(),
            message("again"),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(calls(&lines), 4);
    }
}
