//! What each hook event does. A hook with nothing to deliver reads only (a
//! binding file, one snapshot of the ledger), writes nothing and prints nothing: it runs after
//! every tool call.
//!
//! A hook never stands between a person and their agent: whatever goes wrong on hermes' side
//! (bad configuration, bad input, no ledger) it exits 1 — for most agents a non-blocking error,
//! shown to the user while the agent goes on — with one `hermes:` line on stderr, having taken
//! nothing. It never exits with the agent's "block" code (2). For an agent that takes *every*
//! non-zero exit as "block", it prints the agent's "go on" answer instead and exits 0,
//! the `hermes:` line still on stderr.

use hermes_ledger::{ProcessId, SessionId};
use hermes_router::RouterError;

use super::agents::{self, Action, Agent, HookBoundary, HookEvent, Start};
use super::input::{self, HookInput};
use crate::args::HookCommand;
use crate::services::binding::{self, Bindings, Naming};
use crate::services::delivery::consume;
use crate::services::exit::{Code, code_of, fail};
use crate::services::home::{Home, env_var, now};
use crate::services::output;
use crate::services::relay::{self, Outcome};
use crate::services::subagents::Subagents;

/// Runs `hermes hook EVENT` (or `hook install`).
pub fn run(command: HookCommand) -> anyhow::Result<Code> {
    let (subcommand, agent) = match command {
        HookCommand::Install(args) => return crate::services::hook_files::install(&args),
        HookCommand::Uninstall(args) => return crate::services::hook_files::uninstall(&args),
        HookCommand::SessionStart(a) => ("session-start", a.agent),
        HookCommand::UserPromptSubmit(a) => ("user-prompt-submit", a.agent),
        HookCommand::PreToolUse(a) => ("pre-tool-use", a.agent),
        HookCommand::PostToolUse(a) => ("post-tool-use", a.agent),
        HookCommand::PostToolUseFailure(a) => ("post-tool-use-failure", a.agent),
        HookCommand::Stop(a) => ("stop", a.agent),
        HookCommand::SessionEnd(a) => ("session-end", a.agent),
    };
    match hook(subcommand, &agent) {
        Ok(code) => Ok(code),
        Err(err) => match agents::find(&agent).and_then(|a| a.fail_open()) {
            Some(go_on) if !matches!(code_of(&err), Code::Ok) => {
                eprintln!("{}", crate::services::exit::one_line(&err));
                output::print_json(&go_on)?;
                Ok(Code::Ok)
            }
            _ => Err(non_blocking(err)),
        },
    }
}

/// Any failure of a hook exits 1 (see the module's documentation); a reader that went away
/// (broken pipe) stays a quiet success.
pub fn non_blocking(err: anyhow::Error) -> anyhow::Error {
    match code_of(&err) {
        Code::Ok | Code::WorkFailed => err,
        _ => fail(Code::WorkFailed, format!("{err:#}")),
    }
}

