//! Claims and what settling them did: the claim record, why a key was refused, and the
//! transitions an operation made.

use serde::{Deserialize, Serialize};

use super::{ClaimToken, DropReason, Event, EventRef, EventState, SessionId, Timestamp};

/// A claim as stored under its token. Release, defer, drop and fencing remove it; an ack keeps
/// it (with its keys' events delivered under its lease) until retention purges the unit, so a
/// repeat ack by its token is recognised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// The token.
    pub token: ClaimToken,
    /// Every key the claim covers.
    pub keys: Vec<EventRef>,
    /// Who holds it.
    pub consumer: String,
    /// When it was taken.
    pub claimed_at: Timestamp,
    /// When its lease runs out.
    pub expires_at: Timestamp,
}

/// Why one key could not be claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Delivered or dropped already.
    Terminal(EventState),
    /// Someone else holds a live lease until `expires_at`.
    LiveClaim {
        /// When that lease runs out.
        expires_at: Timestamp,
    },
    /// No such event.
    Missing,
    /// The event belongs to another session (or to none).
    NotOwned,
}

/// One state change an operation made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Which event.
    pub event: EventRef,
    /// Its state before.
    pub from: EventState,
    /// Its state after.
    pub to: EventState,
    /// Why it was dropped, when `to` is `Dropped`.
    pub drop_reason: Option<DropReason>,
}

/// Whether a publish inserted anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    /// The event is new.
    Inserted,
    /// An event with this key existed; nothing changed.
    AlreadyPresent,
}

/// What to claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Every key to claim, all or none.
    pub keys: Vec<EventRef>,
    /// Who claims.
    pub consumer: String,
    /// The claiming consumer's session: when set, events of any other session are refused.
    pub session: Option<SessionId>,
    /// Lease length in milliseconds.
    pub lease_ms: u64,
}

/// A successful claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The fencing token.
    pub token: ClaimToken,
    /// When the lease runs out.
    pub expires_at: Timestamp,
    /// The claimed events, as they are now (attempts counted).
    pub events: Vec<Event>,
}

/// What a claim attempt did.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimOutcome {
    /// Every key is now held by the new token.
    Claimed(Claim),
    /// Nothing was claimed; why, per refused key.
    Refused(Vec<(EventRef, Refusal)>),
}
