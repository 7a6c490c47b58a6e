//! Headless events ([`hermes_agents::StreamFormat::HeadlessEvents`]): JSONL `init` naming the
//! model, `message` chunks of the user and the assistant, `tool_use` and `tool_result`, `error`
//! warnings, and a last `result` with `status` and `stats`. Which agent emits it, and where its
//! format is documented, is that agent's file in `hermes_agents`.
//!
//! The init event names the model as configured, which may be a router's alias (`auto`); the
//! result's `stats.models` names the models that answered, each with its tokens. The one that
//! carried the conversation (the most input tokens; a router's side calls see a fraction of
//! it) is the child's model.

use serde_json::Value;

use super::event::StreamEvent;
use super::profile::ReadState;
use super::stream::{read_object_line, short, str_at};

/// Reads one line of the stream into events; `false` if it is not a JSON object.
pub(crate) fn read(line: &[u8], state: &mut ReadState, out: &mut Vec<StreamEvent>) -> bool {
    read_object_line(line, state, out, read_object)
}

fn read_object(line: &Value, state: &mut ReadState, out: &mut Vec<StreamEvent>) {
    match str_at(line, "type") {
        "init" => out.push(StreamEvent::Init {
            model: line.get("model").and_then(Value::as_str).map(str::to_owned),
        }),
        "message" if str_at(line, "role") == "assistant" => {
            state.model_output(out);
            out.push(StreamEvent::Assistant {
                text: str_at(line, "content").to_owned(),
                delta: line["delta"].as_bool().unwrap_or(false),
            });
        }
        "message" => {}
        "tool_use" => {
            state.model_output(out);
            let parameters = &line["parameters"];
            let detail = [
                "command",
                "file_path",
                "absolute_path",
                "path",
                "pattern",
                "url",
                "query",
            ]
            .iter()
            .find_map(|k| parameters.get(*k).and_then(Value::as_str))
            .map(short)
            .unwrap_or_default();
            let (id, name) = (str_at(line, "tool_id"), str_at(line, "tool_name"));
            state.called(
                id,
                if detail.is_empty() {
                    name.to_owned()
                } else {
                    format!("{name}: {detail}")
                },
            );
            out.push(StreamEvent::ToolStart {
                id: id.to_owned(),
                name: name.to_owned(),
                detail,
            });
        }
        "tool_result" => {
            let ok = str_at(line, "status") == "success";
            let call = state.take_call(str_at(line, "tool_id"));
            if !ok && REFUSALS.contains(&str_at(&line["error"], "type")) {
                let unnamed = || str_at(line, "tool_id").to_owned();
                out.push(StreamEvent::Denied(call.unwrap_or_else(unnamed)));
            }
            let detail = if ok {
                short(str_at(line, "output"))
            } else {
                short(str_at(&line["error"], "message"))
            };
            out.push(StreamEvent::ToolEnd {
                id: str_at(line, "tool_id").to_owned(),
                ok,
                detail,
            });
            state.in_model_turn = false;
        }
        "error" => out.push(StreamEvent::Note(format!(
            "{}: {}",
            match str_at(line, "severity") {
                "" => "error",
                s => s,
            },
            str_at(line, "message")
        ))),
        "result" => {
            let stats = &line["stats"];
            let count = |k: &str| stats[k].as_u64().unwrap_or(0);
            if let Some(model) = answering_model(&stats["models"]) {
                out.push(StreamEvent::Model(model));
            }
            if stats.is_object() {
                out.push(StreamEvent::Usage(hermes_ledger::Usage {
                    input_tokens: count("input_tokens"),
                    output_tokens: count("output_tokens"),
                    cached_input_tokens: count("cached"),
                    cost_usd: None,
                }));
            }
            if str_at(line, "status") == "error" {
                let message = str_at(&line["error"], "message");
                out.push(StreamEvent::Error(if message.is_empty() {
                    format!("{} reported an error", state.agent)
                } else {
                    message.to_owned()
                }));
            }
        }
        other => out.push(StreamEvent::Note(other.to_owned())),
    }
}

/// The error types of a tool result that mean the agent refused the call rather than failed
/// at it: its policy said no (`policy_violation`, `permission_denied`, the sandbox's
/// `sandbox_expansion_required`), or its approval mode took the tool away, so that headless
/// the call finds no such tool (`tool_not_registered`: under `--approval-mode plan` a shell
/// or write call ends so, tried with the real agent).
const REFUSALS: &[&str] = &[
    "policy_violation",
    "permission_denied",
    "sandbox_expansion_required",
    "tool_not_registered",
];

/// The model of `models` (name → tokens) with the most input tokens.
fn answering_model(models: &Value) -> Option<String> {
    models
        .as_object()?
        .iter()
        .max_by_key(|(_, stats)| stats["input_tokens"].as_u64().unwrap_or(0))
        .map(|(name, _)| name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(lines: &[&str]) -> Vec<String> {
        let mut state = ReadState::default();
        let mut out = Vec::new();
        for line in lines {
            assert!(read(line.as_bytes(), &mut state, &mut out), "{line}");
        }
        out.into_iter()
            .filter_map(|e| match e {
                StreamEvent::Denied(call) => Some(call),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_call_the_agent_refused_is_a_denial_named_by_its_call() {
        // As the pinned agent printed it under `--approval-mode plan`.
        let used = r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t1","parameters":{"command":"touch made-by-child.txt"}}"#;
        let refused = r#"{"type":"tool_result","tool_id":"t1","status":"error","output":"Tool \"run_shell_command\" not found.","error":{"type":"tool_not_registered","message":"Tool \"run_shell_command\" not found."}}"#;
        assert_eq!(
            denied(&[used, refused]),
            ["run_shell_command: touch made-by-child.txt"]
        );
        // A call that failed at its work is no denial.
        let failed = r#"{"type":"tool_result","tool_id":"t1","status":"error","error":{"type":"file_not_found","message":"no"}}"#;
        assert!(denied(&[used, failed]).is_empty());
    }
}
