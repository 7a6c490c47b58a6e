//! Bounded capture of what a child prints: the head and tail of its output for its result
//! (stdout and stderr in the order they were read, stderr lines marked), the last bytes of
//! stderr for failures. Memory stays the same whatever the child prints.

use std::collections::VecDeque;

use crate::transcript::Stream;

/// What starts each stderr line in a result, so a reader tells the two streams apart.
pub const STDERR_MARK: &str = "[stderr] ";

/// The longest unfinished line of one stream held back (so that lines of the two streams do
/// not mix); a longer one goes into the capture as it is.
const PARTIAL_MAX: usize = 4096;

/// How much of stderr a failed child's event carries.
pub const STDERR_TAIL_BYTES: usize = 2048;

/// The first and last bytes of a stream, at most `max` bytes in all, and how many there were.
#[derive(Clone, Debug)]
pub struct Capture {
    max: usize,
    head: Vec<u8>,
    tail: TailBuffer,
    total: u64,
}

impl Capture {
    /// An empty capture keeping at most `max` bytes.
    pub fn new(max: usize) -> Capture {
        let head_cap = max.div_ceil(2);
        Capture {
            max,
            head: Vec::new(),
            tail: TailBuffer::new(max - head_cap),
            total: 0,
        }
    }

    /// Takes in more output.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_room = self.max.div_ceil(2).saturating_sub(self.head.len());
        if head_room > 0 {
            let n = head_room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.push(bytes);
    }

    /// Bytes seen so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether everything taken in is kept.
    pub fn is_whole(&self) -> bool {
        self.total <= self.max as u64
    }

    /// The captured text, at most `max` bytes of UTF-8: everything if it fits, else the head and
    /// the tail around a marker naming how many bytes were left out and where the rest is
    /// (`pointer`). Bytes that are not UTF-8 become U+FFFD.
    pub fn render(&self, pointer: &Pointer<'_>) -> String {
        let tail = self.tail.bytes();
        if self.total == (self.head.len() + tail.len()) as u64 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            let text = String::from_utf8_lossy(&all);
            if text.len() <= self.max {
                return text.into_owned();
            }
        }
        // The marker's length with the largest count it could show bounds the room it needs.
        let room = self.max.saturating_sub(marker(self.total, pointer).len());
        let (head_text, head_used) = lossy_prefix(&self.head, room / 2);
        let (tail_text, tail_used) = lossy_suffix(&tail, room - head_text.len());
        let omitted = self.total - (head_used + tail_used) as u64;
        format!("{head_text}{}{tail_text}", marker(omitted, pointer))
    }
}

/// Where what a cut result leaves out can be read: the child's transcript, which holds all of
/// its output unless the transcript reached its own cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pointer<'a> {
    /// The transcript's path.
    pub transcript: &'a str,
    /// The transcript's cap, when it was reached (it then holds its head and latest lines).
    pub capped_at: Option<u64>,
}

impl<'a> Pointer<'a> {
    /// A transcript that holds all of the output.
    pub fn whole(transcript: &'a str) -> Pointer<'a> {
        Pointer {
            transcript,
            capped_at: None,
        }
    }
}

fn marker(omitted: u64, pointer: &Pointer<'_>) -> String {
    let transcript = pointer.transcript;
    match pointer.capped_at {
        None => format!("\n[… {omitted} bytes omitted; the full output is in {transcript} …]\n"),
        Some(cap) => format!(
            "\n[… {omitted} bytes omitted; the transcript {transcript} was cut too, at its cap of \
             {cap} bytes: it holds the first lines and the latest ones, not the full output …]\n"
        ),
    }
}

/// A child's stdout and stderr together, for its result: whole lines in the order they were
/// read, each stderr line starting with [`STDERR_MARK`]; stdout alone comes out byte for byte.
/// An unfinished line waits (up to [`PARTIAL_MAX`] bytes) until its newline or the end.
#[derive(Clone, Debug)]
pub struct Interleaved {
    capture: Capture,
    /// The unfinished line of stdout and of stderr.
    partial: [Vec<u8>; 2],
    /// Whether part of the current line of each stream went into the capture already.
    mid_line: [bool; 2],
}

impl Interleaved {
    /// An empty capture keeping at most `max` bytes.
    pub fn new(max: usize) -> Interleaved {
        Interleaved {
            capture: Capture::new(max),
            partial: [Vec::new(), Vec::new()],
            mid_line: [false; 2],
        }
    }

