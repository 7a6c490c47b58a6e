//! What each hook event does. A hook with nothing to deliver reads only (a binding file, one
//! snapshot of the ledger), writes nothing and prints nothing: it runs after every tool call.

use formatter::Boundary;
use ledger::SessionId;
use serde_json::json;

use super::input::{HookInput, read_stdin};
use crate::args::HookCommand;
use crate::binding::{self, Bindings};
use crate::deliver;
use crate::exit::{Code, fail};
use crate::home::{Home, env_var, now};
use crate::output;

/// Runs `hermes hook EVENT` (or `hook install`).
pub fn run(command: HookCommand) -> anyhow::Result<Code> {
    let event = match command {
        HookCommand::Install(args) => return super::install::run(&args),
        HookCommand::SessionStart => Event::SessionStart,
        HookCommand::UserPromptSubmit => Event::UserPromptSubmit,
        HookCommand::PostToolUse => Event::PostToolUse,
        HookCommand::Stop => Event::Stop,
        HookCommand::SessionEnd => Event::SessionEnd,
    };
    let input = read_stdin()?;
    tracing::debug!(
        ?event,
        hook_event_name = input.hook_event_name.as_deref(),
        cwd = input.cwd.as_deref(),
        tool_name = input.tool_name.as_deref(),
        stop_hook_active = input.stop_hook_active,
        "hook"
    );
    let home = Home::load()?;
    let sessions = conversation(&home, &input, event)?;
    match event {
        Event::SessionStart => Ok(Code::Ok),
        Event::SessionEnd => end(&home, &sessions),
        Event::UserPromptSubmit => deliver(&home, &sessions, Boundary::Turn, |text| {
            json!({"hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": text,
            }})
        }),
        Event::PostToolUse => deliver(&home, &sessions, Boundary::Tool, |text| {
            json!({"hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "additionalContext": text,
            }})
        }),
        // What is ready is acknowledged as it is handed over, so a second stop (with
        // `stop_hook_active`) finds only what arrived since and never blocks twice on the same.
        Event::Stop => deliver(
            &home,
            &sessions,
            Boundary::Turn,
            |text| json!({"decision": "block", "reason": text}),
        ),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    SessionStart,
    UserPromptSubmit,
    PostToolUse,
    Stop,
    SessionEnd,
}

/// The sessions of this hook's conversation: `HERMES_SESSION_ID` if set; else the agent's
/// `session_id`, bound to the agent process (with the provisional sessions the MCP server made
/// before the first hook).
fn conversation(home: &Home, input: &HookInput, event: Event) -> anyhow::Result<Vec<SessionId>> {
    if let Some(id) = env_var("HERMES_SESSION_ID").filter(|s| !s.is_empty()) {
        let id =
            SessionId::new(id).map_err(|e| fail(Code::Usage, format!("HERMES_SESSION_ID: {e}")))?;
        return Ok(vec![id]);
    }
    let Some(raw) = input.session_id.as_deref() else {
        return Err(fail(
            Code::Usage,
            "the hook's JSON has no session_id and HERMES_SESSION_ID is not set",
        ));
    };
    let id = SessionId::new(raw.to_owned())
        .map_err(|e| fail(Code::Usage, format!("session_id: {e}")))?;
    let bindings = Bindings::new(&home.dir);
    let agent = binding::agent_process();
    if event == Event::SessionEnd {
        // The conversation's sessions as bound; the binding goes with the conversation.
        let sessions = match bindings.read(agent) {
            Some(b) if b.agent_session_id.as_deref() == Some(raw) => b.sessions(),
            _ => vec![id],
        };
        bindings.remove(agent)?;
        return Ok(sessions);
    }
    Ok(bindings.bind(agent, raw)?.sessions())
}

/// Claims what is ready at `boundary`, prints it as `answer` makes it, and acknowledges it
/// once written. Nothing ready: no output.
fn deliver(
    home: &Home,
    sessions: &[SessionId],
    boundary: Boundary,
    answer: impl FnOnce(&str) -> serde_json::Value,
) -> anyhow::Result<Code> {
    let ledger = home.ledger()?;
    let consumer = format!("hook:{}", std::process::id());
    let taken = deliver::take_conversation(&ledger, sessions, boundary, &consumer, &home.settings)?;
    if taken.is_empty() {
        return Ok(Code::Ok);
    }
    let text = deliver::text(&taken, boundary);
    let printed = output::print_json(&answer(&text));
    deliver::settle(&ledger, &taken, false, printed.is_ok())?;
    printed?;
    Ok(Code::Ok)
}

/// Ends the conversation's sessions: their running units are interrupted, what they never
/// received is dropped, later dispatches into them are refused.
fn end(home: &Home, sessions: &[SessionId]) -> anyhow::Result<Code> {
    let ledger = home.ledger()?;
    for session in sessions {
        // A conversation that never dispatched anything has no record to end.
        if ledger.session(session)?.is_none() {
            continue;
        }
        let end = ledger.end_session(session, now())?;
        tracing::info!(
            %session,
            interrupted = end.interrupted.len(),
            cancelled = end.cancelled.len(),
            dropped = end.dropped_events,
            "session ended by its agent"
        );
    }
    Ok(Code::Ok)
}
