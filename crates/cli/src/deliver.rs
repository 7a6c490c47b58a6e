//! Taking a session's ready results at a boundary, and settling inline units.
//!
//! `drain` consumes through the router's driver; inline (`-z`, cron) units, which belong to no
//! session, are settled here directly by the process that printed them.

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
pub fn take_ready(
    ledger: Arc<Ledger>,
    session: &SessionId,
    boundary: Boundary,
    consumer: &str,
    settings: &settings::Settings,
    deadline: Option<Timestamp>,
) -> Result<Round, RouterError> {
    let config = RouterConfig::from_settings(session.clone(), consumer, settings);
    let router = Router::new(ledger, config);
    // Rendering cannot fail today; doing it before the claim keeps it that way by construction.
    let render = |delegation: &Delegation, events: &[Event]| -> Result<(), Infallible> {
        let _ = formatter::render_envelope(
            &formatter::Envelope::new(delegation, events),
            &formatter::RenderContext::utc(crate::home::now()),
        );
        Ok(())
    };
    match deadline {
        None => router.take_ready(boundary, crate::home::now(), render),
        Some(deadline) => router.wait_ready(boundary, deadline, &SystemClock, render),
    }
}
