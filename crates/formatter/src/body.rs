//! A child's body: what happened to it, for every status, with what it left behind (its output,
//! the tail of its stderr, the tail of its transcript).

use std::fmt;

use hermes_ledger::{ChildOutcome, ChildStatus, ExitDetail, StallPhase, TimeoutPhase};

use crate::text::{EXCERPT_MAX_CHARS, has_content, one_line, write_quoted};
use crate::time::seconds;

/// Writes the `Live transcript:` line of `outcome` when it names a transcript; returns whether
/// it did.
pub(crate) fn write_transcript<W: fmt::Write + ?Sized>(
    w: &mut W,
    outcome: &ChildOutcome,
) -> Result<bool, fmt::Error> {
    if !has_content(&outcome.transcript) {
        return Ok(false);
    }
    writeln!(
        w,
        "Live transcript: {}",
        one_line(&outcome.transcript, EXCERPT_MAX_CHARS)
    )?;
    Ok(true)
}

/// Writes the body of `outcome`. Ends with a line break; never empty.
pub(crate) fn write_body<W: fmt::Write + ?Sized>(w: &mut W, outcome: &ChildOutcome) -> fmt::Result {
    match outcome.status {
        ChildStatus::Completed => {
            if has_content(&outcome.result) {
                write_quoted(w, &outcome.result)?;
            } else {
                writeln!(w, "(no output)")?;
            }
            return Ok(());
        }
        ChildStatus::Failed => writeln!(w, "Failed: {}.", how_it_exited(outcome))?,
        ChildStatus::Error => {
            let reason = match &outcome.detail {
                ExitDetail::SpawnError { reason } => reason.as_str(),
                _ => "",
            };
            writeln!(
                w,
                "Could not start the command. Reason: {}",
                reason_text(reason)
            )?;
        }
        ChildStatus::Stalled => write_stalled(w, &outcome.detail)?,
        ChildStatus::Timeout => write_timeout(w, &outcome.detail)?,
        ChildStatus::Interrupted => {
            let reason = match &outcome.detail {
                ExitDetail::Interrupted { reason } => reason.as_str(),
                _ => "",
            };
            writeln!(
                w,
                "Interrupted before it finished. Reason: {}",
                reason_text(reason)
            )?;
        }
        ChildStatus::Cancelled => {
            let reason = match &outcome.detail {
                ExitDetail::Cancelled { reason } => reason.as_str(),
                _ => "",
            };
            writeln!(
                w,
                "Cancelled before it started. Reason: {}",
                reason_text(reason)
            )?;
        }
        ChildStatus::Unknown => {
            let reason = match &outcome.detail {
                ExitDetail::Unknown { reason } => reason.as_str(),
                _ => "",
            };
            writeln!(
                w,
                "Outcome unknown: the process running it went away, so how it ended was never \
                 recorded. Reason: {}",
                reason_text(reason)
            )?;
            writeln!(w, "Recorded before that: {}.", recorded(outcome))?;
        }
        ChildStatus::Pending | ChildStatus::Running => {
            writeln!(
                w,
                "Not finished: still {} when this was written.",
                outcome.status
            )?;
        }
    }
    write_leftovers(w, outcome)
}

/// A reason as a one-line excerpt, or a note that none was recorded.
pub(crate) fn reason_text(reason: &str) -> String {
    if has_content(reason) {
        one_line(reason, EXCERPT_MAX_CHARS)
    } else {
        "(none recorded)".to_owned()
    }
}

/// Writes the stall sentence from the stall fields.
fn write_stalled<W: fmt::Write + ?Sized>(w: &mut W, detail: &ExitDetail) -> fmt::Result {
    let ExitDetail::Stalled {
        stalled_after_quiet_seconds,
        stall_threshold_seconds,
        stall_phase,
        stall_grace_seconds,
    } = detail
    else {
        return writeln!(
            w,
            "Stalled: stopped for making no progress (no stall details recorded)."
        );
    };
    let phase = match stall_phase {
        StallPhase::Idle => "while idle",
        StallPhase::InTool => "inside a tool call",
    };
    writeln!(
        w,
        "Stalled: no progress for {}s {phase} (threshold {}s, phase {}). It was sent SIGTERM, \
         then SIGKILL if still running after a {}s grace period.",
        seconds(*stalled_after_quiet_seconds),
        seconds(*stall_threshold_seconds),
        stall_phase.as_str(),
        seconds(*stall_grace_seconds),
    )
}

/// Writes the timeout sentence from the timeout fields.
fn write_timeout<W: fmt::Write + ?Sized>(w: &mut W, detail: &ExitDetail) -> fmt::Result {
    let ExitDetail::Timeout {
        timeout_seconds,
        timed_out_after_seconds,
        timeout_phase,
    } = detail
    else {
        return writeln!(
            w,
            "Timed out: stopped at its timeout (no timeout details recorded)."
        );
    };
    let phase = match timeout_phase {
        TimeoutPhase::BeforeFirstProgress => "it had shown no progress yet",
        TimeoutPhase::AfterProgress => "it had been making progress",
    };
    writeln!(
        w,
        "Timed out: stopped after {}s, at its {}s timeout (phase {}: {phase}).",
        seconds(*timed_out_after_seconds),
        seconds(*timeout_seconds),
        timeout_phase.as_str(),
    )
}

/// How a process ended, from its exit code and signal.
fn how_it_exited(outcome: &ChildOutcome) -> String {
    match (outcome.exit_code, outcome.signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => match signal_name(signal) {
            Some(name) => format!("killed by signal {signal} ({name})"),
            None => format!("killed by signal {signal}"),
        },
        (None, None) => "ended without an exit code".to_owned(),
    }
}

/// The usual name of a signal number.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// What the ledger held about a child whose end was never recorded.
fn recorded(outcome: &ChildOutcome) -> String {
    let started = if outcome.started_at.is_some() {
        "it had started"
    } else {
        "it never started"
    };
    let calls = calls(outcome.api_calls);
    let exit = match (outcome.exit_code, outcome.signal) {
        (None, None) => "no exit".to_owned(),
        _ => how_it_exited(outcome),
    };
    format!("{started}, {calls}, {exit}")
}

/// `1 call`, `12 calls`.
pub(crate) fn calls(n: u64) -> String {
    if n == 1 {
        "1 call".to_owned()
    } else {
        format!("{n} calls")
    }
}

/// Writes what the child left behind: its output, the tail of its stderr and, for a child that
/// did not end on its own, the tail of its transcript.
fn write_leftovers<W: fmt::Write + ?Sized>(w: &mut W, outcome: &ChildOutcome) -> fmt::Result {
    let mut wrote = false;
    let sections = [
        ("Output:", Some(outcome.result.as_str())),
        ("Stderr (tail):", outcome.stderr_tail.as_deref()),
        ("Transcript (tail):", outcome.transcript_tail.as_deref()),
    ];
    for (label, text) in sections {
        if let Some(text) = text.filter(|t| has_content(t)) {
            writeln!(w, "{label}")?;
            write_quoted(w, text)?;
            wrote = true;
        }
    }
    if !wrote && outcome.status != ChildStatus::Cancelled {
        writeln!(w, "(no output, stderr or transcript recorded)")?;
    }
    Ok(())
}