    /// Takes in more of one stream (the progress pipe is not output and is ignored).
    pub fn push(&mut self, stream: Stream, mut bytes: &[u8]) {
        let s = match stream {
            Stream::Out => 0,
            Stream::Err => 1,
            Stream::Progress => return,
        };
        while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
            let mut line = std::mem::take(&mut self.partial[s]);
            line.extend_from_slice(&bytes[..=i]);
            self.emit(s, &line, true);
            bytes = &bytes[i + 1..];
        }
        self.partial[s].extend_from_slice(bytes);
        if self.partial[s].len() > PARTIAL_MAX {
            let piece = std::mem::take(&mut self.partial[s]);
            self.emit(s, &piece, false);
        }
    }

    fn emit(&mut self, s: usize, piece: &[u8], ends_line: bool) {
        if s == 1 && !self.mid_line[s] {
            self.capture.push(STDERR_MARK.as_bytes());
        }
        self.capture.push(piece);
        self.mid_line[s] = !ends_line;
    }

    /// Whether everything taken in is kept.
    pub fn is_whole(&self) -> bool {
        let mut all = self.clone();
        all.finish();
        all.capture.is_whole()
    }

    /// The unfinished lines go in as they are (stdout's, then stderr's).
    fn finish(&mut self) {
        for s in 0..2 {
            let piece = std::mem::take(&mut self.partial[s]);
            if !piece.is_empty() {
                self.emit(s, &piece, false);
            }
        }
    }

    /// The text, as [`Capture::render`] renders it, unfinished lines included.
    pub fn render(&self, pointer: &Pointer<'_>) -> String {
        let mut all = self.clone();
        all.finish();
        all.capture.render(pointer)
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xc0 == 0x80
}

/// The longest lossy UTF-8 rendering of a prefix of `bytes` that fits in `room` bytes, and how
/// many input bytes it covers.
fn lossy_prefix(bytes: &[u8], room: usize) -> (String, usize) {
    let mut end = bytes.len().min(room);
    // Do not cut a character in two.
    let mut back = 0;
    while end < bytes.len() && end > 0 && back < 3 && is_continuation(bytes[end]) {
        end -= 1;
        back += 1;
    }
    loop {
        let text = String::from_utf8_lossy(&bytes[..end]);
        if text.len() <= room {
            return (text.into_owned(), end);
        }
        end -= (text.len() - room).div_ceil(3).clamp(1, end);
    }
}

/// The longest lossy UTF-8 rendering of a suffix of `bytes` that fits in `room` bytes, and how
/// many input bytes it covers.
fn lossy_suffix(bytes: &[u8], room: usize) -> (String, usize) {
    let mut start = bytes.len().saturating_sub(room);
    loop {
        let mut skip = 0;
        while start < bytes.len() && skip < 3 && is_continuation(bytes[start]) && start > 0 {
            start += 1;
            skip += 1;
        }
        let text = String::from_utf8_lossy(&bytes[start..]);
        if text.len() <= room {
            return (text.into_owned(), bytes.len() - start);
        }
        start = (start + (text.len() - room).div_ceil(3).max(1)).min(bytes.len());
    }
}

/// The last `cap` bytes of a stream.
#[derive(Clone, Debug)]
pub struct TailBuffer {
    cap: usize,
    buf: VecDeque<u8>,
}

impl TailBuffer {
    /// An empty buffer keeping the last `cap` bytes.
    pub fn new(cap: usize) -> TailBuffer {
        TailBuffer {
            cap,
            buf: VecDeque::new(),
        }
    }

