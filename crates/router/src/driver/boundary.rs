//! One boundary under the routing reservation: snapshot → plan → render → claim, with refused
//! keys classified and deferred, and every claim given back if the boundary fails.

use std::collections::{HashMap, HashSet};

use hermes_ledger::{
    Boundary, ClaimOutcome, ClaimRequest, ClaimToken, DropReason, Event, EventRef, Timestamp,
    UnitRecord,
};

use super::{Render, Router, State};
use crate::classify::{self, Deferral};
use crate::error::RouterError;
use crate::outcome::{BoundaryOutcome, ClaimedEnvelope, RenderFailure};
use crate::ownership::Access;
use crate::ready::{self, Offer};
use crate::scheduler::DeferKey;
use hermes_stdx::lock;

impl Router {
    /// One boundary under the routing reservation. Also returns the nudge generation this call
    /// produced, if it moved the earliest deferral deadline earlier (waiters must re-plan).
    pub(super) fn take<T, E>(
        &self,
        boundary: Boundary,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
    ) -> Result<(BoundaryOutcome<T, E>, Option<u64>), RouterError> {
        let mut state = lock(&self.state);
        let before = state.scheduler.next_deadline();
        let result = self.take_locked(&mut state, boundary, now, render);
        let after = state.scheduler.next_deadline();
        let nudge = after
            .is_some_and(|a| before.is_none_or(|b| a < b))
            .then(|| self.signal.nudge());
        drop(state);
        result.map(|outcome| (outcome, nudge))
    }

    fn take_locked<T, E>(
        &self,
        state: &mut State,
        boundary: Boundary,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
    ) -> Result<BoundaryOutcome<T, E>, RouterError> {
        let snapshot = self.snapshot(now)?;
        // Our own claims that no open event carries any more were settled (or fenced).
        let leased: HashSet<ClaimToken> = snapshot
            .events
            .iter()
            .filter_map(|e| e.lease.as_ref().map(|l| l.token))
            .collect();
        state.outstanding.retain(|token| leased.contains(token));
        let plan = ready::plan(
            snapshot,
            &self.config.session,
            boundary,
            now,
            &state.outstanding,
        );
        match plan.access {
            Access::Open => {}
            Access::Unknown => {
                state.scheduler.clear();
                return Ok(BoundaryOutcome::empty(boundary));
            }
            Access::Ended => {
                state.scheduler.clear();
                state.outstanding.clear();
                if !plan.leftovers.is_empty() {
                    self.ledger
                        .drop_events(&plan.leftovers, DropReason::SessionEnded, now)?;
                }
                return Err(RouterError::SessionEnded(self.config.session.clone()));
            }
        }

        // Re-classify: what is due comes out; whatever the snapshot still shows held by someone
        // else goes (back) in at its holder's current expiry, so a renewed lease is deferred
        // again; entries the snapshot no longer shows held (acked, dropped, released, expired)
        // are discarded.
        state.scheduler.pop_due(now);
        let held: HashSet<DeferKey> = plan.held.iter().map(Deferral::key).collect();
        state.scheduler.retain(|key, _| held.contains(key));
        for deferral in &plan.held {
            state.scheduler.defer(deferral.key(), deferral.retry_at);
        }

        let mut outcome = BoundaryOutcome::empty(boundary);
        outcome.deferred.extend(
            plan.held
                .into_iter()
                .filter(|d| boundary.offers(d.delivery)),
        );
        if let Err(err) = self.claim_offers(state, plan.offers, now, render, &mut outcome) {
            // Nothing of this boundary was shown yet: give every claim of it back.
            for envelope in &outcome.delivered {
                state.outstanding.remove(&envelope.token);
                let _ = self.ledger.defer(envelope.token);
            }
            return Err(err);
        }
        dedup_deferred(&mut outcome.deferred);
        Ok(outcome)
    }

