//! `hermes session list|end`.

use ledger::SessionId;
use serde_json::json;

use crate::args::SessionCommand;
use crate::exit::{Code, fail};
use crate::home::{Home, now};
use crate::output;

/// Runs a `session` subcommand.
pub fn run(command: SessionCommand) -> anyhow::Result<Code> {
    let home = Home::load()?;
    match command {
        SessionCommand::List { json } => {
            let ledger = home.ledger()?;
            let sessions = ledger.sessions()?;
            if json {
                output::print_json(&json!({
                    "sessions": sessions.iter().map(|s| json!({
                        "id": s.id.to_string(),
                        "state": s.state.as_str(),
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
                        "{:<24} {:<6} host {:<7} running {} queued {} pending {}\n",
                        s.id.as_str(),
                        s.state.as_str(),
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
        SessionCommand::End { session } => {
            let id = SessionId::new(session).map_err(|e| fail(Code::Usage, e.to_string()))?;
            let ledger = home.ledger()?;
            let end = ledger.end_session(&id, now())?;
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
            output::print(&text)?;
        }
    }
    Ok(Code::Ok)
}
