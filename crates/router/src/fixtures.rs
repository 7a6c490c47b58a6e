//! Builders for the unit tests' ledger values.

use hermes_ledger::{
    ChildOutcome, ChildStatus, ClaimToken, DelegationId, DeliveryMode, DispatchSpec, Event,
    EventKey, EventPayload, EventState, Lease, SessionId, Timestamp, UnitRecord,
};

pub(crate) fn sid(id: &str) -> SessionId {
    SessionId::new(id).expect("valid session id")
}

pub(crate) fn unit_id(bits: u64) -> DelegationId {
    DelegationId::from_bits(bits)
}

pub(crate) fn delegation(bits: u64, session: &str, delivery: DeliveryMode) -> UnitRecord {
    let spec = DispatchSpec {
        delivery,
        ..DispatchSpec::new("goal", Vec::new())
    };
    UnitRecord {
        session: Some(sid(session)),
        ..hermes_testkit::running_unit(unit_id(bits), spec, Timestamp(0))
    }
}

pub(crate) fn event(bits: u64, n: u32, session: &str, delivery: DeliveryMode) -> Event {
    Event {
        delegation_id: unit_id(bits),
        key: EventKey::Task(n),
        session: Some(sid(session)),
        delivery,
        payload: EventPayload::Task(ChildOutcome {
            exit_code: Some(0),
            ..ChildOutcome::new(n, format!("task {n}"), ChildStatus::Completed, Timestamp(0))
        }),
        state: EventState::Pending,
        attempts: 0,
        lease: None,
        published_at: Timestamp(u64::from(n)),
        delivered_at: None,
        dropped_at: None,
        drop_reason: None,
    }
}

/// `event` as claimed under `token` until `expires_at`.
pub(crate) fn leased(mut event: Event, token: u128, expires_at: u64) -> Event {
    event.state = EventState::Claimed;
    event.attempts = 1;
    event.lease = Some(Lease {
        token: ClaimToken(token),
        consumer: "other".into(),
        claimed_at: Timestamp(0),
        expires_at: Timestamp(expires_at),
    });
    event
}
