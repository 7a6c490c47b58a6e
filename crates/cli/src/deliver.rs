//! Taking a conversation's ready results at a boundary, rendering them, and settling them.
//!
//! `drain`, the hooks and `hermes mcp` consume through the router's driver. Inline (`-z`, cron)
//! units, which belong to no session, are settled by `Ledger::settle_inline` instead.

use std::convert::Infallible;
use std::sync::Arc;

use formatter::Boundary;
use ledger::{Delegation, Event, Ledger, SessionId, Timestamp};
use router::{Router, RouterConfig, RouterError, SystemClock};

/// What one boundary gave `drain`: the envelopes now held, and those someone else holds.
pub type Round = router::BoundaryOutcome<(), Infallible>;

/// Claims every ready envelope of `session` at `boundary` through the router (render before
/// claim, one claim per delegation, all claims in one commit, fail-closed ownership, live claims
/// of others classified and deferred). With a `deadline`, waits on the router's deferral
/// scheduler until something is ready or the deadline passes. A session the ledger has never
/// seen has nothing; an ended one is `RouterError::SessionEnded`.
///
/// Returns the router too: whoever presents the round renews its claims through it
/// ([`Router::keep_alive`]) every `delivery.heartbeat_seconds` until it settles them.
pub fn take_ready(
    ledger: Arc<Ledger>,
    session: &SessionId,
    boundary: Boundary,
    consumer: &str,
    settings: &settings::Settings,
    deadline: Option<Timestamp>,
) -> Result<(Router, Round), RouterError> {
    let config = RouterConfig::from_settings(session.clone(), consumer, settings);
    let router = Router::new(ledger, config);
    let round = match deadline {
        None => router.take_ready(boundary, crate::home::now(), render_check),
        Some(deadline) => router.wait_ready(boundary, deadline, &SystemClock, render_check),
    }?;
    Ok((router, round))
}

/// The router's render step: rendering cannot fail today; doing it before the claim keeps it
/// that way by construction.
pub fn render_check(delegation: &Delegation, events: &[Event]) -> Result<(), Infallible> {
    let _ = formatter::render_envelope(
        &formatter::Envelope::new(delegation, events),
        &formatter::RenderContext::utc(crate::home::now()),
    );
    Ok(())
}

/// A claimed envelope of one boundary.
pub type Claimed = router::ClaimedEnvelope<()>;

/// Claims what is ready at `boundary` in every session of one conversation: the first is its
/// current session (ended → `SessionEnded`), the others provisional sessions it adopted (an
/// ended one has nothing).
pub fn take_conversation(
    ledger: &Arc<Ledger>,
    sessions: &[SessionId],
    boundary: Boundary,
    consumer: &str,
    settings: &settings::Settings,
) -> Result<Vec<Claimed>, RouterError> {
    let mut taken = Vec::new();
    for (i, session) in sessions.iter().enumerate() {
        match take_ready(
            Arc::clone(ledger),
            session,
            boundary,
            consumer,
            settings,
            None,
        ) {
            Ok((_, round)) => taken.extend(round.delivered),
            Err(RouterError::SessionEnded(_)) if i > 0 => {}
            Err(e) => {
                // Give back what the earlier sessions yielded: nothing was shown.
                give_back(ledger, &taken);
                return Err(e);
            }
        }
    }
    Ok(taken)
}

/// The text of the envelopes taken at one boundary, as the parent reads it (the tool carrier at
/// a tool boundary, one leading line when several arrive together); empty if none.
pub fn text(taken: &[Claimed], boundary: Boundary) -> String {
    if taken.is_empty() {
        return String::new();
    }
    let envelopes: Vec<formatter::Envelope<'_>> = taken
        .iter()
        .map(|t| formatter::Envelope::new(&t.delegation, &t.events))
        .collect();
    formatter::render_boundary(&envelopes, boundary, &crate::home::render_context())
}

/// Acks what was shown (unless held), all in one durable commit; gives back what could not be
/// shown.
pub fn settle(ledger: &Ledger, taken: &[Claimed], hold: bool, shown: bool) -> anyhow::Result<()> {
    if !shown {
        give_back(ledger, taken);
    } else if !hold && !taken.is_empty() {
        let tokens: Vec<_> = taken.iter().map(|t| t.token).collect();
        for result in ledger.ack_many(&tokens, crate::home::now())? {
            result?;
        }
    }
    Ok(())
}

/// Gives claims back unshown (the attempt is not counted).
fn give_back(ledger: &Ledger, taken: &[Claimed]) {
    for t in taken {
        if let Err(e) = ledger.defer(t.token) {
            tracing::warn!(delegation = %t.delegation.id, error = %e, "cannot give a claim back");
        }
    }
}
