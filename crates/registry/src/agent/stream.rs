//! Reading an agent child's stdout as it arrives: lines are assembled (bounded), each JSON
//! object goes to the agent's adapter, and what it says becomes readable transcript lines and
//! a [`Report`]. A line that is not a JSON object is output like any other: it is shown as it
//! is, and the adapter says once that it fell back. The raw stream goes to the sink untouched.

use serde_json::Value;

use super::event::{Report, StreamEvent, Tally};
use super::profile::{Adapter, ReadState, read_line};
use crate::progress::{Line, LineAssembler};

/// Where a stream's transcript goes.
pub trait Sink {
    /// One readable line: its tag (`out`, `err`, `prg`, `---` for hermes' own) and its text
    /// (no newline).
    fn line(&mut self, tag: &'static str, text: &str);
    /// Bytes of the raw stream, exactly as they arrived.
    fn raw(&mut self, bytes: &[u8]);
}

/// Assistant text waiting for the end of its message is written out beyond this size.
const PENDING_MAX: usize = 16 * 1024;

/// Text of a tool's argument or result kept in a transcript line.
const SHORT_CHARS: usize = 200;

/// One child's stdout, read by one agent's adapter.
#[derive(Debug)]
pub struct AgentStream {
    assembler: LineAssembler,
    reader: Reader,
}

#[derive(Debug)]
struct Reader {
    adapter: Adapter,
    state: ReadState,
    tally: Tally,
    events: Vec<StreamEvent>,
    /// Assistant text not written yet (a message streamed in chunks is one line).
    pending: String,
    fell_back: bool,
    line_max: usize,
}

impl AgentStream {
    /// A stream read by `adapter`, assembling lines of at most `line_max` bytes.
    pub fn new(adapter: Adapter, line_max: usize) -> AgentStream {
        AgentStream {
            assembler: LineAssembler::new(line_max),
            reader: Reader {
                adapter,
                state: ReadState {
                    agent: adapter.name,
                    ..ReadState::default()
                },
                tally: Tally::default(),
                events: Vec::new(),
                pending: String::new(),
                fell_back: false,
                line_max,
            },
        }
    }

    /// The adapter's name.
    pub fn name(&self) -> &'static str {
        self.reader.adapter.name
    }

    /// Takes in bytes of stdout.
    pub fn feed(&mut self, bytes: &[u8], sink: &mut dyn Sink) {
        sink.raw(bytes);
        let reader = &mut self.reader;
        self.assembler.feed(bytes, |line| reader.line(line, sink));
    }

    /// The end of stdout: a last line without its newline counts too.
    pub fn finish(&mut self, sink: &mut dyn Sink) {
        let reader = &mut self.reader;
        self.assembler.finish(|line| reader.line(line, sink));
        reader.flush(sink);
    }

    /// What the stream has said so far.
    pub fn report(&self) -> &Report {
        &self.reader.tally.report
    }
}

