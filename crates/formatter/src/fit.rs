//! What one answer holds when the reader keeps only so many characters.
//!
//! Agents cap what a hook or a tool may hand the model: one keeps at most 10,000 characters of
//! a hook's `additionalContext` and replaces the rest by a preview and a file path, MCP clients
//! cut long tool results (each agent's budget, and the pages that document it, are in its file
//! of `hermes_agents`). A result that is cut there was never seen, yet it
//! would be acknowledged as delivered. So every answer is fitted to a budget *before* anything
//! is acknowledged:
//!
//! - whole envelopes are taken, in order, while the boundary's text still fits; an envelope that
//!   does not fit is left out (its claim is given back and it waits for the next boundary);
//! - when not even the first envelope fits alone, it is shown *shortened*: whole lines of its
//!   head and tail around one line hermes writes itself, saying how many characters were cut
//!   and how to read all of it (`how_to_read`, given by the caller: the MCP tool
//!   `delegation_result`, the transcript paths).
//!
//! Cuts fall between lines (a head line that is too long alone is cut inside and ends with
//! `…`), so the rule of the crate holds: no untrusted text begins a line.

use crate::boundary::{Boundary, render_boundary};
use crate::envelope::Envelope;
use crate::time::RenderContext;

/// Characters an answer may never go below: room for the carrier, a header and the marker.
pub const MIN_BUDGET: usize = 1_000;

/// What fits in one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fitted {
    /// The text to hand over (empty when there were no envelopes).
    pub text: String,
    /// The indexes of the envelopes it holds, ascending; the others wait.
    pub taken: Vec<usize>,
    /// Whether the one envelope it holds was shortened to fit.
    pub shortened: bool,
}

/// Fits the envelopes delivered at `boundary` into `budget` characters (at least
/// [`MIN_BUDGET`]). `how_to_read(i)` says, in one line, how to read envelope `i` in full; it is
/// used only when that envelope is shortened.
pub fn fit_boundary(
    envelopes: &[Envelope<'_>],
    boundary: Boundary,
    ctx: &RenderContext,
    budget: usize,
    how_to_read: impl Fn(usize) -> String,
) -> Fitted {
    let budget = budget.max(MIN_BUDGET);
    let mut taken: Vec<usize> = Vec::new();
    let mut text = String::new();
    for i in 0..envelopes.len() {
        let mut trial = taken.clone();
        trial.push(i);
        let chosen: Vec<Envelope<'_>> = trial.iter().map(|&j| envelopes[j]).collect();
        let rendered = render_boundary(&chosen, boundary, ctx);
        if rendered.chars().count() <= budget {
            taken = trial;
            text = rendered;
        }
    }
    if !taken.is_empty() || envelopes.is_empty() {
        return Fitted {
            text,
            taken,
            shortened: false,
        };
    }
    let whole = render_boundary(&envelopes[..1], boundary, ctx);
    Fitted {
        text: shorten(&whole, budget, &how_to_read(0)),
        taken: vec![0],
        shortened: true,
    }
}

/// `text` in at most `budget` characters: whole lines of its head and its tail around one
/// marker line naming what was cut and `how_to_read`.
pub fn shorten(text: &str, budget: usize, how_to_read: &str) -> String {
    let total = text.chars().count();
    if total <= budget {
        return text.to_owned();
    }
    let lines: Vec<&str> = text.split('\n').collect();
    // The marker's length depends on the count it names; reserve room for the widest count.
    let marker_for = |cut: usize| {
        format!(
            "[… {cut} of {total} characters cut here to fit what the agent keeps; the full \
             result: {how_to_read} …]"
        )
    };
    let reserve = marker_for(total).chars().count() + 2;
    let room = budget.saturating_sub(reserve);
    let head_room = room * 3 / 5;
    let mut head = String::new();
    let mut used = 0;
    let mut first_tail = lines.len();
    for (i, line) in lines.iter().enumerate() {
        let n = line.chars().count() + 1;
        if used + n <= head_room {
            head.push_str(line);
            head.push('\n');
            used += n;
            continue;
        }
        if i == 0 || head.is_empty() {
            // A first line too long alone: its beginning, cut inside.
            let keep = head_room.saturating_sub(used + 2);
            head.extend(line.chars().take(keep));
            head.push_str("…\n");
            used += keep + 2;
        }
        first_tail = i + 1;
        break;
    }
    let mut tail_lines: Vec<&str> = Vec::new();
    let mut tail_used = 0;
    let tail_room = room.saturating_sub(used);
    for j in (first_tail..lines.len()).rev() {
        let n = lines[j].chars().count() + 1;
        if tail_used + n > tail_room {
            break;
        }
        tail_lines.push(lines[j]);
        tail_used += n;
    }
    tail_lines.reverse();
    let kept = used + tail_used;
    let mut out = head;
    out.push_str(&marker_for(total.saturating_sub(kept)));
    for line in tail_lines {
        out.push('\n');
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_left_alone() {
        assert_eq!(shorten("a\nb", 10, "x"), "a\nb");
    }

    #[test]
    fn a_long_text_keeps_whole_lines_of_head_and_tail_and_says_what_was_cut() {
        let text: String = (0..3_000).map(|i| format!("  │ line {i}\n")).collect();
        let out = shorten(
            &text,
            2_000,
            "delegation_result {\"delegation_id\":\"deleg_x\"}",
        );
        assert!(out.chars().count() <= 2_000, "{}", out.chars().count());
        assert!(out.starts_with("  │ line 0\n"), "{out}");
        assert!(out.contains("characters cut here"), "{out}");
        assert!(out.contains("deleg_x"), "{out}");
        assert!(
            out.ends_with("  │ line 2999\n") || out.ends_with("  │ line 2999"),
            "{out}"
        );
        for line in out.lines() {
            assert!(
                line.is_empty() || line.starts_with("  │ ") || line.starts_with("[…"),
                "a cut line: {line:?}"
            );
        }
    }

    #[test]
    fn one_huge_line_is_cut_inside_and_marked() {
        let text = format!("  │ {}", "x".repeat(50_000));
        let out = shorten(&text, 1_500, "the transcript /t.log");
        assert!(out.chars().count() <= 1_500);
        assert!(out.contains("…\n[… "), "{out}");
        assert!(out.contains("/t.log"));
    }
}
