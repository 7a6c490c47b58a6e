//! Events and their delivery state.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{
    ChildOutcome, ClaimToken, DelegationId, DeliveryMode, EventKey, EventRef, SessionId, Timestamp,
    UnitStatus,
};

/// What an event carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[expect(
    clippy::large_enum_variant,
    reason = "nearly every event is a Task: boxing it would allocate once more per event for nothing"
)]
pub enum EventPayload {
    /// One child finished.
    Task(ChildOutcome),
    /// The unit ended without an event for every child; these are the missing children.
    Terminal {
        /// The unit's final status.
        unit_status: UnitStatus,
        /// Why the unit ended this way (`owner_died`, `session_end`, …).
        reason: String,
        /// The children that had no event of their own.
        children: Vec<ChildOutcome>,
    },
}

impl EventPayload {
    /// The child outcomes this event carries.
    pub fn outcomes(&self) -> &[ChildOutcome] {
        match self {
            EventPayload::Task(outcome) => std::slice::from_ref(outcome),
            EventPayload::Terminal { children, .. } => children,
        }
    }
}

/// An event's delivery state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventState {
    /// Waiting for a consumer.
    Pending,
    /// Leased to a consumer (possibly with an expired lease).
    Claimed,
    /// The consumer has it. Terminal.
    Delivered,
    /// Given up, with a reason. Terminal; the content stays readable.
    Dropped,
}

impl EventState {
    /// Whether no further transition is possible.
    pub fn is_terminal(self) -> bool {
        matches!(self, EventState::Delivered | EventState::Dropped)
    }

    /// The lowercase name used in JSON and text.
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Pending => "pending",
            EventState::Claimed => "claimed",
            EventState::Delivered => "delivered",
            EventState::Dropped => "dropped",
        }
    }
}

/// Why an event was dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DropReason {
    /// Its session ended before it was delivered.
    SessionEnded,
    /// It waited longer than `replay_max_age_hours`.
    ReplayExpired,
    /// It was claimed and released `max_attempts` times.
    AttemptsExhausted,
    /// Nobody can ever receive it.
    Orphaned,
    /// Anything else, as given by the caller.
    Other(String),
}

impl DropReason {
    /// The snake_case name used in JSON and text.
    pub fn as_str(&self) -> &str {
        match self {
            DropReason::SessionEnded => "session_ended",
            DropReason::ReplayExpired => "replay_expired",
            DropReason::AttemptsExhausted => "attempts_exhausted",
            DropReason::Orphaned => "orphaned",
            DropReason::Other(reason) => reason,
        }
    }

    /// Parses a reason, mapping the well-known names to their variants.
    pub fn parse(reason: &str) -> DropReason {
        match reason {
            "session_ended" => DropReason::SessionEnded,
            "replay_expired" => DropReason::ReplayExpired,
            "attempts_exhausted" => DropReason::AttemptsExhausted,
            "orphaned" => DropReason::Orphaned,
            other => DropReason::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The current lease on an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The claim's token.
    pub token: ClaimToken,
    /// Who holds it.
    pub consumer: String,
    /// When it was taken.
    pub claimed_at: Timestamp,
    /// When it runs out.
    pub expires_at: Timestamp,
}

/// Something to deliver, with its delivery state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Which delegation.
    pub delegation_id: DelegationId,
    /// Which event of it.
    pub key: EventKey,
    /// The session it belongs to (`None` for inline units, which no session may receive).
    pub session: Option<SessionId>,
    /// Whether it may be offered at tool boundaries.
    pub delivery: DeliveryMode,
    /// What it says.
    pub payload: EventPayload,
    /// Its delivery state.
    pub state: EventState,
    /// Claims taken so far (minus deferrals).
    pub attempts: u32,
    /// The latest lease while claimed. A delivered event keeps the lease of the claim that
    /// acked it (none when an inline run delivered it), the mark by which a repeat ack of that
    /// token is told from a lost claim; only a `Claimed` event's lease is a claim.
    pub lease: Option<Lease>,
    /// When it was published.
    pub published_at: Timestamp,
    /// When it was delivered.
    pub delivered_at: Option<Timestamp>,
    /// When it was dropped.
    pub dropped_at: Option<Timestamp>,
    /// Why it was dropped.
    pub drop_reason: Option<DropReason>,
}

impl Event {
    /// Its address.
    pub fn event_ref(&self) -> EventRef {
        EventRef {
            delegation_id: self.delegation_id.clone(),
            key: self.key,
        }
    }

    /// Whether a consumer could claim it at `now`: pending, or claimed with an expired lease.
    pub fn is_deliverable(&self, now: Timestamp) -> bool {
        match self.state {
            EventState::Pending => true,
            EventState::Claimed => self.lease.as_ref().is_none_or(|l| l.expires_at <= now),
            EventState::Delivered | EventState::Dropped => false,
        }
    }
}
