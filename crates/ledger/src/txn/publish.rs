//! Publishing an event inside a transaction: idempotent per key, recorded already dropped when
//! its session ended ([`Owner`] says what publishing needs to know of the event's unit).

use crate::error::Result;
use crate::model::{
    DelegationId, DeliveryMode, DropReason, Event, EventKey, EventPayload, EventState, ExitDetail,
    Published, SessionId, SessionState, Timestamp, UnitRecord,
};
use crate::rules;
use crate::store::Writer;
use crate::txn::sessions::SESSION_END;

/// Who an event belongs to: what publishing it needs to know about its unit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner<'a> {
    pub(crate) id: &'a DelegationId,
    pub(crate) session: Option<&'a SessionId>,
    pub(crate) delivery: DeliveryMode,
}

impl<'a> Owner<'a> {
    pub(crate) fn of(unit: &'a UnitRecord) -> Owner<'a> {
        Owner {
            id: &unit.id,
            session: unit.session.as_ref(),
            delivery: unit.spec.delivery,
        }
    }
}

/// Publishes inside `w`: idempotent per key. An event of an ended session is recorded already
/// dropped (`session_ended`), so it is readable but never offered.
pub(crate) fn publish_in(
    w: &Writer<'_>,
    unit: Owner<'_>,
    key: EventKey,
    payload: EventPayload,
    now: Timestamp,
) -> Result<Published> {
    let event = event_of(w, unit, key, payload, now)?;
    Ok(if w.insert_event(&event)? {
        Published::Inserted
    } else {
        Published::AlreadyPresent
    })
}

/// [`publish_in`] for a caller that does not ask whether the event was there already (a
/// child's finish: its record said it was not finished): the backend may hold the insert
/// until the commit and send a transaction's events in one statement.
pub(crate) fn add_in(
    w: &Writer<'_>,
    unit: Owner<'_>,
    key: EventKey,
    payload: EventPayload,
    now: Timestamp,
) -> Result<()> {
    let event = event_of(w, unit, key, payload, now)?;
    w.add_event(&event)
}

/// The event [`publish_in`] records: pending, or dropped when its session ended.
fn event_of(
    w: &Writer<'_>,
    unit: Owner<'_>,
    key: EventKey,
    payload: EventPayload,
    now: Timestamp,
) -> Result<Event> {
    let mut event = Event {
        delegation_id: unit.id.clone(),
        key,
        session: unit.session.cloned(),
        delivery: unit.delivery,
        payload,
        state: EventState::Pending,
        attempts: 0,
        lease: None,
        published_at: now,
        delivered_at: None,
        dropped_at: None,
        drop_reason: None,
    };
    // An outcome of a child its session's end interrupted belongs to the run that ended: it is
    // dropped like the session's pending events were, even when the session was reopened
    // (resumed) before the child's end was recorded.
    let ended_with_its_session = ended_with_its_session(&event.payload);
    let session_ended = match unit.session {
        Some(session) => w
            .session(session)?
            .is_some_and(|s| s.state == SessionState::Ended),
        None => false,
    };
    if ended_with_its_session || session_ended {
        rules::drop_event(&mut event, DropReason::SessionEnded, now);
    }
    Ok(event)
}

/// Whether `payload` says its session's end interrupted it: then it belongs to the run that
/// ended, and is dropped like the session's pending events were, even when the session was
/// reopened (resumed) before the child's end was recorded.
pub(crate) fn ended_with_its_session(payload: &EventPayload) -> bool {
    match payload {
        EventPayload::Task(outcome) => {
            matches!(&outcome.detail, ExitDetail::Interrupted { reason } if reason == SESSION_END)
        }
        EventPayload::Terminal { reason, .. } => reason == SESSION_END,
    }
}
