//! Progress tokens and the progress protocol a child speaks on `HERMES_PROGRESS_FD`.
//!
//! A child's token is `(api_calls, current_tool, output_bytes, progress_seq)`; it changes when
//! the child writes to stdout or stderr or sends a progress line. The protocol is one JSON object
//! per line: `{"api_calls": n}`, `{"tool": "name"}`, `{"tool": null}`, `{"note": "text"}`,
//! `{"result": "text"}` (keys may be combined in one object; unknown keys are ignored). A line
//! that is not such an object is *malformed*: it is kept in the transcript and counts as
//! activity (`progress_seq` moves), and changes nothing else.

use serde_json::Value;

/// What the stall monitor compares between two looks at a child.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Token {
    /// API calls the child reported.
    pub api_calls: u64,
    /// The tool it said it is inside.
    pub current_tool: Option<String>,
    /// Bytes written to stdout and stderr.
    pub output_bytes: u64,
    /// Lines received on the progress pipe, malformed ones included.
    pub progress_seq: u64,
}

impl Token {
    /// Whether the child has shown any sign of life yet.
    pub fn is_initial(&self) -> bool {
        *self == Token::default()
    }
}

/// One well-formed progress message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// `{"api_calls": n}`: the child's total so far.
    pub api_calls: Option<u64>,
    /// `{"tool": "name"}` (entered) or `{"tool": null}` (left).
    pub tool: Option<Option<String>>,
    /// `{"note": "text"}`: for the transcript only.
    pub note: Option<String>,
    /// `{"result": "text"}`: the child's own summary, replacing stdout as its result.
    pub result: Option<String>,
}

/// Why a progress line was not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Not JSON at all, or not an object.
    #[error("not a JSON object")]
    NotAnObject,
    /// A known key with a value of the wrong type.
    #[error("{0:?} has a value of the wrong type")]
    WrongType(&'static str),
    /// Longer than the progress line limit.
    #[error("longer than {0} bytes")]
    TooLong(usize),
}

/// Parses one line (without its newline) of the progress protocol.
pub fn parse_line(line: &[u8]) -> Result<Message, Malformed> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(line) else {
        return Err(Malformed::NotAnObject);
    };
    let mut message = Message::default();
    if let Some(v) = map.get("api_calls") {
        message.api_calls = Some(v.as_u64().ok_or(Malformed::WrongType("api_calls"))?);
    }
    if let Some(v) = map.get("tool") {
        message.tool = Some(match v {
            Value::Null => None,
            Value::String(name) => Some(name.clone()),
            _ => return Err(Malformed::WrongType("tool")),
        });
    }
    if let Some(v) = map.get("note") {
        message.note = Some(v.as_str().ok_or(Malformed::WrongType("note"))?.to_owned());
    }
    if let Some(v) = map.get("result") {
        message.result = Some(v.as_str().ok_or(Malformed::WrongType("result"))?.to_owned());
    }
    Ok(message)
}

impl Token {
    /// Applies one progress line: `progress_seq` always moves (a malformed line is activity
    /// too); a well-formed message may also set `api_calls` and `current_tool`.
    pub fn apply(&mut self, line: &Result<Message, Malformed>) {
        self.progress_seq += 1;
        if let Ok(message) = line {
            if let Some(n) = message.api_calls {
                self.api_calls = n;
            }
            if let Some(tool) = &message.tool {
                self.current_tool = tool.clone();
            }
        }
    }
}

/// Splits a byte stream into lines of at most `max` bytes each, for the parser. A longer line is
/// reported once as [`Malformed::TooLong`] and the rest of it skipped, so memory stays bounded.
#[derive(Debug)]
pub(crate) struct LineAssembler {
    max: usize,
    line: Vec<u8>,
    overflowed: bool,
}

/// One line out of a [`LineAssembler`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// A complete line, without its newline.
    Complete(&'a [u8]),
    /// A line that was longer than the limit.
    TooLong,
}

impl LineAssembler {
    pub(crate) fn new(max: usize) -> LineAssembler {
        LineAssembler {
            max,
            line: Vec::new(),
            overflowed: false,
        }
    }