fn hook(subcommand: &str, agent_name: &str) -> anyhow::Result<Code> {
    let agent = agents::find(agent_name)
        .ok_or_else(|| fail(Code::Usage, format!("unknown agent {agent_name:?}")))?;
    let event = agent.event(subcommand).ok_or_else(|| {
        fail(
            Code::Usage,
            format!("{agent_name} has no hook event for hermes hook {subcommand}"),
        )
    })?;
    let value = input::read_stdin(input::DEADLINE)?;
    let input = HookInput::of(agent, &value);
    tracing::debug!(event = event.name, agent = agent.name, ?input, "hook");
    // A subagent runs inside the main thread's turn: only the main thread's boundaries
    // deliver, so the result reaches the conversation, not a subagent; and a subagent's start
    // or end (Cline's `spawn_agent` runs `TaskStart` under a task id of its own) binds no
    // conversation, or the agent process's MCP server would no longer know whose it is.
    if input.subagent {
        return Ok(Code::Ok);
    }
    let home = Home::load()?;
    // The agent process (a walk up the process tree), and whether a session end is a discard:
    // each worked out once per hook.
    let process = binding::agent_process();
    let discards = event.action == Action::End && ends(&home, &input);
    let sessions = conversation(&home, agent, &input, &event, process, discards)?;
    if inside_subagent(&home, agent, &event, &input, &value, process)? {
        return Ok(Code::Ok);
    }
    match event.action {
        Action::Start => start(&home, &sessions, input.start),
        Action::EnterSubagent(_) => Ok(Code::Ok),
        Action::End if discards => end(&home, &sessions),
        Action::End => Ok(detach(&sessions)),
        Action::Deliver(boundary) => {
            deliver(&home, agent, &event, &sessions, agents::boundary(boundary))
        }
        // What is ready is acknowledged as it is handed over (a block's reason, or the stop's
        // context for an agent that shows a reason twice), so a second stop (with
        // `stop_hook_active`) finds only what arrived since and never keeps the agent going
        // twice on the same.
        Action::Stop => deliver(
            &home,
            agent,
            &event,
            &sessions,
            hermes_formatter::Boundary::Turn,
        ),
    }
}

/// Whether this is a subagent's tool boundary, for an agent whose hooks tell its subagents'
/// calls apart only by coming inside the call of its subagent tool: that call's start enters a
/// subagent, its own tool boundary (the main thread's) leaves it, and a turn boundary closes
/// any left open.
fn inside_subagent(
    home: &Home,
    agent: &Agent,
    event: &HookEvent,
    input: &HookInput,
    value: &serde_json::Value,
    process: ProcessId,
) -> anyhow::Result<bool> {
    let (Some(_), Some(session)) = (agent.subagent_tool(), input.session_id.as_deref()) else {
        return Ok(false);
    };
    let subagents = Subagents::new(&home.dir, process, session);
    match event.action {
        Action::EnterSubagent(_) if agent.calls_subagent_tool(value) => subagents.enter()?,
        Action::EnterSubagent(_) => {}
        Action::Deliver(HookBoundary::Tool) if agent.calls_subagent_tool(value) => {
            subagents.leave()?;
        }
        Action::Deliver(HookBoundary::Tool) => return Ok(subagents.inside()),
        _ => subagents.clear()?,
    }
    Ok(false)
}

/// The sessions of this hook's conversation: `HERMES_SESSION_ID` if set and the input names no
/// other; else the agent's session id, bound to the agent process (with the sessions it
/// adopted).
fn conversation(
    home: &Home,
    profile: &Agent,
    input: &HookInput,
    event: &HookEvent,
    agent: ProcessId,
    discards: bool,
) -> anyhow::Result<Vec<SessionId>> {
    if input.session_id_malformed {
        return Err(fail(
            Code::Usage,
            format!("the hook's {} is not a string", profile.session_field),
        ));
    }
    // An inherited `HERMES_SESSION_ID` is the weaker signal: a session named on stdin that
    // disagrees with it wins (an agent may export its own id process-wide, or run under
    // another conversation's hermes).
    if let Some(id) = env_var("HERMES_SESSION_ID")
        .filter(|s| !s.is_empty())
        .filter(|id| input.session_id.as_ref().is_none_or(|raw| raw == id))
    {
        let id =
            SessionId::new(id).map_err(|e| fail(Code::Usage, format!("HERMES_SESSION_ID: {e}")))?;
        return Ok(vec![id]);
    }
    let Some(raw) = input.session_id.as_deref() else {
        return Err(fail(
            Code::Usage,
            format!(
                "the hook's JSON has no {} and HERMES_SESSION_ID is not set",
                profile.session_field
            ),
        ));
    };
    SessionId::new(raw.to_owned())
        .map_err(|e| fail(Code::Usage, format!("{}: {e}", profile.session_field)))?;
    let bindings = Bindings::new(&home.dir);
    if event.action == Action::End {
        // The conversation's sessions as bound; its record goes with it (kept as detached
        // unless the conversation is discarded).
        return if discards {
            bindings.end(agent, raw)
        } else {
            bindings.detach(agent, raw)
        };
    }
    let naming = match (event.action, input.start) {
        (Action::Start, Some(Start::Fresh | Start::Resume)) => Naming::Start,
        (Action::Start, _) => Naming::OtherStart,
        _ => Naming::Hook,
    };
    Ok(bindings.bind(agent, profile.name, raw, naming)?.sessions())
}

