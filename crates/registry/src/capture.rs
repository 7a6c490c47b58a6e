//! Bounded capture of what a child prints: the head and tail of stdout for its result, the last
//! bytes of stderr for failures. Memory stays the same whatever the child prints.

use std::collections::VecDeque;

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

    /// The captured text, at most `max` bytes of UTF-8: everything if it fits, else the head and
    /// the tail around a marker naming how many bytes were left out and where the whole output
    /// is (`transcript`). Bytes that are not UTF-8 become U+FFFD.
    pub fn render(&self, transcript: &str) -> String {
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
        let room = self
            .max
            .saturating_sub(marker(self.total, transcript).len());
        let (head_text, head_used) = lossy_prefix(&self.head, room / 2);
        let (tail_text, tail_used) = lossy_suffix(&tail, room - head_text.len());
        let omitted = self.total - (head_used + tail_used) as u64;
        format!("{head_text}{}{tail_text}", marker(omitted, transcript))
    }
}

fn marker(omitted: u64, transcript: &str) -> String {
    format!("\n[… {omitted} bytes omitted; the full output is in {transcript} …]\n")
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
        assert_eq!(c.render("/t.log"), "hello world");
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
        let text = c.render("/logs/task-0.log");
        assert!(text.len() <= 200, "{} bytes", text.len());
        assert!(text.starts_with("HEAD"));
        assert!(text.ends_with("TAIL"));
        assert!(text.contains("/logs/task-0.log"));
        let kept = text.len() - marker(0, "/logs/task-0.log").len();
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
        assert_eq!(c.render("/t"), "0123456789");
        c.push(b"a");
        assert!(c.render("/t").contains("omitted"));
    }

    #[test]
    fn invalid_utf8_is_replaced_and_still_bounded() {
        let mut c = Capture::new(100);
        c.push(&[0xff; 90]);
        let text = c.render("/t");
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
        let text = c.render("/t");
        assert!(text.len() <= 120);
        assert!(!text.contains('\u{fffd}'), "{text}");
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