    /// Feeds bytes, calling `each` for every line they complete.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], mut each: impl FnMut(Line<'_>)) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest, complete) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            // A whole line inside this read goes out as it is, uncopied.
            if complete && self.line.is_empty() && !self.overflowed && part.len() <= self.max {
                each(Line::Complete(part));
                bytes = rest;
                continue;
            }
            if !self.overflowed {
                if self.line.len() + part.len() > self.max {
                    self.overflowed = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if complete {
                self.emit(&mut each);
            }
            bytes = rest;
        }
    }

    /// Ends the stream: a last line without a newline still counts.
    pub(crate) fn finish(&mut self, mut each: impl FnMut(Line<'_>)) {
        if !self.line.is_empty() || self.overflowed {
            self.emit(&mut each);
        }
    }

    fn emit(&mut self, each: &mut impl FnMut(Line<'_>)) {
        if self.overflowed {
            each(Line::TooLong);
        } else {
            each(Line::Complete(&self.line));
        }
        self.line.clear();
        self.overflowed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_message_of_the_protocol() {
        assert_eq!(
            parse_line(br#"{"api_calls": 7}"#).map(|m| m.api_calls),
            Ok(Some(7))
        );
        assert_eq!(
            parse_line(br#"{"tool":"grep"}"#).map(|m| m.tool),
            Ok(Some(Some("grep".into())))
        );
        assert_eq!(
            parse_line(br#"{"tool":null}"#).map(|m| m.tool),
            Ok(Some(None))
        );
        assert_eq!(
            parse_line(br#"{"note":"hi"}"#).map(|m| m.note),
            Ok(Some("hi".into()))
        );
        assert_eq!(
            parse_line(br#"{"result":"done"}"#).map(|m| m.result),
            Ok(Some("done".into()))
        );
        let both = parse_line(br#"{"api_calls":2,"tool":"x","extra":1}"#).expect("parses");
        assert_eq!(
            (both.api_calls, both.tool),
            (Some(2), Some(Some("x".into())))
        );
    }

    #[test]
    fn malformed_lines_are_refused_but_count_as_activity() {
        assert_eq!(parse_line(b"hello"), Err(Malformed::NotAnObject));
        assert_eq!(parse_line(b"[1]"), Err(Malformed::NotAnObject));
        assert_eq!(
            parse_line(br#"{"api_calls":"x"}"#),
            Err(Malformed::WrongType("api_calls"))
        );
        assert_eq!(
            parse_line(br#"{"tool":3}"#),
            Err(Malformed::WrongType("tool"))
        );
        assert_eq!(parse_line(b"\xff\xfe"), Err(Malformed::NotAnObject));
        let mut token = Token {
            api_calls: 3,
            current_tool: Some("t".into()),
            ..Token::default()
        };
        token.apply(&parse_line(b"garbage"));
        assert_eq!(
            token,
            Token {
                api_calls: 3,
                current_tool: Some("t".into()),
                output_bytes: 0,
                progress_seq: 1
            }
        );
    }

    #[test]
    fn messages_move_the_token() {
        let mut token = Token::default();
        assert!(token.is_initial());
        token.apply(&parse_line(br#"{"api_calls":4}"#));
        token.apply(&parse_line(br#"{"tool":"x"}"#));
        assert_eq!(token.current_tool.as_deref(), Some("x"));
        token.apply(&parse_line(br#"{"note":"n"}"#));
        assert_eq!(token.current_tool.as_deref(), Some("x"));
        token.apply(&parse_line(br#"{"tool":null}"#));
        assert_eq!(
            token,
            Token {
                api_calls: 4,
                current_tool: None,
                output_bytes: 0,
                progress_seq: 4
            }
        );
    }

    #[test]
    fn assembler_splits_lines_across_chunks_and_bounds_long_ones() {
        let mut a = LineAssembler::new(8);
        let mut seen = Vec::new();
        let mut record = |l: Line<'_>| {
            seen.push(match l {
                Line::Complete(b) => String::from_utf8_lossy(b).into_owned(),
                Line::TooLong => "<too long>".to_owned(),
            })
        };
        a.feed(b"ab", &mut record);
        a.feed(b"c\nd\n0123456789abc", &mut record);
        a.feed(b"def\nlast", &mut record);
        a.finish(&mut record);
        assert_eq!(seen, ["abc", "d", "<too long>", "last"]);
    }
}
