//! Claims and what settling them did: the claim record, why a key was refused, and the
//! transitions an operation made.

use serde::{Deserialize, Serialize};

use super::{ClaimToken, DropReason, EventRef, EventState, Timestamp};

/// A claim as stored under its token. Release, defer, drop and fencing remove it; an ack keeps
/// it (with its keys' events delivered under its lease) until retention purges the unit, so a
/// repeat ack by its token is recognised (SPEC §11.1).
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
