//! Taking a conversation's ready results at a boundary, rendering them, and settling them.
//!
//! `drain`, the hooks and `hermes mcp` consume through the router's driver; the hooks and
//! `hermes mcp` hand results over through [`present`], the one place that fits them to what the
//! reader keeps, keeps their claims alive while they are shown, and then acknowledges all of
//! them or gives all of them back. Inline (`-z`, cron) units, which belong to no session, are
//! settled by `Ledger::settle_inline` instead.

use std::convert::Infallible;
use std::sync::Arc;

use hermes_formatter::Boundary;
use hermes_ledger::{ClaimToken, Event, Ledger, SessionId, Timestamp, UnitRecord};
use hermes_router::{AfterShown, Router, RouterConfig, RouterError, SystemClock};

/// What one boundary gave `drain`: the envelopes now held, and those someone else holds.
pub type Round = hermes_router::BoundaryOutcome<(), Infallible>;

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
    settings: &hermes_settings::Settings,
    deadline: Option<Timestamp>,
) -> Result<(Router, Round), RouterError> {
    let config = RouterConfig::from_settings(session.clone(), consumer, settings);
    let router = Router::new(ledger, config);
    let round = match deadline {
        None => router.take_ready(boundary, crate::services::home::now(), render_check),
        Some(deadline) => router.wait_ready(boundary, deadline, &SystemClock, render_check),
    }?;
    Ok((router, round))
}

/// The router's render step: rendering cannot fail today; doing it before the claim keeps it
/// that way by construction.
pub fn render_check(delegation: &UnitRecord, events: &[Event]) -> Result<(), Infallible> {
    let _ = hermes_formatter::render_envelope(
        &hermes_formatter::Envelope::new(delegation, events),
        &hermes_formatter::RenderContext::utc(crate::services::home::now()),
    );
    Ok(())
}

/// A claimed envelope of one boundary.
pub type Claimed = hermes_router::ClaimedEnvelope<()>;

/// What one boundary of a conversation yielded: the claimed envelopes, and a router to keep
/// their claims alive while they are presented.
pub struct Taken {
    /// The router of the conversation's current session.
    pub router: Router,
    /// The claimed envelopes, in the order their sessions were consumed.
    pub claimed: Vec<Claimed>,
}

/// Claims what is ready at `boundary` in every session of one conversation: the first is its
/// current session (ended → `SessionEnded`), the others sessions it adopted (an ended one has
/// nothing). Returns them with the router that keeps their claims alive (`None`: no sessions).
pub fn take_conversation(
    ledger: &Arc<Ledger>,
    sessions: &[SessionId],
    boundary: Boundary,
    consumer: &str,
    settings: &hermes_settings::Settings,
) -> Result<Option<Taken>, RouterError> {
    let mut taken: Option<Taken> = None;
    for (i, session) in sessions.iter().enumerate() {
        match take_ready(
            Arc::clone(ledger),
            session,
            boundary,
            consumer,
            settings,
            None,
        ) {
            Ok((router, round)) => match &mut taken {
                Some(t) => t.claimed.extend(round.delivered),
                None => {
                    taken = Some(Taken {
                        router,
                        claimed: round.delivered,
                    })
                }
            },
            Err(RouterError::SessionEnded(_)) if i > 0 => {}
            Err(e) => {
                // Give back what the earlier sessions yielded: nothing was shown.
                if let Some(t) = &taken {
                    t.router.give_back(&tokens(&t.claimed));
                }
                return Err(e);
            }
        }
    }
    Ok(taken)
}

/// Who reads an answer: the characters its agent keeps of it, and the name under which that
/// agent shows hermes' MCP tool `delegation_result` to its model (a shortened block names it,
/// so the model can call it as it is written).
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    pub budget: usize,
    pub result_tool: &'a str,
}

/// `delegation_result` as hermes names it, for a reader of unknown kind.
pub const PLAIN_RESULT_TOOL: &str = "delegation_result";

/// The one protocol of handing results over (hooks, `hermes mcp`): fit the claimed envelopes
/// into `budget` characters (whole envelopes in order while they fit; one too large alone is
/// shortened and says how to read all of it), give back at once what does not fit (it waits
/// for the next boundary, no attempt counted), keep the claims of what is shown alive while
/// `show` runs, then acknowledge all of it in one commit — or, if `show` failed, give all of
/// it back. Returns how many envelopes were shown.
pub fn present(
    router: &Router,
    claimed: Vec<Claimed>,
    boundary: Boundary,
    reader: Reader<'_>,
    show: impl FnOnce(&str) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    if claimed.is_empty() {
        return Ok(0);
    }
    let ctx = crate::services::home::render_context();
    let fitted = {
        let envelopes: Vec<hermes_formatter::Envelope<'_>> = claimed
            .iter()
            .map(|t| hermes_formatter::Envelope::new(&t.delegation, &t.events))
            .collect();
        hermes_formatter::fit_boundary(&envelopes, boundary, &ctx, reader.budget, |i| {
            how_to_read(&claimed[i], reader.result_tool)
        })
    };
    let mut shown: Vec<Claimed> = Vec::new();
    let mut rest: Vec<Claimed> = Vec::new();
    for (i, c) in claimed.into_iter().enumerate() {
        if fitted.taken.contains(&i) {
            shown.push(c);
        } else {
            rest.push(c);
        }
    }
    router.give_back(&tokens(&rest));
    router.present(&tokens(&shown), AfterShown::Ack, || show(&fitted.text))??;
    Ok(shown.len())
}

/// The claim tokens of `claimed`, for the router's settling calls.
pub fn tokens<T>(claimed: &[hermes_router::ClaimedEnvelope<T>]) -> Vec<ClaimToken> {
    claimed.iter().map(|c| c.token).collect()
}

/// How to read all of a shortened envelope, in one line.
fn how_to_read(t: &Claimed, tool: &str) -> String {
    let id = &t.delegation.id;
    let transcripts: Vec<&str> = t
        .events
        .iter()
        .flat_map(|e| e.payload.outcomes())
        .map(|o| o.transcript.as_str())
        .filter(|p| !p.is_empty())
        .collect();
    let mut text = format!(
        "the MCP tool {tool} {{\"delegation_id\":\"{id}\"}} (add \"task\" for one child, \"offset\" for the next page), or `hermes delegation status {id} --json`"
    );
    if !transcripts.is_empty() {
        text.push_str(", or the transcript ");
        text.push_str(&transcripts.join(", "));
    }
    text
}
