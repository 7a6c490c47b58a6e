//! Events and claims: publish, claim (all-or-none, fenced by a fresh token), renew, ack,
//! release, defer and drop. Every settlement checks that the token still holds every key and
//! returns the transitions that really happened.

use std::collections::BTreeSet;

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;
use crate::model::{
    Claim, ClaimOutcome, ClaimRecord, ClaimRequest, ClaimToken, DelegationId, DropReason, Event,
    EventKey, EventPayload, EventRef, EventState, Lease, ProcessId, Published, Refusal, Session,
    SessionId, SessionState, Timestamp, Transition, UnitRecord,
};
use crate::rules::{self, KeysCheck};
use crate::store::Writer;
use crate::txn::claims::held;
use crate::txn::hosts::release_host;
use crate::txn::inline::deliver_inline;
use crate::txn::publish::{Owner, ended_with_its_session, publish_in};

/// What a boundary looks at ([`Ledger::boundary_view`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BoundaryView {
    /// The session's record (`None`: the ledger does not know it).
    pub session: Option<Session>,
    /// Every open (pending or claimed) event of the session, live leases included.
    pub events: Vec<Event>,
    /// The unit of each event a consumer could claim now, once each.
    pub units: Vec<UnitRecord>,
}

/// An event to publish by hand (units publish through `finish_child`/`finish_unit`).
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// Its unit, which must exist.
    pub delegation_id: DelegationId,
    /// Which event.
    pub key: EventKey,
    /// Its content.
    pub payload: EventPayload,
}