/// A session start: a resumed conversation its agent had ended takes work again (what was
/// dropped at its end stays dropped).
fn start(home: &Home, sessions: &[SessionId], how: Option<Start>) -> anyhow::Result<Code> {
    if how == Some(Start::Resume)
        && let Some(current) = sessions.first()
    {
        let ledger = home.open_ledger_and_sweep()?;
        if ledger
            .session(current)?
            .is_some_and(|s| s.state == hermes_ledger::SessionState::Ended)
            && ledger.reopen_session(current, now())?
        {
            tracing::info!(session = %current, "session resumed by its agent");
        }
    }
    Ok(Code::Ok)
}

/// Claims what is ready at `boundary`, fits it to the agent's budget, prints it as the agent's
/// answer and acknowledges what was printed (the rest waits). Nothing ready: no output. The
/// session's headless host does the claim and the ack when it runs (see `relay`).
fn deliver(
    home: &Home,
    agent: &Agent,
    event: &HookEvent,
    sessions: &[SessionId],
    boundary: hermes_formatter::Boundary,
) -> anyhow::Result<Code> {
    let consumer = format!("hook:{}", std::process::id());
    let answer = |text: &str| output::print_json(&agent.answer(event, text));
    let reader = consume::Reader {
        budget: agent.budget,
        result_tool: agent.result_tool,
    };
    match relay::deliver(&home.dir, sessions, boundary, &consumer, reader, answer)? {
        Outcome::Unavailable => {}
        Outcome::Nothing => return Ok(Code::Ok),
        Outcome::Shown(shown) => {
            tracing::debug!(shown, "hook delivered through the session's host");
            return Ok(Code::Ok);
        }
    }
    let ledger = home.open_ledger_and_sweep()?;
    let take =
        || consume::take_conversation(&ledger, sessions, boundary, &consumer, &home.settings);
    let taken = match take() {
        // A later hook of a conversation its agent ended: the conversation is back.
        Err(RouterError::SessionEnded(id)) => {
            ledger.reopen_session(&id, now())?;
            tracing::info!(session = %id, "session reopened by a later hook");
            take()?
        }
        other => other?,
    };
    let Some(taken) = taken.filter(|t| !t.claimed.is_empty()) else {
        return Ok(Code::Ok);
    };
    let shown = consume::present(&taken.router, taken.claimed, boundary, reader, answer)?;
    tracing::debug!(shown, "hook delivered");
    Ok(Code::Ok)
}

/// Whether a session end ends the conversation's sessions: an explicit discard of the agent's
/// profile does; any other (the agent's process exits) only detaches them, unless the user set
/// `session.on_agent_exit = "end"`.
fn ends(home: &Home, input: &HookInput) -> bool {
    input.discard || home.settings.session.on_agent_exit == hermes_settings::AgentExit::End
}

/// Detaches the conversation's sessions from the agent process that leaves them: nothing is
/// written to the ledger. Their children run on in the session's headless host, their results
/// stay pending, and the conversation's next process (a hook naming the same id) receives them
/// at its first boundary.
fn detach(sessions: &[SessionId]) -> Code {
    for session in sessions {
        tracing::info!(%session, "session detached: its agent process leaves it");
    }
    Code::Ok
}

/// Ends the conversation's sessions: their running units are interrupted, what they never
/// received is dropped, later dispatches into them are refused (until a resume).
fn end(home: &Home, sessions: &[SessionId]) -> anyhow::Result<Code> {
    let ledger = home.open_ledger_and_sweep()?;
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
