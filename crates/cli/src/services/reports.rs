//! Views of delegations shared by the front-ends: the JSON of `delegation list/status --json`,
//! the dispatch handle of `delegate --json` and the MCP tools (the same shapes), and the text of
//! a stop (`delegation stop` and the interactive session's `stop`, one function).

use hermes_ledger::{
    Child, ChildOutcome, Event, EventKey, EventState, ExitDetail, Interrupts, Ledger, Listing,
    SessionId, Stalling, UnitRecord,
};
use serde_json::{Value, json};

use crate::services::output::time;

pub fn unit_json(u: &UnitRecord) -> Value {
    json!({
        "delegation_id": u.id.to_string(),
        "session": u.session.as_ref().map(|s| s.to_string()),
        "status": u.status.as_str(),
        "channel": match u.channel { hermes_ledger::Channel::Background => "background", hermes_ledger::Channel::Inline => "inline" },
        "goal": u.spec.goal,
        "group": u.spec.group,
        "delivery": u.spec.delivery.as_str(),
        "tasks": u.task_count(),
        "dispatched_at": time(Some(u.dispatched_at)),
        "started_at": time(u.started_at),
        "ended_at": time(u.ended_at),
        "host_pid": u.host.map(|h| h.pid),
        "pool": u.pool(),
        "worker": worker_of(u).map(|pid| json!({ "pid": pid })),
        "interrupt": u.interrupt,
        "workspace": u.spec.workspace.as_str(),
        "sandbox": {
            "mode": u.spec.sandbox.mode.as_str(),
            "network": {
                "commands": u.spec.sandbox.commands_network,
                "agents": u.spec.sandbox.agents_network,
            },
        },
    })
}

/// The pid of the worker that runs (or ran) a pool unit; `None` while it waits in its pool.
pub fn worker_of(u: &UnitRecord) -> Option<u32> {
    u.pool().and(u.host).map(|h| h.pid)
}

/// Where a pool unit runs, in words for text views: `pool P · worker PID`, `pool P · waiting
/// for a worker`; empty for a unit of the session's own host.
pub fn placement(u: &UnitRecord) -> String {
    match (u.pool(), worker_of(u)) {
        (None, _) => String::new(),
        (Some(pool), Some(pid)) => format!("pool {pool} · worker {pid}"),
        (Some(pool), None) if u.status.is_terminal() => format!("pool {pool}"),
        (Some(pool), None) => format!("pool {pool} · waiting for a worker"),
    }
}

/// How many live workers serve `pool`.
pub fn live_workers(ledger: &Ledger, pool: &str) -> anyhow::Result<usize> {
    Ok(ledger
        .workers(
            Some(pool),
            &hermes_registry::OsReaper::new(),
            crate::services::home::now(),
        )?
        .len())
}

/// The event that carries child `index`'s outcome, and the outcome.
pub(crate) fn outcome_of(events: &[Event], index: u32) -> Option<(&Event, &ChildOutcome)> {
    events
        .iter()
        .filter(|e| e.key == EventKey::Task(index) || e.key == EventKey::Terminal)
        .find_map(|e| {
            e.payload
                .outcomes()
                .iter()
                .find(|o| o.index == index)
                .map(|o| (e, o))
        })
}

/// What a status view shows for a child: `stalling` while a child found stalling waits out its
/// grace period (its row still says running), else its recorded status.
pub(crate) fn shown_status(child: &Child, stalls: &[Stalling]) -> &'static str {
    if !child.status.is_terminal() && stalling_of(stalls, child.index).is_some() {
        "stalling"
    } else {
        child.status.as_str()
    }
}

pub(crate) fn stalling_of(stalls: &[Stalling], index: u32) -> Option<&Stalling> {
    stalls.iter().find(|s| s.index == index)
}

/// The stall fields of a stalling or stalled child in words, for text views.
pub(crate) fn stall_words(detail: &ExitDetail) -> Option<String> {
    match detail {
        ExitDetail::Stalled {
            stalled_after_quiet_seconds,
            stall_threshold_seconds,
            stall_phase,
            stall_grace_seconds,
        } => Some(format!(
            "stalled after {stalled_after_quiet_seconds:.1} s quiet ({} threshold {stall_threshold_seconds} s); SIGTERM sent, SIGKILL after {stall_grace_seconds} s grace",
            stall_phase.as_str()
        )),
        _ => None,
    }
}

/// How the child ended beyond its status, or its stall fields while it is stalling.
pub(crate) fn detail_of<'a>(
    child: &Child,
    found: Option<&'a ChildOutcome>,
    stalls: &'a [Stalling],
) -> Option<&'a ExitDetail> {
    match found {
        Some(outcome) => Some(&outcome.detail),
        None if !child.status.is_terminal() => stalling_of(stalls, child.index).map(|s| &s.detail),
        None => None,
    }
}

