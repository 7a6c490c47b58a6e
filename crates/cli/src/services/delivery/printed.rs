//! Taking the session's ready results at a boundary through the router, presenting them and
//! settling them through the one protocol ([`Router::present`]): the claims are renewed by a
//! heartbeat while they are presented, acked in one commit once the text was written, and
//! given back (deferred) if it could not be shown.

use std::convert::Infallible;

use hermes_formatter::Envelope;
use hermes_ledger::{Event, UnitRecord};
use hermes_router::{AfterShown, Boundary, ClaimedEnvelope, Router, RouterError, SystemClock};

use crate::services::delivery::consume::tokens;
use crate::services::home::{now, render_context};

/// A claimed envelope, rendered before it was claimed.
pub type RenderedClaim = ClaimedEnvelope<String>;

/// Renders one envelope (before the router claims it, so rendering never burns an attempt).
fn render(delegation: &UnitRecord, events: &[Event]) -> Result<String, Infallible> {
    Ok(hermes_formatter::render_envelope(
        &Envelope::new(delegation, events),
        &render_context(),
    ))
}

/// Claims what is ready at `boundary` now.
pub fn take(router: &Router, boundary: Boundary) -> Result<Vec<RenderedClaim>, RouterError> {
    Ok(router.take_ready(boundary, now(), render)?.delivered)
}

/// Waits until `deadline_ms` from now for something ready at a turn boundary (or until the
/// router's waits are interrupted) and claims it.
pub fn wait(router: &Router, deadline_ms: u64) -> Result<Vec<RenderedClaim>, RouterError> {
    let deadline = now().plus_ms(deadline_ms);
    Ok(router
        .wait_ready(Boundary::Turn, deadline, &SystemClock, render)?
        .delivered)
}

/// The text of the envelopes claimed at one boundary (the tool carrier at a tool boundary,
/// one leading line when several arrive together).
pub fn text(claimed: &[RenderedClaim], boundary: Boundary) -> String {
    if claimed.is_empty() {
        return String::new();
    }
    let envelopes: Vec<Envelope<'_>> = claimed
        .iter()
        .map(|c| Envelope::new(&c.delegation, &c.events))
        .collect();
    let mut text = hermes_formatter::render_boundary(&envelopes, boundary, &render_context());
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// Presents `claimed` with `show` (true if the text was written) and settles every claim:
/// renewed while `show` runs, acked in one commit if shown, given back if not
/// ([`Router::present`]).
pub fn present(
    router: &Router,
    claimed: Vec<RenderedClaim>,
    boundary: Boundary,
    show: impl FnOnce(&str) -> bool,
) {
    if claimed.is_empty() {
        return;
    }
    let shown = router.present(&tokens(&claimed), AfterShown::Ack, || {
        show(&text(&claimed, boundary)).then_some(()).ok_or(())
    });
    if let Err(e) = shown {
        tracing::warn!(error = %e, "cannot settle a delivery");
    }
}

/// Gives claims back unshown (the attempt is not counted).
pub fn give_back(router: &Router, claimed: Vec<RenderedClaim>) {
    router.give_back(&tokens(&claimed));
}
