//! The session's read-only views: `agents`, `status ID`, `log ID [N]`.

use std::fmt::Write as _;

use hermes_ledger::{
    Child, DelegationId, EventKey, Ledger, Progress, SessionId, Timestamp, UnitRecord,
};
use hermes_registry::{Host, UnitProgress};

use crate::services::color;
use crate::services::home::now;

/// Recent units `agents` shows.
const RECENT: usize = 10;
/// Transcript lines `log` shows per child.
const LOG_LINES: usize = 40;

/// `agents`: running, queued and recent units of the session, with live progress.
pub fn agents(
    ledger: &Ledger,
    host: &Host,
    session: &SessionId,
    max_running: u32,
) -> anyhow::Result<String> {
    let listing = ledger.list(Some(session), RECENT)?;
    let at = now();
    let mut text = format!(
        "running {} · queued {} · at most {max_running} at once in this home\n",
        listing.running.len(),
        listing.queued.len()
    );
    for unit in &listing.running {
        let _ = writeln!(
            text,
            "  {}  {} {}{}",
            unit.id,
            color::status("running", 9),
            hermes_formatter::one_line(&unit.spec.goal, 70),
            placed(unit)
        );
        let live = host.progress(&unit.id).map(|p| p.borrow().clone());
        match live {
            Some(live) => child_lines(&mut text, &live, at),
            None => {
                for child in ledger.children(&unit.id)? {
                    stored_child_line(&mut text, unit, &child, at);
                }
            }
        }
    }
    for (position, unit) in listing.queued.iter().enumerate() {
        let _ = writeln!(
            text,
            "  {}  {} #{} · {}{}",
            unit.id,
            color::status("queued", 9),
            position + 1,
            hermes_formatter::one_line(&unit.spec.goal, 60),
            placed(unit)
        );
    }
    if !listing.recent.is_empty() {
        text.push_str("recent:\n");
        for unit in &listing.recent {
            let age = unit
                .ended_at
                .map(|e| hermes_formatter::human_age(at.ms_since(e)))
                .unwrap_or_default();
            let _ = writeln!(
                text,
                "  {}  {} {:>8} ago · {}",
                unit.id,
                color::status(unit.status.as_str(), 9),
                age,
                hermes_formatter::one_line(&unit.spec.goal, 60)
            );
        }
    }
    Ok(text)
}

/// ` · pool P · worker PID` for a pool unit, nothing otherwise.
fn placed(unit: &UnitRecord) -> String {
    let words = crate::services::reports::placement(unit);
    if words.is_empty() {
        words
    } else {
        format!(" · {words}")
    }
}

fn secs(ms: u64) -> String {
    format!("{}s", ms / 1000)
}

/// When a child ran: its start and, once it ended, its end.
#[derive(Clone, Copy, Debug)]
struct Span {
    started: Option<Timestamp>,
    /// Whether it ended (a child can be seen ended before its end time is known).
    finished: bool,
    ended: Option<Timestamp>,
}

/// A child's status with its times and calls: while it runs, how long it has run and how long
/// it has been quiet, and its tool; once it ended, how long it ran (its end less its start),
/// never a quiet time, which would only grow.
fn describe(status: &str, span: Span, progress: &Progress, at: Timestamp) -> String {
    let mut line = color::status(status, 0);
    let Some(started) = span.started else {
        return line;
    };
    if span.finished {
        if let Some(ended) = span.ended {
            let _ = write!(line, " · {}", secs(ended.ms_since(started)));
        }
        let _ = write!(line, " · {} calls", progress.api_calls);
        return line;
    }
    let quiet = progress.last_activity_at.unwrap_or(started);
    let _ = write!(
        line,
        " · {} · quiet {} · {} calls",
        secs(at.ms_since(started)),
        secs(at.ms_since(quiet)),
        progress.api_calls
    );
    if let Some(tool) = &progress.current_tool {
        let _ = write!(line, " · tool {}", hermes_formatter::one_line(tool, 30));
    }
    line
}

fn child_lines(text: &mut String, live: &UnitProgress, at: Timestamp) {
    let total = live.children.len();
    for child in &live.children {
        let _ = writeln!(
            text,
            "      task {}/{total} {} · {}",
            child.index + 1,
            describe(
                child.status.as_str(),
                Span {
                    started: child.started_at,
                    finished: child.status.is_terminal(),
                    ended: child.ended_at,
                },
                &child.progress,
                at
            ),
            hermes_formatter::one_line(&child.goal, 50)
        );
    }
}

/// A child's times as the ledger holds them.
fn span(child: &Child) -> Span {
    Span {
        started: child.started_at,
        finished: child.status.is_terminal(),
        ended: child.ended_at,
    }
}

fn stored_child_line(text: &mut String, unit: &UnitRecord, child: &Child, at: Timestamp) {
    let goal = unit
        .spec
        .tasks
        .get(child.index as usize)
        .map(|t| hermes_formatter::one_line(&t.goal, 50))
        .unwrap_or_default();
    let _ = writeln!(
        text,
        "      task {}/{} {} · {goal}",
        child.index + 1,
        unit.task_count(),
        describe(child.status.as_str(), span(child), &child.progress, at),
    );
}