pub fn child_json(
    unit: &UnitRecord,
    child: &Child,
    events: &[Event],
    stalls: &[Stalling],
    at: hermes_ledger::Timestamp,
) -> Value {
    let task = unit.spec.tasks.get(child.index as usize);
    let goal = unit.goal_of(child.index);
    let found = outcome_of(events, child.index);
    let usage = found.and_then(|(_, o)| o.usage.as_ref()).map(|u| {
        json!({
            "input_tokens": u.input_tokens,
            "cached_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens,
            "cost_usd": u.cost_usd,
        })
    });
    let model = found
        .and_then(|(_, o)| o.model.clone())
        .or_else(|| task.and_then(|t| t.model.clone()));
    let duration = match (child.started_at, child.ended_at) {
        (Some(s), Some(e)) => Some(e.ms_since(s) as f64 / 1000.0),
        (Some(s), None) => Some(at.ms_since(s) as f64 / 1000.0),
        _ => found.map(|(_, o)| o.duration_seconds()),
    };
    let last = child.progress.last_activity_at.or(child.started_at);
    let quiet = (!child.status.is_terminal())
        .then(|| last.map(|l| at.ms_since(l) as f64 / 1000.0))
        .flatten();
    let delivery = found.map(|(e, _)| {
        // A delivered event keeps the lease of the claim that acked it: only a claimed one's
        // is a live claim.
        let lease = e.lease.as_ref().filter(|_| e.state == EventState::Claimed);
        json!({
            "event_key": e.key.to_string(),
            "state": e.state.as_str(),
            "attempts": e.attempts,
            "consumer": lease.map(|l| l.consumer.clone()),
            "lease_expires_at": time(lease.map(|l| l.expires_at)),
            "delivered_at": time(e.delivered_at),
            "drop_reason": e.drop_reason.as_ref().map(|r| r.as_str().to_owned()),
        })
    });
    let detail =
        detail_of(child, found.map(|(_, o)| o), stalls).and_then(hermes_formatter::DetailJson::new);
    let workspace = workspace_json(unit, child, found.map(|(_, o)| o));
    json!({
        "index": child.index,
        "goal": goal,
        "status": shown_status(child, stalls),
        "detail": detail,
        "stalling_since": time(
            (!child.status.is_terminal())
                .then(|| stalling_of(stalls, child.index).map(|s| s.since))
                .flatten()
        ),
        "pid": child.process.map(|p| p.pid),
        "started_at": time(child.started_at),
        "ended_at": time(child.ended_at),
        "exit_code": child.exit_code,
        "signal": child.signal,
        "duration_seconds": duration,
        "progress": {
            "api_calls": child.progress.api_calls,
            "current_tool": child.progress.current_tool,
            "output_bytes": child.progress.output_bytes,
            "last_activity_at": time(child.progress.last_activity_at),
            "quiet_seconds": quiet,
        },
        "transcript": child.transcript,
        "machine": child.machine,
        "recording": recording(child),
        "result": found.map(|(_, o)| o.result.clone()),
        "transcript_tail": found.and_then(|(_, o)| o.transcript_tail.clone()),
        "delivery": delivery,
        "agent": task.and_then(|t| t.agent.clone()),
        "model": model,
        "usage": usage,
        "workspace": workspace,
        "sandbox": sandbox_json(unit.spec.sandbox, task.is_some_and(|t| t.agent.is_some())),
        "denials": found.map(|(_, o)| o.denied().len()).unwrap_or(0),
        "denied": found.map(|(_, o)| o.denied()).unwrap_or_default(),
    })
}

/// A child's sandbox: `{mode, network}` (an agent child's network is the agents' setting).
pub fn sandbox_json(sandbox: hermes_ledger::Sandbox, agent: bool) -> Value {
    json!({ "mode": sandbox.mode.as_str(), "network": sandbox.network(agent) })
}

/// A worktree child's `workspace`: what it changed once it ended
/// (`{branch, base, head, commits, files_changed, insertions, deletions, path}`), its branch
/// while it runs; `null` for a unit without worktrees.
fn workspace_json(unit: &UnitRecord, child: &Child, outcome: Option<&ChildOutcome>) -> Value {
    if let Some(changes) = outcome.and_then(|o| o.changes.as_deref()) {
        return serde_json::to_value(hermes_formatter::WorkspaceJson::new(changes))
            .unwrap_or(Value::Null);
    }
    if unit.spec.workspace != hermes_ledger::Workspace::Worktree {
        return Value::Null;
    }
    json!({ "branch": hermes_registry::workspace::branch_name(&unit.id, child.index) })
}

/// What `delegation status` says of recording a child's outcome: `"retrying since …: why"`
/// while its host, on this machine, keeps failing to record the outcome of a child that
/// finished; `None` otherwise, and always on another machine (the host keeps it
/// beside the transcript).
pub fn recording(child: &Child) -> Option<String> {
    if child.status.is_terminal() {
        return None;
    }
    let kept = hermes_registry::unrecorded::read(child.transcript.as_deref()?, child.index)?;
    Some(kept.describe())
}

