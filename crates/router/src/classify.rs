//! Claim-loss classification: what a consumer does with an event it could not claim.
//!
//! A refused claim is classified key by key:
//!
//! | refusal | verdict |
//! |---|---|
//! | terminal (delivered or dropped) | discard the in-memory copy |
//! | live claim held by someone else | defer until its `expires_at` + [`RETRY_SKEW_MS`] |
//! | missing | discard |
//! | not owned (another session's event) | discard |
//!
//! A key another transaction is writing at the very moment of the claim (on PostgreSQL, most
//! likely another consumer taking it) is refused without waiting for that transaction, as a
//! live claim that expires now: it is deferred by [`RETRY_SKEW_MS`] only, and the next
//! boundary's read shows whether someone took it (deferred again, to that lease's expiry),
//! acknowledged it (discarded) or gave it back (offered). Its siblings are then most likely
//! being taken with it ([`being_taken`]), so the rest of the envelope is deferred with it
//! rather than claimed on its own: an envelope is not split between racing consumers.
//!
//! The same rules classify an event read back from the ledger when a deferral comes due
//! ([`standing`]): a renewed lease is still held, so it is deferred again to the new expiry; an
//! acknowledged one is settled, so the deferred entry is discarded.

use std::collections::{BTreeMap, HashSet};

use hermes_ledger::{
    ClaimToken, DelegationId, DeliveryMode, Event, EventKey, EventRef, EventState, Refusal,
    Timestamp,
};

use crate::scheduler::DeferKey;

/// How long after a foreign lease's expiry a deferred envelope is retried: a margin for clock
/// differences between processes, so the retry finds the lease expired.
pub const RETRY_SKEW_MS: u64 = 50;

/// When to retry something held by a lease that runs out at `expires_at`.
pub fn retry_at(expires_at: Timestamp) -> Timestamp {
    expires_at.plus_ms(RETRY_SKEW_MS)
}

/// Why a consumer forgets an event it could not claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// Delivered or dropped already.
    Terminal(EventState),
    /// The ledger has no such event.
    Missing,
    /// The event belongs to another session (or to none).
    NotOwned,
}

impl Discard {
    /// A short lowercase reason (`delivered`, `dropped`, `missing`, `not_owned`).
    pub fn as_str(self) -> &'static str {
        match self {
            Discard::Terminal(state) => state.as_str(),
            Discard::Missing => "missing",
            Discard::NotOwned => "not_owned",
        }
    }
}

/// What to do with one refused key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forget it.
    Discard(Discard),
    /// Try again at `retry_at`.
    Defer {
        /// The holder's `expires_at` + [`RETRY_SKEW_MS`].
        retry_at: Timestamp,
    },
}

/// The verdict for one refused key.
pub fn verdict(refusal: &Refusal) -> Verdict {
    match refusal {
        Refusal::Terminal(state) => Verdict::Discard(Discard::Terminal(*state)),
        Refusal::LiveClaim { expires_at } => Verdict::Defer {
            retry_at: retry_at(*expires_at),
        },
        Refusal::Missing => Verdict::Discard(Discard::Missing),
        Refusal::NotOwned => Verdict::Discard(Discard::NotOwned),
    }
}

/// Whether a refusal says another consumer is taking the envelope at this moment: a key held
/// by a lease that ends no later than `now` (a claim that found the key's row being written
/// answers so, rather than wait for the writer).
pub fn being_taken(refused: &[(EventRef, Refusal)], now: Timestamp) -> bool {
    refused.iter().any(
        |(_, refusal)| matches!(refusal, Refusal::LiveClaim { expires_at } if *expires_at <= now),
    )
}

/// Some keys of one delegation held by a live claim elsewhere, and when to try them again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferral {
    /// The delegation.
    pub delegation_id: DelegationId,
    /// The held keys, sorted.
    pub keys: Vec<EventKey>,
    /// The holder's `expires_at` + [`RETRY_SKEW_MS`].
    pub retry_at: Timestamp,
    /// The unit's delivery mode, so a tool boundary reports only what it could offer.
    pub delivery: DeliveryMode,
}

impl Deferral {
    /// The scheduler key this deferral is deduplicated by.
    pub fn key(&self) -> DeferKey {
        DeferKey::new(self.delegation_id.clone(), self.keys.iter().copied())
    }
}

/// A refused claim, classified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classified {
    /// Keys to forget, and why.
    pub discarded: Vec<(EventRef, Discard)>,
    /// Keys to retry later, one deferral per delegation and holder expiry.
    pub deferred: Vec<Deferral>,
}

/// Classifies every refused key of a claim on units delivered in `delivery` mode.
pub fn classify_refusals(refused: &[(EventRef, Refusal)], delivery: DeliveryMode) -> Classified {
    let mut out = Classified::default();
    let mut held: BTreeMap<(DelegationId, Timestamp), (DeliveryMode, Vec<EventKey>)> =
        BTreeMap::new();
    for (event, refusal) in refused {
        match verdict(refusal) {
            Verdict::Discard(why) => out.discarded.push((event.clone(), why)),
            Verdict::Defer { retry_at } => held
                .entry((event.delegation_id.clone(), retry_at))
                .or_insert_with(|| (delivery, Vec::new()))
                .1
                .push(event.key),
        }
    }
    out.deferred = deferrals(held);
    out
}

/// Groups held keys into deferrals with sorted keys.
pub(crate) fn deferrals(
    held: BTreeMap<(DelegationId, Timestamp), (DeliveryMode, Vec<EventKey>)>,
) -> Vec<Deferral> {
    held.into_iter()
        .map(|((delegation_id, retry_at), (delivery, keys))| {
            let keys = DeferKey::new(delegation_id.clone(), keys).keys().to_vec();
            Deferral {
                delegation_id,
                keys,
                retry_at,
                delivery,
            }
        })
        .collect()
}