impl Ledger {
    /// Publishes an event; idempotent per key.
    pub fn publish(&self, event: NewEvent, now: Timestamp) -> Result<Published> {
        if let Some(at_once) = self.backend.transitions() {
            let ended = ended_with_its_session(&event.payload);
            let id = &event.delegation_id;
            return self
                .at_once(
                    || at_once.publish(id, event.key, &event.payload, ended, now),
                    |published| *published == Some(Published::Inserted),
                )?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()));
        }
        self.write_grouped(move |_, w| {
            let id = &event.delegation_id;
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            let published = publish_in(w, Owner::of(&unit), event.key, event.payload.clone(), now)?;
            Ok((published, published == Published::Inserted))
        })
    }

    /// An event with its delivery state.
    pub fn event(&self, event: &EventRef) -> Result<Option<Event>> {
        self.read_one(|r| r.event(event))
    }

    /// Every event of a unit.
    pub fn events(&self, id: &DelegationId) -> Result<Vec<Event>> {
        self.read_one(|r| r.events(id))
    }

    /// Every event of `session` a consumer could claim at `now` (pending, or claimed with an
    /// expired lease), each with its unit, grouped by unit in id order. An ended session has
    /// none.
    pub fn deliverable(
        &self,
        session: &SessionId,
        now: Timestamp,
    ) -> Result<Vec<(UnitRecord, Vec<Event>)>> {
        self.read(|r| {
            if r.session(session)?
                .is_some_and(|s| s.state == SessionState::Ended)
            {
                return Ok(Vec::new());
            }
            let mut out: Vec<(UnitRecord, Vec<Event>)> = Vec::new();
            for event in r.open_event_records(Some(session))? {
                if !event.is_deliverable(now) || event.session.as_ref() != Some(session) {
                    continue;
                }
                match out.last_mut() {
                    Some((unit, events)) if unit.id == event.delegation_id => events.push(event),
                    _ => {
                        let Some(unit) = r.delegation(event.delegation_id.as_str())? else {
                            continue;
                        };
                        out.push((unit, vec![event]));
                    }
                }
            }
            Ok(out)
        })
    }

    /// What a boundary of `session` looks at, in one read: the session's record, every open
    /// event (live leases included) and the unit of each event a consumer could claim at `now`
    /// (an ended session's units are not needed: nothing of it is delivered).
    pub fn boundary_view(&self, session: &SessionId, now: Timestamp) -> Result<BoundaryView> {
        if let Some(at_once) = self.backend.transitions() {
            let (record, events, mut units) = at_once.boundary(session, now)?;
            let Some(record) = record else {
                return Ok(BoundaryView::default());
            };
            // The units of the events the rule says are claimable (the statement's set holds
            // them all).
            units.retain(|unit| {
                events
                    .iter()
                    .any(|e| e.delegation_id == unit.id && e.is_deliverable(now))
            });
            return Ok(BoundaryView {
                session: Some(record),
                events,
                units,
            });
        }
        self.read(|r| {
            let Some(record) = r.session(session)? else {
                return Ok(BoundaryView::default());
            };
            let events = r.open_event_records(Some(session))?;
            let mut units: Vec<UnitRecord> = Vec::new();
            if record.state != SessionState::Ended {
                // In one read (one statement on PostgreSQL), in id order as the events are.
                let ids: Vec<DelegationId> = events
                    .iter()
                    .filter(|event| event.is_deliverable(now))
                    .map(|event| event.delegation_id.clone())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                if !ids.is_empty() {
                    units = r.delegations_of(&ids)?;
                    units.sort_by(|a, b| a.id.cmp(&b.id));
                }
            }
            Ok(BoundaryView {
                session: Some(record),
                events,
                units,
            })
        })
    }

    /// Open (pending or claimed) events of `session`, live leases included.
    pub fn open_events(&self, session: &SessionId) -> Result<Vec<Event>> {
        self.read_one(|r| r.open_event_records(Some(session)))
    }

    /// Claims every key or none. Each claimed key's attempts go up by one and a fresh token
    /// replaces any old one, fencing its holder out. An event whose attempts are used up is
    /// dropped (`attempts_exhausted`) instead of claimed, and refused as terminal.
    pub fn claim(&self, request: &ClaimRequest, now: Timestamp) -> Result<ClaimOutcome> {
        let mut outcomes = self.claim_many(std::slice::from_ref(request), now)?;
        outcomes
            .pop()
            .ok_or_else(|| LedgerError::Invalid("no claim outcome".into()))
    }

    /// Several independent claims (each all-or-none on its own keys) in one transaction: one
    /// durable commit for a whole boundary's envelopes.
    pub fn claim_many(
        &self,
        requests: &[ClaimRequest],
        now: Timestamp,
    ) -> Result<Vec<ClaimOutcome>> {
        if requests.iter().any(|r| r.keys.is_empty()) {
            return Err(LedgerError::Invalid(
                "a claim needs at least one key".into(),
            ));
        }
        if let Some(at_once) = self.backend.transitions() {
            let requests: Vec<(ClaimRequest, ClaimToken)> = requests
                .iter()
                .map(|request| (request.clone(), self.next_token()))
                .collect();
            let max = self.config.max_attempts;
            return self.at_once(
                || at_once.claim(&requests, max, now),
                |outcomes| outcomes.iter().any(wrote),
            );
        }
        let requests = requests.to_vec();
        self.write_grouped(move |ledger, w| {
            let mut outcomes = Vec::with_capacity(requests.len());
            let mut changed = false;
            for request in &requests {
                let (outcome, wrote) = ledger.claim_in(w, request, now)?;
                changed |= wrote;
                outcomes.push(outcome);
            }
            Ok((outcomes, changed))
        })
    }

    /// One claim inside `w`; also says whether it wrote anything.
    fn claim_in(
        &self,
        w: &Writer<'_>,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<(ClaimOutcome, bool)> {
        // Drawn first, whatever the outcome: one token per request, as a backend's
        // one-statement claim draws them (`store::Transitions::claim`).
        let token = loop {
            let token = self.next_token();
            if w.claim_record(token)?.is_none() {
                break token;
            }
        };
        let keys: Vec<EventRef> = request
            .keys
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut found = Vec::with_capacity(keys.len());
        for key in &keys {
            found.push(w.event(key)?);
        }
        let check = rules::check_keys(
            &keys,
            found,
            request.session.as_ref(),
            self.config.max_attempts,
            now,
        );
        let mut claimable = match check {
            KeysCheck::Claimable(events) => events,
            KeysCheck::Refused { refused, exhausted } => {
                let changed = !exhausted.is_empty();
                for mut event in exhausted {
                    if let Some(lease) = event.lease.take() {
                        w.remove_claim(lease.token)?;
                    }
                    rules::drop_event(&mut event, DropReason::AttemptsExhausted, now);
                    w.put_event(&event)?;
                }
                return Ok((ClaimOutcome::Refused(refused), changed));
            }
        };
        let expires_at = now.plus_ms(request.lease_ms);
        for event in &mut claimable {
            let lease = Lease {
                token,
                consumer: request.consumer.clone(),
                claimed_at: now,
                expires_at,
            };
            if let Some(old) = rules::take(event, lease) {
                // The old holder is fenced out: its token no longer holds every key.
                w.remove_claim(old)?;
            }
            w.put_event(event)?;
        }
        w.put_claim(&ClaimRecord {
            token,
            keys,
            consumer: request.consumer.clone(),
            claimed_at: now,
            expires_at,
        })?;
        Ok((
            ClaimOutcome::Claimed(Claim {
                token,
                expires_at,
                events: claimable,
            }),
            true,
        ))
    }

    /// The claim a token names, if it is still recorded (a claim that acked stays recorded
    /// until retention purges its unit).
    #[cfg(any(test, feature = "testing"))]
    pub fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>> {
        self.read_one(|r| r.claim_record(token))
    }

    /// Extends the lease of every key of the claim to `now + lease_ms`. Works after expiry as
    /// long as nobody has claimed since.
    pub fn renew(&self, token: ClaimToken, lease_ms: u64, now: Timestamp) -> Result<Timestamp> {
        self.write_grouped(move |_, w| {
            let (mut record, events) = held(w, token)?;
            record.expires_at = now.plus_ms(lease_ms);
            for mut event in events {
                if let Some(lease) = event.lease.as_mut() {
                    lease.expires_at = record.expires_at;
                }
                w.put_event(&event)?;
            }
            w.put_claim(&record)?;
            Ok((record.expires_at, true))
        })
    }

    /// Returns every key of the claim to pending, the attempt counted; a key whose attempts
    /// reached `max_attempts` is dropped (`attempts_exhausted`) instead.
    pub fn release(&self, token: ClaimToken, now: Timestamp) -> Result<Vec<Transition>> {
        let max = self.config.max_attempts;
        self.settle(token, move |event| rules::release(event, max, now))
    }

    /// Returns every key of the claim to pending and gives the attempt back (the consumer was
    /// busy; nothing was shown).
    pub fn defer(&self, token: ClaimToken) -> Result<Vec<Transition>> {
        self.settle(token, rules::defer)
    }

    /// Drops every key of the claim with `reason`.
    pub fn drop_claim(
        &self,
        token: ClaimToken,
        reason: DropReason,
        now: Timestamp,
    ) -> Result<Vec<Transition>> {
        self.settle(token, move |event| {
            rules::drop_event(event, reason.clone(), now)
        })
    }

    /// Drops the given events, whoever holds them (an administrative drop); events already
    /// delivered or dropped are left as they are and reported with no transition.
    pub fn drop_events(
        &self,
        keys: &[EventRef],
        reason: DropReason,
        now: Timestamp,
    ) -> Result<Vec<Transition>> {
        let keys = keys.to_vec();
        self.write_grouped(move |_, w| {
            let mut transitions = Vec::new();
            for key in &keys {
                let Some(mut event) = w.event(key)? else {
                    continue;
                };
                if event.state.is_terminal() {
                    continue;
                }
                let from = event.state;
                if let Some(lease) = event.lease.take() {
                    w.remove_claim(lease.token)?;
                }
                rules::drop_event(&mut event, reason.clone(), now);
                w.put_event(&event)?;
                transitions.push(rules::transition(&event, from));
            }
            let wrote = !transitions.is_empty();
            Ok((transitions, wrote))
        })
    }

    /// Applies `change` to every key the token still holds, or fails with `ClaimLost`.
    fn settle(
        &self,
        token: ClaimToken,
        mut change: impl FnMut(&mut Event) + Send + 'static,
    ) -> Result<Vec<Transition>> {
        self.write_grouped(move |_, w| Ok((settle_in(w, token, &mut change)?, true)))
    }

    /// Settles an inline unit's events as delivered in one commit (claim and ack at once): the
    /// process that ran it has shown its result, and no consumer will ever claim it. Events of
    /// other consumers' live claims are left alone. Refused for a unit with a session.
    pub fn settle_inline(&self, id: &DelegationId, now: Timestamp) -> Result<Vec<Transition>> {
        let id = id.clone();
        self.write_grouped(move |_, w| {
            let transitions = settle_inline_in(w, &id, now)?;
            let wrote = !transitions.is_empty();
            Ok((transitions, wrote))
        })
    }

    /// [`Ledger::settle_inline`] and [`Ledger::unregister_host`] of the inline run's host
    /// `host`, in one commit: the last write of a one-shot run, once it printed its result, so
    /// that leaving costs no durable commit of its own. A unit that is not settled here (it
    /// belongs to a session) leaves the host registered and changes nothing.
    pub fn settle_inline_leaving(
        &self,
        id: &DelegationId,
        host: ProcessId,
        now: Timestamp,
    ) -> Result<Vec<Transition>> {
        self.write_then(|w| {
            let transitions = settle_inline_in(w, id, now)?;
            release_host(w, host)?;
            Ok((transitions, true))
        })
    }
}

