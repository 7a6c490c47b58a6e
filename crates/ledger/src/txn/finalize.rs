//! Finalizing children inside a transaction: a child's outcome applied to its record, a unit
//! force-finalized in one `terminal` event, and the outcome of a child whose fate is unknown.

use crate::error::Result;
use crate::model::{
    Child, ChildOutcome, ChildStatus, EventKey, EventPayload, ExitDetail, Timestamp, UnitRecord,
    UnitStatus,
};
use crate::store::Writer;
use crate::txn::publish::{Owner, publish_in};

pub(crate) fn apply_outcome(child: &mut Child, outcome: &ChildOutcome) {
    child.status = outcome.status;
    child.ended_at = Some(outcome.ended_at);
    child.exit_code = outcome.exit_code;
    child.signal = outcome.signal;
    child.started_at = child.started_at.or(outcome.started_at);
    child.progress.api_calls = child.progress.api_calls.max(outcome.api_calls);
    child.progress.current_tool = None;
}

/// Force-finalizes `unit` inside `w` (see `Ledger::finish_unit`).
pub(crate) fn force_finish(
    w: &Writer<'_>,
    unit: UnitRecord,
    missing: Vec<ChildOutcome>,
    reason: &str,
    now: Timestamp,
) -> Result<UnitStatus> {
    let mut covered = Vec::new();
    for mut child in w.children(&unit.id)? {
        if child.status.is_terminal() {
            continue;
        }
        let outcome = missing
            .iter()
            .find(|o| o.index == child.index && o.status.is_terminal())
            .cloned()
            .unwrap_or_else(|| unknown_outcome(&unit, &child, reason, now));
        apply_outcome(&mut child, &outcome);
        w.put_child(&child)?;
        covered.push(outcome);
    }
    let statuses: Vec<ChildStatus> = w.children(&unit.id)?.iter().map(|c| c.status).collect();
    let status = UnitStatus::from_children(&statuses);
    if !covered.is_empty() {
        let payload = EventPayload::Terminal {
            unit_status: status,
            reason: reason.to_owned(),
            children: covered,
        };
        publish_in(w, Owner::of(&unit), EventKey::Terminal, payload, now)?;
    }
    w.remove_tally(&unit.id)?;
    let mut unit = unit;
    unit.status = status;
    unit.ended_at = Some(now);
    w.put_delegation(&unit)?;
    Ok(status)
}

/// The outcome recorded for a child whose fate is not known.
pub(crate) fn unknown_outcome(
    unit: &UnitRecord,
    child: &Child,
    reason: &str,
    now: Timestamp,
) -> ChildOutcome {
    let started = child.status == ChildStatus::Running;
    ChildOutcome {
        index: child.index,
        goal: unit.goal_of(child.index).to_owned(),
        status: if started {
            ChildStatus::Unknown
        } else {
            ChildStatus::Cancelled
        },
        exit_code: None,
        signal: None,
        started_at: child.started_at,
        ended_at: now,
        api_calls: child.progress.api_calls,
        result: String::new(),
        stderr_tail: None,
        transcript_tail: None,
        transcript: child.transcript.clone().unwrap_or_default(),
        detail: if started {
            ExitDetail::Unknown {
                reason: reason.to_owned(),
            }
        } else {
            ExitDetail::Cancelled {
                reason: reason.to_owned(),
            }
        },
        model: None,
        usage: None,
        changes: None,
        denials: None,
    }
}
