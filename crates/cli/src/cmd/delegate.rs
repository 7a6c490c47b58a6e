//! `hermes delegate --session S`: background dispatch into a session. The unit is recorded in
//! the ledger for S's host, starting a headless `hermes host --session S` first when S has none.

use hermes_ledger::{
    Channel, DelegationId, Ledger, LedgerError, NewDelegation, SessionId, SessionState, UnitStatus,
};

use crate::args::DelegateArgs;
use crate::services::dispatch::draft::Draft;
use crate::services::exit::{Code, fail, fail_with};
use crate::services::home::{Home, now, session_of};
use crate::services::output;
use crate::services::reports;
use crate::services::session_host;

/// Runs `delegate`.
pub fn run(args: &DelegateArgs) -> anyhow::Result<Code> {
    let session = session_of(args.session.as_deref())?;
    let given = args
        .id
        .as_deref()
        .map(|raw| DelegationId::new(raw).map_err(|e| fail(Code::Usage, format!("--id: {e}"))))
        .transpose()?;
    let spec = Draft::from_args(&args.dispatch)?.build()?;
    crate::services::dispatch::draft::check_programs_here(&spec)?;
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    // The id is drawn before anything is written, so that a failure whose outcome is unknown
    // (the connection broke around COMMIT) can name it, and the caller can look or retry.
    let drawn = given.is_none();
    let id = given.unwrap_or_else(|| ledger.new_delegation_id());
    crate::services::dispatch::workspace::check_branches(&spec, &id)?;
    dispatch(args, &home, &ledger, session, spec, (&id, drawn))
        .map_err(|err| outcome_unknown(err, &id))
}

/// `delegate` once the id is known (`drawn`: by this process, so no unit can have it yet).
fn dispatch(
    args: &DelegateArgs,
    home: &Home,
    ledger: &Ledger,
    session: SessionId,
    spec: hermes_ledger::DispatchSpec,
    (id, drawn): (&DelegationId, bool),
) -> anyhow::Result<Code> {
    let config = home.registry();
    let new = NewDelegation {
        id: Some(id.clone()),
        session: Some(session.clone()),
        channel: Channel::Background,
        spec: spec.clone(),
        host: None,
        transcript_root: None,
    };
    // The usual case first: a session whose host runs, the host found by the dispatch itself
    // (nothing read before it). A re-sent `--id` answers here too, when that host runs.
    if spec.pool.is_none() {
        let reaper = hermes_registry::OsReaper::new();
        if let Some(admission) = hermes_registry::record_dispatch_to_session_host(
            ledger,
            &config,
            new.clone(),
            &reaper,
            now(),
        )? {
            let host_pid = admission.delegation.host.map(|h| h.pid);
            return answer(args, home, ledger, &session, &admission, host_pid);
        }
    }
    // No live host (or a pool unit): the session and its host are read, the session written
    // when it is new, and a host started when it has none.
    let (known, live) =
        ledger.session_with_live_host(&session, &hermes_registry::OsReaper::new(), now())?;
    match known {
        Some(s) if s.state == SessionState::Ended => {
            return Err(LedgerError::SessionEnded(session).into());
        }
        Some(_) => {}
        None => {
            ledger.ensure_session(&session, now())?;
        }
    }
    // The same dispatch sent again under its id, and the first one landed: answer for the unit
    // as it was recorded, without starting a host for it. An id this process drew from 64
    // random bits was recorded by nobody: no read for it (the dispatch's own write still
    // refuses an id taken).
    if !drawn && let Some(admission) = ledger.recorded_dispatch(&new)? {
        let host_pid = admission.delegation.host.map(|h| h.pid);
        return answer(args, home, ledger, &session, &admission, host_pid);
    }
    let (host_pid, admission) = match spec.pool.clone() {
        Some(_) => {
            let admission = hermes_registry::record_dispatch(ledger, &config, new, now())?;
            (None, admission)
        }
        None => {
            let (host, admission) = session_host::into_session_host(
                home,
                ledger,
                &config,
                &session,
                spec,
                Some(id.clone()),
                Some(live),
            )?;
            (Some(host.pid), admission)
        }
    };
    answer(args, home, ledger, &session, &admission, host_pid)
}

