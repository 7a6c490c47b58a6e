//! What a reader relies on: which lines at column 0 are structure, and a check that rendered
//! text has only those, with the headers and rules it should have.

use hermes_formatter::QUOTE_PREFIX;

/// Every way a line hermes writes itself may start. Any other line must be quoted or empty.
const STRUCTURAL: &[&str] = &[
    "[ASYNC DELEGATION COMPLETE — ",
    "[ASYNC DELEGATION RESULTS — ",
    "[DELEGATION RESULT READY — ",
    "A background task you dispatched earlier has finished.",
    "Tasks of a batch you dispatched in the background earlier have finished.",
    "Dispatched: ",
    "Original goal: ",
    "Context you provided:",
    "Toolsets: ",
    "Role: ",
    "Status: ",
    "--- RESULT ---",
    "--- ✓ TASK ",
    "--- ✗ TASK ",
    "Live transcript: ",
    "Failed: ",
    "Could not start the command. Reason: ",
    "Stalled: ",
    "Timed out: ",
    "Interrupted before it finished. Reason: ",
    "Cancelled before it started. Reason: ",
    "Outcome unknown: ",
    "Recorded before that: ",
    "Not finished: ",
    "Output:",
    "Stderr (tail):",
    "Transcript (tail):",
    "(no output)",
    "(no output, stderr or transcript recorded)",
    "The unit ended ",
    "Not in this envelope: ",
    "This envelope carries no task results.",
];

/// How many header lines (`[…`) and rule lines (`---…`) a rendering should have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Lines starting with `[`: the carrier, the leading line, one header per envelope.
    pub headers: usize,
    /// Lines starting with `---`: one `--- RESULT ---` per single block, one per batch task.
    pub rules: usize,
}

/// Whether `line` is the leading line for several envelopes.
fn is_leading_line(line: &str) -> bool {
    line.strip_prefix('[')
        .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_digit()))
        .is_some_and(|rest| rest.starts_with(" ASYNC DELEGATIONS COMPLETED TOGETHER — "))
}

/// Checks that every line of `text` is structure, quoted or empty; that it has exactly the
/// headers and rules of `shape`; and that no character in it could move the cursor or reorder
/// what a reader sees. Returns what is wrong.
pub fn check(text: &str, shape: Shape) -> Result<(), String> {
    let quoted = |line: &str| line.starts_with(QUOTE_PREFIX) || line == QUOTE_PREFIX.trim_end();
    for line in text.split('\n') {
        let known = line.is_empty()
            || quoted(line)
            || is_leading_line(line)
            || STRUCTURAL.iter().any(|p| line.starts_with(p));
        if !known {
            return Err(format!(
                "a line that is neither structure nor quoted: {line:?}"
            ));
        }
        for c in line.chars() {
            let bad = (c.is_control() && !(c == '\t' && quoted(line)))
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if bad {
                return Err(format!("character {c:?} in line {line:?}"));
            }
        }
    }
    let headers = text.split('\n').filter(|l| l.starts_with('[')).count();
    let rules = text.split('\n').filter(|l| l.starts_with("---")).count();
    let found = Shape { headers, rules };
    if found != shape {
        return Err(format!("expected {shape:?}, found {found:?} in:\n{text}"));
    }
    Ok(())
}

/// The lines of `text` that are not quoted, each reduced to the structural prefix it starts with
/// (or to `""` for an empty line): the skeleton a reader navigates by. Content changes nothing in
/// it; only which fields are empty does.
pub fn skeleton(text: &str) -> Vec<&'static str> {
    text.split('\n')
        .filter(|line| !line.starts_with(QUOTE_PREFIX.trim_end()))
        .map(|line| {
            if line.is_empty() {
                ""
            } else if is_leading_line(line) {
                "[N ASYNC DELEGATIONS COMPLETED TOGETHER"
            } else {
                STRUCTURAL
                    .iter()
                    .copied()
                    .find(|p| line.starts_with(p))
                    .unwrap_or("(unknown)")
            }
        })
        .collect()
}