/// `status ID`.
pub fn status(ledger: &Ledger, host: &Host, id: &DelegationId) -> anyhow::Result<String> {
    let Some(unit) = ledger.delegation(id)? else {
        return Ok(format!("no delegation {id}\n"));
    };
    let at = now();
    let mut text = format!(
        "{}  {}  session {}\ngoal: {}\ndispatched {} ago",
        unit.id,
        color::status(unit.status.as_str(), 0),
        unit.session.as_ref().map_or("-", |s| s.as_str()),
        hermes_formatter::one_line(&unit.spec.goal, 120),
        hermes_formatter::human_age(at.ms_since(unit.dispatched_at)),
    );
    if let Some(reason) = &unit.interrupt {
        let _ = write!(
            text,
            " · interrupt: {}",
            hermes_formatter::one_line(reason, 60)
        );
    }
    text.push_str(&placed(&unit));
    text.push('\n');
    let live = host.progress(id).map(|p| p.borrow().clone());
    let events = ledger.events(id)?;
    let stalls = ledger.stalls(id)?;
    for child in ledger.children(id)? {
        let (status, span, progress) = match live
            .as_ref()
            .and_then(|l| l.children.iter().find(|c| c.index == child.index))
        {
            Some(c) => (
                c.status,
                Span {
                    started: c.started_at,
                    finished: c.status.is_terminal(),
                    ended: c.ended_at.or(child.ended_at),
                },
                c.progress.clone(),
            ),
            None => (child.status, span(&child), child.progress.clone()),
        };
        let stalling = (!status.is_terminal())
            .then(|| stalls.iter().find(|s| s.index == child.index))
            .flatten();
        let status = match stalling {
            Some(_) => "stalling",
            None => status.as_str(),
        };
        let delivery = events
            .iter()
            .find(|e| {
                e.key == EventKey::Task(child.index)
                    || (e.key == EventKey::Terminal
                        && e.payload.outcomes().iter().any(|o| o.index == child.index))
            })
            .map_or("-", |e| e.state.as_str());
        let _ = writeln!(
            text,
            "  task {} {} · exit {} · delivery {}",
            child.index + 1,
            describe(status, span, &progress, at),
            child.exit_code.map_or("-".to_owned(), |c| c.to_string()),
            delivery
        );
        if let Some(words) = stalling.and_then(|s| crate::services::reports::stall_words(&s.detail))
        {
            let _ = writeln!(text, "    {words}");
        }
        if let Some(t) = &child.transcript {
            let _ = writeln!(text, "    transcript: {t}");
        }
    }
    Ok(text)
}

/// `log ID [N]`: the last lines of task N's transcript (numbered from 1, as displayed), or of
/// every task's.
pub fn log(ledger: &Ledger, id: &DelegationId, task: Option<u32>) -> anyhow::Result<String> {
    if ledger.delegation(id)?.is_none() {
        return Ok(format!("no delegation {id}\n"));
    }
    let children = ledger.children(id)?;
    let chosen: Vec<&Child> = children
        .iter()
        .filter(|c| task.is_none_or(|n| c.index + 1 == n))
        .collect();
    if chosen.is_empty() {
        return Ok(format!(
            "{id} has no task {} (tasks are numbered from 1)\n",
            task.unwrap_or(0)
        ));
    }
    let mut text = String::new();
    for child in chosen {
        let Some(path) = &child.transcript else {
            let _ = writeln!(text, "==> task {}: no transcript <==", child.index + 1);
            continue;
        };
        let body = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                let _ = writeln!(text, "==> {path}: cannot read it: {e} <==");
                continue;
            }
        };
        let lines: Vec<&str> = body.lines().collect();
        let skip = lines.len().saturating_sub(LOG_LINES);
        let _ = writeln!(text, "==> task {}: {path} <==", child.index + 1);
        if skip > 0 {
            let _ = writeln!(text, "… {skip} earlier line(s) omitted");
        }
        for line in &lines[skip..] {
            text.push_str(&hermes_formatter::one_line(line, 400));
            text.push('\n');
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(last: u64, tool: Option<&str>) -> Progress {
        Progress {
            api_calls: 2,
            current_tool: tool.map(str::to_owned),
            last_activity_at: Some(Timestamp(last)),
            ..Progress::default()
        }
    }

    #[test]
    fn a_running_child_shows_its_elapsed_and_quiet_time_and_its_tool() {
        let span = Span {
            started: Some(Timestamp(10_000)),
            finished: false,
            ended: None,
        };
        assert_eq!(
            describe(
                "running",
                span,
                &progress(25_000, Some("grep")),
                Timestamp(30_000)
            ),
            "running · 20s · quiet 5s · 2 calls · tool grep"
        );
    }

    #[test]
    fn a_finished_child_shows_how_long_it_ran_and_no_quiet_time() {
        // A five-second job looked at fifteen seconds after it ended.
        let span = Span {
            started: Some(Timestamp(10_000)),
            finished: true,
            ended: Some(Timestamp(15_000)),
        };
        let p = progress(15_000, Some("grep"));
        assert_eq!(
            describe("completed", span, &p, Timestamp(30_000)),
            "completed · 5s · 2 calls"
        );
        // The same a minute later: nothing grows.
        assert_eq!(
            describe("completed", span, &p, Timestamp(90_000)),
            "completed · 5s · 2 calls"
        );
        // Seen ended before its end time is known: no time rather than a growing one.
        let unknown_end = Span {
            ended: None,
            ..span
        };
        assert_eq!(
            describe("completed", unknown_end, &p, Timestamp(30_000)),
            "completed · 2 calls"
        );
    }

    #[test]
    fn a_child_that_never_started_shows_its_status_alone() {
        let span = Span {
            started: None,
            finished: true,
            ended: Some(Timestamp(1)),
        };
        assert_eq!(
            describe("cancelled", span, &Progress::default(), Timestamp(9)),
            "cancelled"
        );
    }
}
