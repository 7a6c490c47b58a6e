//! What an agent's stream says, once its adapter has read a line: the events, and the report
//! they add up to (calls, the tool in flight, model, answer, error, usage).

use hermes_ledger::Usage;

/// One thing an agent's stream said.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// The session started (the init event), with the model it runs.
    Init {
        /// The model, if the event names it.
        model: Option<String>,
    },
    /// The model that answered, named later than the init event (which may name only a
    /// router's alias, such as `auto`).
    Model(String),
    /// One model call (an API request and its response).
    ModelCall,
    /// A tool call started.
    ToolStart {
        /// The agent's id for the call (empty when it gives none).
        id: String,
        /// The tool.
        name: String,
        /// Its main argument, in a few words (a command line, a path).
        detail: String,
    },
    /// A tool call ended.
    ToolEnd {
        /// The call's id (empty: the latest call).
        id: String,
        /// Whether it succeeded.
        ok: bool,
        /// What it said, in a few words.
        detail: String,
    },
    /// Text of the assistant. `delta`: a chunk continuing the current message.
    Assistant {
        /// The text.
        text: String,
        /// Whether it continues the previous chunk.
        delta: bool,
    },
    /// The agent's final answer.
    Answer(String),
    /// Tokens and cost so far (replacing what was reported before).
    Usage(Usage),
    /// The agent's own failure.
    Error(String),
    /// A tool call its own permission system refused: the tool and its main argument
    /// (`Bash: touch f`).
    Denied(String),
    /// Anything else worth a transcript line.
    Note(String),
}

/// What a child's stream has said so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Model calls.
    pub api_calls: u64,
    /// The tool in flight, if any (the latest one started and not yet ended).
    pub current_tool: Option<String>,
    /// The model, from the init event or, when the stream names it later, the one that
    /// answered.
    pub model: Option<String>,
    /// The final answer: the agent's result, else its latest assistant message.
    pub answer: Option<String>,
    /// The agent's own failure.
    pub error: Option<String>,
    /// Tokens and cost.
    pub usage: Option<Usage>,
    /// The tool calls its permission system refused, one line each.
    pub denials: Vec<String>,
}

/// Tool calls in flight and the message being streamed: what turns events into a [`Report`].
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) report: Report,
    /// `(id, name)` of the calls started and not ended, oldest first.
    tools: Vec<(String, String)>,
    /// The latest assistant message, growing while it streams in chunks.
    message: String,
    /// Whether the latest event was assistant text (a chunk continues only such a message).
    message_open: bool,
    /// Whether an explicit answer arrived (it wins over the latest message).
    answered: bool,
}

/// At most this many calls are tracked in flight: a stream that never ends its calls cannot
/// grow memory.
const TOOLS_MAX: usize = 256;

/// At most this many refused calls are kept, each named (a child that keeps asking for the same
/// thing does not grow its outcome without bound).
const DENIALS_MAX: usize = 50;

impl Tally {
    /// The tool of call `id` in flight (the latest one for an empty id).
    pub(crate) fn tool_of(&self, id: &str) -> Option<&str> {
        let found = if id.is_empty() {
            self.tools.last()
        } else {
            self.tools.iter().rev().find(|(i, _)| i == id)
        };
        found.map(|(_, name)| name.as_str())
    }

    pub(crate) fn apply(&mut self, event: &StreamEvent) {
        let open = std::mem::replace(
            &mut self.message_open,
            matches!(event, StreamEvent::Assistant { .. }),
        );
        let r = &mut self.report;
        match event {
            StreamEvent::Init { model } => {
                if model.is_some() {
                    r.model.clone_from(model);
                }
            }
            StreamEvent::Model(model) => r.model = Some(model.clone()),
            StreamEvent::ModelCall => r.api_calls += 1,
            StreamEvent::ToolStart { id, name, .. } => {
                if self.tools.len() == TOOLS_MAX {
                    self.tools.remove(0);
                }
                self.tools.push((id.clone(), name.clone()));
                r.current_tool = Some(name.clone());
            }
            StreamEvent::ToolEnd { id, .. } => {
                // A call without an id is the latest one; an id never started ends nothing.
                match self.tools.iter().rposition(|(i, _)| i == id) {
                    Some(at) => {
                        self.tools.remove(at);
                    }
                    None if id.is_empty() => {
                        self.tools.pop();
                    }
                    None => {}
                }
                r.current_tool = self.tools.last().map(|(_, name)| name.clone());
            }
            StreamEvent::Assistant { text, delta } => {
                if !delta || !open {
                    self.message.clear();
                }
                self.message.push_str(text);
                if !self.answered {
                    r.answer = Some(self.message.clone());
                }
            }
            StreamEvent::Answer(text) => {
                self.answered = true;
                r.answer = Some(text.clone());
            }
            StreamEvent::Usage(usage) => r.usage = Some(usage.clone()),
            StreamEvent::Error(message) => r.error = Some(message.clone()),
            StreamEvent::Denied(call) => {
                if r.denials.len() < DENIALS_MAX {
                    r.denials.push(call.clone());
                }
            }
            StreamEvent::Note(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_in_flight_and_the_answer_follow_the_events() {
        let mut t = Tally::default();
        let start = |id: &str, name: &str| StreamEvent::ToolStart {
            id: id.into(),
            name: name.into(),
            detail: String::new(),
        };
        let end = |id: &str| StreamEvent::ToolEnd {
            id: id.into(),
            ok: true,
            detail: String::new(),
        };
        for e in [
            StreamEvent::ModelCall,
            start("a", "Bash"),
            start("b", "Read"),
            end("a"),
        ] {
            t.apply(&e);
        }
        assert_eq!(t.report.current_tool.as_deref(), Some("Read"));
        t.apply(&end("b"));
        assert_eq!(t.report.current_tool, None);
        let say = |text: &str, delta| StreamEvent::Assistant {
            text: text.into(),
            delta,
        };
        t.apply(&say("Hel", true));
        t.apply(&say("lo", true));
        assert_eq!(t.report.answer.as_deref(), Some("Hello"));
        t.apply(&say("Bye", false));
        assert_eq!(t.report.answer.as_deref(), Some("Bye"));
        t.apply(&StreamEvent::Answer("Final".into()));
        t.apply(&say("later", false));
        assert_eq!(t.report.answer.as_deref(), Some("Final"));
        assert_eq!(t.report.api_calls, 1);
    }
}
