//! `hermes session list|end`. A session is `active`, `detached` (its agent process left it
//! without discarding it: see `services/binding.rs`) or `ended`.

use hermes_ledger::{HostKind, SessionEnd, SessionId, SessionState};
use serde_json::json;

use crate::args::SessionCommand;
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};
use crate::services::output;

/// Runs a `session` subcommand.
pub fn run(command: SessionCommand) -> anyhow::Result<Code> {
    let home = Home::load()?;
    match command {
        SessionCommand::List { json } => {
            let ledger = home.open_ledger_and_sweep()?;
            let sessions = ledger.sessions()?;
            let detached = crate::services::binding::Bindings::new(&home.dir).detached();
            // An active session that its agent process left (without discarding it) is shown
            // `detached`: its work goes on and its results wait for the conversation's return.
            let state = |s: &hermes_ledger::SessionSummary| match s.state {
                SessionState::Active if detached.contains(s.id.as_str()) => "detached",
                state => state.as_str(),
            };
            if json {
                output::print_json(&json!({
                    "sessions": sessions.iter().map(|s| json!({
                        "id": s.id.to_string(),
                        "state": state(s),
                        "host_pid": s.host_pid,
                        "running": s.running,
                        "queued": s.queued,
                        "pending": s.pending,
                    })).collect::<Vec<_>>(),
                }))?;
            } else {
                let mut text = String::new();
                for s in &sessions {
                    text.push_str(&format!(
                        "{:<24} {:<8} host {:<7} running {} queued {} pending {}\n",
                        s.id.as_str(),
                        state(s),
                        s.host_pid.map_or("-".to_owned(), |p| p.to_string()),
                        s.running,
                        s.queued,
                        s.pending
                    ));
                }
                if sessions.is_empty() {
                    text.push_str("no sessions\n");
                }
                output::print(&text)?;
            }
        }
        SessionCommand::End { session, json } => {
            end(&home, session, json)?;
        }
    }
    Ok(Code::Ok)
}

/// `session end S`: the session ends (running units interrupted, queued ones cancelled,
/// undelivered results dropped) and its headless host, when it runs in this locality, is asked
/// to stop at once: it finalizes its interrupted units and unregisters. A host elsewhere sees
/// its units interrupted; it leaves by its idle exit at the latest.
fn end(home: &Home, session: String, json: bool) -> anyhow::Result<()> {
    let id = SessionId::new(session).map_err(|e| fail(Code::Usage, e.to_string()))?;
    let ledger = home.open_ledger_and_sweep()?;
    let end = ledger.end_session(&id, now())?;
    let headless = end.host.as_ref().filter(|h| h.kind == HostKind::Headless);
    let stopping = headless.is_some_and(hermes_registry::procs::stop_host);
    if json {
        return output::print_json(&end_json(&id, &end, stopping));
    }
    let text = if end.already_ended {
        format!("session {id} had already ended\n")
    } else {
        format!(
            "session {id} ended: {} running unit(s) stopping, {} queued cancelled, {} undelivered result(s) dropped\n",
            end.interrupted.len(),
            end.cancelled.len(),
            end.dropped_events
        )
    };
    output::print(&text)
}

/// The JSON answer of `session end --json`.
fn end_json(id: &SessionId, end: &SessionEnd, host_stopping: bool) -> serde_json::Value {
    let ids = |units: &[hermes_ledger::DelegationId]| {
        units.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    json!({
        "session": id.to_string(),
        "state": "ended",
        "already_ended": end.already_ended,
        "interrupted": ids(&end.interrupted),
        "cancelled": ids(&end.cancelled),
        "dropped_results": end.dropped_events,
        "host_pid": end.host.as_ref().map(|h| h.process.pid),
        "host_stopping": host_stopping,
    })
}