    /// Takes in more bytes, forgetting the oldest beyond `cap`.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.cap == 0 {
            return;
        }
        if bytes.len() >= self.cap {
            self.buf.clear();
            self.buf.extend(&bytes[bytes.len() - self.cap..]);
            return;
        }
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(bytes);
    }

    /// The kept bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.buf.iter().copied().collect()
    }

    /// Whether nothing was kept.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The kept bytes as text (lossy), starting at a character boundary.
    pub fn text(&self) -> String {
        let bytes = self.bytes();
        let start = bytes
            .iter()
            .take(3)
            .take_while(|b| is_continuation(**b))
            .count();
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = Capture::new(64);
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.render(&Pointer::whole("/t.log")), "hello world");
        assert_eq!(c.total(), 11);
    }

    #[test]
    fn large_output_keeps_head_and_tail_with_a_marker() {
        let mut c = Capture::new(200);
        c.push(b"HEAD");
        for _ in 0..1000 {
            c.push(&[b'x'; 100]);
        }
        c.push(b"TAIL");
        let text = c.render(&Pointer::whole("/logs/task-0.log"));
        assert!(text.len() <= 200, "{} bytes", text.len());
        assert!(text.starts_with("HEAD"));
        assert!(text.ends_with("TAIL"));
        assert!(text.contains("/logs/task-0.log"));
        let kept = text.len() - marker(0, &Pointer::whole("/logs/task-0.log")).len();
        let omitted: u64 = text
            .split("[… ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("marker names a count");
        // Every byte is either shown or counted as omitted (the marker's digits differ by a few).
        let shown = 100_008 - omitted;
        assert!(
            shown.abs_diff(kept as u64) <= 8,
            "shown {shown} kept {kept}"
        );
    }

    #[test]
    fn exactly_max_bytes_fit() {
        let mut c = Capture::new(10);
        c.push(b"0123456789");
        assert_eq!(c.render(&Pointer::whole("/t")), "0123456789");
        c.push(b"a");
        assert!(c.render(&Pointer::whole("/t")).contains("omitted"));
    }

    #[test]
    fn invalid_utf8_is_replaced_and_still_bounded() {
        let mut c = Capture::new(100);
        c.push(&[0xff; 90]);
        let text = c.render(&Pointer::whole("/t"));
        assert!(text.len() <= 100);
        assert!(text.contains('\u{fffd}'));
        assert!(text.contains("omitted"));
    }

    #[test]
    fn multibyte_characters_are_not_cut() {
        let mut c = Capture::new(120);
        for _ in 0..200 {
            c.push("é".as_bytes());
        }
        let text = c.render(&Pointer::whole("/t"));
        assert!(text.len() <= 120);
        assert!(!text.contains('\u{fffd}'), "{text}");
    }

    #[test]
    fn stdout_alone_comes_out_byte_for_byte() {
        let mut c = Interleaved::new(64);
        c.push(Stream::Out, b"one\ntw");
        c.push(Stream::Out, b"o\nthree");
        assert_eq!(c.render(&Pointer::whole("/t")), "one\ntwo\nthree");
    }

    #[test]
    fn stderr_lines_are_marked_and_kept_in_the_order_they_came() {
        let mut c = Interleaved::new(256);
        c.push(Stream::Err, b"   Compiling hermes v0.1.0\n");
        c.push(Stream::Out, b"partial ");
        c.push(Stream::Err, b"    Finished `dev` profile\nwarn");
        c.push(Stream::Progress, b"{\"tool\":\"x\"}\n");
        c.push(Stream::Out, b"line\n");
        c.push(Stream::Err, b"ing: unused\n");
        assert_eq!(
            c.render(&Pointer::whole("/t")),
            "[stderr]    Compiling hermes v0.1.0\n[stderr]     Finished `dev` profile\n\
             partial line\n[stderr] warning: unused\n"
        );
        assert!(c.is_whole());
    }

    #[test]
    fn a_long_unfinished_line_goes_in_once_and_memory_stays_bounded() {
        let mut c = Interleaved::new(100_000);
        for _ in 0..3 {
            c.push(Stream::Err, &[b'e'; 3000]);
        }
        c.push(Stream::Err, b"\n");
        let text = c.render(&Pointer::whole("/t"));
        assert_eq!(
            text.matches(STDERR_MARK).count(),
            1,
            "one mark for one line"
        );
        assert_eq!(text.len(), STDERR_MARK.len() + 9001);
        assert!(c.partial.iter().all(|p| p.len() <= PARTIAL_MAX));
    }

    #[test]
    fn a_cut_result_says_when_the_transcript_was_cut_too() {
        let mut c = Capture::new(100);
        c.push(&[b'x'; 1000]);
        let whole = c.render(&Pointer::whole("/t/task-0.log"));
        assert!(
            whole.contains("the full output is in /t/task-0.log"),
            "{whole}"
        );
        let capped = c.render(&Pointer {
            transcript: "/t/task-0.log",
            capped_at: Some(65_536),
        });
        assert!(!capped.contains("full output is in"), "{capped}");
        assert!(
            capped.contains("/t/task-0.log was cut too, at its cap of 65536 bytes"),
            "{capped}"
        );
    }

    #[test]
    fn tail_buffer_keeps_the_last_bytes() {
        let mut t = TailBuffer::new(4);
        t.push(b"ab");
        t.push(b"cdef");
        assert_eq!(t.bytes(), b"cdef");
        t.push(b"g");
        assert_eq!(t.bytes(), b"defg");
        t.push(b"0123456789");
        assert_eq!(t.text(), "6789");
        assert!(!t.is_empty());
    }
}