impl Reader {
    fn line(&mut self, line: Line<'_>, sink: &mut dyn Sink) {
        let bytes = match line {
            Line::Complete(bytes) => bytes.strip_suffix(b"\r").unwrap_or(bytes),
            Line::TooLong => {
                self.fall_back(sink);
                let text = format!(
                    "[a line of more than {} bytes; it is in the raw stream]",
                    self.line_max
                );
                sink.line("out", &text);
                return;
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        if read_line(self.adapter, bytes, &mut self.state, &mut events) {
            for event in &events {
                self.show(event, sink);
                self.tally.apply(event);
            }
        } else {
            self.fall_back(sink);
            self.flush(sink);
            sink.line("out", &String::from_utf8_lossy(bytes));
        }
        self.events = events;
    }

    fn fall_back(&mut self, sink: &mut dyn Sink) {
        if !self.fell_back {
            self.fell_back = true;
            let text = format!(
                "hermes: the {} stream adapter cannot read some lines of this child's output; they are shown as they are",
                self.adapter.name
            );
            sink.line("---", &text);
        }
    }

    /// Writes the assistant text waiting for the end of its message.
    fn flush(&mut self, sink: &mut dyn Sink) {
        if !self.pending.is_empty() {
            let text = std::mem::take(&mut self.pending);
            lines(sink, "out", "assistant: ", &text);
        }
    }

    fn show(&mut self, event: &StreamEvent, sink: &mut dyn Sink) {
        if let StreamEvent::Assistant { text, delta } = event {
            if !delta {
                self.flush(sink);
            }
            self.pending.push_str(text);
            if self.pending.len() > PENDING_MAX {
                self.flush(sink);
            }
            return;
        }
        self.flush(sink);
        match event {
            StreamEvent::Init { model } => {
                let text = format!("init model {}", model.as_deref().unwrap_or("?"));
                sink.line("prg", &text);
            }
            StreamEvent::Model(model) => sink.line("prg", &format!("model {model}")),
            StreamEvent::ModelCall | StreamEvent::Assistant { .. } => {}
            StreamEvent::ToolStart { name, detail, .. } => {
                let text = if detail.is_empty() {
                    format!("tool {name}")
                } else {
                    format!("tool {name}: {detail}")
                };
                sink.line("prg", &text);
            }
            StreamEvent::ToolEnd { id, ok, detail } => {
                let name = self.tally.tool_of(id).unwrap_or("?");
                let word = if *ok { "done" } else { "failed" };
                let text = if detail.is_empty() {
                    format!("tool {name} {word}")
                } else {
                    format!("tool {name} {word} ({detail})")
                };
                sink.line("prg", &text);
            }
            StreamEvent::Answer(text) => lines(sink, "out", "result: ", text),
            StreamEvent::Usage(usage) => sink.line("prg", &usage_words(usage)),
            StreamEvent::Error(message) => lines(sink, "err", "error: ", message),
            StreamEvent::Denied(call) => sink.line("err", &format!("permission denied: {call}")),
            StreamEvent::Note(text) => sink.line("prg", text),
        }
    }
}

/// Writes a text of several lines: the first behind `lead`, the others indented.
fn lines(sink: &mut dyn Sink, tag: &'static str, lead: &str, text: &str) {
    for (i, line) in text.trim_end().split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if i == 0 {
            sink.line(tag, &format!("{lead}{line}"));
        } else {
            sink.line(tag, &format!("  {line}"));
        }
    }
}

/// Tokens and cost in words, for a transcript line and the block.
pub fn usage_words(usage: &hermes_ledger::Usage) -> String {
    let mut text = format!("usage: {} input tokens", usage.input_tokens);
    if usage.cached_input_tokens > 0 {
        text.push_str(&format!(" ({} cached)", usage.cached_input_tokens));
    }
    text.push_str(&format!(", {} output", usage.output_tokens));
    if let Some(cost) = usage.cost_usd {
        text.push_str(&format!(", ${cost:.4}"));
    }
    text
}

/// Reads one line of a stream of JSON objects through `read_object`; `false` if the line is
/// not a JSON object (the [`read_line`] of such a stream).
pub(crate) fn read_object_line(
    line: &[u8],
    state: &mut ReadState,
    out: &mut Vec<StreamEvent>,
    read_object: fn(&Value, &mut ReadState, &mut Vec<StreamEvent>),
) -> bool {
    let Some(line) = object(line) else {
        return false;
    };
    read_object(&line, state, out);
    true
}

/// The line as a JSON object, if it is one.
fn object(line: &[u8]) -> Option<Value> {
    match serde_json::from_slice::<Value>(line) {
        Ok(value @ Value::Object(_)) => Some(value),
        _ => None,
    }
}

/// The string at `key` of a JSON object, or `""`.
pub(crate) fn str_at<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A text in a few words: one line, at most [`SHORT_CHARS`] characters.
pub(crate) fn short(text: &str) -> String {
    let mut out: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(SHORT_CHARS + 1)
        .collect();
    if out.chars().count() > SHORT_CHARS {
        out = out.chars().take(SHORT_CHARS).collect();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that keeps everything, for tests.
    #[derive(Default)]
    struct Kept {
        lines: Vec<(&'static str, String)>,
        raw: Vec<u8>,
    }

    impl Sink for Kept {
        fn line(&mut self, tag: &'static str, text: &str) {
            self.lines.push((tag, text.to_owned()));
        }
        fn raw(&mut self, bytes: &[u8]) {
            self.raw.extend_from_slice(bytes);
        }
    }

    #[test]
    fn garbage_and_half_lines_fall_back_once_and_lose_nothing() {
        let adapter = hermes_agents::children()
            .find(|(_, c)| c.stream == hermes_agents::StreamFormat::SdkMessages)
            .map(|(a, _)| a)
            .expect("an agent streams SDK messages");
        let mut stream = AgentStream::new(adapter, 1 << 20);
        let mut kept = Kept::default();
        let input = b"not json\n{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m\"}\n{\"type\":\"assis\nplain tail";
        stream.feed(input, &mut kept);
        stream.finish(&mut kept);
        let text: String = kept
            .lines
            .iter()
            .map(|(tag, text)| format!("{tag} | {text}\n"))
            .collect();
        assert_eq!(text.matches("cannot read some lines").count(), 1, "{text}");
        for piece in [
            "out | not json\n",
            "prg | init model m\n",
            "out | {\"type\":\"assis\n",
            "out | plain tail\n",
        ] {
            assert!(text.contains(piece), "{piece:?} in {text}");
        }
        assert_eq!(stream.report().model.as_deref(), Some("m"));
        assert_eq!(kept.raw, input);
    }
}
