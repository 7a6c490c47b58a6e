//! Taking a session's ready results at a boundary, and settling inline units.
//!
//! `drain` consumes through the router's driver; inline (`-z`, cron) units, which belong to no
//! session, are settled here directly by the process that printed them.

use std::convert::Infallible;
use std::sync::Arc;

use formatter::Boundary;
use ledger::{
    ClaimOutcome, ClaimRequest, ClaimToken, Delegation, DelegationId, Event, EventKey, Ledger,
    SessionId, Timestamp,
};
use router::{Router, RouterConfig, RouterError, SystemClock};

/// One claimed envelope.
#[derive(Debug)]
pub struct Taken {
    /// Its unit.
    pub delegation: Delegation,
    /// Its events, as claimed (attempts counted).
    pub events: Vec<Event>,
    /// The claim.
    pub token: ClaimToken,
}

/// Events held by another consumer's live lease.
#[derive(Debug)]
pub struct Deferred {
    /// Their unit.
    pub delegation_id: DelegationId,
    /// Their keys.
    pub keys: Vec<EventKey>,
    /// When to look again.
    pub retry_at: Timestamp,
}

/// What one boundary gave.
#[derive(Debug, Default)]
pub struct Round {
    /// Envelopes now held by this consumer.
    pub taken: Vec<Taken>,
    /// Envelopes someone else holds.
    pub deferred: Vec<Deferred>,
}

/// Claims every ready envelope of `session` at `boundary` through the router (render before
/// claim, one claim per delegation, all claims in one commit, fail-closed ownership, live claims
/// of others classified and deferred). With a `deadline`, waits on the router's deferral
/// scheduler until something is ready or the deadline passes. A session the ledger has never
/// seen has nothing; an ended one is `RouterError::SessionEnded`.
pub fn take_ready(
    ledger: Arc<Ledger>,
    session: &SessionId,
    boundary: Boundary,
    consumer: &str,
    lease_ms: u64,
    deadline: Option<Timestamp>,
) -> Result<Round, RouterError> {
    let config = RouterConfig {
        lease_ms,
        ..RouterConfig::new(session.clone(), consumer)
    };
    let router = Router::new(ledger, config);
    let boundary = match boundary {
        Boundary::Turn => router::Boundary::Turn,
        Boundary::Tool => router::Boundary::Tool,
    };
    // Rendering cannot fail today; doing it before the claim keeps it that way by construction.
    let render = |delegation: &Delegation, events: &[Event]| -> Result<(), Infallible> {
        let _ = formatter::render_envelope(
            &formatter::Envelope::new(delegation, events),
            &formatter::RenderContext::utc(crate::home::now()),
        );
        Ok(())
    };
    let outcome = match deadline {
        None => router.take_ready(boundary, crate::home::now(), render)?,
        Some(deadline) => router.wait_ready(boundary, deadline, &SystemClock, render)?,
    };
    Ok(Round {
        taken: outcome
            .delivered
            .into_iter()
            .map(|e| Taken {
                delegation: e.delegation,
                events: e.events,
                token: e.token,
            })
            .collect(),
        deferred: outcome
            .deferred
            .into_iter()
            .map(|d| Deferred {
                delegation_id: d.delegation_id,
                keys: d.keys,
                retry_at: d.retry_at,
            })
            .collect(),
    })
}

/// Settles an inline unit's events as delivered by this process (it printed them).
pub fn settle_inline(
    ledger: &Ledger,
    id: &DelegationId,
    consumer: &str,
    lease_ms: u64,
    now: Timestamp,
) -> ledger::Result<()> {
    let open: Vec<_> = ledger
        .events(id)?
        .into_iter()
        .filter(|e| e.is_deliverable(now))
        .map(|e| e.event_ref())
        .collect();
    if open.is_empty() {
        return Ok(());
    }
    let request = ClaimRequest {
        keys: open,
        consumer: consumer.to_owned(),
        session: None,
        lease_ms,
    };
    if let ClaimOutcome::Claimed(claim) = ledger.claim(&request, now)? {
        ledger.ack(claim.token, now)?;
    }
    Ok(())
}
