//! Reading an agent child's stdout as it arrives: lines are assembled (bounded), each JSON
//! object goes to the agent's adapter, and what it says becomes readable transcript lines and
//! a [`Report`]. A line that is not a JSON object is output like any other: it is shown as it
//! is, and the adapter says once that it fell back. The raw stream goes to the sink untouched.

use serde_json::Value;

use super::event::{Event, Report, Tally};
use super::profile::{AgentCli, ReadState};
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
    cli: &'static dyn AgentCli,
    state: ReadState,
    tally: Tally,
    events: Vec<Event>,
    /// Assistant text not written yet (a message streamed in chunks is one line).
    pending: String,
    fell_back: bool,
    line_max: usize,
}

impl AgentStream {
    /// A stream read by `cli`, assembling lines of at most `line_max` bytes.
    pub fn new(cli: &'static dyn AgentCli, line_max: usize) -> AgentStream {
        AgentStream {
            assembler: LineAssembler::new(line_max),
            reader: Reader {
                cli,
                state: ReadState::default(),
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
        self.reader.cli.name()
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
        if self.cli.read(bytes, &mut self.state, &mut events) {
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
                self.cli.name()
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

    fn show(&mut self, event: &Event, sink: &mut dyn Sink) {
        if let Event::Assistant { text, delta } = event {
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
            Event::Init { model } => {
                let text = format!("init model {}", model.as_deref().unwrap_or("?"));
                sink.line("prg", &text);
            }
            Event::ModelCall | Event::Assistant { .. } => {}
            Event::ToolStart { name, detail, .. } => {
                let text = if detail.is_empty() {
                    format!("tool {name}")
                } else {
                    format!("tool {name}: {detail}")
                };
                sink.line("prg", &text);
            }
            Event::ToolEnd { id, ok, detail } => {
                let name = self.tally.tool_of(id).unwrap_or("?");
                let word = if *ok { "done" } else { "failed" };
                let text = if detail.is_empty() {
                    format!("tool {name} {word}")
                } else {
                    format!("tool {name} {word} ({detail})")
                };
                sink.line("prg", &text);
            }
            Event::Answer(text) => lines(sink, "out", "result: ", text),
            Event::Usage(usage) => sink.line("prg", &usage_words(usage)),
            Event::Error(message) => lines(sink, "err", "error: ", message),
            Event::Note(text) => sink.line("prg", text),
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
/// not a JSON object (the [`AgentCli::read`] of such a stream).
pub(crate) fn read_object_line(
    line: &[u8],
    state: &mut ReadState,
    out: &mut Vec<Event>,
    read_object: fn(&Value, &mut ReadState, &mut Vec<Event>),
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
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A sink that keeps everything, for tests.
    #[derive(Default)]
    pub(crate) struct Kept {
        pub(crate) lines: Vec<(&'static str, String)>,
        pub(crate) raw: Vec<u8>,
    }

    impl Sink for Kept {
        fn line(&mut self, tag: &'static str, text: &str) {
            self.lines.push((tag, text.to_owned()));
        }
        fn raw(&mut self, bytes: &[u8]) {
            self.raw.extend_from_slice(bytes);
        }
    }

    impl Kept {
        pub(crate) fn text(&self) -> String {
            self.lines
                .iter()
                .map(|(tag, text)| format!("{tag} | {text}\n"))
                .collect()
        }
    }

    /// The lines of a fixture that are sent (directions starting with `#` are not).
    pub(crate) fn sent(fixture: &str) -> String {
        fixture
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Replays a fixture through the adapter `name` in small chunks: its report and the
    /// readable transcript (`tag | text` lines).
    pub(crate) fn replay(name: &str, fixture: &str) -> (Report, String) {
        let cli = crate::agent::adapter_by_name(name)
            .expect("known")
            .expect("not plain");
        let mut stream = AgentStream::new(cli, 1 << 20);
        let mut kept = Kept::default();
        let bytes = sent(fixture);
        for chunk in bytes.as_bytes().chunks(7) {
            stream.feed(chunk, &mut kept);
        }
        stream.finish(&mut kept);
        assert_eq!(
            kept.raw,
            bytes.as_bytes(),
            "the raw stream is kept as it came"
        );
        (stream.report().clone(), kept.text())
    }

    #[test]
    fn garbage_and_half_lines_fall_back_once_and_lose_nothing() {
        let cli = crate::agent::adapter_by_name("claude")
            .expect("known")
            .expect("an adapter");
        let mut stream = AgentStream::new(cli, 1 << 20);
        let mut kept = Kept::default();
        let input = b"not json\n{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m\"}\n{\"type\":\"assis\nplain tail";
        stream.feed(input, &mut kept);
        stream.finish(&mut kept);
        let text = kept.text();
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

    fn fixture_lines() -> Vec<String> {
        [
            include_str!("../../tests/fixtures/agents/claude.jsonl"),
            include_str!("../../tests/fixtures/agents/codex.jsonl"),
            include_str!("../../tests/fixtures/agents/gemini.jsonl"),
            include_str!("../../tests/fixtures/agents/gemini-error.jsonl"),
        ]
        .iter()
        .flat_map(|f| sent(f).lines().map(str::to_owned).collect::<Vec<_>>())
        .collect()
    }

    fn piece() -> impl Strategy<Value = Vec<u8>> {
        let lines = fixture_lines();
        let n = lines.len();
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            (0..n).prop_map(move |i| lines[i].clone().into_bytes()),
            ((0..n), any::<prop::sample::Index>()).prop_map({
                let lines = fixture_lines();
                move |(i, cut)| {
                    let line = lines[i].as_bytes();
                    line[..cut.index(line.len() + 1)].to_vec()
                }
            }),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Any bytes, cut anywhere, through any adapter: no panic, the raw stream is kept
        /// exactly, and every line that is not a JSON object is in the readable transcript.
        #[test]
        fn any_stream_through_any_adapter_loses_no_output(
            pieces in proptest::collection::vec(piece(), 0..24),
            cuts in proptest::collection::vec(1usize..40, 1..8),
            adapter in 0usize..3,
        ) {
            let cli = crate::agent::AGENTS[adapter];
            let input: Vec<u8> = pieces.concat();
            let mut stream = AgentStream::new(cli, 1 << 20);
            let mut kept = Kept::default();
            let mut rest = &input[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = cuts[i % cuts.len()].min(rest.len());
                stream.feed(&rest[..n], &mut kept);
                rest = &rest[n..];
                i += 1;
            }
            stream.finish(&mut kept);
            prop_assert_eq!(&kept.raw, &input);
            for line in input.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if matches!(serde_json::from_slice::<Value>(line), Ok(Value::Object(_))) {
                    continue;
                }
                let text = String::from_utf8_lossy(line).into_owned();
                prop_assert!(
                    kept.lines.iter().any(|(tag, t)| *tag == "out" && *t == text),
                    "{:?} missing from {:?}", text, kept.lines
                );
            }
        }
    }
}
