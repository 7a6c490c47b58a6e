//! Taking a session's ready results at a boundary and settling them, on the ledger directly.
//!
//! This is the consumer path of `drain` and of inline (`-z`, cron) units. It follows the
//! router's rules (one envelope per delegation claimed with one claim, fail-closed ownership,
//! `inject`-only at a tool boundary, live claims of others deferred until their lease ends) and
//! is kept in this one module so it can be switched to the router's driver when that lands.

use std::collections::BTreeMap;

use formatter::Boundary;
use ledger::{
    ClaimOutcome, ClaimRequest, ClaimToken, Delegation, DelegationId, DeliveryMode, Event,
    EventKey, EventState, Ledger, LedgerError, Refusal, SessionId, SessionState, Timestamp,
};

/// Deferred retries wake this long after the blocking lease ends.
const DEFER_SLACK_MS: u64 = 50;

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

/// What a consumer is allowed at this boundary.
fn offered(event: &Event, boundary: Boundary) -> bool {
    boundary == Boundary::Turn || event.delivery == DeliveryMode::Inject
}

/// Claims every ready envelope of `session` at `boundary`. A session the ledger has never seen
/// has nothing; an ended one is `SessionEnded`.
pub fn take_ready(
    ledger: &Ledger,
    session: &SessionId,
    boundary: Boundary,
    consumer: &str,
    lease_ms: u64,
    now: Timestamp,
) -> ledger::Result<Round> {
    let mut round = Round::default();
    match ledger.session(session)? {
        None => return Ok(round),
        Some(s) if s.state == SessionState::Ended => {
            return Err(LedgerError::SessionEnded(session.clone()));
        }
        Some(_) => {}
    }
    // Render before claiming, so a formatting problem never burns an attempt; then claim every
    // envelope in one transaction (each all-or-none on its own keys).
    let mut offers = Vec::new();
    for (delegation, events) in ledger.deliverable(session, now)? {
        let events: Vec<Event> = events
            .into_iter()
            .filter(|e| offered(e, boundary))
            .collect();
        if events.is_empty() {
            continue;
        }
        let _ = formatter::render_envelope(
            &formatter::Envelope::new(&delegation, &events),
            &formatter::RenderContext::utc(now),
        );
        offers.push((delegation, events));
    }
    let requests: Vec<ClaimRequest> = offers
        .iter()
        .map(|(_, events)| ClaimRequest {
            keys: events.iter().map(Event::event_ref).collect(),
            consumer: consumer.to_owned(),
            session: Some(session.clone()),
            lease_ms,
        })
        .collect();
    let outcomes = if requests.is_empty() {
        Vec::new()
    } else {
        ledger.claim_many(&requests, now)?
    };
    for ((delegation, events), outcome) in offers.into_iter().zip(outcomes) {
        match outcome {
            ClaimOutcome::Claimed(claim) => round.taken.push(Taken {
                delegation,
                events: claim.events,
                token: claim.token,
            }),
            ClaimOutcome::Refused(refusals) => {
                let retry_at = refusals
                    .iter()
                    .filter_map(|(_, r)| match r {
                        Refusal::LiveClaim { expires_at } => Some(*expires_at),
                        _ => None,
                    })
                    .max();
                if let Some(at) = retry_at {
                    round.deferred.push(Deferred {
                        delegation_id: delegation.id.clone(),
                        keys: events.iter().map(|e| e.key).collect(),
                        retry_at: at.plus_ms(DEFER_SLACK_MS),
                    });
                }
            }
        }
    }
    // Envelopes another consumer holds under a live lease.
    let mut held: BTreeMap<DelegationId, (Vec<EventKey>, Timestamp)> = BTreeMap::new();
    for event in ledger.open_events(session)? {
        if event.state != EventState::Claimed
            || event.is_deliverable(now)
            || !offered(&event, boundary)
        {
            continue;
        }
        if round
            .taken
            .iter()
            .any(|t| t.delegation.id == event.delegation_id)
        {
            continue;
        }
        let expires = event.lease.as_ref().map_or(now, |l| l.expires_at);
        let entry = held
            .entry(event.delegation_id.clone())
            .or_insert((Vec::new(), expires));
        entry.0.push(event.key);
        entry.1 = entry.1.max(expires);
    }
    for (id, (keys, expires)) in held {
        if round.deferred.iter().any(|d| d.delegation_id == id) {
            continue;
        }
        round.deferred.push(Deferred {
            delegation_id: id,
            keys,
            retry_at: expires.plus_ms(DEFER_SLACK_MS),
        });
    }
    Ok(round)
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
