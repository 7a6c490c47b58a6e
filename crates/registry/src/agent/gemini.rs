//! Gemini CLI: `gemini -p PROMPT --output-format stream-json [-m M] [--allowed-tools …]`, and
//! its JSONL events (`init` naming the model, `message` chunks of the user and the assistant,
//! `tool_use` and `tool_result`, `error` warnings, and a last `result` with `status` and
//! `stats`). Format: <https://geminicli.com/docs/cli/headless/>.

use serde_json::Value;

use super::event::Event;
use super::profile::{AgentCli, ReadState};
use super::stream::{read_object_line, short, str_at};

/// Gemini CLI.
#[derive(Debug)]
pub struct Gemini;

impl AgentCli for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn argv(&self, prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String> {
        let mut argv: Vec<String> = ["gemini", "-p", prompt, "--output-format", "stream-json"]
            .map(str::to_owned)
            .to_vec();
        if let Some(model) = model {
            argv.extend(["-m".to_owned(), model.to_owned()]);
        }
        if !tools.is_empty() {
            argv.extend(["--allowed-tools".to_owned(), tools.join(",")]);
        }
        argv
    }

    fn streams(&self, args: &[String]) -> bool {
        args.iter().any(|a| a == "--output-format=stream-json")
            || args
                .windows(2)
                .any(|w| (w[0] == "--output-format" || w[0] == "-o") && w[1] == "stream-json")
    }

    fn toolset(&self, name: &str) -> &'static [&'static str] {
        match name {
            "terminal" | "shell" => &["run_shell_command"],
            "file" | "files" => &[
                "read_file",
                "write_file",
                "replace",
                "glob",
                "search_file_content",
                "list_directory",
            ],
            "web" => &["web_fetch", "google_web_search"],
            _ => &[],
        }
    }

    fn read(&self, line: &[u8], state: &mut ReadState, out: &mut Vec<Event>) -> bool {
        read_object_line(line, state, out, read_object)
    }
}

fn read_object(line: &Value, state: &mut ReadState, out: &mut Vec<Event>) {
    match str_at(line, "type") {
        "init" => out.push(Event::Init {
            model: line.get("model").and_then(Value::as_str).map(str::to_owned),
        }),
        "message" if str_at(line, "role") == "assistant" => {
            state.model_output(out);
            out.push(Event::Assistant {
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
            out.push(Event::ToolStart {
                id: str_at(line, "tool_id").to_owned(),
                name: str_at(line, "tool_name").to_owned(),
                detail,
            });
        }
        "tool_result" => {
            let ok = str_at(line, "status") == "success";
            let detail = if ok {
                short(str_at(line, "output"))
            } else {
                short(str_at(&line["error"], "message"))
            };
            out.push(Event::ToolEnd {
                id: str_at(line, "tool_id").to_owned(),
                ok,
                detail,
            });
            state.in_model_turn = false;
        }
        "error" => out.push(Event::Note(format!(
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
            if stats.is_object() {
                out.push(Event::Usage(hermes_ledger::Usage {
                    input_tokens: count("input_tokens"),
                    output_tokens: count("output_tokens"),
                    cached_input_tokens: count("cached"),
                    cost_usd: None,
                }));
            }
            if str_at(line, "status") == "error" {
                let message = str_at(&line["error"], "message");
                out.push(Event::Error(if message.is_empty() {
                    "gemini reported an error".to_owned()
                } else {
                    message.to_owned()
                }));
            }
        }
        other => out.push(Event::Note(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream::tests::replay;

    #[test]
    fn a_documented_stream_gives_calls_the_tool_the_last_message_and_usage() {
        let (report, text) = replay(
            "gemini",
            include_str!("../../tests/fixtures/agents/gemini.jsonl"),
        );
        assert_eq!(report.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(report.api_calls, 2);
        assert_eq!(report.answer.as_deref(), Some("All 12 tests pass."));
        assert_eq!(report.usage.expect("usage").output_tokens, 110);
        assert!(
            text.contains("prg | tool run_shell_command: cargo test\n"),
            "{text}"
        );
        assert!(
            text.contains("out | assistant: I will run the tests.\n"),
            "{text}"
        );
    }

    #[test]
    fn an_error_result_is_the_agents_failure_and_warnings_are_not() {
        let (report, text) = replay(
            "gemini",
            include_str!("../../tests/fixtures/agents/gemini-error.jsonl"),
        );
        assert_eq!(report.error.as_deref(), Some("Please set an Auth method"));
        assert!(
            text.contains("prg | warning: Retrying after a 429\n"),
            "{text}"
        );
    }
}
