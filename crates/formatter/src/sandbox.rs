//! What a block says of a child's sandbox: the sandbox of a confined child, the tool calls its
//! agent refused (`Denied: 1 (Bash: touch f)`), and whether the sandbox is the likely reason a
//! failed command child failed.

use std::fmt;

use hermes_ledger::{ChildOutcome, ChildStatus, UnitRecord};

use crate::text::one_line;

/// At most this many refused calls are named; the count says how many there were.
const DENIALS_NAMED: usize = 3;

/// Each named call is cut to this many characters.
const DENIAL_MAX_CHARS: usize = 80;

/// What the operating system says when a sandbox refused: a failed confined child whose
/// stderr says one of these was most likely stopped by its sandbox.
const REFUSALS: &[&str] = &[
    "Read-only file system",
    "Permission denied",
    "Operation not permitted",
    "Network is unreachable",
];

/// ` (sandbox: Read-only file system)` for a confined child that failed with an operating
/// system refusal in its stderr; empty otherwise.
pub(crate) fn refusal(unit: &UnitRecord, outcome: &ChildOutcome) -> String {
    if outcome.status == ChildStatus::Completed
        || !unit.spec.sandbox.confines(is_agent(unit, outcome))
    {
        return String::new();
    }
    let said = [&outcome.stderr_tail, &Some(outcome.result.clone())];
    REFUSALS
        .iter()
        .find(|r| {
            said.iter()
                .any(|s| s.as_deref().is_some_and(|s| s.contains(*r)))
        })
        .map(|r| format!(" (sandbox: {r})"))
        .unwrap_or_default()
}

/// Writes `Sandbox: …` for a confined child and `Denied: N (…)` for an agent child whose
/// permission system refused calls.
pub(crate) fn write_sandbox<W: fmt::Write + ?Sized>(
    w: &mut W,
    unit: &UnitRecord,
    outcome: &ChildOutcome,
) -> fmt::Result {
    let agent = is_agent(unit, outcome);
    let sandbox = unit.spec.sandbox;
    if sandbox.confines(agent) {
        let network = if sandbox.network(agent) { "on" } else { "off" };
        writeln!(w, "Sandbox: {}, network {network}", sandbox.mode)?;
    }
    if !outcome.denied().is_empty() {
        let named: Vec<String> = outcome
            .denied()
            .iter()
            .take(DENIALS_NAMED)
            .map(|d| one_line(d, DENIAL_MAX_CHARS))
            .collect();
        let more = outcome.denied().len().saturating_sub(DENIALS_NAMED);
        let more = if more > 0 {
            format!("; {more} more")
        } else {
            String::new()
        };
        writeln!(
            w,
            "Denied: {} ({}{more})",
            outcome.denied().len(),
            named.join("; ")
        )?;
    }
    Ok(())
}

fn is_agent(unit: &UnitRecord, outcome: &ChildOutcome) -> bool {
    unit.spec
        .tasks
        .get(outcome.index as usize)
        .is_some_and(|t| t.agent.is_some())
}