/// Where an event read from the ledger stands for a consumer at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Claimable now: pending, or claimed with an expired lease.
    Ready,
    /// Held by someone else's live lease until `expires_at`.
    Held {
        /// When that lease runs out.
        expires_at: Timestamp,
    },
    /// Held by a live claim this consumer took itself (it is being presented here).
    Ours,
    /// Delivered or dropped.
    Settled(EventState),
}

/// Classifies an event as the ledger shows it at `now`; `own` are the claim tokens this consumer
/// holds and has not settled.
pub fn standing(event: &Event, now: Timestamp, own: &HashSet<ClaimToken>) -> Standing {
    if event.state.is_terminal() {
        return Standing::Settled(event.state);
    }
    match event
        .lease
        .as_ref()
        .filter(|_| event.state == EventState::Claimed)
    {
        Some(lease) if lease.expires_at > now && own.contains(&lease.token) => Standing::Ours,
        Some(lease) if lease.expires_at > now => Standing::Held {
            expires_at: lease.expires_at,
        },
        _ => Standing::Ready,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn unit(bits: u64) -> DelegationId {
        DelegationId::from_bits(bits)
    }

    fn event_ref(bits: u64, n: u32) -> EventRef {
        EventRef {
            delegation_id: unit(bits),
            key: EventKey::Task(n),
        }
    }

    #[test]
    fn every_refusal_has_its_verdict() {
        let live = Refusal::LiveClaim {
            expires_at: Timestamp(1_000),
        };
        assert_eq!(
            verdict(&live),
            Verdict::Defer {
                retry_at: Timestamp(1_050)
            }
        );
        for state in [EventState::Delivered, EventState::Dropped] {
            assert_eq!(
                verdict(&Refusal::Terminal(state)),
                Verdict::Discard(Discard::Terminal(state))
            );
        }
        assert_eq!(
            verdict(&Refusal::Missing),
            Verdict::Discard(Discard::Missing)
        );
        assert_eq!(
            verdict(&Refusal::NotOwned),
            Verdict::Discard(Discard::NotOwned)
        );
    }

    #[test]
    fn held_keys_group_by_delegation_and_expiry() {
        let refused = vec![
            (
                event_ref(1, 2),
                Refusal::LiveClaim {
                    expires_at: Timestamp(500),
                },
            ),
            (event_ref(1, 0), Refusal::Terminal(EventState::Delivered)),
            (
                event_ref(1, 1),
                Refusal::LiveClaim {
                    expires_at: Timestamp(500),
                },
            ),
            (
                event_ref(1, 3),
                Refusal::LiveClaim {
                    expires_at: Timestamp(900),
                },
            ),
            (event_ref(1, 4), Refusal::Missing),
        ];
        let classified = classify_refusals(&refused, DeliveryMode::Inject);
        assert_eq!(
            classified.discarded,
            vec![
                (event_ref(1, 0), Discard::Terminal(EventState::Delivered)),
                (event_ref(1, 4), Discard::Missing),
            ]
        );
        assert_eq!(
            classified.deferred,
            vec![
                Deferral {
                    delegation_id: unit(1),
                    keys: vec![EventKey::Task(1), EventKey::Task(2)],
                    retry_at: Timestamp(550),
                    delivery: DeliveryMode::Inject,
                },
                Deferral {
                    delegation_id: unit(1),
                    keys: vec![EventKey::Task(3)],
                    retry_at: Timestamp(950),
                    delivery: DeliveryMode::Inject,
                },
            ]
        );
    }

    #[test]
    fn a_key_held_by_a_lease_ending_now_is_being_taken() {
        let now = Timestamp(1_000);
        let held = |expires_at: u64| {
            (
                event_ref(1, 0),
                Refusal::LiveClaim {
                    expires_at: Timestamp(expires_at),
                },
            )
        };
        assert!(being_taken(&[held(1_000)], now));
        assert!(being_taken(
            &[(event_ref(1, 1), Refusal::Missing), held(900)],
            now
        ));
        assert!(!being_taken(&[held(1_001)], now), "a lease that runs on");
        assert!(!being_taken(
            &[(event_ref(1, 1), Refusal::Terminal(EventState::Delivered))],
            now
        ));
    }

    fn event(state: EventState, lease: Option<(u128, u64)>) -> Event {
        let event = fixtures::event(1, 0, "s", DeliveryMode::AfterTurn);
        let mut event = match lease {
            Some((token, expires_at)) => fixtures::leased(event, token, expires_at),
            None => event,
        };
        event.state = state;
        event
    }

    #[test]
    fn standing_follows_the_lease() {
        let own: HashSet<ClaimToken> = [ClaimToken(7)].into();
        let now = Timestamp(100);
        assert_eq!(
            standing(&event(EventState::Pending, None), now, &own),
            Standing::Ready
        );
        assert_eq!(
            standing(&event(EventState::Claimed, Some((1, 100))), now, &own),
            Standing::Ready,
            "a lease expiring now is expired"
        );
        assert_eq!(
            standing(&event(EventState::Claimed, Some((1, 101))), now, &own),
            Standing::Held {
                expires_at: Timestamp(101)
            }
        );
        assert_eq!(
            standing(&event(EventState::Claimed, Some((7, 101))), now, &own),
            Standing::Ours
        );
        assert_eq!(
            standing(&event(EventState::Delivered, None), now, &own),
            Standing::Settled(EventState::Delivered)
        );
    }
}
