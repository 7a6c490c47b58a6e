//! Delegations, outcomes and events to render, with fixed times.

use hermes_formatter::RenderContext;
use hermes_ledger::{
    Channel, ChildOutcome, ChildStatus, DelegationId, DispatchSpec, Event, EventKey, EventPayload,
    EventState, TaskSpec, Timestamp, UnitRecord, UnitStatus,
};

/// 2025-01-01T00:00:00Z, "now" in every test.
pub const NOW: Timestamp = Timestamp(1_735_689_600_000);

/// Rendering at [`NOW`], one hour east of UTC.
pub fn ctx() -> RenderContext {
    RenderContext {
        now: NOW,
        utc_offset_seconds: 3_600,
    }
}

/// A task as dispatched, with only a goal.
pub fn task(goal: &str) -> TaskSpec {
    TaskSpec::new(
        goal,
        vec!["sh".to_owned(), "-c".to_owned(), "true".to_owned()],
    )
}

/// A running background unit with one task per goal, dispatched 42 seconds before [`NOW`].
/// The unit's goal is the first task's for a single child, a summary for a batch.
pub fn delegation(goals: &[&str]) -> UnitRecord {
    let unit_goal = match goals {
        [one] => (*one).to_owned(),
        _ => format!("Survey {} things in parallel", goals.len()),
    };
    UnitRecord {
        id: DelegationId::from_bits(0x0123_4567_89ab),
        session: None,
        channel: Channel::Background,
        spec: DispatchSpec::new(unit_goal, goals.iter().map(|g| task(g)).collect()),
        status: UnitStatus::Running,
        dispatched_at: NOW.minus_ms(42_000),
        started_at: Some(NOW.minus_ms(41_000)),
        ended_at: None,
        host: None,
        queue_seq: None,
        interrupt: None,
        transcript_dir: None,
    }
}

/// An outcome of child `index` that started 41 s and ended 3.4 s later, with a plain result.
pub fn outcome(index: u32, goal: &str, status: ChildStatus) -> ChildOutcome {
    let started = NOW.minus_ms(41_000);
    ChildOutcome {
        exit_code: match status {
            ChildStatus::Completed => Some(0),
            ChildStatus::Failed => Some(1),
            _ => None,
        },
        started_at: Some(started),
        api_calls: 7,
        transcript: format!(
            "/home/u/.hermes/cache/delegation/live/deleg_0123456789ab/task-{index}.log"
        ),
        ..ChildOutcome::new(index, goal, status, started.plus_ms(3_400))
    }
}

/// The `task:N` event of `outcome`, pending, never claimed.
pub fn task_event(delegation: &UnitRecord, outcome: ChildOutcome) -> Event {
    event(
        delegation,
        EventKey::Task(outcome.index),
        EventPayload::Task(outcome),
    )
}

/// The `terminal` event of a unit that ended `status` for `reason`, carrying `children`.
pub fn terminal_event(
    delegation: &UnitRecord,
    status: UnitStatus,
    reason: &str,
    children: Vec<ChildOutcome>,
) -> Event {
    let payload = EventPayload::Terminal {
        unit_status: status,
        reason: reason.to_owned(),
        children,
    };
    event(delegation, EventKey::Terminal, payload)
}

fn event(delegation: &UnitRecord, key: EventKey, payload: EventPayload) -> Event {
    Event {
        delegation_id: delegation.id.clone(),
        key,
        session: delegation.session.clone(),
        delivery: delegation.spec.delivery,
        payload,
        state: EventState::Pending,
        attempts: 0,
        lease: None,
        published_at: NOW.minus_ms(1_000),
        delivered_at: None,
        dropped_at: None,
        drop_reason: None,
    }
}
