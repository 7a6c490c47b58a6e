//! What one boundary produced: the envelopes claimed for the consumer, what waits on someone
//! else's lease, what was forgotten, and what could not be rendered.

use hermes_ledger::{ClaimToken, DelegationId, Event, EventKey, EventRef, Timestamp, UnitRecord};

use crate::classify::{Deferral, Discard};
use hermes_ledger::Boundary;

/// An envelope claimed for this consumer: present `rendered`, then settle `token` (ack once the
/// consumer has it; release if interrupted after showing it; defer if nothing was shown).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedEnvelope<T> {
    /// The claim's fencing token.
    pub token: ClaimToken,
    /// When the lease runs out unless renewed.
    pub expires_at: Timestamp,
    /// The unit.
    pub delegation: UnitRecord,
    /// The claimed events as the claim left them (attempts counted), sorted by key.
    pub events: Vec<Event>,
    /// What the render function made of the envelope before it was claimed.
    pub rendered: T,
}

impl<T> ClaimedEnvelope<T> {
    /// The event keys, sorted.
    pub fn keys(&self) -> Vec<EventKey> {
        self.events.iter().map(|e| e.key).collect()
    }

    /// The most claims any of its events has seen (this one included).
    pub fn attempts(&self) -> u32 {
        self.events.iter().map(|e| e.attempts).max().unwrap_or(0)
    }
}

/// An envelope left unclaimed because rendering it failed; no delivery attempt was spent.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderFailure<E> {
    /// The unit.
    pub delegation_id: DelegationId,
    /// The keys it would have claimed.
    pub keys: Vec<EventKey>,
    /// What the render function returned.
    pub error: E,
}

/// Everything one boundary did.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundaryOutcome<T, E> {
    /// The boundary.
    pub boundary: Boundary,
    /// Envelopes now claimed by this consumer, in delivery order.
    pub delivered: Vec<ClaimedEnvelope<T>>,
    /// Keys held by live claims elsewhere, and when they will be tried again (only what this
    /// boundary could offer).
    pub deferred: Vec<Deferral>,
    /// Keys whose claim was refused for good, and why (the ledger settled them elsewhere).
    pub discarded: Vec<(EventRef, Discard)>,
    /// Envelopes that could not be rendered and were left unclaimed.
    pub failed: Vec<RenderFailure<E>>,
}

impl<T, E> BoundaryOutcome<T, E> {
    /// An outcome with nothing in it.
    pub fn empty(boundary: Boundary) -> BoundaryOutcome<T, E> {
        BoundaryOutcome {
            boundary,
            delivered: Vec::new(),
            deferred: Vec::new(),
            discarded: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// Whether anything was claimed or failed to render: something the caller must act on.
    pub fn needs_attention(&self) -> bool {
        !self.delivered.is_empty() || !self.failed.is_empty()
    }
}