/// A ledger failure of `delegate`: whether the unit was recorded is not known (the connection
/// may have broken after `COMMIT` reached the server), so the error names the id it was to be
/// recorded under — on stderr, and as a JSON object on stdout with `--json`.
fn outcome_unknown(err: anyhow::Error, id: &DelegationId) -> anyhow::Error {
    if crate::services::exit::code_of(&err) != Code::LedgerUnavailable {
        return err;
    }
    let cause = crate::services::exit::one_line(&err);
    let cause = cause.strip_prefix("hermes: ").unwrap_or(&cause);
    let message = format!(
        "{cause}; delegation {id} may or may not have been recorded: look with `hermes delegation status {id}`, or send the same dispatch again with `--id {id}` (a no-op if it was)"
    );
    let mut details = serde_json::Map::new();
    details.insert("delegation_id".into(), id.to_string().into());
    details.insert("recorded".into(), "unknown".into());
    fail_with(Code::LedgerUnavailable, message, details)
}

/// What `delegate` answers for a recorded unit (now, or by an earlier attempt under its id).
fn answer(
    args: &DelegateArgs,
    home: &Home,
    ledger: &Ledger,
    session: &SessionId,
    admission: &hermes_ledger::Admission,
    host_pid: Option<u32>,
) -> anyhow::Result<Code> {
    let unit = &admission.delegation;
    let transcripts: Vec<String> =
        hermes_registry::transcript::task_logs(&home.registry().transcript_root, unit)
            .iter()
            .map(|path| path.display().to_string())
            .collect();
    let workers = match unit.pool() {
        Some(pool) => {
            let workers = reports::live_workers(ledger, pool)?;
            if workers == 0 {
                eprintln!(
                    "hermes: no live worker serves pool {pool}; {} waits until one starts (hermes worker --pool {pool})",
                    unit.id
                );
            }
            Some(workers)
        }
        None => None,
    };
    if args.json {
        let mut value = reports::dispatch_json(
            unit,
            session,
            &transcripts,
            admission.queue_position,
            host_pid,
            workers,
        );
        if let serde_json::Value::Object(map) = &mut value {
            map.insert(
                "already_recorded".into(),
                serde_json::json!(admission.already_recorded),
            );
            map.insert(
                "on_agent_exit".into(),
                session_host::exit_note(&home.settings, true).into(),
            );
        }
        output::print_json(&value)?;
        return Ok(Code::Ok);
    }
    let status = if unit.status == UnitStatus::Queued {
        "queued"
    } else {
        "dispatched"
    };
    let mut head = match (unit.pool(), workers) {
        (Some(pool), Some(workers)) => format!(
            "{} queued in pool {pool} for session {session}: {} task(s), {workers} live worker(s)",
            unit.id,
            unit.task_count()
        ),
        _ => format!(
            "{} {status} into session {session}: {} task(s)",
            unit.id,
            unit.task_count()
        ),
    };
    if admission.already_recorded {
        head.push_str(&format!(
            " (already recorded by an earlier dispatch under this id; now {})",
            unit.status.as_str()
        ));
    }
    output::print(&dispatch_text(
        head,
        admission.queue_position,
        &transcripts,
        session,
    ))?;
    Ok(Code::Ok)
}

/// What a dispatch says in text: `head`, its queue position, its transcripts, where results go.
fn dispatch_text(
    mut text: String,
    queue_position: Option<u32>,
    transcripts: &[String],
    session: &SessionId,
) -> String {
    if let Some(pos) = queue_position {
        text.push_str(&format!(", queue position {pos}"));
    }
    text.push('\n');
    for t in transcripts {
        text.push_str(&format!("  live transcript: {t}\n"));
    }
    text.push_str(&format!("  results: hermes drain --session {session}\n"));
    text
}
