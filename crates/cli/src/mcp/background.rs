//! `delegate_task` in the background. A named conversation's unit (its hooks bound it, or
//! `HERMES_SESSION_ID`) goes to the session's headless host, started for it as `hermes
//! delegate` starts one, so the children outlive this server: a client that closes (stdin
//! closed, then SIGTERM, as the MCP SDKs do) stops none of them, and a resumed conversation gets
//! their results. A provisional session's unit runs in this server, and ends with it.

use hermes_registry::DispatchRequest;

use super::conversation::Sessions;
use super::tools::{Tools, blocking, ok_json, tool_error};
use crate::services::reports;

/// What the dispatch answer says when no hook of the conversation has reached hermes: for an
/// agent hermes recognizes, what its installer says to do next (hooks it skips silently until
/// they are reviewed, say); else the agents listed from the table.
pub fn no_binding(agent: Option<&hermes_agents::Agent>) -> String {
    let fix = match agent {
        Some(a) => format!(
            "hermes hook install {} registers them; then {}",
            a.name,
            a.install.advice.replace("{project}", "the project")
        ),
        None => format!(
            "install the hooks: hermes hook install {}",
            hermes_agents::names("or")
        ),
    };
    format!(
        "no hook of this conversation has reached hermes, so this result cannot arrive by itself: collect it with delegation_results (to have results handed over by themselves, {fix})"
    )
}

/// What the dispatch answer says when the agent has no tool boundary for `inject`.
fn inject_note(agent: &str) -> String {
    format!(
        "{agent} has no hook after a tool call that can add context, so result_delivery inject is delivered as after_turn: the result arrives at the next turn boundary"
    )
}

/// Dispatches `spec` in the background into the conversation's current session.
pub async fn background(
    tools: &Tools,
    sessions: Sessions,
    mut spec: hermes_ledger::DispatchSpec,
) -> super::tools::ToolResult {
    // A session's unit runs on this machine: a program it cannot find is refused now.
    if let Err(e) = crate::services::dispatch::draft::check_programs_here(&spec) {
        return tool_error(&e);
    }
    let session = sessions.current.clone();
    let fallback = if spec.delivery == hermes_ledger::DeliveryMode::Inject {
        let conversation = tools.conversation.clone();
        blocking(move || Ok(conversation.agent()))
            .await
            .ok()
            .flatten()
            .filter(|agent| hermes_agents::inject_falls_back(agent))
    } else {
        None
    };
    if fallback.is_some() {
        spec.delivery = hermes_ledger::DeliveryMode::AfterTurn;
    }
    let pooled = spec.pool.clone();
    // A named session's unit runs in its headless host, a pool's in a worker: neither is this
    // server.
    let outlives = sessions.named || pooled.is_some();
    let (unit, transcripts, queue_position, host_pid) = if sessions.named && pooled.is_none() {
        let home = tools.home.clone();
        let ledger = tools.conversation.ledger().clone();
        let s = session.clone();
        let recorded = blocking(move || {
            let config = home.registry();
            let (host, admission) = crate::services::session_host::into_session_host(
                &home, &ledger, &config, &s, spec, None, None,
            )?;
            let transcripts: Vec<String> = hermes_registry::transcript::task_logs(
                &config.transcript_root,
                &admission.delegation,
            )
            .iter()
            .map(|path| path.display().to_string())
            .collect();
            Ok((admission, transcripts, host))
        })
        .await;
        match recorded {
            Ok((a, t, host)) => (a.delegation, t, a.queue_position, Some(host.pid)),
            Err(e) => return tool_error(&e),
        }
    } else {
        let dispatched = tools
            .host
            .dispatch(DispatchRequest::background(session.clone(), spec))
            .await;
        match dispatched {
            Ok(d) => {
                let t = d
                    .transcripts
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                let pid = pooled.is_none().then(|| tools.host.process().pid);
                (d.delegation, t, d.queue_position, pid)
            }
            Err(e) => return tool_error(&anyhow::Error::new(e)),
        }
    };
    let workers = match pooled {
        Some(pool) => {
            let conversation = tools.conversation.clone();
            blocking(move || reports::live_workers(conversation.ledger(), &pool))
                .await
                .ok()
        }
        None => None,
    };
    let mut answer = reports::dispatch_json(
        &unit,
        &session,
        &transcripts,
        queue_position,
        host_pid,
        workers,
    );
    annotate(
        tools,
        sessions.named,
        outlives,
        fallback.as_deref(),
        &mut answer,
    )
    .await;
    ok_json(&answer)
}

/// What the dispatch answer says besides the dispatch: what the agent's exit does to it, why
/// results cannot arrive by themselves (no hook named the conversation), and where an `inject`
/// result arrives instead for an agent without a tool boundary.
async fn annotate(
    tools: &Tools,
    named: bool,
    outlives: bool,
    fallback: Option<&str>,
    answer: &mut serde_json::Value,
) {
    let serde_json::Value::Object(map) = answer else {
        return;
    };
    let note = crate::services::session_host::exit_note(&tools.home.settings, outlives);
    map.insert("on_agent_exit".into(), note.into());
    if !named {
        let conversation = tools.conversation.clone();
        let agent = blocking(move || Ok(conversation.profile()))
            .await
            .ok()
            .flatten();
        map.insert("warning".into(), no_binding(agent).into());
    }
    if let Some(agent) = fallback {
        map.insert("note".into(), inject_note(agent).into());
    }
}
