//! Fail-closed ownership: an event is offered only to a consumer of its own parent session.
//!
//! Anything that does not positively match is refused: an event of another session, an event
//! with no session (an inline unit's), an event whose unit names another session, and every
//! event of a session that has ended or that the ledger does not know.

use hermes_ledger::{Event, Session, SessionId, SessionState, UnitRecord};

/// Whether a consumer of a session may be offered anything at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The session is active: its own events may be offered.
    Open,
    /// The session has ended: nothing is offered, its events are dropped.
    Ended,
    /// The ledger has no record of the session (or the record is for another id): nothing is
    /// offered.
    Unknown,
}

/// What a consumer of `consumer` may receive, given the ledger's record of that session.
pub fn access(consumer: &SessionId, record: Option<&Session>) -> Access {
    match record {
        Some(session) if session.id != *consumer => Access::Unknown,
        Some(session) => match session.state {
            SessionState::Active => Access::Open,
            SessionState::Ended => Access::Ended,
        },
        None => Access::Unknown,
    }
}

/// Whether `event` (of `unit`, when its record is at hand) belongs to `consumer`'s session.
pub fn owns(consumer: &SessionId, unit: Option<&UnitRecord>, event: &Event) -> bool {
    let event_owned = event.session.as_ref() == Some(consumer);
    let unit_owned = unit.is_none_or(|unit| {
        unit.id == event.delegation_id && unit.session.as_ref() == Some(consumer)
    });
    event_owned && unit_owned
}

#[cfg(test)]
mod tests {
    use hermes_ledger::Timestamp;

    use super::*;

    fn sid(id: &str) -> SessionId {
        SessionId::new(id).expect("valid")
    }

    fn record(id: &str, state: SessionState) -> Session {
        Session {
            id: sid(id),
            state,
            created_at: Timestamp(0),
            ended_at: None,
            host: None,
        }
    }

    #[test]
    fn only_an_active_session_of_the_same_id_is_open() {
        let a = sid("a");
        assert_eq!(
            access(&a, Some(&record("a", SessionState::Active))),
            Access::Open
        );
        assert_eq!(
            access(&a, Some(&record("a", SessionState::Ended))),
            Access::Ended
        );
        assert_eq!(access(&a, None), Access::Unknown);
        assert_eq!(
            access(&a, Some(&record("b", SessionState::Active))),
            Access::Unknown
        );
    }
}