/// `delegation list --json`: running, queued and recent units with their counts.
pub fn list_json(listing: &Listing, max_concurrent_children: u32) -> Value {
    json!({
        "running": listing.running.iter().map(unit_json).collect::<Vec<_>>(),
        "queued": listing.queued.iter().map(unit_json).collect::<Vec<_>>(),
        "recent": listing.recent.iter().map(unit_json).collect::<Vec<_>>(),
        "running_count": listing.running.len(),
        "queued_count": listing.queued.len(),
        "recent_count": listing.recent_total,
        "recent_count_capped": listing.recent_more,
        "max_concurrent_children": max_concurrent_children,
    })
}

/// `delegation status --json`: the unit, its children (progress, result, delivery) and its
/// events.
pub fn status_json(
    ledger: &Ledger,
    unit: &UnitRecord,
    children: &[Child],
    at: hermes_ledger::Timestamp,
) -> hermes_ledger::Result<Value> {
    let events = ledger.events(&unit.id)?;
    let stalls = ledger.stalls(&unit.id)?;
    let tasks: Vec<Value> = children
        .iter()
        .map(|c| child_json(unit, c, &events, &stalls, at))
        .collect();
    let mut value = unit_json(unit);
    if let Value::Object(map) = &mut value {
        // A worker is named by pid and machine: pids mean nothing across machines.
        if let Some(Value::Object(worker)) = map.get_mut("worker") {
            let machine = children.iter().find_map(|c| c.machine.clone());
            worker.insert("machine".into(), json!(machine));
        }
        map.insert("tasks".into(), Value::Array(tasks));
        map.insert(
            "events".into(),
            Value::Array(
                events
                    .iter()
                    .map(|e| {
                        json!({
                            "event_key": e.key.to_string(),
                            "state": e.state.as_str(),
                            "attempts": e.attempts,
                            "published_at": time(Some(e.published_at)),
                        })
                    })
                    .collect(),
            ),
        );
    }
    Ok(value)
}

/// The dispatch handle of `delegate --json` and of a background `delegate_task`.
pub fn dispatch_json(
    unit: &UnitRecord,
    session: &SessionId,
    transcripts: &[String],
    queue_position: Option<u32>,
    host_pid: Option<u32>,
    workers: Option<usize>,
) -> Value {
    let status = if unit.status == hermes_ledger::UnitStatus::Queued {
        "queued"
    } else {
        "dispatched"
    };
    let mut value = json!({
        "status": status,
        "delegation_id": unit.id.to_string(),
        "session": session.to_string(),
        "mode": "background",
        "tasks": unit.task_count(),
        "live_transcripts": transcripts,
        "queue_position": queue_position,
        "host_pid": host_pid,
    });
    if let (Some(pool), Value::Object(map)) = (unit.pool(), &mut value) {
        map.insert("pool".into(), json!(pool));
        map.insert("workers".into(), json!(workers.unwrap_or(0)));
    }
    value
}

/// How a stop report words what happened to each unit.
#[derive(Clone, Copy, Debug)]
pub enum StopWording<'a> {
    /// `hermes delegation stop`: `ID: stopping (REASON)`, `ID: cancelled (REASON)`.
    WithReason(&'a str),
    /// The interactive session's `stop`: `ID: stopping`, `ID: cancelled while queued`.
    Plain,
}

/// The text of an interrupt request's outcome: one line per unit flagged (its host stops it),
/// then one per queued unit cancelled, or `nothing to stop`.
pub fn stop_text(done: &Interrupts, wording: StopWording<'_>) -> String {
    let (stopping, cancelled) = match wording {
        StopWording::WithReason(reason) => (
            format!("stopping ({reason})"),
            format!("cancelled ({reason})"),
        ),
        StopWording::Plain => ("stopping".to_owned(), "cancelled while queued".to_owned()),
    };
    let mut text = String::new();
    for id in &done.flagged {
        text.push_str(&format!("{id}: {stopping}\n"));
    }
    for id in &done.cancelled {
        text.push_str(&format!("{id}: {cancelled}\n"));
    }
    if text.is_empty() {
        text.push_str("nothing to stop\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use hermes_ledger::{DelegationId, Interrupts};

    use super::{StopWording, stop_text};

    fn done() -> Interrupts {
        let id = |raw: &str| DelegationId::new(raw).expect("a valid id");
        Interrupts {
            flagged: vec![id("deleg_000000000001")],
            cancelled: vec![id("deleg_000000000002")],
        }
    }

    #[test]
    fn a_stop_report_names_the_reason_on_the_command_line() {
        assert_eq!(
            stop_text(&done(), StopWording::WithReason("stopped_by_user")),
            "deleg_000000000001: stopping (stopped_by_user)\n\
             deleg_000000000002: cancelled (stopped_by_user)\n"
        );
    }

    #[test]
    fn a_stop_report_in_the_session_says_a_queued_unit_was_cancelled_while_queued() {
        assert_eq!(
            stop_text(&done(), StopWording::Plain),
            "deleg_000000000001: stopping\ndeleg_000000000002: cancelled while queued\n"
        );
    }

    #[test]
    fn a_stop_report_of_nothing_says_so() {
        assert_eq!(
            stop_text(&Interrupts::default(), StopWording::Plain),
            "nothing to stop\n"
        );
    }
}
