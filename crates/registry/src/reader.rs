//! The one loop that reads a child's pipe as bytes arrive — stdout, stderr or the progress
//! pipe — and what each kind of pipe does with them: output moves the progress token, feeds the
//! result capture and becomes transcript lines; progress lines are parsed into the token; an
//! agent child's stdout goes through its stream adapter, which writes one readable line per
//! event and keeps the raw stream beside the transcript.

use std::io;
use std::sync::Arc;

use hermes_ledger::Timestamp;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::agent::{AgentStream, Sink};
use crate::child::LiveChild;
use crate::progress::{Line, LineAssembler, Malformed, parse_line};
use crate::transcript::{LINE_MAX, LineSplitter, Stream, TaskLog, hms};
use hermes_stdx::Clock;

/// Bytes read at a time.
const CHUNK: usize = 64 * 1024;

/// What a reader does with the bytes of its pipe.
#[derive(Debug)]
pub(crate) enum Pipe {
    /// stdout or stderr, shown as it is.
    Output(Stream),
    /// The progress pipe, whose lines are parsed whole up to `line_max` bytes.
    Progress {
        /// The longest line parsed.
        line_max: usize,
    },
    /// An agent child's stdout, read by its adapter; the raw stream goes to `raw`.
    Agent {
        /// The adapter at work.
        stream: Box<AgentStream>,
        /// `task-N.jsonl`.
        raw: Arc<TaskLog>,
    },
}

/// One pipe's state between two reads.
enum Reading {
    Output(Stream, LineSplitter),
    Progress {
        lines: LineSplitter,
        assembler: LineAssembler,
        line_max: usize,
    },
    Agent {
        stream: Box<AgentStream>,
        raw_log: Arc<TaskLog>,
        raw: Vec<u8>,
    },
}

/// Reads `reader` to its end, handing each read to the pipe's kind as it arrives.
pub(crate) async fn read_pipe<R: AsyncRead + Unpin>(
    mut reader: R,
    pipe: Pipe,
    live: Arc<LiveChild>,
    log: Arc<TaskLog>,
    clock: Arc<dyn Clock>,
) {
    let mut reading = match pipe {
        Pipe::Output(stream) => Reading::Output(stream, LineSplitter::new(stream)),
        Pipe::Progress { line_max } => Reading::Progress {
            lines: LineSplitter::new(Stream::Progress),
            assembler: LineAssembler::new(line_max),
            line_max,
        },
        Pipe::Agent { stream, raw } => Reading::Agent {
            stream,
            raw_log: raw,
            raw: Vec::new(),
        },
    };
    let mut buf = Vec::with_capacity(CHUNK);
    let mut out = Vec::new();
    loop {
        buf.clear();
        match reader.read_buf(&mut buf).await {
            Ok(0) => break,
            Ok(_) => {
                out.clear();
                reading.bytes(&buf, clock.now(), &live, &mut out);
                log.write_raw(&out, clock.now());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading a child's pipe failed");
                break;
            }
        }
    }
    out.clear();
    let now = clock.now();
    reading.end(now, &live, &mut out);
    log.write_raw(&out, now);
}

impl Reading {
    /// Takes in one read; transcript lines go to `out`.
    fn bytes(&mut self, bytes: &[u8], now: Timestamp, live: &LiveChild, out: &mut Vec<u8>) {
        let stamp = hms(now);
        match self {
            Reading::Output(stream, lines) => {
                live.record_output(*stream, bytes, now);
                lines.feed(bytes, &stamp, out);
            }
            Reading::Progress {
                lines,
                assembler,
                line_max,
            } => {
                lines.feed(bytes, &stamp, out);
                let max = *line_max;
                assembler.feed(bytes, |line| live.record_progress(parse(line, max), now));
            }
            Reading::Agent {
                stream,
                raw_log,
                raw,
            } => {
                live.record_output(Stream::Out, bytes, now);
                raw.clear();
                stream.feed(bytes, &mut LogSink { stamp, out, raw });
                raw_log.write_raw(raw, now);
                live.record_agent(stream.name(), stream.report(), now);
            }
        }
    }

    /// The pipe ended: whatever waited for a newline counts too.
    fn end(&mut self, now: Timestamp, live: &LiveChild, out: &mut Vec<u8>) {
        let stamp = hms(now);
        match self {
            Reading::Output(_, lines) => lines.finish(&stamp, out),
            Reading::Progress {
                lines,
                assembler,
                line_max,
            } => {
                lines.finish(&stamp, out);
                let max = *line_max;
                assembler.finish(|line| live.record_progress(parse(line, max), now));
            }
            Reading::Agent {
                stream,
                raw_log,
                raw,
            } => {
                raw.clear();
                stream.finish(&mut LogSink { stamp, out, raw });
                raw_log.write_raw(raw, now);
                live.record_agent(stream.name(), stream.report(), now);
            }
        }
    }
}

fn parse(line: Line<'_>, line_max: usize) -> Result<crate::progress::Message, Malformed> {
    match line {
        Line::Complete(bytes) => parse_line(bytes),
        Line::TooLong => Err(Malformed::TooLong(line_max)),
    }
}

/// Writes an adapter's readable lines as transcript lines (`HH:MM:SS tag | text`, split at
/// [`LINE_MAX`] bytes) and collects its raw bytes.
struct LogSink<'a> {
    stamp: String,
    out: &'a mut Vec<u8>,
    raw: &'a mut Vec<u8>,
}

impl Sink for LogSink<'_> {
    fn line(&mut self, tag: &'static str, text: &str) {
        let mut rest = text;
        loop {
            let mut cut = rest.len().min(LINE_MAX);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            let (piece, tail) = rest.split_at(cut);
            self.out.extend_from_slice(self.stamp.as_bytes());
            self.out.push(b' ');
            self.out.extend_from_slice(tag.as_bytes());
            self.out.extend_from_slice(b" | ");
            self.out.extend_from_slice(piece.as_bytes());
            self.out.push(b'\n');
            if tail.is_empty() {
                break;
            }
            rest = tail;
        }
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.raw.extend_from_slice(bytes);
    }
}