/// Settles an inline unit's deliverable events inside `w` (see [`Ledger::settle_inline`]).
fn settle_inline_in(w: &Writer<'_>, id: &DelegationId, now: Timestamp) -> Result<Vec<Transition>> {
    let unit = w
        .delegation(id.as_str())?
        .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
    if unit.session.is_some() {
        return Err(LedgerError::Invalid(format!(
            "{id} belongs to a session; deliver it through a claim"
        )));
    }
    deliver_inline(w, id, now)
}

/// Applies `change` to every key `token` still holds inside `w`, or fails with `ClaimLost`
/// before writing anything.
fn settle_in(
    w: &Writer<'_>,
    token: ClaimToken,
    change: &mut dyn FnMut(&mut Event),
) -> Result<Vec<Transition>> {
    let (_, events) = held(w, token)?;
    let mut transitions = Vec::new();
    for mut event in events {
        let from = event.state;
        event.lease = None;
        change(&mut event);
        w.put_event(&event)?;
        transitions.push(rules::transition(&event, from));
    }
    w.remove_claim(token)?;
    Ok(transitions)
}

/// Whether a claim wrote anything: it took its keys, or dropped one whose attempts were used
/// up (a refusal as terminal, dropped, which may also be an event dropped before).
fn wrote(outcome: &ClaimOutcome) -> bool {
    match outcome {
        ClaimOutcome::Claimed(_) => true,
        ClaimOutcome::Refused(why) => why
            .iter()
            .any(|(_, refusal)| *refusal == Refusal::Terminal(EventState::Dropped)),
    }
}