    /// Renders every offer, then claims all that rendered in one transaction (one durable commit
    /// for the whole boundary). An offer refused for some keys is classified key by key and its
    /// remaining keys are tried again at once, on their own.
    fn claim_offers<T, E>(
        &self,
        state: &mut State,
        offers: Vec<Offer>,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
        outcome: &mut BoundaryOutcome<T, E>,
    ) -> Result<(), RouterError> {
        let mut rendered_offers = Vec::with_capacity(offers.len());
        for offer in offers {
            match render(&offer.delegation, &offer.events) {
                Ok(rendered) => rendered_offers.push((offer, rendered)),
                Err(error) => outcome.failed.push(RenderFailure {
                    delegation_id: offer.delegation.id.clone(),
                    keys: offer.events.iter().map(|e| e.key).collect(),
                    error,
                }),
            }
        }
        if rendered_offers.is_empty() {
            return Ok(());
        }
        let requests: Vec<ClaimRequest> = rendered_offers
            .iter()
            .map(|(offer, _)| self.request(&offer.events))
            .collect();
        let results = self.ledger.claim_many(&requests, now)?;
        for ((offer, rendered), result) in rendered_offers.into_iter().zip(results) {
            let Offer {
                delegation,
                mut events,
            } = offer;
            match result {
                ClaimOutcome::Claimed(claim) => {
                    accept(state, outcome, delegation, claim, rendered);
                }
                ClaimOutcome::Refused(refused) => {
                    absorb_refusal(state, &delegation, &refused, &mut events, outcome);
                    if classify::being_taken(&refused, now) {
                        defer_rest(state, &delegation, &mut events, now, outcome);
                    }
                    if !events.is_empty() {
                        self.claim_offer(
                            state,
                            Offer { delegation, events },
                            now,
                            render,
                            outcome,
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    fn request(&self, events: &[Event]) -> ClaimRequest {
        ClaimRequest {
            keys: events.iter().map(Event::event_ref).collect(),
            consumer: self.config.consumer.clone(),
            session: Some(self.config.session.clone()),
            lease_ms: self.config.lease_ms,
        }
    }

    /// Renders and claims one offer. A claim refused for some keys is classified key by key and
    /// the rest is tried again at once: a ready child is never held back for a sibling.
    fn claim_offer<T, E>(
        &self,
        state: &mut State,
        offer: Offer,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
        outcome: &mut BoundaryOutcome<T, E>,
    ) -> Result<(), RouterError> {
        let Offer {
            delegation,
            mut events,
        } = offer;
        while !events.is_empty() {
            let rendered = match render(&delegation, &events) {
                Ok(rendered) => rendered,
                Err(error) => {
                    outcome.failed.push(RenderFailure {
                        delegation_id: delegation.id.clone(),
                        keys: events.iter().map(|e| e.key).collect(),
                        error,
                    });
                    return Ok(());
                }
            };
            match self.ledger.claim(&self.request(&events), now)? {
                ClaimOutcome::Claimed(claim) => {
                    accept(state, outcome, delegation, claim, rendered);
                    return Ok(());
                }
                ClaimOutcome::Refused(refused) => {
                    if refused.is_empty() {
                        return Ok(());
                    }
                    absorb_refusal(state, &delegation, &refused, &mut events, outcome);
                    if classify::being_taken(&refused, now) {
                        defer_rest(state, &delegation, &mut events, now, outcome);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Records a successful claim as one of this boundary's delivered envelopes.
fn accept<T, E>(
    state: &mut State,
    outcome: &mut BoundaryOutcome<T, E>,
    delegation: UnitRecord,
    claim: hermes_ledger::Claim,
    rendered: T,
) {
    state.outstanding.insert(claim.token);
    outcome.delivered.push(ClaimedEnvelope {
        token: claim.token,
        expires_at: claim.expires_at,
        delegation,
        events: claim.events,
        rendered,
    });
}

/// Classifies a refused claim key by key (deferring what someone else holds, discarding what
/// is gone) and removes the refused keys from `events`.
fn absorb_refusal<T, E>(
    state: &mut State,
    delegation: &UnitRecord,
    refused: &[(EventRef, hermes_ledger::Refusal)],
    events: &mut Vec<Event>,
    outcome: &mut BoundaryOutcome<T, E>,
) {
    let classified = classify::classify_refusals(refused, delegation.spec.delivery);
    for deferral in classified.deferred {
        state.scheduler.defer(deferral.key(), deferral.retry_at);
        if outcome.boundary.offers(deferral.delivery) {
            outcome.deferred.push(deferral);
        }
    }
    outcome.discarded.extend(classified.discarded);
    let gone: HashSet<&EventRef> = refused.iter().map(|(key, _)| key).collect();
    events.retain(|e| !gone.contains(&e.event_ref()));
}

/// Defers the keys of `events` left after a refusal that says another consumer is taking the
/// envelope right now ([`classify::being_taken`]): looked at again after the retry skew, with
/// the keys it refused, instead of claimed on their own.
fn defer_rest<T, E>(
    state: &mut State,
    delegation: &UnitRecord,
    events: &mut Vec<Event>,
    now: Timestamp,
    outcome: &mut BoundaryOutcome<T, E>,
) {
    if events.is_empty() {
        return;
    }
    let deferral = Deferral {
        delegation_id: delegation.id.clone(),
        keys: DeferKey::new(delegation.id.clone(), events.iter().map(|e| e.key))
            .keys()
            .to_vec(),
        retry_at: classify::retry_at(now),
        delivery: delegation.spec.delivery,
    };
    events.clear();
    state.scheduler.defer(deferral.key(), deferral.retry_at);
    if outcome.boundary.offers(deferral.delivery) {
        outcome.deferred.push(deferral);
    }
}

/// Keeps the last deferral per key (a claim refusal is newer than the snapshot).
fn dedup_deferred(deferred: &mut Vec<Deferral>) {
    let mut last: HashMap<DeferKey, usize> = HashMap::new();
    for (at, deferral) in deferred.iter().enumerate() {
        last.insert(deferral.key(), at);
    }
    let mut at = 0;
    deferred.retain(|deferral| {
        let keep = last.get(&deferral.key()) == Some(&at);
        at += 1;
        keep
    });
}

#[cfg(test)]
mod tests {
    use hermes_ledger::DelegationId;

    use super::*;

    #[test]
    fn dedup_keeps_the_newest_deferral_per_key() {
        let unit = DelegationId::from_bits(1);
        let deferral = |n: u32, at: u64| Deferral {
            delegation_id: unit.clone(),
            keys: vec![hermes_ledger::EventKey::Task(n)],
            retry_at: Timestamp(at),
            delivery: hermes_ledger::DeliveryMode::AfterTurn,
        };
        let mut list = vec![deferral(0, 1), deferral(1, 2), deferral(0, 3)];
        dedup_deferred(&mut list);
        assert_eq!(list, vec![deferral(1, 2), deferral(0, 3)]);
    }
}
