//! The child's own output in transcript text: what a capped transcript's note counts as
//! skipped.

/// Bytes and lines of a child's own output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ChildCount {
    pub(super) bytes: u64,
    pub(super) lines: u64,
}

/// The `HH:MM:SS tag | ` before each transcript line's text.
const PREFIX: usize = 15;

/// Counts the child's own output in transcript text fed in pieces that may cut lines anywhere:
/// what follows the prefix of its `out`, `err` and `prg` lines, newline included. hermes' own
/// `---` lines and the header are not the child's. Only whole lines count.
#[derive(Clone, Debug, Default)]
pub(super) struct ChildCounter {
    pub(super) count: ChildCount,
    /// Bytes of the current line so far.
    col: usize,
    prefix: [u8; PREFIX],
}

impl ChildCounter {
    pub(super) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let piece = &bytes[..newline.map_or(bytes.len(), |i| i + 1)];
            if self.col < PREFIX {
                let n = (PREFIX - self.col).min(piece.len());
                self.prefix[self.col..self.col + n].copy_from_slice(&piece[..n]);
            }
            self.col += piece.len();
            if newline.is_some() {
                let child = matches!(&self.prefix[9..12], b"out" | b"err" | b"prg")
                    && &self.prefix[12..] == b" | ";
                if child && self.col > PREFIX {
                    self.count.bytes += (self.col - PREFIX) as u64;
                    self.count.lines += 1;
                }
                self.col = 0;
            }
            bytes = &bytes[piece.len()..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_s_output_is_counted_without_prefixes_or_notes_across_any_cut() {
        let text = b"# header\n00:00:01 out | abc\n00:00:01 --- | hermes: note\n\
                     00:00:02 err | \n00:00:03 prg | {\"tool\":null}\n";
        for cut in 0..text.len() {
            let mut c = ChildCounter::default();
            c.feed(&text[..cut]);
            c.feed(&text[cut..]);
            assert_eq!(
                c.count,
                ChildCount {
                    bytes: 4 + 1 + 14,
                    lines: 3
                },
                "cut at {cut}"
            );
        }
    }
}
