//! The JSON a hook-driven agent CLI sends a hook on stdin, read with bounds: one JSON value (the
//! agent may leave stdin open after it, as one is reported to do for its session's end), at
//! most [`MAX_INPUT`] bytes, within [`DEADLINE`]. The fields hermes reads are named by the
//! agent's profile; the agents add fields freely, so the rest is ignored.

use std::io::Read as _;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::agents::{Agent, Start};
use crate::services::exit::{Code, fail};

/// How long a hook waits for its JSON.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// The most a hook reads of stdin (a `PostToolUse` carries the tool's whole response).
pub const MAX_INPUT: u64 = 64 << 20;

/// What hermes reads of one hook invocation's input.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HookInput {
    /// The agent's conversation id, if the input has one.
    pub session_id: Option<String>,
    /// The input has the conversation field, but not as a string.
    pub session_id_malformed: bool,
    /// Whether a subagent, not the main thread, made the call.
    pub subagent: bool,
    /// How a session start came about.
    pub start: Option<Start>,
    /// Whether the agent goes on because a stop hook kept it going.
    pub stop_active: bool,
    /// The event name the agent gave (informational).
    pub event_name: Option<String>,
    /// Whether a session end is one the agent's profile names an explicit discard.
    pub discard: bool,
}

impl HookInput {
    /// The fields `agent` names, from its JSON `value`.
    pub fn of(agent: &Agent, value: &Value) -> HookInput {
        HookInput {
            session_id: value
                .get(agent.session_field)
                .and_then(Value::as_str)
                .map(str::to_owned),
            session_id_malformed: value
                .get(agent.session_field)
                .is_some_and(|v| !v.is_string()),
            subagent: agent
                .subagent_field
                .and_then(|f| value.get(f))
                .is_some_and(|v| !v.is_null() && v.as_str() != Some("")),
            start: Some(agent.start(value)),
            stop_active: agent.stop_active(value),
            event_name: value
                .get(agent.event_field)
                .and_then(Value::as_str)
                .map(str::to_owned),
            discard: agent.discards(value),
        }
    }
}

/// Reads the hook's JSON object from stdin, within `deadline`. Nothing has been taken when
/// this fails.
pub fn read_stdin(deadline: Duration) -> anyhow::Result<Value> {
    let (tx, rx) = mpsc::channel();
    // A thread of its own, so a stdin that stays open and silent cannot hold the hook: the
    // process leaves without it.
    std::thread::spawn(move || {
        let stdin = std::io::stdin().lock().take(MAX_INPUT);
        let _ = tx.send(parse_one(stdin));
    });
    rx.recv_timeout(deadline).unwrap_or_else(|_| {
        Err(fail(
            Code::Usage,
            format!(
                "no JSON object arrived on stdin within {}s",
                deadline.as_secs_f64()
            ),
        ))
    })
}

/// The first JSON value of `reader`, which must be an object; what follows it is not read.
pub fn parse_one(reader: impl std::io::Read) -> anyhow::Result<Value> {
    let mut values = serde_json::Deserializer::from_reader(reader).into_iter::<Value>();
    match values.next() {
        Some(Ok(v @ Value::Object(_))) => Ok(v),
        Some(Ok(_)) => Err(bad("it is not a JSON object")),
        Some(Err(e)) => Err(bad(&e.to_string())),
        None => Err(bad("stdin was empty")),
    }
}

fn bad(why: &str) -> anyhow::Error {
    fail(
        Code::Usage,
        format!("the hook's input on stdin is not the JSON object agents send: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_names_its_conversation_in_its_own_field_and_extra_fields_are_ignored() {
        for agent in hermes_agents::AGENTS {
            let mut value = serde_json::json!({"tool_input": {"command": "ls"}, "cwd": "/w"});
            value[agent.session_field] = "id-1".into();
            value[agent.event_field] = "SomeEvent".into();
            let input = HookInput::of(agent, &value);
            assert_eq!(input.session_id.as_deref(), Some("id-1"), "{}", agent.name);
            assert_eq!(input.event_name.as_deref(), Some("SomeEvent"));
            assert!(
                !input.subagent && !input.session_id_malformed,
                "{}",
                agent.name
            );
            if let Some(field) = agent.subagent_field {
                value[field] = "a-1".into();
                assert!(HookInput::of(agent, &value).subagent, "{}", agent.name);
            }
            // A conversation id under another field means nothing to this agent.
            let other = serde_json::json!({"some_other_id": "s"});
            assert_eq!(HookInput::of(agent, &other).session_id, None);
            let mut malformed = serde_json::json!({});
            malformed[agent.session_field] = 7.into();
            assert!(HookInput::of(agent, &malformed).session_id_malformed);
        }
        let text = br#"{"session_id":"abc-1","transcript_path":"/t.jsonl","hook_event_name":"PostToolUse"}"#;
        assert_eq!(parse_one(&text[..]).expect("parses")["session_id"], "abc-1");
    }

    #[test]
    fn only_the_reasons_a_profile_names_discard_a_conversation() {
        for agent in hermes_agents::AGENTS {
            let mut value = serde_json::json!({"session_id": "s"});
            for reason in agent.discard.reasons {
                value[agent.discard.field.expect("a field")] = (*reason).into();
                assert!(HookInput::of(agent, &value).discard, "{}", agent.name);
            }
            for other in ["other", "exit", "complete", "shutdown", "prompt_input_exit"] {
                value["reason"] = other.into();
                assert!(
                    !HookInput::of(agent, &value).discard,
                    "{} {other}",
                    agent.name
                );
            }
        }
    }

    #[test]
    fn one_value_is_read_and_what_follows_is_left() {
        // A reader that would block after the object: it is never asked for more.
        struct Then<'a>(&'a [u8]);
        impl std::io::Read for Then<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() {
                    panic!("read past the JSON value");
                }
                let n = buf.len().min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let value = parse_one(Then(br#"{"session_id":"s"}"#)).expect("parses");
        assert_eq!(value["session_id"], "s");
    }

    #[test]
    fn anything_else_is_bad_input() {
        for text in [&b""[..], b"{", b"[1]", b"\"x\"", b"\xff\xfe"] {
            assert!(parse_one(text).is_err(), "{text:?}");
        }
    }
}
